"""Per-turn rewards: the worked example of the docstring, computed by hand."""

from __future__ import annotations

import pytest

from tripod.core.config import RewardSection
from tripod.core.types import EpisodeEnd, EpisodeJob, Trajectory, Turn, TurnStatus


def _traj(progress, statuses, won=False, lost=False):
    turns = [Turn([1], [2], [0.0], "a", "o", 0.0, s, progress=p)
             for p, s in zip(progress, statuses)]
    return Trajectory(EpisodeJob("e", "train", 0, 0, 0, 0), "obj", "obs", turns, won=won, lost=lost,
                      end=EpisodeEnd.WON if won else EpisodeEnd.MAX_TURNS)


OK, BAD = TurnStatus.OK, TurnStatus.INVALID


def test_dense_worked_example():
    from tripod.rewards import turn_rewards

    t = _traj([0.25, 0.25, 1.0], [OK, BAD, OK], won=True)
    assert turn_rewards(t, RewardSection(kind="dense")) == pytest.approx([0.25, 0.0, 0.75])
    shaped = turn_rewards(t, RewardSection(kind="dense", invalid_penalty=-0.1))
    assert shaped == pytest.approx([0.25, -0.1, 0.75])
    assert sum(turn_rewards(t, RewardSection(kind="dense"))) == pytest.approx(1.0)


def test_sparse_and_lost():
    from tripod.rewards import turn_rewards

    won = _traj([0.0, 1.0], [OK, OK], won=True)
    assert turn_rewards(won, RewardSection(kind="sparse")) == [0.0, 1.0]
    lost = _traj([0.5, 0.5], [OK, OK], lost=True)
    assert turn_rewards(lost, RewardSection(kind="sparse", lost_penalty=-1.0)) == [0.0, -1.0]
    # A losing episode never out-earns a winning one under dense rewards.
    assert sum(turn_rewards(lost, RewardSection(kind="dense"))) < 1.0


def test_turn_cost():
    from tripod.rewards import turn_rewards

    t = _traj([0.0, 0.0], [OK, OK])
    assert turn_rewards(t, RewardSection(kind="sparse", turn_cost=0.01)) == [-0.01, -0.01]


def test_final_score_pays_the_final_progress_on_the_last_turn():
    from tripod.rewards import turn_rewards

    # e.g. an SWE episode that ends with 3 of its 5 tests passing
    partial = _traj([0.2, 0.6], [OK, OK], lost=True)
    assert turn_rewards(partial, RewardSection(kind="sparse")) == [0.0, 0.0]
    assert turn_rewards(partial, RewardSection(kind="final_score")) == pytest.approx([0.0, 0.6])
    won = _traj([0.2, 1.0], [OK, OK], won=True)
    assert turn_rewards(won, RewardSection(kind="final_score")) == [0.0, 1.0]


def test_dense_pays_gains_from_the_progress_at_reset():
    from tripod.rewards import turn_rewards

    # an SWE task whose 5 tests start with 4 passing: fixing the fifth is worth 0.2, not 1.0
    t = _traj([0.8, 1.0], [OK, OK], won=True)
    t.start_progress = 0.8
    assert turn_rewards(t, RewardSection(kind="dense")) == pytest.approx([0.0, 0.2])
