"""Every recipe in recipes/ runs end to end (the quickstart has its own test).

The full pipeline of each recipe file: SFT on expert demonstrations of real w2-o3-q4 games,
RL iterations with the recipe's estimator, critic, KL and loss settings, a mid-training
evaluation, resumable checkpoints, and the final held-out evaluation on every env id the
recipe lists (w4-o6-q8 too). Only the model (the tiny one) and the budget are overridden, so
this checks the recipes' wiring in minutes; README "Recipes" has the SmolLM2 runs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tripod.cli import main
from tripod.core.config import load_config

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
NAMES = sorted(p.stem for p in RECIPES.glob("*.yaml")
               if p.stem != "quickstart" and not p.stem.startswith("swe-"))  # own tests
SMALL = ["model.name=tiny", "sft.games=3", "sft.recovery_games=1", "sft.epochs=1",
         "train.iterations=2", "train.eval_every=1", "train.eval_games=2",
         "train.checkpoint_every=1", "train.tensorboard=false", "rollout.games_per_iter=2",
         "rollout.group_size=2", "rollout.train_pool=2", "rollout.train.max_new_tokens=6",
         "rollout.eval.max_new_tokens=6", "eval.games=2", "env.max_turns=4",
         "eval.max_turns=4", "eval.before_training=false"]
"""`eval.before_training=false`: the base and SFT evaluations run the final evaluation's code
on other weights (the quickstart's test keeps all three); CI time."""
EXTRA = {
    # the tw-simple expert needs more than 4 turns to win: demonstrations keep the full cap
    "textworld-simple-density": ["sft.max_turns=24"],
    # the one-hour recipe's w4-o6-q8 mixes (RL groups with the paper's 24-turn cap, SFT
    # games to generate in a cold CI cache) cost minutes with the tiny model: its budget,
    # snapshots and evaluation of both sizes run here, the mixes are covered by
    # tests/train/test_mix.py. Its 100 w4-o6-q8 test games become eval.games' 2
    "best-cpu": ["eval.games_by_env={}", "rollout.env_ids=[]",
                 "sft.env_ids=[]"],
    # the planner expert needs up to ~20 turns; one game per evaluated task type, one
    # mid-training evaluation (ALFWorld episodes are the slow part of these runs)
    **{f"alfworld-{n}": ["sft.max_turns=24", "eval.games=1", "train.eval_every=2",
                         "train.eval_games=1"]
       for n in ("sft-ppo", "diversity-single", "diversity-mix")},
}
# the searching expert needs up to ~30 turns; replies are restricted to admissible commands,
# so the tiny model's episodes are valid play to the turn cap
EXTRA["alfworld-cpu"] = ["sft.max_turns=40", "sft.dagger_games=1", "eval.games=1",
                         "train.eval_every=2",
                         "train.eval_games=1", "sft.heldout_games=1",
                         "rollout.train.max_new_tokens=12",
                         "rollout.eval.max_new_tokens=12",
                         "eval.env_ids=[alfworld/generated-pick_and_place_simple]",
                         "env.options_by_env={alfworld/generated-pick_and_place_simple: "
                         "{expert: false, inventory: true}}"]
# The mix's final evaluation on all six task types (a minute of cold-cache games in CI): two of
# them here, one trained and one held out; the run evaluates every listed env id the same way.
EXTRA["alfworld-diversity-mix"] += [
    "eval.env_ids=[alfworld/generated-pick_and_place_simple,"
    "alfworld/generated-pick_cool_then_place_in_recep]"]


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_recipe_runs_end_to_end(tmp_path, name):
    recipe = RECIPES / f"{name}.yaml"
    evals = [o for o in EXTRA.get(name, [])
             if o.startswith(("eval.env_ids", "env.options_by_env"))]
    cfg = load_config(recipe, overrides=evals)
    rc = main(["train", str(recipe), f"run.out_dir={tmp_path}", "run.name=r", *SMALL,
               *EXTRA.get(name, [])])
    assert rc == 0
    run = tmp_path / "r"
    results = json.loads((run / "results.json").read_text())
    assert set(results["eval"]["final"]) == set(cfg.eval.env_ids or [cfg.env.id])
    if cfg.sft.enabled:  # a recovery demo that misses the turn cap is dropped
        assert results["sft_train"]["demos"] >= 3
    if "sft.heldout_games=1" in EXTRA.get(name, []):   # accuracy before and after SFT
        held = results["sft_heldout"]
        assert held["won"] == 1 and held["base"]["turns"] == held["sft"]["turns"] > 0
    history = results["rl_history"]
    assert len(history) == 2
    for h in history:
        assert h["nan_skips"] == 0 and math.isfinite(h["grad_norm"])
        assert h["episodes"] == 4
    if cfg.algo.estimator in ("gae", "gae_turn"):
        assert all(math.isfinite(h["value_loss"]) for h in history)
    if cfg.algo.kl_coef > 0:
        assert all("kl" in h for h in history)
    assert any("valid_success_rate" in h for h in history)
    assert (run / "checkpoints" / "iter_000002" / "trainer.safetensors").exists()
    from tripod.report.records import read_trajectories

    recorded = read_trajectories(run / "trajectories" / "iter_000002.jsonl.gz")
    assert recorded and all(t.tokens.advantages is not None
                            for ep in recorded if ep.end != "env_error" for t in ep.turns)
    assert (run / "report.html").is_file()


@pytest.mark.slow
def test_sweep_runs_every_arm(tmp_path):
    """`tripod sweep` as the README shows it, on the toy task: one run per value, one table."""
    recipe = tmp_path / "toy.yaml"
    recipe.write_text("env: {id: toy/letters-2, max_turns: 2}\nmodel: {name: tiny}\n"
                      f"run: {{name: toy, out_dir: {tmp_path}}}\n"
                      "algo: {estimator: grpo}\nrollout: {group_size: 2, games_per_iter: 2}\n"
                      "train: {iterations: 1, tensorboard: false}\neval: {games: 2}\n")
    assert main(["sweep", str(recipe), "algo.estimator=grpo,rloo",
                 "rollout.train.max_new_tokens=3", "rollout.eval.max_new_tokens=3"]) == 0
    rows = json.loads((tmp_path / "toy-sweep.json").read_text())
    assert [r["settings"]["algo.estimator"] for r in rows] == ["grpo", "rloo"]
    assert all(Path(r["run_dir"]).is_dir() and "toy/letters-2" in r["success"] for r in rows)
