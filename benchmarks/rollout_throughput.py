"""Multi-turn rollout throughput: each speed-up of tripod's `RolloutEngine`, measured apart.

    python benchmarks/rollout_throughput.py [--model smollm2-135m|tiny|PATH] [--episodes 16]
        [--group-size 1] [--max-turns 12] [--max-new-tokens 16] [--temperature 0.7]
        [--truncated-action step|end] [--paths engine,serial-env,...] [--repeats 1]
        [--threads 2] [--json] [--tiny]

Every path plays the same jobs (games 0..G-1 of the `test` split of `--env`, `--group-size`
episodes each, the same per-episode sampling seeds), with the same prompt formatting (full
history), sampling, turn cap, stop tokens and action parsing:

- `engine`: the engine as used in training: all episodes in one batch, each episode's keys
  and values kept across turns (only new tokens are prefilled), envs stepped in threads.
- `serial-env`: the same, but env steps run one at a time (a lock around `Env.step`):
  engine / serial-env is the gain from stepping envs in parallel.
- `no-reuse`: the same batch, but every turn forgets the cache and prefills the whole
  context again: engine / no-reuse is the gain from reusing the KV cache across turns.
- `one-at-a-time`: the engine with batch size 1 (cache reuse kept): engine / one-at-a-time
  is the gain from batching.
- `naive`: one episode at a time with Hugging Face `generate`, the whole chat re-rendered
  and re-encoded every turn (what a straightforward agent loop does).

The four engine paths sample with the same per-episode generators, so they replay the same
episodes (the script checks and prints whether the actions were identical): their time
ratios compare equal work. `naive` samples differently; compare its tokens/s and its FLOP
efficiency.

Fairness: before any timing, every path runs the same warm-up (all jobs, one turn, two
tokens), which also starts the env processes (TextWorld runs each game in a child process;
start-up is excluded, as is game generation). Then `--repeats` rounds time every path, the
order reversed on odd rounds (A B C, C B A, ...), so drift in machine load hits all paths.

Figures per path: episodes/s, env steps/s, generated tokens/s, prefill tokens/s (tokens run
through the model outside decoding), and the FLOP limit: the model arithmetic the path's
work needs (linear layers, attention over each token's context, LM head once per sampled
token; tokens shared by identical first prompts count once) divided by the fp32 matmul peak
measured in the same run (`torch.mm`, best of a few shapes, at start and end). Efficiency =
FLOP limit / wall time. The load average is printed before and after each timed run, and the
CPU time of this process (env child processes excluded): on a machine shared with other
jobs, compare ratios within one run, not absolute times.

`--tiny` is a reduced run for tests (tiny model, `toy/letters-3`, 4 episodes): it checks the
script end to end; its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import threading
import time
from collections.abc import Callable
from typing import Any

import torch
from _common import (
    ArenaCountingEngine,
    FlopModel,
    command_line,
    emit,
    loadavg,
    matmul_peak,
    output_flags,
    progress,
    work_flops,
)

from tripod.core.types import EpisodeJob, Trajectory, Turn, TurnStatus
from tripod.envs import make
from tripod.envs.base import last_line_action
from tripod.envs.pool import EnvPool
from tripod.policy.chat import PromptConfig, build_messages, render_prompt_ids
from tripod.policy.models import Policy, load_policy
from tripod.policy.rollout import RolloutConfig, make_jobs
from tripod.policy.sampler import ArenaStats, RowState, SamplingParams

SEED = 1234
PATHS = ("engine", "serial-env", "no-reuse", "one-at-a-time", "naive")


# -- the paths -------------------------------------------------------------------------------
class _CountingEngine(ArenaCountingEngine):
    """Collects the sampler's arena statistics; `reuse=False` forgets every cache."""

    def __init__(self, *args: Any, reuse: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reuse = reuse

    def _sample(self, active, sampling, arena=None):
        if not self.reuse:  # forget every cache: the whole context is prefilled again
            for ep in active:
                ep.row.release()
                ep.row = RowState()
        return super()._sample(active, sampling, arena)


class _SerialEnv:
    """An env whose steps take a lock shared by all episodes (no two step at once)."""

    def __init__(self, env, lock: threading.Lock) -> None:
        self.env, self.lock = env, lock

    def reset(self, game_index: int):
        return self.env.reset(game_index)

    def step(self, action: str):
        with self.lock:
            return self.env.step(action)

    def close(self) -> None:
        self.env.close()


def _engine_runner(policy: Policy, args: argparse.Namespace, path: str
                   ) -> Callable[[list[EpisodeJob], SamplingParams, int], tuple]:
    batch = 1 if path == "one-at-a-time" else len(args.jobs)
    pool = EnvPool()
    if path == "serial-env":  # same env reuse as the others, one step at a time
        lock = threading.Lock()
        pool = EnvPool(lambda env_id, split, **o: _SerialEnv(make(env_id, split=split, **o), lock))
    engine = _CountingEngine(policy, RolloutConfig(batch_size=batch), pool=pool,
                             reuse=path != "no-reuse")

    def run(jobs: list[EpisodeJob], sampling: SamplingParams, max_turns: int) -> tuple:
        engine.cfg = RolloutConfig(max_turns=max_turns, batch_size=batch,
                                   truncated_action=args.truncated_action,
                                   prompt=PromptConfig(history_window=None))
        engine.arenas.clear()
        trajs, stats = engine.collect(jobs, sampling)
        return trajs, stats.env_steps, engine.arena_stats(), stats.env_wait_seconds

    run.close = pool.close  # type: ignore[attr-defined]
    return run


@torch.no_grad()
def _generate(policy: Policy, ids: list[int], sampling: SamplingParams) -> tuple[list[int], bool]:
    """One reply with HF generate, the whole prompt encoded from scratch (batch 1)."""
    input_ids = torch.tensor([ids], device=policy.device)
    kwargs: dict[str, Any] = {"do_sample": False}
    if not sampling.greedy:
        kwargs = {"do_sample": True, "temperature": sampling.temperature, "top_k": 0,
                  "top_p": sampling.top_p}
    out = policy.model.generate(input_ids, attention_mask=torch.ones_like(input_ids),
                                max_new_tokens=sampling.max_new_tokens,
                                eos_token_id=list(policy.eos_token_ids),
                                pad_token_id=policy.pad_token_id, **kwargs)
    new = out[0, len(ids):].tolist()
    for i, tok in enumerate(new):  # stop at the first end-of-turn token
        if tok in policy.eos_token_ids:
            return new[:i + 1], True
    return new, False


def _naive_episode(policy: Policy, env, job: EpisodeJob, sampling: SamplingParams,
                   max_turns: int, truncated_action: str) -> tuple[Trajectory, int]:
    """Returns a trajectory (prompt and action ids per turn) and the env steps taken."""
    obs, info = env.reset(job.game_index)
    traj = Trajectory(job, objective=info.objective, first_observation=obs)
    history: list[tuple[str, str]] = []
    steps = 0
    for _ in range(max_turns):
        ids = render_prompt_ids(policy.tokenizer, build_messages(
            PromptConfig(history_window=None), info.objective, traj.first_observation, history))
        reply, ended = _generate(policy, ids, sampling)
        action = last_line_action(policy.tokenizer.decode(reply, skip_special_tokens=True))
        traj.turns.append(Turn(prompt_ids=ids, action_ids=reply, logprobs=[0.0] * len(reply),
                               action_text=action, observation="", reward=0.0,
                               status=TurnStatus.OK))
        if not ended and truncated_action == "end":
            break  # the paper's rule: a reply without the end-of-turn token ends the episode
        step = env.step(action)
        steps += 1
        if step.terminated or step.truncated or step.info.won or step.info.lost:
            break
        history.append((action, step.observation))
    return traj, steps


def _naive_runner(policy: Policy, args: argparse.Namespace
                  ) -> Callable[[list[EpisodeJob], SamplingParams, int], tuple]:
    env = make(args.env, split="test")

    def run(jobs: list[EpisodeJob], sampling: SamplingParams, max_turns: int) -> tuple:
        was_training = policy.model.training
        policy.model.eval()
        torch.manual_seed(SEED)
        trajs, steps = [], 0
        try:
            for job in jobs:
                traj, n = _naive_episode(policy, env, job, sampling, max_turns,
                                         args.truncated_action)
                trajs.append(traj)
                steps += n
        finally:
            policy.model.train(was_training)
        return trajs, steps, None, None   # env waits are not counted here

    run.close = env.close  # type: ignore[attr-defined]
    return run


# -- timing and report -------------------------------------------------------------------------
def _summary(path: str, seconds: float, trajs: list[Trajectory], steps: int,
             arena: ArenaStats | None, fm: FlopModel, peak: float,
             load: tuple[list[float], list[float]]) -> dict[str, Any]:
    flops, prefill = work_flops(fm, trajs, reuse=path not in ("no-reuse", "naive"))
    tokens = sum(len(u.action_ids) for t in trajs for u in t.turns)
    limit = flops / (peak * 1e9)
    return {
        "path": path, "seconds": seconds, "episodes": len(trajs), "env_steps": steps,
        "turns": sum(t.num_turns for t in trajs), "generated_tokens": tokens,
        "prefill_tokens": prefill, "episodes_per_s": len(trajs) / seconds,
        "env_steps_per_s": steps / seconds, "tokens_per_s": tokens / seconds,
        "prefill_tokens_per_s": prefill / seconds, "model_tflop": flops / 1e12,
        "flop_limit_s": limit, "efficiency": limit / seconds,
        "arena": dataclasses.asdict(arena) if arena else None,
        "loadavg_before": load[0], "loadavg_after": load[1],
    }


def run_paths(policy: Policy, args: argparse.Namespace) -> dict[str, Any]:
    """Warm every path up identically, then time them in alternating order."""
    sampling = SamplingParams(temperature=args.temperature, top_p=1.0,
                              max_new_tokens=args.max_new_tokens)
    warm = sampling.model_copy(update={"max_new_tokens": 2})
    runners = {p: _naive_runner(policy, args) if p == "naive" else _engine_runner(policy, args, p)
               for p in args.paths}
    fm = FlopModel.of(policy.model)
    peaks = [matmul_peak()]
    results: dict[str, list[dict[str, Any]]] = {p: [] for p in args.paths}
    actions: dict[str, list] = {}
    try:
        for p, run in runners.items():
            start = time.perf_counter()
            run(args.jobs, warm, 1)
            progress(f"{p}: warm-up (env start-up included) {time.perf_counter() - start:.1f} s")
        for r in range(args.repeats):
            for p in (args.paths if r % 2 == 0 else args.paths[::-1]):
                before, start, cpu = loadavg(), time.perf_counter(), time.process_time()
                trajs, steps, arena, env_wait = runners[p](args.jobs, sampling,
                                                           args.max_turns)
                seconds = time.perf_counter() - start
                results[p].append(_summary(p, seconds, trajs, steps, arena, fm, peaks[0],
                                           (before, loadavg())))
                results[p][-1]["cpu_seconds"] = time.process_time() - cpu
                results[p][-1]["env_wait_s"] = env_wait
                actions.setdefault(p, [[u.action_ids for u in t.turns] for t in trajs])
                progress(f"{p} (round {r + 1}): {seconds:.1f} s, load {before[0]}")
    finally:
        for run in runners.values():
            run.close()
    peaks.append(matmul_peak())
    peak = sum(peaks) / len(peaks)
    for runs in results.values():  # FLOP limits against the run's mean peak
        for s in runs:
            s["flop_limit_s"] = s["model_tflop"] * 1e3 / peak
            s["efficiency"] = s["flop_limit_s"] / s["seconds"]
    engine_paths = [p for p in args.paths if p != "naive"]
    same = all(actions[p] == actions[engine_paths[0]] for p in engine_paths)
    return {"runs": results, "matmul_peak_gflops": peaks, "engine_paths_same_actions": same}


def _median(runs: list[dict[str, Any]], key: str) -> float:
    values = sorted(s[key] for s in runs)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def ratios(results: dict[str, list[dict[str, Any]]]) -> dict[str, float]:
    """engine / other on the median wall time (same episodes) or tokens/s (naive)."""
    if "engine" not in results:
        return {}
    out = {}
    for p, runs in results.items():
        if p == "engine":
            continue
        if p == "naive":
            out["tokens_per_s vs naive"] = (_median(results["engine"], "tokens_per_s")
                                            / _median(runs, "tokens_per_s"))
        else:
            out[f"speed vs {p}"] = _median(runs, "seconds") / _median(results["engine"], "seconds")
    return out


def _print(report: dict[str, Any]) -> None:
    print(f"command: {report['command']}")
    m = report["machine"]
    print(f"machine: nproc={m['nproc']} torch_threads={m['torch_threads']} torch={m['torch']} "
          f"dtype={m['dtype']} matmul peak {m['matmul_peak_gflops'][0]:.0f} / "
          f"{m['matmul_peak_gflops'][1]:.0f} GFLOP/s (start / end) "
          f"loadavg before={m['loadavg_before']} after={m['loadavg_after']}")
    print(f"setup: {report['setup']}")
    head = (f"  {'path':>13} {'s':>7} {'ep/s':>6} {'steps/s':>7} {'gen tok/s':>9} "
            f"{'prefill tok/s':>13} {'TFLOP':>6} {'limit s':>7} {'eff':>5} {'load':>5} "
            f"{'cpu s':>6}")
    print(head)
    for p, runs in report["runs"].items():
        for s in runs:
            print(f"  {p:>13} {s['seconds']:7.1f} {s['episodes_per_s']:6.3f} "
                  f"{s['env_steps_per_s']:7.2f} {s['tokens_per_s']:9.1f} "
                  f"{s['prefill_tokens_per_s']:13.0f} {s['model_tflop']:6.2f} "
                  f"{s['flop_limit_s']:7.1f} {s['efficiency']:5.0%} {s['loadavg_before'][0]:5.1f} "
                  f"{s['cpu_seconds']:6.1f}")
        s = runs[0]
        waits = [r["env_wait_s"] for r in runs if r.get("env_wait_s") is not None]
        print(f"  {'':>13} {s['episodes']} episodes, {s['turns']} turns, {s['env_steps']} env "
              f"steps, {s['generated_tokens']} generated, {s['prefill_tokens']} prefill tokens"
              + (f"; waiting for envs {', '.join(f'{w:.1f}' for w in waits)} s (resets and "
                 "steps)" if waits else "")
              + (f"; arena {s['arena']}" if s["arena"] else ""))
    print(f"engine paths replayed identical actions: {report['engine_paths_same_actions']}")
    for k, v in report["ratios"].items():
        print(f"  engine {k}: x{v:.2f}")


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m",
                        help="smollm2-135m, tiny, or a local (fine-tuned) model folder")
    parser.add_argument("--env", default="textworld/w2-o3-q4")
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=1,
                        help="episodes per game (>1: group members share the first prompt)")
    parser.add_argument("--max-turns", type=int, default=12)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--truncated-action", choices=("end", "step"), default="step",
                        help="step (default): a reply without <|im_end|> is still sent to the "
                             "env, so every turn has the full action budget (base SmolLM2 "
                             "rarely stops); end: the paper's rule")
    parser.add_argument("--paths", default=",".join(PATHS),
                        help=f"comma-separated subset of {','.join(PATHS)}")
    parser.add_argument("--repeats", type=int, default=1,
                        help="timed rounds; odd rounds run the paths in reverse order")
    output_flags(parser)
    args = parser.parse_args()
    if args.tiny:   # a reduced run for tests: tiny model, toy env, 4 episodes, 2 turns
        args.model, args.env, args.episodes, args.group_size = "tiny", "toy/letters-3", 4, 2
        args.max_turns, args.max_new_tokens, args.repeats = 2, 4, 2
    args.paths = tuple(p for p in args.paths.split(",") if p)
    unknown = set(args.paths) - set(PATHS)
    if unknown or args.episodes % args.group_size:
        parser.error(f"unknown paths {sorted(unknown)}" if unknown
                     else "--episodes must be a multiple of --group-size")
    return args


def main() -> None:
    args = _args()
    torch.set_num_threads(args.threads)
    command = command_line()
    load_before = loadavg()
    games = list(range(args.episodes // args.group_size))
    if args.env.startswith("textworld/"):
        from tripod.envs.textworld import prepare_games

        prepare_games(args.env, "test", games, progress=False)
    args.jobs = make_jobs(args.env, "test", games, args.group_size, seed=SEED)
    policy = load_policy(args.model)
    measured = run_paths(policy, args)
    report = {
        "command": command,
        "setup": (f"{args.model} on {args.env} (test games 0..{len(games) - 1}, "
                  f"{args.group_size} episode(s) each), max_turns={args.max_turns}, "
                  f"max_new_tokens={args.max_new_tokens}, temperature={args.temperature}, "
                  f"truncated replies: {args.truncated_action}, repeats={args.repeats}"),
        "machine": {
            "nproc": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "python": platform.python_version(),
            "dtype": str(next(policy.model.parameters()).dtype).removeprefix("torch."),
            "matmul_peak_gflops": measured["matmul_peak_gflops"],
            "loadavg_before": load_before, "loadavg_after": loadavg(),
        },
        "runs": measured["runs"],
        "engine_paths_same_actions": measured["engine_paths_same_actions"],
        "ratios": ratios(measured["runs"]),
    }
    emit(report, args.json, _print)


if __name__ == "__main__":
    main()
