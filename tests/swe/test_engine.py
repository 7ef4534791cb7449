"""SWE episodes through the rollout engine, as training plays them (issue: all three env
families train end to end): multi-line tool calls survive the reply parsing, the expert wins
as often as under `tripod play`, and the SWE recipe runs SFT -> GRPO -> evaluation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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
    assert edits and "\n" in edits[0] and "REPLACE" in edits[0]  # the whole block got through
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
