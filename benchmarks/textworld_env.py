"""Measure TextWorld game generation time and env throughput.

    python benchmarks/textworld_env.py [--env textworld/w2-o3-q4] [--games 4] [--workers 2]

Generation runs in a fresh temporary cache (so nothing is reused); then one env plays the
generated games with the expert and with random admissible commands, reporting steps/s
(time inside `step` only, one game process, including the text clean-up and state tracking of every step).
Env start-up: `--starts` envs started one after another (each one's first reset starts its
game process), each with a fresh interpreter, then forked from the fork server
(`tripod.envs.process`, the default), whose own start is timed apart.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time

from tripod.envs import make, process
from tripod.envs.textworld import prepare_games


def _steps_per_second(env_id: str, games: int, policy: str, max_turns: int) -> tuple[float, int]:
    env = make(env_id, split="test")
    env.reset(0)  # start the game process outside the timing
    rng, steps, elapsed = random.Random(0), 0, 0.0
    for index in range(games):
        _, info = env.reset(index)
        for _ in range(max_turns):
            action = info.expert_action if policy == "expert" else rng.choice(
                info.admissible_actions or ["look"])
            start = time.perf_counter()
            step = env.step(action or "look")
            elapsed += time.perf_counter() - start
            info, steps = step.info, steps + 1
            if step.terminated:
                break
    env.close()
    return steps / elapsed, steps


def _start_seconds(env_id: str, starts: int, fork_server: bool) -> float:
    """Mean wall time of one env's first reset (game process start + game load)."""
    process.FORK_SERVER = fork_server
    total = 0.0
    for _ in range(starts):
        env = make(env_id, split="test")
        start = time.perf_counter()
        env.reset(0)
        total += time.perf_counter() - start
        env.close()
    return total / starts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="textworld/w2-o3-q4")
    parser.add_argument("--games", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--starts", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        os.environ["TRIPOD_CACHE"] = cache
        start = time.perf_counter()
        prepare_games(args.env, "test", [0], workers=1, progress=False)
        one = time.perf_counter() - start
        start = time.perf_counter()
        prepare_games(args.env, "test", range(1, args.games + 1), workers=args.workers)
        many = time.perf_counter() - start
        print(f"{args.env}: generation {one:.1f} s for one game in-process; "
              f"{many:.1f} s for {args.games} games with {args.workers} workers "
              f"({many / args.games:.1f} s/game)")
        fresh = _start_seconds(args.env, args.starts, fork_server=False)
        start = time.perf_counter()
        _start_seconds(args.env, 1, fork_server=True)  # starts the server if not yet running
        first = time.perf_counter() - start
        forked = _start_seconds(args.env, args.starts, fork_server=True)
        print(f"env start ({args.starts} one after another, first reset each): "
              f"{fresh:.2f} s each from a fresh interpreter, {forked:.3f} s each forked "
              f"from the fork server ({fresh / forked:.0f}x; the first forked one, which "
              f"starts the server,"
              f" {first:.2f} s, once per process)")
        start = time.perf_counter()
        env = make(args.env, split="test")
        env.reset(0)
        print(f"first reset (starts the game process): {time.perf_counter() - start:.2f} s")
        start = time.perf_counter()
        env.reset(1)
        print(f"later reset (same process, new game): {time.perf_counter() - start:.3f} s")
        env.close()
        for policy in ("expert", "random"):
            rate, steps = _steps_per_second(args.env, args.games, policy, 24)
            print(f"{policy:>6} policy: {rate:.0f} steps/s over {steps} steps")
        print(f"load average {[round(x, 2) for x in os.getloadavg()]}")


if __name__ == "__main__":
    main()
