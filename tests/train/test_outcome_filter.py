"""Groups judged on the raw outcome (`algo.uniform_outcomes`), and `Trajectory.resolved`."""

from __future__ import annotations

import pytest

from tripod.core.types import EpisodeEnd, EpisodeJob, Trajectory
from tripod.envs.base import Step, StepInfo
from tripod.policy.rollout import RolloutEngine
from tripod.policy.settings import rollout_config
from tripod.train.batch import trainable_episodes


def _traj(group: int, episode: int, won: bool = False, resolved: bool | None = None,
          error: bool = False) -> Trajectory:
    job = EpisodeJob("toy/letters-2", "train", group, group, episode, episode)
    traj = Trajectory(job, "objective", "start", won=won, resolved=resolved)
    if error:
        traj.end = EpisodeEnd.ENV_ERROR
    return traj


def test_the_outcome_is_resolved_where_the_env_reports_it_else_won() -> None:
    assert _traj(0, 0, won=True).outcome is True
    assert _traj(0, 0, won=False, resolved=True).outcome is True    # resolved, not submitted
    assert _traj(0, 0, won=True, resolved=False).outcome is False


def test_groups_with_one_outcome_are_left_out_only_when_asked() -> None:
    trajs = [_traj(0, 0, won=True), _traj(0, 1),                      # mixed: kept
             _traj(1, 2), _traj(1, 3),                                # all lost
             _traj(2, 4, resolved=True), _traj(2, 5, resolved=True),  # all resolved
             _traj(3, 6, resolved=True), _traj(3, 7, won=True, resolved=False),  # mixed
             _traj(4, 8), _traj(4, 9, error=True)]                     # one left: too small
    kept = trainable_episodes(trajs, min_group_size=2)
    assert {t.group_id for t in kept.trajectories} == {0, 1, 2, 3}
    assert (kept.uniform_groups, kept.dropped_groups) == (0, 1)
    sel = trainable_episodes(trajs, min_group_size=2, uniform_outcomes=False)
    assert {t.group_id for t in sel.trajectories} == {0, 3}
    assert (sel.uniform_groups, sel.dropped_groups, sel.dropped_episodes) == (2, 1, 5)
    assert sel.env_errors == 1


class _ResolvingEnv:
    """Reports `resolved` in `info.extra`, apart from `won` (as the SWE env does)."""

    def __init__(self, verdict: bool | None) -> None:
        self.verdict = verdict

    def reset(self, game_index: int):
        return "start", StepInfo(objective="o")

    def step(self, action: str):
        extra = {} if self.verdict is None else {"resolved": self.verdict}
        return Step("done", 0.0, True, False, StepInfo(objective="o", won=False, extra=extra))

    def close(self) -> None:
        pass


@pytest.mark.parametrize("verdict", [True, False, None])
def test_the_rollout_records_the_envs_verdict(verdict, tmp_path, tiny_policy_factory) -> None:
    from tripod.core.config import load_config
    from tripod.policy.rollout import make_jobs
    from tripod.policy.sampler import SamplingParams

    cfg = load_config(None, ["model.name=tiny", "env.id=toy/letters-2", "env.max_turns=1",
                             "rollout.truncated_action=step", f"run.out_dir={tmp_path}"])
    engine = RolloutEngine(tiny_policy_factory(), rollout_config(cfg),
                           env_factory=lambda job: _ResolvingEnv(verdict))
    trajs, _ = engine.collect(make_jobs("toy/letters-2", "train", [0], 2, 0),
                              SamplingParams(temperature=0.7, max_new_tokens=3))
    engine.close()
    assert [t.resolved for t in trajs] == [verdict, verdict]
    assert all(t.outcome is bool(verdict) for t in trajs)
