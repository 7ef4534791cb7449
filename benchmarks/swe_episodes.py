"""Measure SWE episodes with test runs: expert episodes per minute with parallel workspaces.

    python benchmarks/swe_episodes.py [--workers 1 2 4] [--episodes 16] [--tasks FILE]
        [--json] [--tiny]

Each expert episode views, edits, runs the task's tests (a scored run: a fresh copy of the
base with the agent's source changes, pytest through the trusted runner, in the sandbox)
and submits (which reuses that run when no source file changed since), in its own
workspace; episodes run in a thread pool, their test runs in separate sandboxed processes.
The tasks are the default generated suite (`swe/generated`, generated on first use: minutes),
or those of ``--tasks`` (a file `load_tasks` reads, e.g. written by ``swe_generate.py
--save``). The load average is recorded with each line: the machine may be shared.

``--tiny`` plays one episode with one worker; without ``--tasks`` its task is one
single-bug task of inflection generated first (`swe_generate.py --tiny`'s), the smallest
real task there is offline, since the default suite takes minutes to generate.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

from _common import emit, loadavg, output_flags, progress

from tripod.envs.swe.env import SweEnv
from tripod.envs.swe.generator import GeneratorConfig, generate_project, prepare_suite
from tripod.envs.swe.sources import PROJECTS
from tripod.envs.swe.task import SweTask, load_tasks

TINY_PROJECT = "inflection"


def expert_episode(task: SweTask) -> tuple[bool, int]:
    """(won, number of run_tests calls) of one expert episode."""
    env = SweEnv("swe/bench", task.split or "train", [task])
    try:
        _, info = env.reset(0)
        runs = 0
        while True:
            step = env.step(info.expert_action)
            info = step.info
            runs += info.extra["tool"] == "run_tests"
            if step.terminated or step.truncated:
                return info.won, runs
    finally:
        env.close()


def _tasks(args: argparse.Namespace) -> list[SweTask]:
    if args.tasks:
        return load_tasks(args.tasks)
    if args.tiny:
        progress(f"generating one task of {TINY_PROJECT}")
        config = GeneratorConfig(seed=args.seed, singles=1, pairs=0, triples=0, workers=1)
        return generate_project(PROJECTS[TINY_PROJECT], config)
    return prepare_suite(args.seed)


def measure(args: argparse.Namespace) -> dict:
    """Episodes, test runs and wins per minute for each worker count."""
    tasks = _tasks(args)
    chosen = [tasks[i % len(tasks)] for i in range(args.episodes)]
    runs = []
    for workers in args.workers:
        progress(f"{len(chosen)} episodes with {workers} workers")
        start = time.monotonic()
        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(expert_episode, chosen))
        elapsed = time.monotonic() - start
        runs.append({"workers": workers, "episodes": len(results), "seconds": elapsed,
                     "episodes_per_min": 60 * len(results) / elapsed,
                     "run_tests_per_min": 60 * sum(r for _, r in results) / elapsed,
                     "solved": sum(w for w, _ in results), "loadavg": loadavg()})
    return {"tasks": len(tasks), "runs": runs}


def _print(r: dict) -> None:
    for run in r["runs"]:
        print(f"workers={run['workers']}: {run['episodes']} episodes in "
              f"{run['seconds']:6.1f}s = {run['episodes_per_min']:5.1f} episodes/min, "
              f"{run['run_tests_per_min']:5.1f} run_tests/min, solved "
              f"{run['solved']}/{run['episodes']}; load average {run['loadavg']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tasks", default=None, help="play these tasks (a task file)")
    output_flags(parser)
    args = parser.parse_args()
    if args.tiny:
        args.workers, args.episodes = [1], 1
    emit(measure(args), args.json, _print)


if __name__ == "__main__":
    main()
