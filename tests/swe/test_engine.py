"""SWE episodes through the rollout engine, as training plays them (issue: all three env
families train end to end): multi-line tool calls survive the reply parsing, the expert wins
as often as under `tripod play`, and the SWE recipe runs SFT -> GRPO -> evaluation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.swe.conftest import HIDDEN

from tripod.envs.play import play
from tripod.envs.swe.task import save_tasks
from tripod.policy import load_policy
from tripod.policy.rollout import RolloutConfig, RolloutEngine, expert_actor, make_jobs
from tripod.policy.sampler import SamplingParams

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "swe-sft-grpo.yaml"


@pytest.fixture
def task_file(calc_task, tmp_path) -> str:
    return str(save_tasks([calc_task], tmp_path / "tasks.jsonl"))


def test_expert_through_the_engine_wins_like_play(task_file):
    env_id = f"swe/file:{task_file}"
    played = play(env_id, "expert", episodes=4, split="train", print_fn=lambda *a: None)
    engine = RolloutEngine(load_policy("tiny"), RolloutConfig(max_turns=40, batch_size=4))
    trajs, stats = engine.collect(make_jobs(env_id, "train", [0, 1, 2, 3], 1, 0),
                                  SamplingParams(), actor=expert_actor())
    engine.close()
    assert stats.env_errors == 0
    assert [t.won for t in trajs] == [r.won for r in played.records] == [True] * 4
    assert [t.num_turns for t in trajs] == [r.turns for r in played.records]
    edits = [t.action_text for t in trajs[0].turns if t.action_text.startswith("edit")]
    assert edits and "\n" in edits[0] and edits[0].endswith(">>>>>>> LINES")  # whole block
    assert all(turn.status.value == "ok" for t in trajs for turn in t.turns)


@pytest.mark.slow
def test_swe_recipe_runs_end_to_end(task_file, tmp_path):
    from tripod.cli import main

    rc = main(["train", str(RECIPE), f"env.id=swe/file:{task_file}", "model.name=tiny",
               f"run.out_dir={tmp_path}", "run.name=swe", "sft.games=2", "train.iterations=1",
               "rollout.games_per_iter=1", "rollout.group_size=2", "env.max_turns=3",
               "sft.max_turns=40",
               "rollout.train.max_new_tokens=8", "rollout.eval.max_new_tokens=8",
               "eval.games=1", "train.tensorboard=false"])
    assert rc == 0
    results = json.loads((tmp_path / "swe" / "results.json").read_text())
    assert results["sft_train"]["demos"] == 2 and results["sft_train"]["tokens"] > 0
    assert len(results["rl_history"]) == 1
    assert set(results["eval"]["final"]) == {f"swe/file:{task_file}"}


@pytest.mark.slow
def test_swe_cpu_recipe_runs_end_to_end(task_file, tmp_path):
    """The CPU recipe's reduced form: its options (brief objective, fail_to_pass progress,
    8 tool calls), SFT with held-out next-action accuracy, RLOO and the evaluations of the
    base, SFT and final models, on the calc task with the tiny model."""
    from tripod.cli import main

    rc = main(["train", str(RECIPE.with_name("swe-cpu.yaml")), f"env.id=swe/file:{task_file}",
               "env.options={objective: brief, progress: fail_to_pass, max_tool_calls: 8}",
               "model.name=tiny", f"run.out_dir={tmp_path}", "run.name=swe", "sft.games=2",
               "sft.heldout_games=1", "sft.max_turns=8", "train.iterations=1",
               "train.budget_min=null", "rollout.games_per_iter=1", "rollout.group_size=2",
               "env.max_turns=3", "rollout.train.max_new_tokens=8",
               "rollout.eval.max_new_tokens=8", "eval.games=1", "train.tensorboard=false"])
    assert rc == 0
    results = json.loads((tmp_path / "swe" / "results.json").read_text())
    assert results["sft_train"]["demos"] == 2
    assert results["sft_heldout"]["won"] == 1
    assert len(results["rl_history"]) == 1
    assert set(results["eval"]) == {"base", "sft", "final"}


class _Script:
    """A scripted policy that replays fixed replies (one per turn)."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)

    def act(self, observation, info):
        from tripod.envs.play import ScriptedAction

        return ScriptedAction(self.replies.pop(0))


def test_breaking_mean_is_worth_0_sparse_and_its_share_final_score(task_file):
    """The reward pillar on a real SWE episode: break `mean` (3 of the 5 tests pass; the
    hidden checks of clamp fail), submit."""
    from tripod.core.config import RewardSection
    from tripod.rewards import turn_rewards

    break_mean = ("I will change mean.\nedit calc/__init__.py\n<<<<<<< SEARCH\n"
                  "    return sum(xs) / len(xs)\n=======\n    return 0\n>>>>>>> REPLACE")
    engine = RolloutEngine(load_policy("tiny"), RolloutConfig(max_turns=5, batch_size=1))
    (traj,), _ = engine.collect(make_jobs(f"swe/file:{task_file}", "train", [0], 1, 0),
                                SamplingParams(), actor=lambda job: _Script([break_mean,
                                                                             "submit"]))
    engine.close()
    assert traj.lost and not traj.won and traj.num_turns == 2
    total = 5 + HIDDEN  # the calc task's 5 tests and its hidden checks
    assert traj.start_progress == pytest.approx(4 / total)  # the 4 PASS_TO_PASS tests pass
    assert turn_rewards(traj, RewardSection(kind="sparse")) == [0.0, 0.0]
    assert turn_rewards(traj, RewardSection(kind="final_score")) == pytest.approx([0.0, 3 / total])
    assert sum(turn_rewards(traj, RewardSection(kind="dense"))) == pytest.approx(-1 / total)
