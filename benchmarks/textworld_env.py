"""Measure TextWorld game generation time and env throughput.

    python benchmarks/textworld_env.py [--env textworld/w2-o3-q4] [--games 4] [--workers 2]
        [--starts 8] [--json] [--tiny]

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

from _common import emit, loadavg, output_flags

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


def _generation(env_id: str, games: int, workers: int) -> dict[str, float]:
    """Seconds to generate one game in-process, then `games` more with `workers`."""
    start = time.perf_counter()
    prepare_games(env_id, "test", [0], workers=1, progress=False)
    one = time.perf_counter() - start
    start = time.perf_counter()
    prepare_games(env_id, "test", range(1, games + 1), workers=workers, progress=False)
    return {"one_game_s": one, "games_s": time.perf_counter() - start}


def _starts(env_id: str, starts: int) -> dict[str, float]:
    fresh = _start_seconds(env_id, starts, fork_server=False)
    start = time.perf_counter()
    _start_seconds(env_id, 1, fork_server=True)  # starts the server if not yet running
    first = time.perf_counter() - start
    forked = _start_seconds(env_id, starts, fork_server=True)
    env = make(env_id, split="test")
    start = time.perf_counter()
    env.reset(0)
    first_reset = time.perf_counter() - start
    start = time.perf_counter()
    env.reset(1)
    later_reset = time.perf_counter() - start
    env.close()
    return {"fresh_start_s": fresh, "forked_start_s": forked, "fork_server_first_s": first,
            "first_reset_s": first_reset, "later_reset_s": later_reset}


def measure(args: argparse.Namespace) -> dict:
    """Generation, env start and steps/s of `args.env`, in a fresh temporary game cache."""
    before = loadavg()
    with tempfile.TemporaryDirectory() as cache:
        os.environ["TRIPOD_CACHE"] = cache
        report = {"env": args.env, "games": args.games, "workers": args.workers,
                  "starts": args.starts, **_generation(args.env, args.games, args.workers),
                  **_starts(args.env, args.starts)}
        for policy in ("expert", "random"):
            rate, steps = _steps_per_second(args.env, args.games, policy, 24)
            report[f"{policy}_steps_per_s"], report[f"{policy}_steps"] = rate, steps
    return {**report, "loadavg_before": before, "loadavg_after": loadavg()}


def _print(r: dict) -> None:
    print(f"{r['env']}: generation {r['one_game_s']:.1f} s for one game in-process; "
          f"{r['games_s']:.1f} s for {r['games']} games with {r['workers']} workers "
          f"({r['games_s'] / r['games']:.1f} s/game)")
    print(f"env start ({r['starts']} one after another, first reset each): "
          f"{r['fresh_start_s']:.2f} s each from a fresh interpreter, "
          f"{r['forked_start_s']:.3f} s each forked from the fork server "
          f"({r['fresh_start_s'] / r['forked_start_s']:.0f}x; the first forked one, which "
          f"starts the server, {r['fork_server_first_s']:.2f} s, once per process)")
    print(f"first reset (starts the game process): {r['first_reset_s']:.2f} s; later reset "
          f"(same process, new game): {r['later_reset_s']:.3f} s")
    for policy in ("expert", "random"):
        print(f"{policy:>6} policy: {r[f'{policy}_steps_per_s']:.0f} steps/s over "
              f"{r[f'{policy}_steps']} steps")
    print(f"load average before {r['loadavg_before']}, after {r['loadavg_after']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="textworld/w2-o3-q4")
    parser.add_argument("--games", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--starts", type=int, default=8)
    output_flags(parser)
    args = parser.parse_args()
    if args.tiny:   # one more game, one start of each kind: checks the script, not the speed
        args.games, args.workers, args.starts = 1, 1, 1
    emit(measure(args), args.json, _print)


if __name__ == "__main__":
    main()
