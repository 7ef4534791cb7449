"""`tripod report`: one self-contained HTML file for a run directory or a study directory.

Everything is inline (CSS, a small script, SVG charts drawn here, PNG plots as data URIs),
so the file opens from a laptop, a CI artifact or an e-mail with no network. A run
directory gives: headline numbers, the config, learning curves from `metrics.jsonl`,
evaluations with their 95% intervals from `results.json`, and the trajectory viewer over
the records in `trajectories/` (format: `tripod.report.records`). A directory holding
several run directories gives a study page: one summary row per run, overlaid curves,
and any study tables (`*.csv`) and plots (`*.png`, `*.svg`) found in it.

Escaping: text from files goes through `html.escape`; trajectory text travels as JSON in a
`<script type="application/json">` block with `<`, `>` and `&` as `\\u` escapes (so no
string can close the block) and is put into the page by the script with `textContent`.
The output is ASCII; lone surrogates become character references the browser shows as
U+FFFD. SVG files are embedded as images, never inline, so a script inside one cannot run.
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tripod.report.assets import CSS, JS
from tripod.report.records import (
    OUTCOMES,
    EpisodeRecord,
    episode_records_json,
    read_trajectories,
    trajectory_files,
    well_formed,
)

CURVE_ORDER = ("success_rate", "valid_success_rate", "return", "episode_length",
               "invalid_action_rate", "kl", "approx_kl", "entropy", "clip_fraction",
               "zero_variance_groups", "value_loss", "grad_norm", "env_errors", "tokens_per_s",
               "iteration_s", "rollout_s")
"""Learning curves shown first, in this order; other numeric keys of metrics.jsonl follow."""
MAIN_CURVES = set(CURVE_ORDER[:10])
"""Shown unfolded: success, return, length, invalid actions, KL, entropy, clipping,
zero-variance groups."""
SKIP_KEYS = {"step", "time"}
STUDY_CURVES = ("success_rate", "valid_success_rate", "return", "episode_length")
PALETTE = ("#0969da", "#cf222e", "#1a7f37", "#9a6700", "#8250df", "#bf3989", "#1b7c83",
           "#57606a")
RUN_MARKERS = ("config.yaml", "metrics.jsonl", "results.json")


@dataclass
class RunData:
    """What a run directory holds, read leniently: a damaged file becomes a warning on the
    page, not a missing report."""

    path: Path
    config_text: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.resolve().name


def is_run_dir(path: Path) -> bool:
    return any((path / m).is_file() for m in RUN_MARKERS) or (path / "trajectories").is_dir()


def load_run(path: Path) -> RunData:
    run = RunData(path)
    cfg = path / "config.yaml"
    if cfg.is_file():
        run.config_text = cfg.read_text(encoding="utf-8", errors="replace")
        try:
            loaded = yaml.safe_load(run.config_text)
            run.config = loaded if isinstance(loaded, dict) else {}
        except yaml.YAMLError as exc:
            run.warnings.append(f"{cfg}: not valid YAML ({exc})")
    run.metrics = _read_metrics(path / "metrics.jsonl", run.warnings)
    res = path / "results.json"
    if res.is_file():
        try:
            run.results = json.loads(res.read_text(encoding="utf-8", errors="replace"))
        except json.JSONDecodeError as exc:
            run.warnings.append(f"{res}: not valid JSON ({exc})")
    return run


def _read_metrics(path: Path, warnings: list[str]) -> list[dict[str, Any]]:
    """metrics.jsonl records; a bad line (a run killed mid-write) is skipped and reported.
    A resumed run appends: the last record of a step wins."""
    if not path.is_file():
        return []
    by_step: dict[Any, dict[str, Any]] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8", errors="replace")
                                  .splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            warnings.append(f"{path}: line {lineno} skipped ({exc})")
            continue
        if isinstance(rec, dict):
            by_step[rec.get("step", lineno)] = rec
    return list(by_step.values())


# -- numbers and SVG -------------------------------------------------------------------------
def _fmt(x: float, digits: int = 3) -> str:
    return "0" if x == 0 else f"{x:.{digits}g}"


def _ticks(values: list[float]) -> list[str]:
    """Labels for tick values with just enough significant digits to tell them apart."""
    for digits in range(2, 8):
        labels = [_fmt(v, digits) for v in values]
        if len(set(labels)) == len(set(values)):
            return labels
    return labels


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def metric_series(metrics: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """(step, value) points per numeric key, ordered by `CURVE_ORDER` then by name."""
    series: dict[str, list[tuple[float, float]]] = {}
    for i, rec in enumerate(metrics):
        step = rec.get("step", i + 1)
        for key, value in rec.items():
            if key not in SKIP_KEYS and _finite(value) and _finite(step):
                series.setdefault(key, []).append((float(step), float(value)))
    rank = {k: i for i, k in enumerate(CURVE_ORDER)}
    return {k: sorted(series[k]) for k in sorted(series, key=lambda k: (rank.get(k, 99), k))}


def _range(values: list[float]) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    if hi - lo < 1e-12:
        pad = abs(hi) * 0.1 or 0.5
        return lo - pad, hi + pad
    return lo, hi


def svg_line_chart(title: str, series: dict[str, list[tuple[float, float]]],
                   width: int = 320, height: int = 190) -> str:
    """A small line chart: one polyline (and dots with tooltips) per series."""
    xs = [x for pts in series.values() for x, _ in pts]
    ys = [y for pts in series.values() for _, y in pts]
    if not xs:
        return ""
    x0, x1 = (min(xs), max(xs)) if max(xs) > min(xs) else (min(xs) - 1, max(xs) + 1)
    y0, y1 = _range(ys)
    ticks = [y0, (y0 + y1) / 2, y1]
    labels = _ticks(ticks)
    left, right, top, bottom = 14 + 6 * max(len(s) for s in labels), 10, 24, 26
    w, h = width - left - right, height - top - bottom

    def px(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * w

    def py(y: float) -> float:
        return top + (1 - (y - y0) / (y1 - y0)) * h

    parts = [f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" role="img">',
             f'<title>{html.escape(title)}</title>',
             f'<text x="{left}" y="15" font-size="13" font-weight="600">{html.escape(title)}</text>',
             f'<line x1="{left}" y1="{top + h}" x2="{left + w}" y2="{top + h}" stroke="#8c959f"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + h}" stroke="#8c959f"/>']
    for y, label in zip(ticks, labels):
        parts.append(f'<text x="{left - 4}" y="{py(y) + 4:.1f}" font-size="10" '
                     f'text-anchor="end" fill="#656d76">{label}</text>')
        parts.append(f'<line x1="{left}" y1="{py(y):.1f}" x2="{left + w}" y2="{py(y):.1f}" '
                     'stroke="#eaeef2"/>')
    for x in sorted({x0, x1}):
        parts.append(f'<text x="{px(x):.1f}" y="{top + h + 14}" font-size="10" '
                     f'text-anchor="middle" fill="#656d76">{_fmt(x)}</text>')
    for i, (label, pts) in enumerate(series.items()):
        colour = PALETTE[i % len(PALETTE)]
        coords = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.8" '
                     f'points="{coords}"/>')
        for x, y in pts:
            parts.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.6" fill="{colour}">'
                         f'<title>{html.escape(label)} step {_fmt(x)}: {y:.4g}</title></circle>')
        if len(series) > 1:
            parts.append(f'<text x="{left + 6}" y="{top + 12 + 12 * i}" font-size="10" '
                         f'fill="{colour}">{html.escape(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


@dataclass
class EvalRow:
    stage: str
    env_id: str
    success: float
    lo: float
    hi: float
    won: int
    episodes: int
    mean_turns: float
    invalid_rate: float
    tampered: int = 0


def eval_rows(results: dict[str, Any]) -> list[EvalRow]:
    """Every evaluation in results.json (`eval` -> stage -> env id -> EvalResult json)."""
    rows = []
    for stage, per_env in (results.get("eval") or {}).items():
        for env_id, r in (per_env or {}).items():
            lo, hi = r.get("ci95") or (math.nan, math.nan)
            rows.append(EvalRow(str(stage), str(env_id), float(r.get("success_rate", math.nan)),
                                float(lo), float(hi), int(r.get("won", 0)),
                                int(r.get("episodes", 0)), float(r.get("mean_turns", math.nan)),
                                float(r.get("invalid_rate", math.nan)),
                                int(r.get("tampered", 0))))
    return rows


def svg_interval_chart(rows: list[EvalRow], height: int = 210) -> str:
    """Success rate per evaluation with its 95% interval as a vertical bar (y from 0 to 1)."""
    if not rows:
        return ""
    left, top, bottom, step = 44, 24, 46, 70
    width, h = max(260, left + step * len(rows) + 10), height - top - bottom
    envs = sorted({r.env_id for r in rows})

    def py(y: float) -> float:
        return top + (1 - y) * h

    parts = [f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" role="img">',
             '<text x="44" y="15" font-size="13" font-weight="600">held-out success, 95% CI'
             '</text>']
    for y in (0.0, 0.5, 1.0):
        parts.append(f'<line x1="{left}" y1="{py(y):.1f}" x2="{width - 10}" y2="{py(y):.1f}" '
                     f'stroke="#eaeef2"/><text x="{left - 4}" y="{py(y) + 4:.1f}" '
                     f'font-size="10" text-anchor="end" fill="#656d76">{y:.0%}</text>')
    for i, r in enumerate(rows):
        x = left + step * i + step / 2
        colour = PALETTE[envs.index(r.env_id) % len(PALETTE)]
        tip = html.escape(f"{r.stage} {r.env_id}: {r.success:.1%} ({r.won}/{r.episodes}), "
                          f"95% CI {r.lo:.0%}-{r.hi:.0%}")
        if _finite(r.lo) and _finite(r.hi):
            parts.append(f'<line x1="{x}" y1="{py(r.lo):.1f}" x2="{x}" y2="{py(r.hi):.1f}" '
                         f'stroke="{colour}" stroke-width="2"/>')
        if _finite(r.success):
            parts.append(f'<circle cx="{x}" cy="{py(r.success):.1f}" r="4" fill="{colour}">'
                         f'<title>{tip}</title></circle>')
        parts.append(f'<text x="{x}" y="{top + h + 14}" font-size="10" text-anchor="middle">'
                     f'{html.escape(r.stage[:12])}</text>')
        if len(envs) > 1:
            parts.append(f'<text x="{x}" y="{top + h + 27}" font-size="9" text-anchor="middle" '
                         f'fill="{colour}">{html.escape(r.env_id.split("/")[-1][:12])}</text>')
    parts.append("</svg>")
    return "".join(parts)


# -- HTML pieces -----------------------------------------------------------------------------
def _esc(x: Any) -> str:
    return html.escape(well_formed(str(x)))


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f'<table class="data"><tr>{head}</tr>{body}</table>'


def _pct(x: float) -> str:
    return f"{x:.0%}" if _finite(x) else "n/a"


def _eval_table(rows: list[EvalRow]) -> str:
    return _table(["stage", "env", "success", "95% CI", "won/n", "mean turns", "invalid rate",
                   "tampered"],
                  [[r.stage, r.env_id, f"{r.success:.1%}", f"{_pct(r.lo)}-{_pct(r.hi)}",
                    f"{r.won}/{r.episodes}", f"{r.mean_turns:.1f}", _pct(r.invalid_rate),
                    str(r.tampered)]
                   for r in rows])


def _cards(items: list[tuple[str, str]]) -> str:
    return '<div class="cards">' + "".join(
        f'<div class="card"><div class="k">{_esc(k)}</div><div class="v">{_esc(v)}</div></div>'
        for k, v in items) + "</div>"


def _setting(config: dict[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def run_summary(run: RunData) -> dict[str, str]:
    """The headline of a run: what it trained, and its last numbers (for cards and study rows)."""
    out = {key: str(_setting(run.config, key)) for key in
           ("env.id", "model.name", "algo.estimator", "reward.kind")
           if _setting(run.config, key) is not None}
    if run.metrics:
        last = run.metrics[-1]
        out["iterations"] = str(last.get("step", len(run.metrics)))
        if _finite(last.get("success_rate")):
            out["last train success"] = f"{last['success_rate']:.0%}"
    rows = eval_rows(run.results)
    for r in rows:
        if r.stage == rows[-1].stage:
            out[f"{r.stage} {r.env_id}"] = (f"{r.success:.0%} ({r.won}/{r.episodes}, "
                                            f"CI {_pct(r.lo)}-{_pct(r.hi)})")
    return out


def _curves_html(metrics: list[dict[str, Any]]) -> str:
    """The issue's curves first; every other numeric key behind a fold."""
    series = metric_series(metrics)
    if not series:
        return '<p class="note">no metrics.jsonl records</p>'
    main = [svg_line_chart(k, {k: v}) for k, v in series.items() if k in MAIN_CURVES]
    more = [svg_line_chart(k, {k: v}) for k, v in series.items() if k not in MAIN_CURVES]
    out = '<div class="charts">' + "".join(main) + "</div>"
    if more:
        out += (f'<details><summary>{len(more)} more metrics</summary>'
                f'<div class="charts">{"".join(more)}</div></details>')
    return out


def _json_for_script(data: Any) -> str:
    """JSON that cannot end its <script> block early (and is ASCII)."""
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _first_groups(episodes: list[EpisodeRecord], limit: int | None) -> list[EpisodeRecord]:
    """Whole groups, in group order, while they fit in `limit` episodes (at least one)."""
    if limit is None or len(episodes) <= limit:
        return episodes
    kept: list[int] = []
    for group in sorted({e.group_id for e in episodes}):
        size = sum(e.group_id == group for e in episodes)
        if kept and sum(e.group_id in kept for e in episodes) + size > limit:
            break
        kept.append(group)
    return [e for e in episodes if e.group_id in kept]


def trajectory_payload(run_dir: Path, warnings: list[str],
                       max_episodes: int | None = None) -> dict[str, Any]:
    """The viewer's data: one set per (file, source, iteration), latest training set first
    selected. An unreadable file is reported on the page and left out. `max_episodes`
    caps each set (whole groups) to bound the page size of runs that recorded everything."""
    sets: list[dict[str, Any]] = []
    for path in trajectory_files(run_dir):
        try:
            episodes = read_trajectories(path)
        except ValueError as exc:
            warnings.append(str(exc))
            continue
        keys = sorted({(e.source, e.iteration) for e in episodes}, key=lambda k: (k[1], k[0]))
        for source, iteration in keys:
            every = [e for e in episodes if (e.source, e.iteration) == (source, iteration)]
            chosen = _first_groups(every, max_episodes)
            cut = f", first {len(chosen)} of {len(every)}" if len(chosen) < len(every) else ""
            sets.append({"label": f"{source} \u00b7 iteration {iteration}{cut}",
                         "file": str(path.relative_to(run_dir)), "source": source,
                         "episodes": episode_records_json(chosen)})
    train = [i for i, s in enumerate(sets) if s["source"] == "train"]
    return {"sets": sets, "outcomes": list(OUTCOMES), "initial": train[-1] if train else 0}


def _page(title: str, subtitle: str, nav: list[tuple[str, str]], sections: list[str],
          payload: dict[str, Any] | None) -> str:
    links = "".join(f'<a href="#{a}">{_esc(t)}</a>' for a, t in nav)
    data = ""
    if payload is not None:
        data = (f'<script type="application/json" id="trajectory-data">'
                f"{_json_for_script(payload)}</script>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_esc(title)}</title><meta name=\"viewport\" "
            f"content=\"width=device-width, initial-scale=1\"><style>{CSS}</style></head><body>"
            f"<header><h1>{_esc(title)}</h1><p class=\"sub\">{_esc(subtitle)}</p>"
            f"<nav>{links}</nav></header>{''.join(sections)}{data}<script>{JS}</script>"
            "</body></html>\n")


def _section(anchor: str, heading: str, inner: str) -> str:
    return f'<section id="{anchor}"><h2>{_esc(heading)}</h2>{inner}</section>'


def _warnings(warnings: list[str]) -> str:
    if not warnings:
        return ""
    items = "".join(f'<li class="warn">{_esc(w)}</li>' for w in warnings)
    return _section("warnings", "Warnings", f"<ul>{items}</ul>")


def run_page(run_dir: Path, max_episodes: int | None = None) -> str:
    run = load_run(run_dir)
    payload = trajectory_payload(run_dir, run.warnings, max_episodes)
    rows = eval_rows(run.results)
    evals = (_eval_table(rows) + svg_interval_chart(rows)) if rows else \
        '<p class="note">no evaluations (results.json)</p>'
    config = (f'<details class="config"><summary>config.yaml</summary>'
              f"<pre>{_esc(run.config_text)}</pre></details>") if run.config_text else \
        '<p class="note">no config.yaml</p>'
    episodes = sum(len(s["episodes"]) for s in payload["sets"])
    cards = _cards([*run_summary(run).items(), ("recorded episodes", str(episodes))])
    sections = [_section("summary", "Summary", cards), _section("config", "Config", config),
                _section("curves", "Learning curves", _curves_html(run.metrics)),
                _section("evaluations", "Evaluations", evals),
                _section("trajectories", "Trajectories", '<div id="viewer"></div>'),
                _warnings(run.warnings)]
    nav = [("summary", "summary"), ("config", "config"), ("curves", "curves"),
           ("evaluations", "evaluations"), ("trajectories", "trajectories")]
    return _page(f"tripod report: {run.name}", f"{run_dir.resolve()} \u00b7 generated "
                 f"{dt.datetime.now().strftime('%Y-%m-%d %H:%M')}", nav, sections, payload)


# -- study directories -----------------------------------------------------------------------
def _csv_tables(study_dir: Path, warnings: list[str], max_rows: int = 500) -> str:
    out = []
    for path in sorted(study_dir.glob("*.csv")):
        try:
            with path.open(newline="", encoding="utf-8", errors="replace") as f:
                rows = list(csv.reader(f))
        except csv.Error as exc:
            warnings.append(f"{path}: not readable as CSV ({exc})")
            continue
        if not rows:
            continue
        more = f'<p class="note">first {max_rows} of {len(rows) - 1} rows</p>' \
            if len(rows) - 1 > max_rows else ""
        out.append(f"<h3>{_esc(path.name)}</h3>{_table(rows[0], rows[1:max_rows + 1])}{more}")
    return "".join(out)


def _plots(study_dir: Path) -> str:
    """Plots in the study folder and its `plots/` folder (`tripod study` writes them there);
    a plot written both as PNG and SVG is shown once (the SVG)."""
    mime = {".png": "image/png", ".svg": "image/svg+xml"}
    found = [p for d in (study_dir, study_dir / "plots") if d.is_dir()
             for p in sorted(d.iterdir()) if p.suffix.lower() in mime]
    stems = {(p.parent, p.stem) for p in found if p.suffix.lower() == ".svg"}
    out = []
    for path in found:
        if path.suffix.lower() == ".png" and (path.parent, path.stem) in stems:
            continue
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        out.append(f'<figure><img class="plot" alt="{_esc(path.name)}" '
                   f'src="data:{mime[path.suffix.lower()]};base64,{data}">'
                   f"<figcaption>{_esc(path.name)}</figcaption></figure>")
    return "".join(out)


def study_runs(study_dir: Path) -> list[Path]:
    """Run folders of a study: direct children (`tripod sweep` layouts, hand-made studies) and
    grandchildren (`tripod study` writes STUDY/ARM/seedN)."""
    found = []
    for child in sorted(p for p in study_dir.iterdir() if p.is_dir()):
        if is_run_dir(child):
            found.append(child)
        else:
            found.extend(p for p in sorted(child.iterdir()) if p.is_dir() and is_run_dir(p))
    return found


def _summary_md(study_dir: Path) -> str:
    path = study_dir / "summary.md"
    if not path.is_file():
        return ""
    return f"<pre>{_esc(path.read_text(encoding='utf-8', errors='replace'))}</pre>"


def study_page(study_dir: Path) -> str:
    paths = study_runs(study_dir)
    runs = [load_run(p) for p in paths]
    names = [str(p.relative_to(study_dir)) for p in paths]
    warnings = [w for r in runs for w in r.warnings]
    summaries = [run_summary(r) for r in runs]
    columns = sorted({k for s in summaries for k in s})
    table = _table(["run", *columns], [[n, *[s.get(c, "") for c in columns]]
                                       for n, s in zip(names, summaries)])
    overlays = []
    for key in STUDY_CURVES:
        series = {n: metric_series(r.metrics).get(key, []) for n, r in zip(names, runs)}
        series = {k: v for k, v in series.items() if v}
        if series:
            overlays.append(svg_line_chart(key, series, width=420, height=240))
    sections = [_section("summary", "Study summary", _summary_md(study_dir) or
                         '<p class="note">no summary.md (tripod study --summarise writes it)</p>'),
                _section("runs", f"Runs ({len(runs)})", table if runs else
                         '<p class="note">no run directories here</p>'),
                _section("curves", "Learning curves", '<div class="charts">' +
                         "".join(overlays) + "</div>"),
                _section("tables", "Study tables", _csv_tables(study_dir, warnings) or
                         '<p class="note">no *.csv tables</p>'),
                _section("plots", "Plots", _plots(study_dir) or '<p class="note">no plots</p>'),
                _warnings(warnings)]
    nav = [("summary", "summary"), ("runs", "runs"), ("curves", "curves"),
           ("tables", "tables"), ("plots", "plots")]
    return _page(f"tripod study: {study_dir.resolve().name}",
                 f"{study_dir.resolve()} \u00b7 per-run trajectories: tripod report RUN_DIR",
                 nav, sections, None)


def build_report(path: str | Path, out: str | Path | None = None,
                 max_episodes: int | None = None) -> Path:
    """Write the report of a run (or study) directory; returns the file written
    (default: `report.html` inside the directory). `max_episodes` caps the episodes shown
    per iteration (whole groups are kept)."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"not a directory: {path}")
    page = run_page(path, max_episodes) if is_run_dir(path) else study_page(path)
    target = Path(out) if out else path / "report.html"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(page.encode("ascii", "xmlcharrefreplace"))
    return target
