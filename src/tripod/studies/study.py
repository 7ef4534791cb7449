"""`tripod study STUDY.yaml`: one command per question of arXiv 2510.01132.

A study file names a base recipe, the arms to compare (explicit arms, or `zip` / `product`
grids of dotted recipe overrides), the seeds, and one held-out evaluation shared by every arm
(so arms are compared on the same games). Each arm x seed is one run of the recipe pipeline
in `STUDY_DIR/ARM/seedN`. A run is finished when its completion marker (`study-done.json`,
written after `results.json`) exists; a re-run of the study skips finished runs and starts
unfinished ones afresh, so a killed study finishes only the rest.

Layers of a run's recipe, later ones win: base recipe < `overrides` < `eval` < smoke layer
(with `--smoke`: the shared `SMOKE_OVERRIDES` then the study's `smoke.overrides`) < the arm's
own settings (`smoke.grid` replaces `grid` in smoke mode) < the run's name, folder and seed.
The smoke layer sits below the arm so that it shrinks everything the arms share while the
arms keep what makes them differ.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from tripod.core import provenance
from tripod.core.config import ConfigError, TrainConfig, load_config, set_dotted
from tripod.studies.schema import (
    EvalSpec,
    GridSpec,
    StudyError,
    StudyFile,
)

STUDIES = Path(__file__).resolve().parents[3] / "recipes" / "studies"
DONE_FILE = "study-done.json"
"""Completion marker of a run, written last (after `results.json`)."""
TAG = "tag."
"""Grid keys with this prefix are arm fields for tables and plots, not recipe overrides."""
SMOKE_OVERRIDES: dict[str, Any] = {
    "model.name": "tiny", "sft.games": 3, "sft.recovery_games": 1, "train.iterations": 2,
    "train.eval_every": 0, "train.checkpoint_every": 0, "train.tensorboard": False,
    "train.trajectory_groups": 0, "rollout.games_per_iter": 2, "rollout.group_size": 2,
    "rollout.train_pool": 2, "rollout.train.max_new_tokens": 6,
    "rollout.eval.max_new_tokens": 6, "eval.games": 2, "env.max_turns": 4, "eval.max_turns": 4,
    "algo.micro_batch_size": 4,
}
"""What `--smoke` does to every arm unless the arm sets the key itself: the tiny model, two
iterations of 4 episodes, 3 (+1 recovery) demonstrations, 2 evaluation games, 4 turns."""


@dataclass
class Arm:
    """One arm, expanded: its settings (dotted overrides) and its table/plot fields."""

    name: str
    settings: dict[str, Any]
    tags: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunSpec:
    """One arm x seed: the validated recipe and where it runs."""

    arm: Arm
    seed: int
    cfg: TrainConfig
    study_dir: Path

    @property
    def run_dir(self) -> Path:
        return self.cfg.run_dir


def seed_list(seeds: int | list[int]) -> list[int]:
    return list(range(seeds)) if isinstance(seeds, int) else list(seeds)


def _value_label(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return re.sub(r"[^A-Za-z0-9_.=+-]+", "_", str(text).split("/")[-1]).strip("_")


def expand_grid(grid: GridSpec) -> list[Arm]:
    """Zipped tuples crossed with the product's combinations, in that order."""
    zipped = [dict(zip(grid.zip, vals)) for vals in zip(*grid.zip.values())] or [{}]
    crossed = [dict(zip(grid.product, vals))
               for vals in itertools.product(*grid.product.values())]
    arms = []
    for z, p in itertools.product(zipped, crossed):
        both = {**z, **p}
        tags = {k[len(TAG):]: v for k, v in both.items() if k.startswith(TAG)}
        settings = {k: v for k, v in both.items() if not k.startswith(TAG)}
        label = "-".join(f"{k.split('.')[-1]}={_value_label(v)}" for k, v in settings.items())
        arms.append(Arm(label or "arm", settings, tags))
    if grid.names is not None:
        if len(grid.names) != len(arms):
            raise StudyError(f"grid.names has {len(grid.names)} names for {len(arms)} arms")
        for arm, name in zip(arms, grid.names):
            arm.name = name
    return arms


def study_arms(study: StudyFile, smoke: bool = False) -> list[Arm]:
    """Every arm of the study (the shared-SFT arm first), names checked unique."""
    arms = [Arm("sft", {"train.iterations": 0, "sft.enabled": True})] if study.shared_sft else []
    arms += [Arm(a.name, dict(a.set), dict(a.tags)) for a in study.arms]
    grid = study.smoke.grid if smoke and study.smoke.grid is not None else study.grid
    grid_arms = expand_grid(grid) if grid is not None else []
    if smoke and study.smoke.grid is not None and study.grid is not None:
        real = [a.name for a in expand_grid(study.grid)]
        if real != [a.name for a in grid_arms]:
            raise StudyError(f"smoke.grid must give the arms of grid: {real}")
    arms += grid_arms
    names = [a.name for a in arms]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise StudyError(f"arm names must be unique; repeated: {', '.join(dupes)} (name the "
                         "arms with grid.names or explicit arms)")
    if not arms:
        raise StudyError("the study has no arms (give `arms` or `grid`)")
    for a in arms:
        if not re.fullmatch(r"[A-Za-z0-9_.=+-]+", a.name):
            raise StudyError(f"arm name {a.name!r}: use letters, digits and _ . = + - only")
    return arms


# -- loading ---------------------------------------------------------------------------------
def find_study(path: str | Path) -> Path:
    """A study file by path, or by name under recipes/studies/ (with or without .yaml)."""
    p = Path(path)
    for candidate in (p, STUDIES / p, STUDIES / f"{p}.yaml"):
        if candidate.is_file():
            return candidate
    raise StudyError(f"study file not found: {path}")


def load_study(path: str | Path) -> tuple[StudyFile, Path]:
    """Parse and validate a study file; errors name the file and the key."""
    path = find_study(path)
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise StudyError(f"{path}: a study file must be a mapping")
    try:
        study = StudyFile.model_validate(data)
    except ValidationError as exc:
        lines = [f"{path}: {'.'.join(str(p) for p in e['loc']) or '(study)'}: "
                 f"{'unknown key' if e['type'] == 'extra_forbidden' else e['msg']}"
                 for e in exc.errors()]
        raise StudyError("invalid study file:\n  " + "\n  ".join(lines)) from None
    return study, path


def base_recipe(study: StudyFile, study_path: Path) -> Path:
    """The base recipe, relative to the study file or by name under recipes/."""
    for candidate in (study_path.parent / study.base, STUDIES.parent / study.base):
        if candidate.is_file():
            return candidate
    raise StudyError(f"{study_path}: base recipe not found: {study.base}")


def _set(data: dict[str, Any], dotted: dict[str, Any], where: str) -> dict[str, Any]:
    try:
        return set_dotted(data, dotted)
    except ConfigError as exc:
        raise StudyError(f"{where}: {exc}") from None


def _eval_layer(spec: EvalSpec) -> dict[str, Any]:
    layer: dict[str, Any] = {"eval.split": spec.split, "eval.before_training": spec.before_training}
    if spec.env_ids:
        layer["eval.env_ids"] = list(spec.env_ids)
    for key in ("games", "max_turns"):
        if getattr(spec, key) is not None:
            layer[f"eval.{key}"] = getattr(spec, key)
    return layer


def resolve_runs(study: StudyFile, study_path: Path, out: Path,
                 smoke: bool = False) -> list[RunSpec]:
    """Every arm x seed as a validated recipe (nothing runs; errors name the arm and key)."""
    recipe = base_recipe(study, study_path)
    data = yaml.safe_load(recipe.read_text()) or {}
    layers = [study.overrides, _eval_layer(study.eval)]
    if smoke:
        layers += [SMOKE_OVERRIDES, study.smoke.overrides]
    for layer in layers:
        data = _set(data, layer, str(study_path))
    seeds = seed_list(study.smoke.seeds if smoke else study.seeds)
    arms, runs = study_arms(study, smoke), []
    # Seed-major: a study stopped part-way has every arm of its first seeds, the runs a
    # comparison needs, rather than every seed of its first arms. With a shared SFT, the
    # `sft` arm comes first among each seed's arms, so it runs before the arms that load it.
    for seed in seeds:
        for arm in arms:
            settings = dict(arm.settings)
            if study.shared_sft and arm.name != "sft":
                settings.update({"model.name": str(out / "sft" / f"seed{seed}" / "sft"),
                                 "sft.enabled": False})
            settings.update({"run.out_dir": str(out / arm.name), "run.name": f"seed{seed}",
                             "run.seed": seed})
            try:
                cfg = load_config(None, base=_set(data, settings, f"arm {arm.name}"))
            except ConfigError as exc:
                raise StudyError(f"{study_path}: arm {arm.name}, seed {seed}: {exc}") from None
            runs.append(RunSpec(arm, seed, cfg, out))
    return runs


def default_out(study: StudyFile, smoke: bool) -> Path:
    return Path("runs") / "studies" / (f"{study.name}-smoke" if smoke else study.name)


# -- checks ----------------------------------------------------------------------------------
_ROW_FIELDS = ("arm", "seed", "eval_env", "stage")


def _has_field(spec: RunSpec, key: str) -> bool:
    if key in _ROW_FIELDS:
        return True
    if key.startswith(TAG):
        return key[len(TAG):] in spec.arm.tags
    node: Any = spec.cfg.model_dump(mode="json")
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def check_study(study: StudyFile, runs: list[RunSpec]) -> None:
    """Fail before any run: compared arms exist, plotted fields exist on every arm (the
    shared-SFT arm aside), every env id and env option of every run exists."""
    from tripod.train.pipeline import check_envs

    names = {r.arm.name for r in runs}
    for a, b in study.compare:
        for arm in (a, b):
            if arm not in names:
                raise StudyError(f"compare: unknown arm {arm!r}; arms: {', '.join(names)}")
    plotted = [r for r in runs if not (study.shared_sft and r.arm.name == "sft")]
    for plot in study.plots:
        for key in filter(None, (plot.x, plot.series)):
            missing = sorted({r.arm.name for r in plotted if not _has_field(r, key)})
            if missing:
                raise StudyError(f"plot {plot.stem}: field {key!r} is missing on arm(s) "
                                 f"{', '.join(missing)}")
    for spec in runs:
        try:
            check_envs(spec.cfg)
        except ConfigError as exc:
            raise StudyError(f"arm {spec.arm.name}: {exc}") from None


# -- running ---------------------------------------------------------------------------------
def _fingerprint(spec: RunSpec) -> str:
    """The resolved recipe, without where the study lives: a study folder that was moved or
    named by another spelling of its path still recognises its finished runs."""
    data = spec.cfg.model_dump(mode="json")
    data["run"] = {"seed": data["run"]["seed"]}
    model = data["model"]["name"]
    sft_dir = str(spec.study_dir / "sft")
    if model.startswith(sft_dir):
        data["model"]["name"] = "STUDY/sft" + model[len(sft_dir):]
    return json.dumps(data, sort_keys=True)


def _same_recipe(saved: str, spec: RunSpec) -> bool:
    """Whether a finished run's fingerprint is this run's recipe. A recipe field that tripod
    added after the run finished, at its default value, is not a difference: upgrading tripod
    must not orphan a study's finished runs (a changed value still is one)."""
    old = json.loads(saved)
    now = json.loads(_fingerprint(spec))
    return _without_new_defaults(now, old, TrainConfig().model_dump(mode="json")) == old


def _without_new_defaults(now: Any, old: Any, defaults: Any) -> Any:
    if not (isinstance(now, dict) and isinstance(old, dict)):
        return now
    defaults = defaults if isinstance(defaults, dict) else {}
    return {k: _without_new_defaults(v, old[k], defaults.get(k)) if k in old else v
            for k, v in now.items()
            if k in old or k not in defaults or defaults[k] != v}


def is_finished(spec: RunSpec) -> bool:
    """A run is finished when its marker exists; a marker for another recipe is an error (the
    study file changed under a study directory that holds runs of the old one)."""
    marker = spec.run_dir / DONE_FILE
    if not (marker.is_file() and (spec.run_dir / "results.json").is_file()):
        return False
    saved = json.loads(marker.read_text())
    if not _same_recipe(saved.get("fingerprint") or "{}", spec):
        raise StudyError(f"{spec.run_dir} was finished with another recipe than the study "
                         "file now gives; delete that run or use another --out")
    return True


def _with_missing_sft_models(study: StudyFile, runs: list[RunSpec], todo: list[RunSpec],
                             log: Callable[[str], None]) -> list[RunSpec]:
    """A shared `sft` arm copied back from its small files (`docs/results/`) is finished but
    has no model. When an arm of its seed still has to run, it runs again first (it is
    deterministic), rather than that arm failing to load the model."""
    if not study.shared_sft:
        return todo
    waiting = {r.seed for r in todo if r.arm.name != "sft"}
    again = [r for r in runs if r.arm.name == "sft" and r.seed in waiting and r not in todo
             and not (r.run_dir / "sft" / "config.json").is_file()]
    for r in again:
        log(f"sft, seed {r.seed}: finished, but its model ({r.run_dir / 'sft'}) is missing; "
            "it runs again before the arms of that seed that load it")
    return [r for r in runs if r in todo or r in again]


Runner = Callable[[TrainConfig], Any]


def _games_text(cfg: TrainConfig) -> str:
    if not cfg.eval.games_by_env:
        return f"{cfg.eval.games} games per env"
    return ", ".join(f"{cfg.eval_games(e)} games of {e}" for e in cfg.eval_env_ids())


def default_runner(cfg: TrainConfig) -> Any:
    """The recipe pipeline; the run's models are freed before the next run loads its own."""
    import gc

    from tripod.train.pipeline import run_recipe

    try:
        return run_recipe(cfg)
    finally:
        gc.collect()


def run_one(spec: RunSpec, runner: Runner) -> None:
    """Run an arm x seed from scratch (an unfinished run's leftovers are removed first, so
    that no stale checkpoint or metric mixes into it), then write the marker last."""
    if spec.run_dir.exists():
        shutil.rmtree(spec.run_dir)
    runner(spec.cfg)
    marker = {"arm": spec.arm.name, "seed": spec.seed, "fingerprint": _fingerprint(spec)}
    (spec.run_dir / DONE_FILE).write_text(json.dumps(marker))


@dataclass
class StudyOutcome:
    """What `run_study` did: every run (in order), runs started, runs skipped as finished,
    the output files."""

    runs: list[RunSpec]
    ran: list[RunSpec]
    skipped: list[RunSpec]
    outputs: dict[str, Path]


def run_study(path: str | Path, out: Path | None = None, smoke: bool = False,
              dry_run: bool = False, summarise_only: bool = False,
              runner: Runner = default_runner, log: Callable[[str], None] = print
              ) -> StudyOutcome:
    """Load a study file and run it (see `execute_study`)."""
    study, study_path = load_study(path)
    return execute_study(study, study_path, out or default_out(study, smoke), smoke=smoke,
                         dry_run=dry_run, summarise_only=summarise_only, runner=runner, log=log)


def execute_study(study: StudyFile, study_path: Path, out: Path, smoke: bool = False,
                  dry_run: bool = False, summarise_only: bool = False,
                  runner: Runner = default_runner, log: Callable[[str], None] = print
                  ) -> StudyOutcome:
    """Validate every run, run the unfinished ones in order, then summarise. `study_path`
    locates the base recipe (`base` is relative to its folder)."""
    runs = resolve_runs(study, study_path, out, smoke)
    check_study(study, runs)
    todo = _with_missing_sft_models(study, runs, [r for r in runs if not is_finished(r)], log)
    log(f"study {study.name}: {len(runs)} runs ({len(runs) - len(todo)} finished) in {out}")
    for r in runs:
        state = "done" if r not in todo else ("would run" if dry_run else "to run")
        log(f"  {r.arm.name:<28} seed {r.seed}  {state:<9} {_describe_settings(r.arm)}")
    if dry_run:
        return StudyOutcome(runs, [], [r for r in runs if r not in todo], {})
    out.mkdir(parents=True, exist_ok=True)
    (out / "study.yaml").write_text(yaml.safe_dump(study.model_dump(mode="json"),
                                                   sort_keys=False))
    ran = []
    for i, spec in enumerate([] if summarise_only else todo, 1):
        log(f"[{i}/{len(todo)}] arm {spec.arm.name}, seed {spec.seed} -> {spec.run_dir}")
        run_one(spec, runner)
        ran.append(spec)
    outputs = summarise_study(study, study_path, runs, out, smoke)
    return StudyOutcome(runs, ran, [r for r in runs if r not in ran], outputs)


def _describe_settings(arm: Arm) -> str:
    parts = [f"{k}={v}" for k, v in arm.settings.items()]
    parts += [f"tag.{k}={v}" for k, v in arm.tags.items()]
    return " ".join(parts)


def summarise_study(study: StudyFile, study_path: Path, runs: list[RunSpec], out: Path,
                    smoke: bool) -> dict[str, Path]:
    """Tidy tables, summary page and plots from the finished runs (partial studies too)."""
    from tripod.studies.aggregate import (
        compare,
        read_run,
        summary_markdown,
        write_episodes,
        write_table,
    )
    from tripod.studies.plots import make_plots

    arm_order = {a: i for i, a in enumerate(dict.fromkeys(r.arm.name for r in runs))}
    done = sorted((r for r in runs if (r.run_dir / DONE_FILE).is_file()),
                  key=lambda r: (arm_order[r.arm.name], r.seed))   # tables read arm by arm
    rows = [row for r in done for row in read_run(
        r.run_dir, r.arm.name, r.seed, r.arm.tags, r.arm.settings, r.cfg.model_dump(mode="json"))]
    outputs = {"table": out / "results.csv", "episodes": out / "episodes.csv",
               "summary": out / "summary.md"}
    write_table(rows, outputs["table"], study.name)
    write_episodes(rows, outputs["episodes"])
    comparisons = [c for a, b in study.compare for c in compare(rows, a, b)]
    plot_rows = [r for r in rows if not (study.shared_sft and r.arm == "sft")]
    command = f"tripod study {_display(study_path)}{' --smoke' if smoke else ''}"
    plots = make_plots(study.plots, plot_rows, [(r.arm.name, r.seed, r.run_dir) for r in done],
                       out / "plots")
    header = [f"Question: {study.question}", "",
              *([f"Paper (arXiv 2510.01132): {study.paper}", ""] if study.paper else []),
              f"Runs finished: {len(done)} of {len(runs)}"
              f"{' (smoke size: tiny model, not a result)' if smoke else ''}; seeds "
              f"{sorted({r.seed for r in runs})}; evaluation: split {study.eval.split}, "
              f"{_games_text(runs[0].cfg)}, greedy.", "",
              f"Command: `{command}`", "", runs_provenance([r.run_dir for r in done])]
    outputs["provenance"] = provenance.write(out, provenance.collect(command, measure=False))
    outputs["summary"].write_text(summary_markdown(
        f"Study: {study.name}", header, rows, comparisons,
        [p.relative_to(out) for p in plots]))
    outputs.update({f"plot:{p.stem}": p for p in plots})
    from tripod.report.html import build_report

    outputs["report"] = build_report(out)  # the study page: summary, runs, tables, plots
    return outputs


def runs_provenance(run_dirs: list[Path]) -> str:
    """One line on where the runs' numbers come from: their commits and matmul peaks, from
    each run's provenance record."""
    records = [r for r in map(provenance.read, run_dirs) if r is not None]
    if not records:
        return "Provenance: no run records (runs made before runs recorded their provenance)."
    commits = Counter(r.commit or "unknown" for r in records)
    peaks = [p for r in records if (p := r.machine.matmul_peak_gflops)]
    text = ", ".join(f"{c} ({n} runs)" for c, n in commits.items())
    if peaks:
        text += f"; matmul peak {min(peaks):.0f}-{max(peaks):.0f} GFLOP/s"
    return f"Provenance: commits {text}; records in each run's {provenance.PROVENANCE_FILE}."


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(STUDIES.parents[1]))
    except ValueError:
        return str(path)


# -- command line ----------------------------------------------------------------------------
def cmd_study(args: Any) -> int:
    try:
        outcome = run_study(args.study, Path(args.out) if args.out else None, smoke=args.smoke,
                            dry_run=args.dry_run, summarise_only=args.summarise)
    except StudyError as exc:
        raise ConfigError(str(exc)) from None
    except KeyboardInterrupt:
        print("interrupted: finished runs are kept; the same command runs the rest",
              file=sys.stderr)
        return 130
    if outcome.outputs:
        print(f"ran {len(outcome.ran)} runs, {len(outcome.skipped)} already finished")
        for key in ("summary", "table", "episodes"):
            print(f"{key}: {outcome.outputs[key]}")
        print(outcome.outputs["summary"].read_text())
    return 0


def register_study_commands(sub: Any) -> None:
    """`tripod study` and `tripod budget` (called by `tripod.cli.build_parser`)."""
    from tripod.studies.budget import add_budget_parser

    sp = sub.add_parser("study", help="run a study: arms x seeds, resumable; table, summary, "
                        "plots")
    sp.add_argument("study", help="study file, or a name under recipes/studies/")
    sp.add_argument("--smoke", action="store_true",
                    help="tiny model, a few games and iterations (checks the wiring only)")
    sp.add_argument("--dry-run", action="store_true",
                    help="validate every arm and list the runs; run nothing")
    sp.add_argument("--summarise", action="store_true",
                    help="only rebuild the table, summary and plots from finished runs")
    sp.add_argument("--out", help="study directory (default runs/studies/NAME[-smoke])")
    sp.set_defaults(fn=cmd_study)
    add_budget_parser(sub)
