"""Measured cost of generated ALFWorld games: generation, env steps/s, parallel episodes.

    python benchmarks/alfworld_env.py [--games 3] [--steps 60] [--task-types ...]
    python benchmarks/alfworld_env.py --parallel 4 --task-types pick_and_place_simple

Generation runs in a fresh temporary cache (nothing reused). Steps/s is measured three ways
on the generated games, through `make` (each env plays in its own child process): the expert
policy (plan followed, no replanning), a uniformly random admissible policy without the
expert (engine cost alone: `expert=False`, as in RL rollouts), and the same random policy
with the expert on (a replan after every detour). Reset time (loading a game translates its
PDDL problem) is reported separately.

``--parallel N`` instead times the expert playing N games (per task type) one after the
other on one env, and N envs at once from threads (as the rollout engine steps them). Both
sides are warmed up the same way (every env has started its process and played once),
then run alternately, `--repeats` times each; the load average is printed with the times.
``--engine N`` times the same through the rollout engine (expert actor, tiny model unused):
batch 1 vs batch N.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor


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


def _play_expert(env, index: int) -> bool:
    _, info = env.reset(index)
    for _ in range(40):
        step = env.step(info.expert_action or "look")
        info = step.info
        if step.terminated or step.truncated:
            break
    return info.won


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def _parallel(task_types: list[str], games: int, repeats: int) -> None:
    """Seconds for the expert to play `games` games of each type: one env in turn vs one env
    per game, all stepped at once from threads."""
    from tripod.envs import make

    indices = list(range(games))
    env_id = "alfworld/generated"
    one = make(env_id, "test", task_types=task_types)
    many = [make(env_id, "test", task_types=task_types) for _ in indices]
    pool = ThreadPoolExecutor(len(many))

    def sequential() -> list[bool]:
        return [_play_expert(one, i) for i in indices]

    def parallel() -> list[bool]:
        return list(pool.map(_play_expert, many, indices))

    try:
        assert sequential() == parallel(), "parallel play differs from sequential play"  # warm-up
        times: dict[str, list[float]] = {"sequential": [], "parallel": []}
        for _ in range(repeats):
            for name, run in (("sequential", sequential), ("parallel", parallel)):
                start = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - start)
                print(f"  {name:<10} {times[name][-1]:6.2f} s  (load average {_load()})")
    finally:
        pool.shutdown()
        for env in [one, *many]:
            env.close()
    seq, par = statistics.mean(times["sequential"]), statistics.mean(times["parallel"])
    print(f"{games} games of {', '.join(task_types)}: sequential {seq:.2f} s, parallel "
          f"{par:.2f} s (mean of {repeats}), speed-up x{seq / par:.2f}; cpus {os.cpu_count()}")


def _engine(task_types: list[str], games: int, repeats: int) -> None:
    """Seconds for the rollout engine to play `games` games with the expert actor, one
    episode at a time (batch 1) vs all at once (batch `games`); warm envs, alternated."""
    from tripod.envs import make
    from tripod.policy.models import load_policy
    from tripod.policy.rollout import RolloutConfig, RolloutEngine, expert_actor, make_jobs
    from tripod.policy.sampler import SamplingParams

    policy = load_policy("tiny")  # not run: the expert actor replies
    jobs = make_jobs("alfworld/generated", "test", list(range(games)), 1, 0)
    engines = {batch: RolloutEngine(
        policy, RolloutConfig(max_turns=24, batch_size=batch, env_timeout_s=120),
        env_factory=lambda job: make(job.env_id, split=job.split, task_types=task_types))
        for batch in (1, games)}
    try:
        for engine in engines.values():  # warm-up: every env started, every game generated
            engine.collect(jobs, SamplingParams(), actor=expert_actor())
        for _ in range(repeats):
            for batch, engine in engines.items():
                start = time.perf_counter()
                trajs, stats = engine.collect(jobs, SamplingParams(), actor=expert_actor())
                print(f"  batch {batch:<3} {time.perf_counter() - start:6.2f} s, won "
                      f"{sum(t.won for t in trajs)}/{games}, env errors {stats.env_errors} "
                      f"(load average {_load()})")
    finally:
        for engine in engines.values():
            engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=3, help="games per task type")
    parser.add_argument("--steps", type=int, default=60, help="steps per task type and policy")
    parser.add_argument("--task-types", nargs="*", default=None)
    parser.add_argument("--parallel", type=int, default=0,
                        help="time N games played at once vs one at a time (instead)")
    parser.add_argument("--engine", type=int, default=0,
                        help="time N games through the rollout engine, batch 1 vs N (instead)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ["TRIPOD_CACHE"] = tempfile.mkdtemp(prefix="tripod-alfworld-bench-")
    # This script imports the generator (and so the alfworld wheel) itself: keep the wheel's
    # data folder inside the temporary cache.
    os.environ.setdefault("ALFWORLD_DATA", os.path.join(os.environ["TRIPOD_CACHE"], "data"))

    from tripod.envs.alfworld.task_types import TASK_TYPES

    task_types = args.task_types or list(TASK_TYPES)
    print(f"cache: {os.environ['TRIPOD_CACHE']} (fresh); cpus: {os.cpu_count()}; "
          f"load average {_load()}")
    if args.parallel:
        _parallel(task_types, args.parallel, args.repeats)
        return
    if args.engine:
        _engine(task_types, args.engine, args.repeats)
        return
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
