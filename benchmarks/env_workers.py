"""Env-bound rollouts with 1 and 2 Ray env workers (and the local backend for reference).

    python benchmarks/env_workers.py [--episodes 8] [--turns 4] [--step-s 0.2] [--json] [--tiny]

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
import time

from _common import emit, loadavg, output_flags

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


def measure(args: argparse.Namespace) -> dict:
    """Seconds to play the episodes locally (threads) and with 1 and 2 Ray env workers."""
    before = loadavg()
    factory = sleepy_factory(args.step_s)
    seconds = {}
    with EnvPool(factory=factory) as pool:
        seconds["local"] = play(pool, args)
    for workers in (1, 2):
        cluster = ClusterSection(backend="ray", num_cpus=2, env_workers=workers)
        with start_ray_pool(cluster, factory=factory) as pool:
            seconds[f"ray_{workers}"] = play(pool, args)
    return {"episodes": args.episodes, "turns": args.turns, "step_s": args.step_s,
            "steps": args.episodes * args.turns, "seconds": seconds,
            "loadavg_before": before, "loadavg_after": loadavg()}


def _print(r: dict) -> None:
    steps = r["steps"]
    print(f"{r['episodes']} episodes x {r['turns']} turns = {steps} steps of "
          f"{r['step_s']} s (serial: {steps * r['step_s']:.1f} s)")
    names = {"local": "local (threads)", "ray_1": "ray, 1 env worker(s)",
             "ray_2": "ray, 2 env worker(s)"}
    for key, seconds in r["seconds"].items():
        print(f"{names[key]:>24}: {seconds:6.2f} s  ({steps / seconds:5.1f} steps/s)")
    print(f"2 workers / 1 worker wall time: {r['seconds']['ray_2'] / r['seconds']['ray_1']:.2f}")
    print(f"load average before {r['loadavg_before']}, after {r['loadavg_after']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--step-s", type=float, default=0.2)
    output_flags(parser)
    args = parser.parse_args()
    if args.tiny:   # checks the script, not the speed-up
        args.episodes, args.turns, args.step_s = 4, 2, 0.05
    emit(measure(args), args.json, _print)


if __name__ == "__main__":
    main()
