"""Helpers of the study tests: a fake runner that writes what a run writes, so that the study
machinery (expansion, resumption, tables, paired comparisons, plots) is tested in seconds; the
slow tests run real arms end to end."""

from __future__ import annotations

import json
from pathlib import Path

from tripod.core.config import TrainConfig


class FakeRunner:
    """Writes results.json and metrics.jsonl as `run_recipe` would; the outcome of game g is
    `wins(cfg, g)`. Counts its calls per run directory."""

    def __init__(self, wins=lambda cfg, g: g % 2 == 0) -> None:
        self.wins = wins
        self.calls: list[Path] = []

    def __call__(self, cfg: TrainConfig) -> dict:
        run_dir = cfg.run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self.calls.append(run_dir)
        evals = {}
        for env in cfg.eval.env_ids or [cfg.env.id]:
            per_game = [{"game": g, "won": bool(self.wins(cfg, g)), "turns": 2, "end": "won",
                         "error": None} for g in range(cfg.eval.games)]
            won = sum(p["won"] for p in per_game)
            evals[env] = {"env_id": env, "split": cfg.eval.split, "episodes": len(per_game),
                          "won": won, "env_errors": 0, "success_rate": won / len(per_game),
                          "ci95": [0, 1], "mean_turns": 2.0, "invalid_rate": 0.0,
                          "per_game": per_game}
        stage = "final" if cfg.train.iterations else "sft"
        (run_dir / "metrics.jsonl").write_text("".join(
            json.dumps({"step": i + 1, "success_rate": (i + cfg.run.seed) / 10}) + "\n"
            for i in range(cfg.train.iterations)))
        results = {"run_dir": str(run_dir), "eval": {stage: evals}}
        (run_dir / "results.json").write_text(json.dumps(results))
        return results
