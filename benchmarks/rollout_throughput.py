"""Rollout throughput: tripod's batched `RolloutEngine` against a naive HF `generate` loop.

    python benchmarks/rollout_throughput.py [--episodes 16] [--max-turns 12] \
        [--max-new-tokens 16] [--temperature 0.7] [--model smollm2-135m|PATH] [--json] \
        [--truncated-action end|step] [--threads N]

Both paths play the same episodes: game indices 0..N-1 of the `test` split of
`textworld/w2-o3-q4` (`--env`), one episode each, with the same prompt formatting
(`tripod.policy.chat.build_messages` / `render_prompt_ids`, full history), the same sampling
(temperature, no top-k / top-p, `--max-new-tokens`), the same turn cap, the same stop tokens
(`policy.eos_token_ids`, i.e. `<|im_end|>`), the same action parsing (`parse_action`) and the
paper's rule that a reply without the end-of-turn token ends the episode (no env step).

(a) engine: `RolloutEngine` with batch_size = N (all episodes at once) and
    history_window None, so each episode's KV cache is reused across turns: a turn only
    prefills the new observation, and decoding is batched over the active episodes.
(b) naive: one episode at a time; every turn the whole chat is re-rendered, re-tokenized and
    re-encoded from scratch by `model.generate` (batch 1, fresh cache).

What is timed: model work, env steps and all bookkeeping from the first reset to the last
step. What is not: game generation (`prepare_games` runs first) and TextWorld process
start-up (about 2.5 s per env process; the engine starts one per parallel episode, the naive
loop one in total). A warm-up before timing starts every env process and runs the model once
on each path; the env start-up time is measured during that warm-up and reported separately.

Figures: episodes/s, env steps/s and generated tokens/s (every sampled token, the
end-of-turn token included), and the engine/naive ratio of each. The two paths sample
independently, so their episodes differ in length and token count: compare tokens/s first;
episodes/s and steps/s depend on how long the episodes are. Base SmolLM2 rarely stops with
a game command inside a short reply, so with the paper's rule most of its episodes end on the
first turn (few env steps, short contexts: the KV cache reuse barely shows). For figures
representative of RL rollouts pass a fine-tuned model folder (`--model PATH`, e.g. an SFT
checkpoint), or `--truncated-action step` to keep stepping with truncated replies (then both
paths send the parsed text to the env and episodes run to the turn cap).

Both paths share the CPU with anything else running: the load average before and after is
printed; figures taken with a load above the core count are not comparable to idle ones.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shlex
import sys
import time
from collections import Counter
from typing import Any

import torch

from tripod.core.types import EpisodeEnd
from tripod.envs import make
from tripod.envs.textworld import prepare_games
from tripod.policy.chat import PromptConfig, build_messages, parse_action, render_prompt_ids
from tripod.policy.models import Policy, load_policy
from tripod.policy.rollout import RolloutConfig, RolloutEngine, make_jobs
from tripod.policy.sampler import SamplingParams

SEED = 1234


def _progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _summary(name: str, seconds: float, episodes: int, steps: int, tokens: int,
             turns: int, prefill: int, ends: Counter) -> dict[str, Any]:
    return {
        "path": name, "seconds": seconds, "episodes": episodes, "env_steps": steps,
        "generated_tokens": tokens, "turns": turns, "prefill_tokens": prefill,
        "episodes_per_s": episodes / seconds, "env_steps_per_s": steps / seconds,
        "tokens_per_s": tokens / seconds,
        "tokens_per_turn": tokens / max(turns, 1), "turns_per_episode": turns / max(episodes, 1),
        "ends": dict(sorted(ends.items())),
    }


# -- (a) the engine -----------------------------------------------------------------------
def run_engine(policy: Policy, args: argparse.Namespace, sampling: SamplingParams
               ) -> tuple[dict[str, Any], float]:
    """Returns (summary of the timed run, env start-up seconds measured in the warm-up)."""
    cfg = RolloutConfig(max_turns=args.max_turns, batch_size=args.episodes,
                        truncated_action=args.truncated_action,
                        prompt=PromptConfig(history_window=None))
    engine = RolloutEngine(policy, cfg)
    jobs = make_jobs(args.env, "test", list(range(args.episodes)), group_size=1, seed=SEED)
    try:
        # Warm-up: one turn of two tokens starts all N env processes (kept idle by the engine
        # and reused below) and runs the model once.
        engine.cfg = dataclasses.replace(cfg, max_turns=1)
        start = time.perf_counter()
        engine.collect(jobs, dataclasses.replace(sampling, max_new_tokens=2))
        startup = time.perf_counter() - start
        engine.cfg = cfg
        _progress(f"engine: warm-up done in {startup:.1f} s; timing {len(jobs)} episodes")
        if sum(len(v) for v in engine._idle.values()) < args.episodes:
            print("warning: not every env survived the warm-up; start-up is partly timed",
                  file=sys.stderr)
        trajs, stats = engine.collect(jobs, sampling)
    finally:
        engine.close()
    turns = sum(t.num_turns for t in trajs)
    prefill = 0
    for t in trajs:  # tokens fed by `extend` = final context minus tokens fed while decoding
        if t.turns:
            prefill += len(t.turns[-1].prompt_ids) - sum(
                len(u.action_ids) - 1 for u in t.turns[:-1])
    ends = Counter(str(t.end) for t in trajs)
    return _summary("engine", stats.seconds, stats.episodes, stats.env_steps,
                    stats.generated_tokens, turns, prefill, ends), startup


# -- (b) the naive loop -------------------------------------------------------------------
@torch.no_grad()
def _generate(policy: Policy, ids: list[int], sampling: SamplingParams) -> tuple[list[int], bool]:
    """One reply with HF generate, the whole prompt encoded from scratch (batch 1)."""
    model = policy.model
    input_ids = torch.tensor([ids], device=policy.device)
    kwargs: dict[str, Any] = {"do_sample": False}
    if not sampling.greedy:  # plain tempered sampling, as the engine: no top-k, top-p 1
        kwargs = {"do_sample": True, "temperature": sampling.temperature, "top_k": 0,
                  "top_p": sampling.top_p}
    out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids),
                         max_new_tokens=sampling.max_new_tokens,
                         eos_token_id=list(policy.eos_token_ids),
                         pad_token_id=policy.pad_token_id, **kwargs)
    new = out[0, len(ids):].tolist()
    for i, tok in enumerate(new):  # stop at the first end-of-turn token (no padding at batch 1)
        if tok in policy.eos_token_ids:
            return new[:i + 1], True
    return new, False


def _naive_episode(policy: Policy, env, game: int, args: argparse.Namespace,
                   sampling: SamplingParams, prompt: PromptConfig) -> dict[str, Any]:
    obs, info = env.reset(game)
    objective, first_obs = info.objective, obs
    history: list[tuple[str, str]] = []
    tokens = steps = turns = prefill = 0
    end = EpisodeEnd.MAX_TURNS
    for _ in range(args.max_turns):
        ids = render_prompt_ids(policy.tokenizer,
                                build_messages(prompt, objective, first_obs, history))
        reply, ended = _generate(policy, ids, sampling)
        turns, tokens, prefill = turns + 1, tokens + len(reply), prefill + len(ids)
        action = parse_action(policy.tokenizer.decode(reply, skip_special_tokens=True))
        if not ended and args.truncated_action == "end":
            end = EpisodeEnd.TRUNCATED_ACTION  # the paper's rule: no env step
            break
        step = env.step(action)
        steps += 1
        if step.terminated or step.info.won or step.info.lost:
            end = EpisodeEnd.WON if step.info.won else EpisodeEnd.LOST
            break
        if step.truncated:
            end = EpisodeEnd.ENV_TRUNCATED
            break
        history.append((action, step.observation))
    return {"tokens": tokens, "steps": steps, "turns": turns, "prefill": prefill,
            "end": str(end)}


def run_naive(policy: Policy, args: argparse.Namespace, sampling: SamplingParams
              ) -> tuple[dict[str, Any], float]:
    prompt = PromptConfig(history_window=None)
    model = policy.model
    was_training = model.training
    model.eval()
    start = time.perf_counter()
    env = make(args.env, split="test")
    try:
        env.reset(0)  # starts the game process (not timed below)
        startup = time.perf_counter() - start
        _generate(policy, [policy.eos_token_ids[0]] * 8,  # model warm-up
                  dataclasses.replace(sampling, max_new_tokens=2))
        torch.manual_seed(SEED)
        results = []
        start = time.perf_counter()
        _progress(f"naive: warm-up done in {startup:.1f} s; timing {args.episodes} episodes")
        for game in range(args.episodes):
            results.append(_naive_episode(policy, env, game, args, sampling, prompt))
            r = results[-1]
            _progress(f"naive: game {game}: {r['turns']} turns, {r['tokens']} tokens, "
                      f"{r['end']} ({time.perf_counter() - start:.1f} s so far)")
        seconds = time.perf_counter() - start
    finally:
        env.close()
        model.train(was_training)
    return _summary("naive", seconds, len(results), sum(r["steps"] for r in results),
                    sum(r["tokens"] for r in results), sum(r["turns"] for r in results),
                    sum(r["prefill"] for r in results),
                    Counter(r["end"] for r in results)), startup


# -- report ---------------------------------------------------------------------------------
def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _print_path(s: dict[str, Any]) -> None:
    print(f"  {s['path']:>6}: {s['seconds']:7.1f} s | {s['episodes_per_s']:6.3f} episodes/s | "
          f"{s['env_steps_per_s']:6.2f} env steps/s | {s['tokens_per_s']:7.1f} tokens/s")
    print(f"          {s['episodes']} episodes, {s['env_steps']} env steps, {s['turns']} turns "
          f"({s['turns_per_episode']:.2f}/episode), {s['generated_tokens']} generated tokens "
          f"({s['tokens_per_turn']:.1f}/turn), {s['prefill_tokens']} prefill tokens; "
          f"ends: {s['ends']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=16,
                        help="parallel episodes (engine batch size) = games 0..N-1")
    parser.add_argument("--max-turns", type=int, default=12)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--model", default="smollm2-135m",
                        help="smollm2-135m, tiny, or a local (fine-tuned) model folder")
    parser.add_argument("--env", default="textworld/w2-o3-q4")
    parser.add_argument("--truncated-action", choices=("end", "step"), default="end",
                        help="end: a reply without <|im_end|> ends the episode (the paper's "
                             "rule); step: send its parsed text to the env anyway")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default: torch's own choice); on a loaded machine "
                             "1 thread can beat 2")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    command = " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv])
    load_before = _load()
    start = time.perf_counter()
    prepare_games(args.env, "test", range(args.episodes), progress=False)
    games_s = time.perf_counter() - start
    policy = load_policy(args.model)
    dtype = str(next(policy.model.parameters()).dtype).removeprefix("torch.")
    sampling = SamplingParams(temperature=args.temperature, max_new_tokens=args.max_new_tokens)

    _progress(f"games ready ({games_s:.1f} s), {args.model} loaded")
    engine, engine_startup = run_engine(policy, args, sampling)
    _progress(f"engine: {engine['seconds']:.1f} s, {engine['turns']} turns, "
              f"{engine['generated_tokens']} tokens")
    naive, naive_startup = run_naive(policy, args, sampling)
    ratios = {k: engine[k] / naive[k] if naive[k] else float("nan")
              for k in ("episodes_per_s", "env_steps_per_s", "tokens_per_s")}
    machine = {
        "nproc": os.cpu_count(), "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__, "python": platform.python_version(),
        "device": str(policy.device), "dtype": dtype,
        "loadavg_before": load_before, "loadavg_after": _load(),
    }
    report = {
        "command": command, "model": args.model, "env": args.env, "split": "test",
        "games": f"0..{args.episodes - 1}", "episodes": args.episodes,
        "max_turns": args.max_turns, "max_new_tokens": args.max_new_tokens,
        "temperature": args.temperature, "truncated_action": args.truncated_action,
        "machine": machine, "game_prep_s": games_s,
        "env_startup_s_excluded": {"engine": engine_startup, "naive": naive_startup},
        "engine": engine, "naive": naive, "ratio_engine_over_naive": ratios,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"command: {command}")
    print(f"machine: nproc={machine['nproc']} torch_threads={machine['torch_threads']} "
          f"torch={machine['torch']} device={machine['device']} dtype={dtype} "
          f"loadavg before={load_before} after={machine['loadavg_after']}")
    print(f"setup: {args.model} on {args.env} (test games 0..{args.episodes - 1}, one episode "
          f"each), max_turns={args.max_turns}, max_new_tokens={args.max_new_tokens}, "
          f"temperature={args.temperature}, truncated replies: {args.truncated_action}")
    print(f"excluded from timing: game prep {games_s:.1f} s; env start-up + warm-up "
          f"{engine_startup:.1f} s (engine, {args.episodes} env processes), "
          f"{naive_startup:.1f} s (naive, 1 env process)")
    _print_path(engine)
    _print_path(naive)
    print(f"  engine/naive: episodes/s x{ratios['episodes_per_s']:.2f}, "
          f"env steps/s x{ratios['env_steps_per_s']:.2f}, "
          f"tokens/s x{ratios['tokens_per_s']:.2f}")


if __name__ == "__main__":
    main()
