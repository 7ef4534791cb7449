"""`tripod sweep` is a one-seed study of a product grid: same arms, same JSON, resumable."""

from __future__ import annotations

import json

import yaml

from tripod.studies.sweep import run_sweep

from .helpers import FakeRunner


def test_sweep_runs_the_product_once_and_skips_finished_arms(toy_dir):
    recipe = toy_dir / "toy.yaml"
    data = yaml.safe_load(recipe.read_text())
    data["run"] = {"name": "toy", "out_dir": str(toy_dir / "runs"), "seed": 3}
    recipe.write_text(yaml.safe_dump(data))
    runner = FakeRunner()
    rows = run_sweep(recipe, ["algo.estimator=grpo,rloo", "algo.lr=1e-5,1e-4"], runner=runner)
    assert [r["settings"] for r in rows] == [
        {"algo.estimator": e, "algo.lr": lr} for e in ("grpo", "rloo") for lr in ("1e-5", "1e-4")]
    # values are read as YAML, like any dotted override (YAML reads 1e-5 as a string; the
    # recipe's schema makes it a float)
    assert [p.name for p in runner.calls] == ["seed3"] * 4
    assert all(r["success"] == {"toy/letters-2": 0.5} for r in rows)
    saved = json.loads((toy_dir / "runs" / "toy-sweep.json").read_text())
    assert saved == json.loads(json.dumps(rows))
    again = FakeRunner()
    assert run_sweep(recipe, ["algo.estimator=grpo,rloo", "algo.lr=1e-5,1e-4"],
                     runner=again) == rows
    assert again.calls == []
