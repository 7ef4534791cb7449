"""Measure SWE task generation: tasks generated per minute (sdists are fetched beforehand).

    python benchmarks/swe_generate.py [--projects inflection parse] [--singles 4]

Each candidate bug costs one sandboxed run of the project's test suite (two if it is kept:
the gold patch is checked too), so throughput is set by the suite's run time and by how many
mutants survive or break too much.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

from tripod.envs.swe.generator import GeneratorConfig, generate_project
from tripod.envs.swe.sources import PROJECTS, sdist_tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--projects", nargs="+", default=list(PROJECTS), choices=list(PROJECTS))
    parser.add_argument("--singles", type=int, default=4)
    parser.add_argument("--pairs", type=int, default=1)
    parser.add_argument("--triples", type=int, default=1)
    parser.add_argument("--workers", type=int, default=GeneratorConfig().workers)
    parser.add_argument("--seed", type=int, default=100)
    args = parser.parse_args()
    for name in args.projects:
        sdist_tree(PROJECTS[name].name, PROJECTS[name].version)  # download outside the clock
    config = GeneratorConfig(seed=args.seed, singles=args.singles, pairs=args.pairs,
                             triples=args.triples, workers=args.workers)
    total, tiers, start = 0, Counter(), time.monotonic()
    for name in args.projects:
        t0 = time.monotonic()
        tasks = generate_project(PROJECTS[name], config)
        took = time.monotonic() - t0
        tiers.update(t.difficulty for t in tasks)
        total += len(tasks)
        print(f"{name:<12} {len(tasks):>3} tasks in {took:6.1f}s "
              f"({60 * len(tasks) / took:5.1f} tasks/min)")
    elapsed = time.monotonic() - start
    print(f"total        {total:>3} tasks in {elapsed:6.1f}s ({60 * total / elapsed:5.1f} "
          f"tasks/min, {args.workers} workers); tiers: {dict(sorted(tiers.items()))}")


if __name__ == "__main__":
    main()
