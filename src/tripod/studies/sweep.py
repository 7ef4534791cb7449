"""`tripod sweep RECIPE algo.estimator=gae,grpo,rloo reward.kind=sparse,dense`.

A sweep is the simplest study (`tripod.studies.study`): every combination of the
comma-separated values is one arm, run once with the recipe's seed, in
`{out_dir}/{name}-sweep/ARM/seedN`. Like a study it is resumable (finished runs are skipped
when the same sweep is run again) and writes `results.csv` and `summary.md` there; the final
held-out success rates are also collected into `{out_dir}/{name}-sweep.json` and printed as
one table. Studies with seeds, paired settings (`zip`) and plots are study files.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table

from tripod.core.config import ConfigError, load_config
from tripod.studies.schema import ArmSpec, EvalSpec, GridSpec, StudyError, StudyFile
from tripod.studies.study import Runner, default_runner, execute_study


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


def sweep_study(recipe: Path, grid: list[str]) -> StudyFile:
    """The study a sweep runs: a product grid over the recipe, the recipe's seed."""
    keys, values = parse_grid(grid)
    base = load_config(recipe)
    product = {k: [yaml.safe_load(v) if v else "" for v in vals] for k, vals in zip(keys, values)}
    return StudyFile(
        name=f"{base.run.name}-sweep", question=f"sweep of {recipe.name}: {' '.join(grid)}",
        base=recipe.name, seeds=[base.run.seed],
        arms=[] if keys else [ArmSpec(name=base.run.name)],
        grid=GridSpec(product=product) if keys else None,
        eval=EvalSpec(split=base.eval.split, before_training=base.eval.before_training))


def run_sweep(recipe: Path, grid: list[str], out: Path | None = None,
              runner: Runner = default_runner) -> list[dict]:
    from tripod.studies.aggregate import read_run

    recipe = Path(recipe).resolve()
    study = sweep_study(recipe, grid)
    base = load_config(recipe)
    try:
        outcome = execute_study(study, recipe, Path(base.run.out_dir) / study.name,
                                runner=runner)
    except StudyError as exc:
        raise ConfigError(str(exc)) from None
    rows = []
    for spec in outcome.runs:
        evals = read_run(spec.run_dir, spec.arm.name, spec.seed, {}, {}, {})
        rows.append({"settings": spec.arm.settings, "run_dir": str(spec.run_dir),
                     "success": {r.eval_env: r.success_rate for r in evals},
                     "ci95": {r.eval_env: _ci(r.successes, r.episodes) for r in evals}})
    out = out or Path(base.run.out_dir) / f"{base.run.name}-sweep.json"
    out.write_text(json.dumps(rows, indent=2))
    _print(rows, list(study.grid.product) if study.grid else [])
    return rows


def _ci(successes: int, n: int) -> tuple[float, float]:
    from tripod.eval.stats import wilson_interval

    return wilson_interval(successes, n)


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
