"""Generate the large SWE suite (`swe/large`), project by project, and report what it holds.

    python benchmarks/swe_large_suite.py [--projects webcolors idna] [--seed 0] [--json]
        [--tiny]

Each project is generated once per seed into its own cache file
(`generator.large_suite_dir`), so a run that stops keeps the projects it finished and a
second run reads them back: a project's seconds are its generation time, or about zero when
it was cached (`cached` says which). Reported: tasks per project by split and tier, the
single-bug training tasks, the held-out test sets (unseen projects, unseen functions), and
the generation rate of the projects generated in this run.

``--tiny`` generates one single-bug task of webcolors (a held-out project) into a fresh
suite cache (the downloaded sdists are shared), with one worker.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import time
from collections import Counter

from _common import emit, loadavg, output_flags, progress

from tripod.core.paths import cache_dir
from tripod.envs.swe.generator import (
    LARGE_HELD_OUT,
    LARGE_TRAIN,
    large_suite_dir,
    prepare_large_suite,
)
from tripod.envs.swe.sources import LARGE_PROJECTS, sdist_tree


def measure(args: argparse.Namespace) -> dict:
    train, held = LARGE_TRAIN, LARGE_HELD_OUT
    if args.tiny:
        train = held = dataclasses.replace(LARGE_HELD_OUT, singles=1, pairs=0, triples=0,
                                           workers=1)
    for name in args.projects:
        spec = LARGE_PROJECTS[name]
        sdist_tree(spec.name, spec.version)  # download outside the clock
    before, rows = loadavg(), []
    for name in args.projects:
        cached = (large_suite_dir(args.seed) / f"{name}.jsonl").is_file()
        progress(f"{name}: {'reading the cache' if cached else 'generating'}")
        t0 = time.monotonic()
        tasks = prepare_large_suite(args.seed, (name,), train=train, held_out=held)
        seconds = time.monotonic() - t0
        rows.append({
            "project": name, "held_out": LARGE_PROJECTS[name].held_out, "cached": cached,
            "tasks": len(tasks), "seconds": round(seconds, 1),
            "splits": dict(sorted(Counter(t.split for t in tasks).items())),
            "tiers": dict(sorted(Counter(t.difficulty for t in tasks).items())),
            "singles_by_split": dict(sorted(Counter(
                t.split for t in tasks if len(t.metadata["bugs"]) == 1).items()))})
        progress(f"{name}: {len(tasks)} tasks in {seconds:.0f}s")
    made = [r for r in rows if not r["cached"]]
    minutes = sum(r["seconds"] for r in made) / 60
    per_split = Counter()
    for r in rows:
        for split, n in r["singles_by_split"].items():
            key = "test (unseen project)" if r["held_out"] else (
                "test (unseen function)" if split == "test" else split)
            per_split[key] += n
    return {"seed": args.seed, "projects": rows,
            "single_bug_tasks": dict(sorted(per_split.items())),
            "tasks": sum(r["tasks"] for r in rows),
            "generated_tasks": sum(r["tasks"] for r in made),
            "generation_minutes": round(minutes, 2),
            "tasks_per_min": round(sum(r["tasks"] for r in made) / minutes, 2) if minutes else None,
            "workers": train.workers, "loadavg_before": before, "loadavg_after": loadavg()}


def _print(r: dict) -> None:
    for p in r["projects"]:
        how = "cached" if p["cached"] else f"{p['seconds']:.0f}s"
        role = "held out" if p["held_out"] else "training"
        print(f"{p['project']:<15} {role:<9} {p['tasks']:>4} tasks ({how}); splits "
              f"{p['splits']}; tiers {p['tiers']}")
    print(f"single-bug tasks: {r['single_bug_tasks']}")
    print(f"total {r['tasks']} tasks; generated now {r['generated_tasks']} in "
          f"{r['generation_minutes']} min ({r['tasks_per_min']} tasks/min, {r['workers']} "
          f"workers); load average before {r['loadavg_before']}, after {r['loadavg_after']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--projects", nargs="+", default=list(LARGE_PROJECTS),
                        choices=list(LARGE_PROJECTS))
    parser.add_argument("--seed", type=int, default=0)
    output_flags(parser)
    args = parser.parse_args()
    if args.tiny:  # a fresh suite cache; the downloaded sdists are shared
        args.projects = ["webcolors"]
        sources = cache_dir("swe", "sources")
        os.environ["TRIPOD_CACHE"] = tempfile.mkdtemp(prefix="tripod-large-")
        (cache_dir("swe")).joinpath("sources").symlink_to(sources)
    emit(measure(args), args.json, _print)


if __name__ == "__main__":
    main()
