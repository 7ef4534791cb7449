"""`tripod sweep RECIPE algo.estimator=gae,grpo,rloo reward.kind=sparse,dense`.

Every combination of the comma-separated values is one run of the recipe (SFT, RL and
evaluation as the recipe says), named after its settings; the final held-out success rates
are collected into `sweep.json` and printed as one table. This is how the paper-style studies
(algorithm comparison, reward density, task complexity, SFT:RL split) run with one command.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tripod.core.config import ConfigError, load_config
from tripod.train.pipeline import run_recipe


def parse_grid(items: list[str]) -> tuple[list[str], list[list[str]]]:
    """`key=v1,v2` items -> keys and the list of value lists (plain `key=v` is fixed)."""
    keys, values = [], []
    for item in items:
        if "=" not in item:
            raise ConfigError(f"grid item {item!r} must look like section.key=v1,v2")
        key, raw = item.split("=", 1)
        keys.append(key)
        values.append(raw.split(",") if not raw.startswith("[") and not raw.startswith("{")
                      else [raw])
    return keys, values


def run_sweep(recipe: Path, grid: list[str], out: Path | None = None) -> list[dict]:
    keys, values = parse_grid(grid)
    combos = list(itertools.product(*values)) or [()]
    base = load_config(recipe)
    # Validate every arm before running any of them.
    arms = []
    for combo in combos:
        overrides = [f"{k}={v}" for k, v in zip(keys, combo)]
        name = "-".join([base.run.name] + [f"{k.split('.')[-1]}={v}" for k, v in zip(keys, combo)])
        arms.append((load_config(recipe, overrides + [f"run.name={name}"]), dict(zip(keys, combo))))
    rows = []
    for cfg, settings in arms:
        results = run_recipe(cfg)
        final = results["eval"].get("final") or results["eval"].get("sft") or {}
        rows.append({"settings": settings, "run_dir": results["run_dir"],
                     "success": {env: r["success_rate"] for env, r in final.items()},
                     "ci95": {env: r["ci95"] for env, r in final.items()}})
    out = out or Path(base.run.out_dir) / f"{base.run.name}-sweep.json"
    out.write_text(json.dumps(rows, indent=2))
    _print(rows, keys)
    return rows


def _print(rows: list[dict], keys: list[str]) -> None:
    envs = sorted({e for r in rows for e in r["success"]})
    table = Table(title="sweep: held-out success (greedy)")
    for k in keys + envs:
        table.add_column(k)
    for r in rows:
        cells = [str(r["settings"][k]) for k in keys]
        for e in envs:
            lo, hi = r["ci95"].get(e, (0, 0))
            cells.append(f"{r['success'].get(e, float('nan')):.0%} ({lo:.0%}-{hi:.0%})")
        table.add_row(*cells)
    Console().print(table)
