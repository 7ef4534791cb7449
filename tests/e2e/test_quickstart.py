"""End to end, as a user runs it: `tripod quickstart` with a small budget (SmolLM2, TextWorld)."""

from __future__ import annotations

import json

import pytest

from tripod.cli import main


@pytest.mark.slow
def test_quickstart_small_budget(tmp_path):
    rc = main(["quickstart", f"run.out_dir={tmp_path}", "run.name=qs", "eval.games=1",
               "sft.games=2", "sft.recovery_games=1", "sft.epochs=1", "train.iterations=1",
               "rollout.games_per_iter=2", "rollout.group_size=2", "rollout.train_pool=2",
               "rollout.train.max_new_tokens=8", "rollout.eval.max_new_tokens=8",
               "env.max_turns=4", "sft.max_turns=12"])
    assert rc == 0
    run = tmp_path / "qs"
    results = json.loads((run / "results.json").read_text())
    assert set(results["eval"]) == {"base", "sft", "final"}
    assert results["sft_train"]["demos"] == 3 and results["sft_train"]["tokens"] > 0
    assert len(results["rl_history"]) == 1
    assert set(results["peak_rss_mb"]) == {"sft", "rl", "eval"}   # each stage's own peak
    assert all(mb > 100 for mb in results["peak_rss_mb"].values())
    assert (run / "sft" / "model.safetensors").exists()
    assert (run / "checkpoints" / "iter_000001" / "trainer.safetensors").exists()
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert "success_rate" in json.loads(lines[0])
