"""Measured cost of generated ALFWorld games: generation, env steps/s, parallel episodes.

    python benchmarks/alfworld_env.py [--games 3] [--steps 60] [--task-types ...] [--json] [--tiny]
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
then run alternately, `--repeats` times each; the load average is recorded with the times.
``--engine N`` times the same through the rollout engine (expert actor, tiny model unused):
batch 1 vs batch N.

``--tiny`` plays one game of the fastest type to generate (pick_and_place_simple, about 1 s)
for a few steps, with one repeat in the other modes: it checks the script, not the speed.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from _common import emit, loadavg, output_flags, progress

from tripod.envs.base import game_seed

TINY_TASK_TYPE = "pick_and_place_simple"


def _generation(task_types: list[str], games: int) -> dict[str, list[float]]:
    from tripod.envs.alfworld import generator

    times: dict[str, list[float]] = {}
    for task_type in task_types:
        for index in range(games):
            start = time.perf_counter()
            generator.cached_game("test", game_seed("test", index), task_type)
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


def _steps(task_types: list[str], games: int, steps: int) -> dict:
    """Generation seconds, reset seconds and steps/s of the three policies, per task type."""
    gen = _generation(task_types, games)
    rows = []
    for task_type in task_types:
        progress(f"steps/s of {task_type}")
        expert_sps, reset_s = _steps_per_s(task_type, games, steps, "expert", True)
        random_sps, _ = _steps_per_s(task_type, games, steps, "random", False)
        replan_sps, _ = _steps_per_s(task_type, games, steps, "random", True)
        rows.append({"task_type": task_type, "generation_s": gen[task_type],
                     "reset_s": reset_s, "expert_steps_per_s": expert_sps,
                     "random_steps_per_s": random_sps,
                     "random_expert_on_steps_per_s": replan_sps})
    return {"mode": "steps", "games": games, "steps": steps, "rows": rows}


def _play_expert(env, index: int) -> bool:
    _, info = env.reset(index)
    for _ in range(40):
        step = env.step(info.expert_action or "look")
        info = step.info
        if step.terminated or step.truncated:
            break
    return info.won


def _parallel(task_types: list[str], games: int, repeats: int) -> dict:
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

    runs = []
    try:
        won = sequential()  # warm-up: every env started, every game generated
        assert won == parallel(), "parallel play differs from sequential play"
        for _ in range(repeats):
            for name, run in (("sequential", sequential), ("parallel", parallel)):
                start = time.perf_counter()
                run()
                runs.append({"arm": name, "seconds": time.perf_counter() - start,
                             "loadavg": loadavg()})
                progress(f"{name:<10} {runs[-1]['seconds']:6.2f} s")
    finally:
        pool.shutdown()
        for env in [one, *many]:
            env.close()
    mean = {arm: statistics.mean(r["seconds"] for r in runs if r["arm"] == arm)
            for arm in ("sequential", "parallel")}
    return {"mode": "parallel", "games": games, "repeats": repeats, "won": sum(won),
            "runs": runs, "mean_s": mean, "speedup": mean["sequential"] / mean["parallel"]}


def _engine(task_types: list[str], games: int, repeats: int) -> dict:
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
    runs = []
    try:
        for engine in engines.values():  # warm-up: every env started, every game generated
            engine.collect(jobs, SamplingParams(), actor=expert_actor())
        for _ in range(repeats):
            for batch, engine in engines.items():
                start = time.perf_counter()
                trajs, stats = engine.collect(jobs, SamplingParams(), actor=expert_actor())
                runs.append({"batch": batch, "seconds": time.perf_counter() - start,
                             "won": sum(t.won for t in trajs), "env_errors": stats.env_errors,
                             "loadavg": loadavg()})
                progress(f"batch {batch:<3} {runs[-1]['seconds']:6.2f} s")
    finally:
        for engine in engines.values():
            engine.close()
    return {"mode": "engine", "games": games, "repeats": repeats, "runs": runs}


def measure(args: argparse.Namespace) -> dict:
    """The chosen mode's figures, measured in a fresh temporary game cache."""
    before = loadavg()
    with tempfile.TemporaryDirectory(prefix="tripod-alfworld-bench-") as cache:
        os.environ["TRIPOD_CACHE"] = cache
        # The generator imports the alfworld wheel into this process, whose import creates
        # its data folder: unless one is set, keep that folder inside the temporary cache.
        os.environ.setdefault("ALFWORLD_DATA", os.path.join(cache, "data"))
        if args.parallel:
            report = _parallel(args.task_types, args.parallel, args.repeats)
        elif args.engine:
            report = _engine(args.task_types, args.engine, args.repeats)
        else:
            report = _steps(args.task_types, args.games, args.steps)
    return {**report, "task_types": args.task_types, "cpus": os.cpu_count(),
            "loadavg_before": before, "loadavg_after": loadavg()}


def _print(r: dict) -> None:
    print(f"cache: fresh temporary; cpus: {r['cpus']}; load average before "
          f"{r['loadavg_before']}, after {r['loadavg_after']}")
    if r["mode"] == "parallel":
        for run in r["runs"]:
            print(f"  {run['arm']:<10} {run['seconds']:6.2f} s  (load average {run['loadavg']})")
        print(f"{r['games']} games of {', '.join(r['task_types'])}: sequential "
              f"{r['mean_s']['sequential']:.2f} s, parallel {r['mean_s']['parallel']:.2f} s "
              f"(mean of {r['repeats']}), speed-up x{r['speedup']:.2f}")
    elif r["mode"] == "engine":
        for run in r["runs"]:
            print(f"  batch {run['batch']:<3} {run['seconds']:6.2f} s, won "
                  f"{run['won']}/{r['games']}, env errors {run['env_errors']} "
                  f"(load average {run['loadavg']})")
    else:
        print(f"{'task type':<32} {'gen s (mean/max)':>17} {'reset s':>8} {'expert st/s':>12} "
              f"{'random st/s':>12} {'random+expert st/s':>19}")
        for row in r["rows"]:
            gen = row["generation_s"]
            print(f"{row['task_type']:<32} {statistics.mean(gen):>8.2f}/{max(gen):<8.2f} "
                  f"{row['reset_s']:>8.2f} {row['expert_steps_per_s']:>12.1f} "
                  f"{row['random_steps_per_s']:>12.1f} "
                  f"{row['random_expert_on_steps_per_s']:>19.1f}")


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
    output_flags(parser)
    args = parser.parse_args()
    if args.tiny:
        args.task_types, args.games, args.steps, args.repeats = [TINY_TASK_TYPE], 1, 6, 1
        args.parallel, args.engine = min(args.parallel, 2), min(args.engine, 2)
    if not args.task_types:
        from tripod.envs.alfworld.task_types import TASK_TYPES

        args.task_types = list(TASK_TYPES)
    emit(measure(args), args.json, _print)


if __name__ == "__main__":
    main()
