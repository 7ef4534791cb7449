"""Uneven env steps overlapped with decoding inside one rollout (`rollout.env_overlap_s`).

    python benchmarks/env_overlap.py [--model smollm2-135m|tiny|PATH] [--overlap 0.1 ...]
        [--env letters|swe] [--slow-s 2.0] [--slow-p 0.25] [--fast-s 0.02] [--turns 6] [--episodes 16]
        [--max-new-tokens 16] [--rounds 2] [--threads 2] [--json] [--tiny]

A stand-in for SWE tasks, where most actions are quick (a `cat`, an edit) and some run the
test suite: every step of `toy/letters-N` sleeps `--slow-s` with probability `--slow-p`,
else `--fast-s`, drawn from a generator seeded by (episode, turn), so every arm waits on
exactly the same steps. Every reply steps its env (`truncated_action=step`) and a letters
episode always lasts N turns, so every arm plays the same episodes for the same turns; each
episode samples from its own seeded stream, so the sampled ids are the same too unless a
different batch composition flips a near-tie (printed: episodes whose actions all match the
default arm's, and generated tokens per arm).

Arms: the default (a turn waits for all its steps before decoding again) and
`env_overlap_s` = each `--overlap` value. After a warm-up collection (first-call costs),
the arms alternate for `--rounds`; printed per arm: wall time (median over rounds), the
time blocked on envs, batched decode steps and rows (an overlapping arm decodes in smaller
batches, which costs per-step overhead), steps that ran while others decoded, and the ratio
to the default's wall time. The load average is printed before and after: on a shared
machine compare the ratios of one run. Nothing is asserted.

`--env swe` plays `swe/generated-easy` instead: each step runs the task's tests in the
sandbox with probability `--slow-p` (whatever the model wrote) and lists the repository
otherwise. The test runs are real work on the same 2 cores the decoding uses, so this shows
what overlapping gains when env work is not free waiting.

`--tiny` is a reduced run for tests (tiny model, short sleeps): its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch
from _common import (
    ArenaCountingEngine,
    command_line,
    loadavg,
    machine_facts,
    output_flags,
    print_json,
    progress,
)

from tripod.envs.registry import make
from tripod.envs.toy import LettersEnv
from tripod.policy import load_policy
from tripod.policy.chat import PromptConfig
from tripod.policy.rollout import RolloutConfig, make_jobs
from tripod.policy.sampler import SamplingParams

SEED = 11


class UnevenLetters(LettersEnv):
    """`toy/letters-N` whose steps sleep `slow_s` with probability `slow_p`, else `fast_s`."""

    def __init__(self, episode: int, turns: int, slow_s: float, slow_p: float,
                 fast_s: float) -> None:
        super().__init__(f"toy/letters-{turns}", "train", turns=turns)
        self.episode, self.slow_s, self.slow_p, self.fast_s = episode, slow_s, slow_p, fast_s

    def step(self, action: str):
        draw = random.Random(f"{SEED}:{self.episode}:{self._turn}").random()
        time.sleep(self.slow_s if draw < self.slow_p else self.fast_s)
        return super().step(action)


class MixedSwe:
    """`swe/generated-easy` whose step, whatever the model wrote, runs the task's tests in the
    sandbox with probability `slow_p` and lists the repository otherwise (seeded per episode
    and turn): real test runs beside quick tool calls. Unlike a sleep, a test run takes CPU
    from the decoding it overlaps, on the same cores."""

    def __init__(self, episode: int, slow_p: float) -> None:
        self.episode, self.slow_p, self.turn = episode, slow_p, 0
        self._env = make("swe/generated-easy", split="train")

    def reset(self, game_index: int):
        self.turn = 0
        return self._env.reset(game_index)

    def step(self, action: str):
        draw = random.Random(f"{SEED}:{self.episode}:{self.turn}").random()
        self.turn += 1
        return self._env.step("run_tests" if draw < self.slow_p else "list")

    def close(self) -> None:
        self._env.close()


def _env_factory(args):
    if args.env == "swe":
        return "swe/generated-easy", lambda job: MixedSwe(job.episode_id, args.slow_p)
    return f"toy/letters-{args.turns}", lambda job: UnevenLetters(
        job.episode_id, args.turns, args.slow_s, args.slow_p, args.fast_s)


def collect(policy, args, overlap: float | None) -> dict:
    cfg = RolloutConfig(max_turns=args.turns, batch_size=args.episodes,
                        truncated_action="step", prompt=PromptConfig(),
                        env_timeout_s=60.0 + 10 * args.slow_s, env_overlap_s=overlap)
    env_id, factory = _env_factory(args)
    engine = ArenaCountingEngine(policy, cfg, env_factory=factory)
    jobs = make_jobs(env_id, "train", list(range(args.episodes // 4)), 4, seed=SEED)
    sampling = SamplingParams(temperature=0.7, max_new_tokens=args.max_new_tokens)
    trajs, stats = engine.collect(jobs, sampling)
    engine.close()
    arena = engine.arena_stats()
    return {"seconds": stats.seconds, "env_wait_s": stats.env_wait_seconds,
            "overlapped_steps": stats.overlapped_steps, "env_steps": stats.env_steps,
            "env_errors": stats.env_errors, "generated_tokens": stats.generated_tokens,
            "decode_steps": arena.decode_steps, "decode_rows": arena.decode_rows,
            "prefill_passes": arena.prefill_passes,
            "actions": [[t.action_ids for t in traj.turns] for traj in trajs]}


def run(policy, args) -> dict:
    arms: list[float | None] = [None, *args.overlap]
    progress("warm-up")
    collect(policy, args, None)
    rounds: dict[str, list[dict]] = {_name(a): [] for a in arms}
    for r in range(args.rounds):
        for arm in arms:
            before = loadavg()
            out = collect(policy, args, arm)
            out["loadavg"] = [before, loadavg()]
            rounds[_name(arm)].append(out)
            progress(f"round {r + 1} {_name(arm)}: {out['seconds']:.1f} s, "
                     f"load {out['loadavg'][1][0]}")
    reference = rounds[_name(None)][0]["actions"]
    summary = {}
    for name, outs in rounds.items():
        wall = statistics.median(o["seconds"] for o in outs)
        same = sum(a == b for a, b in zip(outs[0]["actions"], reference))
        summary[name] = {
            "wall_s_median": round(wall, 2),
            "wall_s_each": [round(o["seconds"], 2) for o in outs],
            "env_wait_s_median": round(statistics.median(o["env_wait_s"] for o in outs), 2),
            "decode_steps": outs[0]["decode_steps"], "decode_rows": outs[0]["decode_rows"],
            "prefill_passes": outs[0]["prefill_passes"],
            "overlapped_steps": outs[0]["overlapped_steps"],
            "env_steps": outs[0]["env_steps"], "env_errors": outs[0]["env_errors"],
            "generated_tokens": outs[0]["generated_tokens"],
            "episodes_same_actions_as_default": f"{same}/{len(reference)}",
            "loadavg": [o["loadavg"] for o in outs],
        }
    base = summary[_name(None)]["wall_s_median"]
    for s in summary.values():
        s["wall_ratio_to_default"] = round(s["wall_s_median"] / base, 3)
    return summary


def _steps(args) -> str:
    if args.env == "swe":
        return (f"swe/generated-easy, each step runs the tests with p={args.slow_p} else "
                "lists the repository (seeded per episode and turn)")
    return (f"toy/letters-{args.turns}, each step sleeps {args.slow_s} s with p={args.slow_p} "
            f"else {args.fast_s} s (seeded per episode and turn)")


def _name(overlap: float | None) -> str:
    return "default (wait for every step)" if overlap is None else f"env_overlap_s={overlap}"


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--env", choices=["letters", "swe"], default="letters",
                   help="letters: sleeps; swe: real sandboxed test runs (p = --slow-p) "
                        "beside `list` calls on swe/generated-easy")
    p.add_argument("--overlap", type=float, nargs="+", default=[0.1],
                   help="env_overlap_s values to compare with the default")
    p.add_argument("--slow-s", type=float, default=2.0, help="a slow step's sleep (s)")
    p.add_argument("--slow-p", type=float, default=0.25, help="probability of a slow step")
    p.add_argument("--fast-s", type=float, default=0.02, help="a quick step's sleep (s)")
    p.add_argument("--turns", type=int, default=6, help="turns per episode (letters-N)")
    p.add_argument("--episodes", type=int, default=16, help="episodes (4 per game), batched")
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--rounds", type=int, default=2)
    output_flags(p)   # --tiny: the tiny model and short sleeps
    args = p.parse_args()
    if args.tiny:
        args.model, args.slow_s, args.fast_s, args.turns = "tiny", 0.3, 0.0, 3
        args.episodes, args.max_new_tokens, args.rounds = 8, 4, 1
    return args


def main() -> None:
    args = _args()
    torch.set_num_threads(args.threads)
    command, load_before = command_line(), loadavg()
    policy = load_policy(args.model)
    arms = run(policy, args)
    report = {
        "command": command,
        "setup": (f"{args.model}, {_steps(args)}, {args.episodes} episodes batched (4 per "
                  f"game), {args.turns} turns, {args.max_new_tokens} new tokens per reply at "
                  f"T=0.7, {args.rounds} rounds after a warm-up"),
        "machine": machine_facts(load_before),
        "arms": arms,
    }
    if args.json:
        print_json(report)
        return
    print(f"command: {report['command']}\nsetup:   {report['setup']}")
    m = report["machine"]
    print(f"machine: {m['nproc']} CPUs, {m['torch_threads']} torch threads, torch "
          f"{m['torch']}, load average {m['loadavg_before']} before, {m['loadavg_after']} after")
    for name, a in arms.items():
        print(f"\n{name}\n  wall {a['wall_s_median']} s median (each {a['wall_s_each']}), "
              f"x{a['wall_ratio_to_default']} of the default\n  blocked on envs "
              f"{a['env_wait_s_median']} s; decode steps {a['decode_steps']} over "
              f"{a['decode_rows']} rows; prefill passes {a['prefill_passes']}\n  env steps "
              f"{a['env_steps']} ({a['overlapped_steps']} ran while others decoded, "
              f"{a['env_errors']} errors); generated tokens {a['generated_tokens']}; episodes "
              f"with the default's actions {a['episodes_same_actions_as_default']}")


if __name__ == "__main__":
    main()
