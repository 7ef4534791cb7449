"""`tripod results`: the results pages and the README's results table, built from records.

Each folder under `docs/results/` holds one result: its tidy table `results.csv` (a study's
aggregate writes it: one row per run, stage and evaluated env) and its `provenance.json`
(`tripod.core.provenance`). This command reads them and writes

- `docs/results/index.md`: every result, pooled per arm, stage and env, with its provenance;
- the block between `<!-- results:begin -->` and `<!-- results:end -->` in README.md, for
  the results `docs/results/readme.txt` names.

Nothing is typed by hand: a new result is a folder copied from a run or study directory
(`results.csv` and `provenance.json`), then `tripod results`. `--check` fails when the pages
are not what the records give (for CI).
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from tripod.core import provenance
from tripod.core.provenance import Provenance
from tripod.eval.stats import wilson_interval

BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
README_ROWS = "readme.txt"
"""Names of the results the README's table shows, one per line (the rest: index.md only)."""
REPO = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Pooled:
    """One arm's success at one stage on one env, pooled over seeds."""

    arm: str
    stage: str
    env: str
    won: int
    n: int
    seeds: int

    def cell(self) -> str:
        lo, hi = wilson_interval(self.won, self.n)
        return f"{self.won}/{self.n} = {_pct(self.won / self.n)} ({lo:.0%}-{hi:.0%})"


def _pct(rate: float) -> str:
    """96.5%, 48% (one decimal where it is not zero)."""
    return f"{rate:.1%}".replace(".0%", "%")


@dataclass(frozen=True)
class Result:
    """One folder of docs/results: its name, its pooled rows and where they come from."""

    name: str
    folder: Path
    rows: list[Pooled]
    record: Provenance


def pool_rows(table: Path) -> list[Pooled]:
    """`results.csv` pooled per (arm, stage, env), in the table's order."""
    won: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    with table.open() as f:
        for row in csv.DictReader(f):
            acc = won[(row["arm"], row["stage"], row["eval_env"])]
            acc[0] += int(row["successes"])
            acc[1] += int(row["episodes"])
            acc[2] += 1
    return [Pooled(a, s, e, w, n, k) for (a, s, e), (w, n, k) in won.items() if n]


def read_results(root: Path) -> list[Result]:
    """Every folder under `root` with a `results.csv`; one without a record is an error."""
    found = []
    for folder in sorted(p.parent for p in root.glob("*/results.csv")):
        record = provenance.read(folder)
        if record is None:
            raise FileNotFoundError(f"{folder} has results but no {provenance.PROVENANCE_FILE}")
        found.append(Result(folder.name, folder, pool_rows(folder / "results.csv"), record))
    return found


def _env(env: str) -> str:
    return env.removeprefix("textworld/")


def index_page(results: list[Result]) -> str:
    """docs/results/index.md."""
    lines = ["# Results", "",
             "Built by `tripod results` from each folder's `results.csv` and `provenance.json`;",
             "do not edit by hand. Success is greedy, on held-out games, pooled over seeds",
             "(95% Wilson interval). A *recovered* record was rebuilt from git for a result",
             "made before runs recorded their provenance: it names the commit that added the",
             "result and the command, not the machine.", ""]
    for r in results:
        summary = f" ([summary]({r.name}/summary.md))" if (r.folder / "summary.md").is_file() else ""
        lines += [f"## {r.name}", "", f"Command: `{r.record.command}`{summary}", "",
                  f"Provenance: {r.record.short()}", "",
                  "| arm | stage | env | seeds | success |", "|---|---|---|---|---|"]
        lines += [f"| {p.arm} | {p.stage} | {_env(p.env)} | {p.seeds} | {p.cell()} |"
                  for p in r.rows]
        lines.append("")
    return "\n".join(lines)


def readme_block(results: list[Result], link_root: str = "docs/results") -> str:
    """The README's table: one line per result and evaluated env, its arms side by side."""
    lines = [BEGIN, "| result | env | success per arm (stage) | provenance |", "|---|---|---|---|"]
    for r in results:
        by_env: dict[str, list[Pooled]] = defaultdict(list)
        for p in r.rows:
            by_env[p.env].append(p)
        for env, rows in by_env.items():
            cells = "; ".join(f"{p.arm} ({p.stage}) {p.cell()}" for p in rows)
            anchor = f"{link_root}/index.md#{r.name}"
            lines.append(f"| [{r.name}]({anchor}) | {_env(env)} | {cells} | "
                         f"`{r.record.command}` at {r.record.commit or 'unknown'} "
                         f"({r.record.source}) |")
    return "\n".join([*lines, END])


def replace_block(text: str, block: str) -> str:
    """`text` with its results block replaced by `block`."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"no {BEGIN} ... {END} block")
    return text[:start] + block + text[end + len(END):]


def headline(results: list[Result], root: Path) -> list[Result]:
    """The results the README shows: those `root/README_ROWS` names, in its order (every
    result where the file is missing)."""
    names = root / README_ROWS
    if not names.is_file():
        return results
    by_name = {r.name: r for r in results}
    wanted = [n.strip() for n in names.read_text().splitlines() if n.strip()]
    missing = [n for n in wanted if n not in by_name]
    if missing:
        raise FileNotFoundError(f"{names} names results without a folder: {missing}")
    return [by_name[n] for n in wanted]


def build(root: Path, readme: Path | None) -> dict[Path, str]:
    """The files the records give: path -> content."""
    results = read_results(root)
    out = {root / "index.md": index_page(results)}
    if readme is not None:
        block = readme_block(headline(results, root))
        out[readme] = replace_block(readme.read_text(), block)
    return out


def cmd_results(args: argparse.Namespace) -> int:
    readme = None if args.no_readme else Path(args.readme)
    files = build(Path(args.root), readme)
    stale = [p for p, text in files.items() if not p.is_file() or p.read_text() != text]
    if args.check:
        for p in stale:
            print(f"out of date: {p} (run `tripod results`)", file=sys.stderr)
        return 1 if stale else 0
    for p in stale:
        p.write_text(files[p])
        print(f"wrote {p}")
    return 0


def add_results_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`tripod results [--root DIR] [--readme FILE] [--check]`."""
    p = subparsers.add_parser("results", help="build docs/results/index.md and the README's "
                              "results table from the results' records")
    p.add_argument("--root", default=str(REPO / "docs" / "results"),
                   help="folder of results (default: docs/results)")
    p.add_argument("--readme", default=str(REPO / "README.md"))
    p.add_argument("--no-readme", action="store_true", help="leave the README alone")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 if a page differs from what the records give")
    p.set_defaults(fn=cmd_results)
    return p
