"""A study's plots (PNG + SVG, matplotlib's Agg backend: no display needed).

- `learning_curves`: a metric of `metrics.jsonl` (training success by default) per RL
  iteration; the line is the mean over seeds and the band their range (with 2-3 seeds a
  t-interval would be wider than the axis, the range shows what was measured).
- `success_by`: held-out success against a field (complexity, SFT share, turn cap), one line
  per series, with 95% Wilson intervals of the episodes pooled over seeds and games.
- `bars`: grouped bars of held-out success (e.g. reward density within each algorithm), with
  the same intervals.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from tripod.studies.aggregate import EvalRow, summarise_arms  # noqa: E402
from tripod.studies.schema import PlotSpec  # noqa: E402

Curves = dict[str, dict[int, list[tuple[int, float]]]]
"""arm -> seed -> [(iteration, value)]."""


def read_curves(runs: list[tuple[str, int, Path]], metric: str) -> Curves:
    """`metric` per iteration of each finished run (arm, seed, run dir)."""
    curves: Curves = {}
    for arm, seed, run_dir in runs:
        path = run_dir / "metrics.jsonl"
        if not path.is_file():
            continue
        points = [(int(rec["step"]), float(rec[metric]))
                  for rec in map(json.loads, path.read_text().splitlines())
                  if metric in rec and "step" in rec]
        if points:
            curves.setdefault(arm, {})[seed] = points
    return curves


def _save(fig: plt.Figure, out_dir: Path, stem: str) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    for ext in ("png", "svg"):
        fig.savefig(out_dir / f"{stem}.{ext}", dpi=120)
    plt.close(fig)
    return out_dir / f"{stem}.png"


def plot_learning_curves(curves: Curves, metric: str, out_dir: Path, stem: str) -> Path | None:
    if not curves:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    for arm, per_seed in curves.items():
        steps = sorted({s for pts in per_seed.values() for s, _ in pts})
        by_step = [[v for pts in per_seed.values() for s, v in pts if s == step]
                   for step in steps]
        mean = [sum(v) / len(v) for v in by_step]
        line, = ax.plot(steps, mean, marker="o", label=f"{arm} ({len(per_seed)} seeds)")
        ax.fill_between(steps, [min(v) for v in by_step], [max(v) for v in by_step],
                        color=line.get_color(), alpha=0.2)
    ax.set_xlabel("RL iteration")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(metric)
    if "success" in metric:
        ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"{metric}: mean over seeds, band = range")
    ax.legend(fontsize=7)
    return _save(fig, out_dir, stem)


def _order(values: list[Any]) -> list[Any]:
    """Numbers sorted; anything else in order of first appearance."""
    unique = list(dict.fromkeys(values))
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in unique)
    return sorted(unique) if numeric else unique


def _panels(rows: list[EvalRow], spec: PlotSpec) -> dict[str, list[EvalRow]]:
    if spec.panels == "none":
        return {"all evaluated envs": rows}
    return {env: [r for r in rows if r.eval_env == env]
            for env in dict.fromkeys(r.eval_env for r in rows)}


def plot_success(rows: list[EvalRow], spec: PlotSpec, out_dir: Path) -> Path | None:
    """`success_by` (lines) and `bars` (grouped bars), one panel per evaluated env."""
    panels = {k: v for k, v in _panels(rows, spec).items() if v}
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, (title, panel_rows) in zip(axes[0], panels.items()):
        _draw_panel(ax, panel_rows, spec)
        ax.set_title(title, fontsize=9)
    return _save(fig, out_dir, spec.stem)


def _draw_panel(ax: plt.Axes, rows: list[EvalRow], spec: PlotSpec) -> None:
    keys = (spec.x, spec.series or "eval_env") if spec.series else (spec.x,)
    summaries = summarise_arms(rows, keys=keys)
    xs = _order([k[0] for k in summaries])
    series = _order([k[1] for k in summaries]) if spec.series else [None]
    width = 0.8 / len(series)
    for i, s in enumerate(series):
        pts = [(x, summaries[(x, s) if spec.series else (x,)]) for x in xs
               if ((x, s) if spec.series else (x,)) in summaries]
        pos = [xs.index(x) if spec.kind == "bars" or not _numeric(xs) else x for x, _ in pts]
        rate = [p.rate for _, p in pts]
        err = [[p.rate - p.ci95[0] for _, p in pts], [p.ci95[1] - p.rate for _, p in pts]]
        label = f"{spec.series}={s}" if spec.series else None
        if spec.kind == "bars":
            ax.bar([p + (i - (len(series) - 1) / 2) * width for p in pos], rate, width,
                   yerr=err, capsize=3, label=label)
        else:
            ax.errorbar(pos, rate, yerr=err, marker="o", capsize=3, label=label)
    if spec.kind == "bars" or not _numeric(xs):
        ax.set_xticks(range(len(xs)), [str(x) for x in xs], rotation=20, fontsize=8)
    ax.set_xlabel(spec.x)
    ax.set_ylabel("held-out success (95% CI)")
    ax.set_ylim(-0.02, 1.05)
    if spec.series:
        ax.legend(fontsize=7)


def _numeric(values: list[Any]) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool)
               and not (isinstance(v, float) and math.isnan(v)) for v in values)


def make_plots(specs: list[PlotSpec], rows: list[EvalRow], runs: list[tuple[str, int, Path]],
               out_dir: Path) -> list[Path]:
    """Every declared plot that has data; returns the PNG paths (an SVG lies beside each)."""
    made = []
    for spec in specs:
        if spec.kind == "learning_curves":
            path = plot_learning_curves(read_curves(runs, spec.metric), spec.metric, out_dir,
                                        spec.stem)
        else:
            path = plot_success(rows, spec, out_dir)
        if path is not None:
            made.append(path)
    return made
