"""A study's results: a tidy table, a summary with intervals, paired comparisons of arms.

Success of an arm on an env pools its episodes over seeds and games; the 95% interval is the
Wilson interval `tripod eval` uses (`tripod.eval.evaluate.wilson_interval`). Pooling treats
the seeds' episodes as independent draws, which ignores the spread between seeds: the per-seed
rates are listed beside it so that a reader sees that spread too.

Two arms evaluated on the same games are compared game by game (pairs: same seed, same game):
the exact McNemar test on the discordant pairs, and the difference in success with a paired
bootstrap interval over those pairs. Two arms that share no evaluated env (a study across game
sizes or reward levels) played no game in common: their pooled rates are compared as two
independent samples instead (Fisher's exact test, Newcombe's interval of the difference).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from tripod.eval.stats import wilson_interval

RESULT_STAGES = ("final", "sft", "base")
"""The evaluation a run is judged by: after RL, else after SFT (runs without RL)."""


@dataclass
class EvalRow:
    """One arm x seed x evaluated env: the tidy table's row."""

    arm: str
    seed: int
    eval_env: str
    stage: str
    split: str
    successes: int
    episodes: int
    """Episodes that ran (env errors excluded), as in `tripod eval`."""
    env_errors: int
    mean_turns: float
    invalid_rate: float
    outcomes: dict[int, bool | None]
    """Game index -> won (None: the env broke that episode)."""
    run_dir: str
    tags: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict, repr=False)
    """The run's resolved recipe (for plot fields given as dotted keys)."""

    @property
    def success_rate(self) -> float:
        return self.successes / self.episodes if self.episodes else float("nan")

    def field(self, key: str) -> Any:
        """A plot/table field: arm, seed, eval_env, `tag.NAME` or a dotted recipe key."""
        if key in ("arm", "seed", "eval_env", "stage"):
            return getattr(self, key)
        if key.startswith("tag."):
            return self.tags.get(key[4:])
        node: Any = self.config
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node


def read_run(run_dir: Path, arm: str, seed: int, tags: dict, settings: dict,
             config: dict) -> list[EvalRow]:
    """The rows of one finished run (its `results.json`, judged at its result stage)."""
    results = json.loads((run_dir / "results.json").read_text())
    evals = results.get("eval", {})
    stage = next((s for s in RESULT_STAGES if s in evals), None)
    if stage is None:
        return []
    rows = []
    for env_id, r in evals[stage].items():
        outcomes = {int(g["game"]): (None if g.get("error") or g.get("end") == "env_error"
                                     else bool(g["won"])) for g in r.get("per_game", [])}
        rows.append(EvalRow(arm, seed, env_id, stage, r["split"], int(r["won"]),
                            int(r["episodes"]), int(r.get("env_errors", 0)),
                            float(r["mean_turns"]), float(r["invalid_rate"]), outcomes,
                            str(run_dir), dict(tags), dict(settings), config))
    return rows


def _outcome_string(outcomes: dict[int, bool | None]) -> str:
    """'1' won, '0' not won, 'E' env error, one character per game index 0..n-1."""
    return "".join("E" if outcomes[g] is None else str(int(outcomes[g]))
                   for g in sorted(outcomes))


def write_table(rows: list[EvalRow], path: Path, study: str) -> None:
    """One row per arm, seed and evaluated env; per-game outcomes in `outcomes`."""
    tag_keys = sorted({k for r in rows for k in r.tags})
    set_keys = sorted({k for r in rows for k in r.settings})
    head = ["study", "arm", "seed", "stage", "eval_env", "split", "successes", "episodes",
            "success_rate", "ci_low", "ci_high", "env_errors", "mean_turns", "invalid_rate",
            "outcomes", *[f"tag.{k}" for k in tag_keys], *set_keys, "run_dir"]
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(head)
        for r in rows:
            lo, hi = wilson_interval(r.successes, r.episodes)
            w.writerow([study, r.arm, r.seed, r.stage, r.eval_env, r.split, r.successes,
                        r.episodes, f"{r.success_rate:.4f}", f"{lo:.4f}", f"{hi:.4f}",
                        r.env_errors, f"{r.mean_turns:.2f}", f"{r.invalid_rate:.4f}",
                        _outcome_string(r.outcomes), *[r.tags.get(k, "") for k in tag_keys],
                        *[_cell(r.settings.get(k, "")) for k in set_keys], r.run_dir])


def write_episodes(rows: list[EvalRow], path: Path) -> None:
    """The long form: one row per arm, seed, env and game (won 1/0, empty for env errors)."""
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["arm", "seed", "eval_env", "game", "won"])
        for r in rows:
            for game, won in sorted(r.outcomes.items()):
                w.writerow([r.arm, r.seed, r.eval_env, game, "" if won is None else int(won)])


def _cell(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


@dataclass
class ArmSummary:
    """An arm on one env, pooled over seeds and games."""

    arm: str
    eval_env: str
    successes: int
    episodes: int
    per_seed: dict[int, float]

    @property
    def rate(self) -> float:
        return self.successes / self.episodes if self.episodes else float("nan")

    @property
    def ci95(self) -> tuple[float, float]:
        return wilson_interval(self.successes, self.episodes)


def summarise_arms(rows: list[EvalRow], keys: tuple[str, ...] = ("arm", "eval_env")
                   ) -> dict[tuple, ArmSummary]:
    """Pool rows sharing the values of `keys` (default: per arm and evaluated env)."""
    out: dict[tuple, ArmSummary] = {}
    for r in rows:
        key = tuple(_hashable(r.field(k)) for k in keys)
        s = out.setdefault(key, ArmSummary(r.arm, r.eval_env, 0, 0, {}))
        s.successes += r.successes
        s.episodes += r.episodes
        s.per_seed[r.seed] = r.success_rate
    return out


def _hashable(value: Any) -> Any:
    return json.dumps(value) if isinstance(value, (list, dict)) else value


@dataclass
class Difference:
    """Success rate of arm `a` minus that of arm `b`, with its 95% interval and the p-value of
    a test of no difference (the comparison that holds it says which interval and test)."""

    diff: float
    ci95: tuple[float, float]
    p_value: float

    def cells(self) -> list[str]:
        """The last three cells of a comparison's row: difference, interval, p-value."""
        lo, hi = self.ci95
        return [f"{self.diff:+.1%}", f"{lo:+.1%} to {hi:+.1%}", f"{self.p_value:.3g}"]


@dataclass
class Paired:
    """Arm `a` against arm `b` on the same (seed, game) pairs of one env."""

    a: str
    b: str
    eval_env: str
    pairs: int
    a_only: int
    """Pairs that `a` won and `b` did not."""
    b_only: int
    difference: Difference
    """Success of `a` minus success of `b` on the pairs; its interval is the paired bootstrap
    percentile interval (pairs resampled, 2000 draws), its test the exact two-sided McNemar
    test (binomial on the discordant pairs)."""

    TITLE: ClassVar[str] = "Paired comparisons (same seeds, same games)"
    COLUMNS: ClassVar[list[str]] = ["a vs b", "evaluated env", "pairs", "only a won",
                                    "only b won", "a - b", "95% CI (paired bootstrap)",
                                    "McNemar p"]

    def cells(self) -> list[str]:
        return [f"{self.a} vs {self.b}", self.eval_env, str(self.pairs), str(self.a_only),
                str(self.b_only), *self.difference.cells()]


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p-value: discordant pairs ~ Binomial(n, 1/2) under H0."""
    n = a_only + b_only
    if n == 0:
        return 1.0
    k = min(a_only, b_only)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired_bootstrap(diffs: np.ndarray, draws: int = 2000, seed: int = 0
                     ) -> tuple[float, float]:
    """95% percentile interval of the mean of per-pair differences (fixed seed: the same
    table every time it is rebuilt)."""
    if len(diffs) == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(diffs), size=(draws, len(diffs)))   # [draws, pairs]
    means = diffs[idx].mean(axis=1)                                  # [draws]
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def compare_arms(rows: list[EvalRow], a: str, b: str) -> list[Paired]:
    """Paired comparisons of arms `a` and `b` on every env both were evaluated on."""
    def outcomes(arm: str) -> dict[tuple[str, int, int], bool]:
        return {(r.eval_env, r.seed, g): won for r in rows if r.arm == arm
                for g, won in r.outcomes.items() if won is not None}

    oa, ob = outcomes(a), outcomes(b)
    out = []
    for env in sorted({k[0] for k in oa} & {k[0] for k in ob}):
        keys = sorted(k for k in oa.keys() & ob.keys() if k[0] == env)
        diffs = np.array([int(oa[k]) - int(ob[k]) for k in keys], dtype=float)   # [pairs]
        a_only, b_only = int((diffs > 0).sum()), int((diffs < 0).sum())
        diff = float(diffs.mean()) if len(keys) else float("nan")
        out.append(Paired(a, b, env, len(keys), a_only, b_only, Difference(
            diff, paired_bootstrap(diffs), mcnemar_exact(a_only, b_only))))
    return out


@dataclass
class Unpaired:
    """Arm `a` against arm `b` when they share no evaluated env (e.g. trained and evaluated on
    different game sizes): no game was played by both, so the rates are compared as two
    independent samples, pooled over seeds, games and each arm's envs."""

    a: str
    b: str
    a_envs: list[str]
    b_envs: list[str]
    a_won: int
    a_n: int
    b_won: int
    b_n: int
    difference: Difference
    """Success rate of `a` minus that of `b`; its interval is Newcombe's hybrid score interval
    (built from the two Wilson intervals), its test Fisher's exact test, two-sided."""

    TITLE: ClassVar[str] = "Unpaired comparisons (no evaluated env id in common)"
    COLUMNS: ClassVar[list[str]] = ["a vs b", "a evaluated on", "b evaluated on", "a won/n",
                                    "b won/n", "a - b", "95% CI (Newcombe)", "Fisher p"]

    def cells(self) -> list[str]:
        return [f"{self.a} vs {self.b}", ", ".join(self.a_envs), ", ".join(self.b_envs),
                f"{self.a_won}/{self.a_n}", f"{self.b_won}/{self.b_n}",
                *self.difference.cells()]


def newcombe_interval(a_won: int, a_n: int, b_won: int, b_n: int) -> tuple[float, float]:
    """95% interval of a difference of two independent proportions (Newcombe 1998, method
    10: each side's distance from its Wilson interval, combined in quadrature)."""
    if a_n == 0 or b_n == 0:
        return float("nan"), float("nan")
    pa, pb = a_won / a_n, b_won / b_n
    (la, ua), (lb, ub) = wilson_interval(a_won, a_n), wilson_interval(b_won, b_n)
    d = pa - pb
    return (d - math.sqrt((pa - la) ** 2 + (ub - pb) ** 2),
            d + math.sqrt((ua - pa) ** 2 + (pb - lb) ** 2))


def fisher_exact(a_won: int, a_n: int, b_won: int, b_n: int) -> float:
    """Two-sided Fisher exact p-value of the 2x2 table (won/lost x a/b): the probability, with
    the margins fixed, of a table at most as likely as the observed one."""
    n, won = a_n + b_n, a_won + b_won
    if a_n == 0 or b_n == 0:
        return 1.0

    def prob(x: int) -> float:   # hypergeometric: x of a's games won
        return math.comb(won, x) * math.comb(n - won, a_n - x) / math.comb(n, a_n)

    observed = prob(a_won)
    tables = range(max(0, a_n - (n - won)), min(won, a_n) + 1)
    return min(1.0, sum(p for p in map(prob, tables) if p <= observed * (1 + 1e-9)))


def compare_unpaired(rows: list[EvalRow], a: str, b: str) -> Unpaired | None:
    """Arms `a` and `b` as independent samples; None when either has no episodes."""
    ra, rb = [r for r in rows if r.arm == a], [r for r in rows if r.arm == b]
    a_won, a_n = sum(r.successes for r in ra), sum(r.episodes for r in ra)
    b_won, b_n = sum(r.successes for r in rb), sum(r.episodes for r in rb)
    if not a_n or not b_n:
        return None
    return Unpaired(a, b, sorted({r.eval_env for r in ra}), sorted({r.eval_env for r in rb}),
                    a_won, a_n, b_won, b_n, Difference(
                        a_won / a_n - b_won / b_n, newcombe_interval(a_won, a_n, b_won, b_n),
                        fisher_exact(a_won, a_n, b_won, b_n)))


def compare(rows: list[EvalRow], a: str, b: str) -> list[Paired | Unpaired]:
    """Paired comparisons on every env both arms were evaluated on; if they share none, one
    unpaired comparison (different games cannot be paired)."""
    paired = compare_arms(rows, a, b)
    if paired:
        return list(paired)
    unpaired = compare_unpaired(rows, a, b)
    return [unpaired] if unpaired is not None else []


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.0%}"


def summary_markdown(title: str, header: list[str], rows: list[EvalRow],
                     comparisons: list[Paired | Unpaired], plots: list[Path]) -> str:
    """The study's summary page: pooled success per arm and env, paired comparisons, plots."""
    lines = [f"# {title}", "", *header, "",
             "## Success per arm (pooled over seeds and games; 95% Wilson interval)", "",
             "| arm | fields | evaluated env | success | 95% CI | won/n | per seed |",
             "|---|---|---|---|---|---|---|"]
    order = list(dict.fromkeys(r.arm for r in rows))
    fields = {r.arm: ", ".join(f"{k}={v}" for k, v in r.tags.items()) for r in rows}
    summaries = summarise_arms(rows)
    for (arm, env), s in sorted(summaries.items(), key=lambda kv: (order.index(kv[0][0]),
                                                                    kv[0][1])):
        lo, hi = s.ci95
        seeds = ", ".join(f"{seed}: {_pct(v)}" for seed, v in sorted(s.per_seed.items()))
        lines.append(f"| {arm} | {fields[arm]} | {env} | {_pct(s.rate)} | {_pct(lo)}-{_pct(hi)}"
                     f" | {s.successes}/{s.episodes} | {seeds} |")
    for kind in (Paired, Unpaired):
        group = [c for c in comparisons if isinstance(c, kind)]
        if group:
            lines += ["", f"## {kind.TITLE}", "", _md_row(kind.COLUMNS),
                      _md_row(["---"] * len(kind.COLUMNS)), *(_md_row(c.cells()) for c in group)]
    if plots:
        lines += ["", "## Plots", ""] + [f"![{p.stem}]({p.as_posix()})" for p in plots]
    return "\n".join(lines) + "\n"
