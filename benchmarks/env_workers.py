"""Env-bound rollouts with 1 and 2 Ray env workers (and the local backend for reference).

    python benchmarks/env_workers.py [--episodes 8] [--turns 4] [--step-s 0.2]

The env is `toy/letters-N` with a sleep in every step (a stand-in for an SWE test run or an
ALFWorld planner call: the time is spent outside the policy). Actions come from a scripted
random actor, so no model runs and the rollout is env-bound. A Ray worker steps its envs one
at a time, so with W workers about W steps run at once: 2 workers should take close to half
the time of 1. The local backend steps every active episode in its own thread, which for a
sleeping env is as parallel as the batch; it is shown for reference (CPU-bound envs, which
the GIL serialises in threads, are what processes and Ray workers are for).

Timings exclude starting Ray and its workers. Nothing is asserted; the load average is
printed with the figures because this machine is shared.
"""

from __future__ import annotations

import argparse
import os
import time

from tripod.core.config import ClusterSection
from tripod.envs.pool import EnvPool
from tripod.envs.ray_pool import start_ray_pool
from tripod.policy.models import load_policy
from tripod.policy.rollout import RolloutConfig, RolloutEngine, make_jobs, random_actor
from tripod.policy.sampler import SamplingParams


def sleepy_factory(step_s: float):
    """Builds toy/letters envs that sleep `step_s` in every step (runs in the workers)."""

    def factory(env_id: str, split: str = "train", **options):
        from tripod.envs.toy import LettersEnv

        class Sleepy(LettersEnv):
            def step(self, action):
                time.sleep(step_s)
                return super().step(action)

        return Sleepy(env_id, split, turns=int(env_id.rsplit("-", 1)[1]), **options)

    return factory


def play(pool, args: argparse.Namespace) -> float:
    """Seconds to play the episodes (the scripted random actor, no model)."""
    policy = load_policy("tiny")
    cfg = RolloutConfig(max_turns=args.turns, batch_size=args.episodes,
                        truncated_action="step", env_timeout_s=60.0)
    jobs = make_jobs(f"toy/letters-{args.turns}", "train", list(range(args.episodes // 2)),
                     2, seed=0)
    engine = RolloutEngine(policy, cfg, pool=pool)
    start = time.perf_counter()
    trajs, _ = engine.collect(jobs, SamplingParams(max_new_tokens=8), actor=random_actor())
    seconds = time.perf_counter() - start
    assert not any(t.failed for t in trajs), [t.error for t in trajs if t.failed]
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--step-s", type=float, default=0.2)
    args = parser.parse_args()
    steps = args.episodes * args.turns
    print(f"{args.episodes} episodes x {args.turns} turns = {steps} steps of "
          f"{args.step_s} s (serial: {steps * args.step_s:.1f} s)")
    print(f"load average before: {os.getloadavg()}")
    factory = sleepy_factory(args.step_s)
    results = {}
    with EnvPool(factory=factory) as pool:
        results["local (threads)"] = play(pool, args)
    for workers in (1, 2):
        cluster = ClusterSection(backend="ray", num_cpus=2, env_workers=workers)
        with start_ray_pool(cluster, factory=factory) as pool:
            results[f"ray, {workers} env worker(s)"] = play(pool, args)
    for name, seconds in results.items():
        print(f"{name:>24}: {seconds:6.2f} s  ({steps / seconds:5.1f} steps/s)")
    one, two = results["ray, 1 env worker(s)"], results["ray, 2 env worker(s)"]
    print(f"2 workers / 1 worker wall time: {two / one:.2f}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
