"""Measure SWE episodes with test runs: expert episodes per minute with parallel workspaces.

    python benchmarks/swe_episodes.py [--workers 1 2 4] [--episodes 16]

Each expert episode views, edits, runs the task's tests (a scored run: a fresh copy of the
base with the agent's source changes, pytest through the trusted runner, in the sandbox)
and submits (which reuses that run when no source file changed since), in its own
workspace; episodes run in a thread pool, their test runs in separate sandboxed processes.
The load average is printed with each line: the machine may be shared.
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ThreadPoolExecutor

from tripod.envs.swe.env import SweEnv
from tripod.envs.swe.generator import prepare_suite
from tripod.envs.swe.task import SweTask


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    tasks = prepare_suite(args.seed)
    chosen = [tasks[i % len(tasks)] for i in range(args.episodes)]
    for workers in args.workers:
        start = time.monotonic()
        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(expert_episode, chosen))
        elapsed = time.monotonic() - start
        won = sum(w for w, _ in results)
        runs = sum(r for _, r in results)
        load = " ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"workers={workers}: {len(results)} episodes in {elapsed:6.1f}s = "
              f"{60 * len(results) / elapsed:5.1f} episodes/min, "
              f"{60 * runs / elapsed:5.1f} run_tests/min, solved {won}/{len(results)}; "
              f"load average {load}", flush=True)


if __name__ == "__main__":
    main()
