"""Overlapped rollouts (`cluster.overlap`) against the on-policy loop, on an env that sleeps.

    python benchmarks/overlap.py [--iterations 4] [--step-s 0.3] [--model tiny] [--json] [--tiny]
    python benchmarks/overlap.py --env alfworld/generated --turns 4 --train-pool 12
    python benchmarks/overlap.py --env bench/swe-run-tests --turns 4

The default env is `toy/letters-4` with a sleep in every step (a stand-in for an SWE test
run): the rollout's time is mostly waiting for envs, which the update can overlap. `--env`
takes any registered env instead (`--env-options` as a YAML mapping; `--train-pool` keeps
the games among those already generated, e.g. ALFWorld's cached ones); `bench/swe-run-tests`
is the SWE env with every action turned into a test run (`TestingSwe`). Both loops run the
same recipe and seeds; printed are the total wall time of the iterations, the mean rollout
and update times, and how long the overlapped loop's update waited for its next batch. The
load average is printed because this machine is shared; nothing is asserted. A one-iteration
warm-up run goes first (first-call costs), then the two loops alternate (`--rounds`, 2).

`--threads 1` by default: on this shared 2-core machine (load average about 10), runs with
2 intra-op threads were erratic in a way that favoured the overlapped loop by 5-10x (the
sequential loop's matmuls ran 10x slower; OpenMP workers spinning on an oversubscribed CPU is
the likely cause, not confirmed), which says nothing about overlapping. With one thread the
comparison is of the schedules themselves.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch
from _common import emit, loadavg, output_flags

from tripod.core.config import load_config
from tripod.envs.registry import make, register
from tripod.envs.toy import LettersEnv
from tripod.train.rl import train_rl


class SleepyLetters(LettersEnv):
    """`toy/letters-N` whose every step sleeps `step_s` seconds first."""

    def __init__(self, env_id: str, split: str = "train", step_s: float = 0.3,
                 **options) -> None:
        super().__init__(env_id, split, turns=int(env_id.rsplit("-", 1)[1]), **options)
        self.step_s = step_s

    def step(self, action: str):
        time.sleep(self.step_s)
        return super().step(action)


register(r"bench/sleepy-letters-\d+", SleepyLetters, ("bench/sleepy-letters-4",),
         "toy/letters-N with a sleep per step (benchmarks only)")


class TestingSwe:
    """`swe/generated-easy` where every action is `run_tests`, whatever the model wrote: the
    tiny model never writes a tool call, so without this no SWE test would ever run. Each step
    is then a real sandboxed pytest run of the task's tests (the env-heavy SWE case)."""

    def __init__(self, env_id: str, split: str = "train", **options) -> None:
        self.env_id, self.split = env_id, split
        self._env = make("swe/generated-easy", split=split, **options)

    def reset(self, game_index: int):
        return self._env.reset(game_index)

    def step(self, action: str):
        return self._env.step("run_tests")

    def close(self) -> None:
        self._env.close()


register(r"bench/swe-run-tests", TestingSwe, ("bench/swe-run-tests",),
         "swe/generated-easy with every action replaced by run_tests (benchmarks only)")


def env_flags(args: argparse.Namespace) -> list[str]:
    """The recipe's env keys: the sleepy letters, or `--env` with its options."""
    if args.env is None:
        return ["env.id=bench/sleepy-letters-4", "env.max_turns=4",
                f"env.options={{vocabulary: 4, step_s: {args.step_s}}}"]
    flags = [f"env.id={args.env}", f"env.max_turns={args.turns}",
             f"env.options={args.env_options}"]
    return flags + ([f"rollout.train_pool={args.train_pool}"] if args.train_pool else [])


def run(args: argparse.Namespace, overlap: bool, out: str) -> tuple[float, list[dict]]:
    cfg = load_config(overrides=[
        f"model.name={args.model}", *env_flags(args), "rollout.games_per_iter=4",
        "rollout.group_size=2", "rollout.batch_size=8", "rollout.train.max_new_tokens=4",
        "rollout.truncated_action=step", "reward.kind=dense", "algo.estimator=grpo",
        "algo.lr=1e-4", "algo.epochs=2", "algo.minibatch_size=4", "algo.micro_batch_size=2",
        f"train.iterations={args.iterations}", "train.tensorboard=false",
        "train.trajectory_groups=0", f"run.out_dir={out}", f"run.name=overlap-{overlap}",
        f"cluster.overlap={str(overlap).lower()}"])
    start = time.perf_counter()
    history = train_rl(cfg, quiet=True).history
    return time.perf_counter() - start, history


def _row(overlap: bool, wall: float, hist: list[dict]) -> dict:
    """One loop's figures: wall time, mean rollout and update per iteration, waits."""
    return {"overlap": overlap, "wall_s": wall, "iterations": len(hist),
            "rollout_s": sum(h["rollout_s"] for h in hist) / len(hist),
            "update_s": sum(h["iteration_s"] - (0 if overlap else h["rollout_s"])
                            for h in hist) / len(hist),
            "waited_s": sum(h.get("wait_s", 0.0) for h in hist),
            "staleness": [int(h["staleness"]) for h in hist]}


def measure(args: argparse.Namespace) -> dict:
    before = loadavg()
    runs = []
    with tempfile.TemporaryDirectory() as out:
        run(argparse.Namespace(**{**vars(args), "iterations": 1}), False, out)  # warm-up
        for overlap in (False, True) * args.rounds:  # alternating: drifts in load show
            runs.append(_row(overlap, *run(args, overlap, out)))
    return {"env": args.env or "bench/sleepy-letters-4", "threads": torch.get_num_threads(),
            "runs": runs, "loadavg_before": before, "loadavg_after": loadavg()}


def _print(r: dict) -> None:
    print(f"env: {r['env']}; torch threads: {r['threads']}; load average before: "
          f"{r['loadavg_before']}")
    for x in r["runs"]:
        print(f"overlap={x['overlap']!s:5}: {x['wall_s']:6.2f} s for {x['iterations']} "
              f"iterations (rollout {x['rollout_s']:.2f} s, update {x['update_s']:.2f} s per "
              f"iteration; waited for batches {x['waited_s']:.2f} s; staleness "
              f"{x['staleness']})")
    print(f"load average after: {r['loadavg_after']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--step-s", type=float, default=0.3)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--env", default=None,
                        help="a registered env id instead of the sleepy toy env")
    parser.add_argument("--env-options", default="{}", help="with --env: a YAML mapping")
    parser.add_argument("--turns", type=int, default=4, help="with --env: env.max_turns")
    parser.add_argument("--train-pool", type=int, default=0,
                        help="with --env: rollout.train_pool (0: fresh games every iteration)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="on-policy / overlapped pairs, alternating")
    output_flags(parser, threads=1)   # one thread: see the module docstring
    args = parser.parse_args()
    if args.tiny:   # checks the script, not the schedules
        args.iterations, args.rounds, args.step_s = 2, 1, 0.02
    torch.set_num_threads(args.threads)
    emit(measure(args), args.json, _print)


if __name__ == "__main__":
    main()
