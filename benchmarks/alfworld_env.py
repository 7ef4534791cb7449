"""Measured cost of generated ALFWorld games: generation time and env steps per second.

    python benchmarks/alfworld_env.py [--games 3] [--steps 60]

Generation runs in a fresh temporary cache (nothing reused). Steps/s is measured three ways
on the generated games: the expert policy (plan followed, no replanning), a uniformly
random admissible policy without the expert (engine cost alone: `expert=False`, as in RL
rollouts), and the same random policy with the expert on (a replan after every detour).
Reset time (loading a game translates its PDDL problem) is reported separately.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time


def _generation(task_types: list[str], games: int) -> dict[str, list[float]]:
    from tripod.envs.alfworld import generator

    times: dict[str, list[float]] = {}
    for task_type in task_types:
        for index in range(games):
            start = time.perf_counter()
            generator.cached_game("test", 30_000_000 + index, task_type)
            times.setdefault(task_type, []).append(time.perf_counter() - start)
    return times


def _steps_per_s(task_type: str, games: int, steps: int, policy: str, expert: bool
                 ) -> tuple[float, float]:
    """(steps/s excluding resets, mean reset seconds)."""
    from tripod.envs import make

    env = make(f"alfworld/generated-{task_type}", split="test", expert=expert)
    rng = random.Random(0)
    step_time, resets, n = 0.0, [], 0
    for index in range(games):
        start = time.perf_counter()
        _, info = env.reset(index)
        resets.append(time.perf_counter() - start)
        for _ in range(steps // games):
            if policy == "expert":
                action = info.expert_action or "look"
            else:
                action = rng.choice(info.admissible_actions or ["look"])
            start = time.perf_counter()
            result = env.step(action)
            step_time += time.perf_counter() - start
            n += 1
            info = result.info
            if result.terminated:
                break
    env.close()
    return n / step_time, statistics.mean(resets)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=3, help="games per task type")
    parser.add_argument("--steps", type=int, default=60, help="steps per task type and policy")
    parser.add_argument("--task-types", nargs="*", default=None)
    args = parser.parse_args()
    os.environ["TRIPOD_CACHE"] = tempfile.mkdtemp(prefix="tripod-alfworld-bench-")

    from tripod.envs.alfworld.tasks import TASK_TYPES

    task_types = args.task_types or list(TASK_TYPES)
    print(f"cache: {os.environ['TRIPOD_CACHE']} (fresh); cpus: {os.cpu_count()}")
    gen = _generation(task_types, args.games)
    header = (f"{'task type':<32} {'gen s (mean/max)':>17} {'reset s':>8} {'expert st/s':>12} "
              f"{'random st/s':>12} {'random+expert st/s':>19}")
    print(header)
    for task_type in task_types:
        expert_sps, reset_s = _steps_per_s(task_type, args.games, args.steps, "expert", True)
        random_sps, _ = _steps_per_s(task_type, args.games, args.steps, "random", False)
        replan_sps, _ = _steps_per_s(task_type, args.games, args.steps, "random", True)
        times = gen[task_type]
        print(f"{task_type:<32} {statistics.mean(times):>8.2f}/{max(times):<8.2f} "
              f"{reset_s:>8.2f} {expert_sps:>12.1f} {random_sps:>12.1f} {replan_sps:>19.1f}")


if __name__ == "__main__":
    main()
