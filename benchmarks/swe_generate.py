"""Measure SWE task generation: tasks generated per minute (sdists are fetched beforehand).

    python benchmarks/swe_generate.py [--projects inflection parse] [--singles 4]
        [--save tasks.jsonl] [--json] [--tiny]

Each candidate bug costs one sandboxed run of the project's test suite (two if it is kept:
the gold patch is checked too), so throughput is set by the suite's run time and by how many
mutants survive or break too much. ``--save`` writes the generated tasks as JSONL (the
format `swe/file:PATH` and `swe_episodes.py --tasks` read).

``--tiny`` makes one single-bug task of inflection (one module, a suite of about 1.5 s) with
one worker: about 6-8 suite runs, so tens of seconds rather than a few.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

from _common import emit, loadavg, output_flags, progress

from tripod.envs.swe.generator import GeneratorConfig, generate_project
from tripod.envs.swe.sources import PROJECTS, sdist_tree
from tripod.envs.swe.task import save_tasks

TINY_PROJECT = "inflection"


def measure(args: argparse.Namespace) -> dict:
    """Tasks and seconds per project, and the tiers of all the tasks made."""
    for name in args.projects:
        sdist_tree(PROJECTS[name].name, PROJECTS[name].version)  # download outside the clock
    config = GeneratorConfig(seed=args.seed, singles=args.singles, pairs=args.pairs,
                             triples=args.triples, workers=args.workers)
    before, made, projects = loadavg(), [], []
    start = time.monotonic()
    for name in args.projects:
        progress(f"generating {name}")
        t0 = time.monotonic()
        tasks = generate_project(PROJECTS[name], config)
        projects.append({"project": name, "tasks": len(tasks),
                         "seconds": time.monotonic() - t0})
        made.extend(tasks)
    elapsed = time.monotonic() - start
    if args.save:
        save_tasks(made, args.save)
    return {"seed": args.seed, "singles": args.singles, "pairs": args.pairs,
            "triples": args.triples, "workers": args.workers, "projects": projects,
            "tasks": len(made), "seconds": elapsed,
            "tasks_per_min": 60 * len(made) / elapsed,
            "tiers": dict(sorted(Counter(t.difficulty for t in made).items())),
            "loadavg_before": before, "loadavg_after": loadavg()}


def _print(r: dict) -> None:
    for p in r["projects"]:
        print(f"{p['project']:<12} {p['tasks']:>3} tasks in {p['seconds']:6.1f}s "
              f"({60 * p['tasks'] / p['seconds']:5.1f} tasks/min)")
    print(f"total        {r['tasks']:>3} tasks in {r['seconds']:6.1f}s "
          f"({r['tasks_per_min']:5.1f} tasks/min, {r['workers']} workers); "
          f"tiers: {r['tiers']}")
    print(f"load average before {r['loadavg_before']}, after {r['loadavg_after']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--projects", nargs="+", default=list(PROJECTS), choices=list(PROJECTS))
    parser.add_argument("--singles", type=int, default=4)
    parser.add_argument("--pairs", type=int, default=1)
    parser.add_argument("--triples", type=int, default=1)
    parser.add_argument("--workers", type=int, default=GeneratorConfig().workers)
    parser.add_argument("--seed", type=int, default=100)
    parser.add_argument("--save", default=None, help="write the generated tasks (JSONL) here")
    output_flags(parser)
    args = parser.parse_args()
    if args.tiny:
        args.projects, args.singles, args.pairs, args.triples = [TINY_PROJECT], 1, 0, 0
        args.workers = 1
    emit(measure(args), args.json, _print)


if __name__ == "__main__":
    main()
