"""Apples to apples with TRL: one single-turn GRPO iteration, tripod vs `trl.GRPOTrainer`.

    python benchmarks/trl_grpo.py [--model smollm2-135m|tiny|PATH] [--prompts 8]
        [--generations 4] [--new-tokens 32] [--micro-batch 8] [--lr 1e-5]
        [--iterations 2] [--threads 2] [--json] [--tiny]

The same work on both sides, in one process, one side after the other (tripod first):

- the same model weights (loaded afresh for each side), fp32, on CPU, `--threads` threads;
- the same `--prompts` chats (8 short writing requests, rendered by tripod's prompt builder
  and given to TRL as the same conversational messages: both apply the model's chat
  template to identical messages), `--generations` samples each (the GRPO group), at
  temperature 1.0 with no top-p / top-k;
- exactly `--new-tokens` new tokens per sample: TRL gets `min_new_tokens` (the end-of-turn
  token is masked until then), tripod a policy for which no token ends a reply (sampled
  `<|im_end|>` tokens are kept and the reply goes on); both then stop at the cap, so both
  sample, score and train on the same number of tokens;
- the same reward (the share of vowels among the reply's characters: continuous, so the
  samples of a group almost surely differ and every group carries a signal), the same
  estimator (GRPO: group mean and std), the token-mean loss (TRL's `dapo`), no KL term
  (tripod `kl_coef=0`, TRL `beta=0`: neither loads a reference), one epoch, one AdamW
  step per iteration at the same learning rate, accumulated over micro-batches of
  `--micro-batch` rows, gradient norm clipped to 1.

tripod runs its training loop's own pieces (`tripod.train.rl`: `collect`, `make_batch`,
`score`, `advantage`, `update`) on a single-turn env registered by this script
(`bench/single-turn`, through the env registry's `register`). TRL runs `trainer.train()`
with `max_steps = 1 + --iterations`; a callback times each optimizer step from its start
(generation included) to its end.

Each side first runs one untimed warm-up iteration; then `--iterations` timed ones. Printed:
wall time per iteration for each side (median) and the ratio tripod / TRL, the generated
tokens, each side's loss per iteration, whether the weights changed (parameter tensors that
differ from the starting weights) and the peak resident memory of each side (sampled from
/proc). The script fails (exit 1) unless both losses are finite and both models changed.
The load average is printed around each side: compare the ratio, not absolute times.

`--tiny` is a reduced run for tests (tiny model, 4 prompts x 2 samples x 8 tokens): it
checks the script end to end; its numbers mean nothing. Needs `trl` (`pip install -e
".[bench]"`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from typing import Any

import torch
from _common import (
    RssSampler,
    command_line,
    loadavg,
    max_rss_mb,
    output_flags,
    print_json,
    progress,
)

import tripod.train.learner as learner_module
from tripod.core.config import TrainConfig, load_config
from tripod.envs.base import Step, StepInfo, whole_reply_action
from tripod.envs.pool import EnvPool
from tripod.envs.registry import register
from tripod.policy.chat import PromptConfig, build_messages
from tripod.policy.models import Policy, load_policy
from tripod.policy.rollout import RolloutEngine
from tripod.policy.settings import rollout_config
from tripod.train import batch as batch_module
from tripod.train.common import seed_everything
from tripod.train.learner import build_learner, no_grad_passes, update
from tripod.train.rl import advantage, collect, make_batch

ENV_ID = "bench/single-turn"
INSTRUCTION = "You are a helpful writer. Answer the request in a few sentences."
PROMPTS = (
    "Describe a quiet harbour at dawn.",
    "Explain why bread rises.",
    "Write a short note thanking a neighbour.",
    "Describe the smell of rain on dry earth.",
    "Give advice to someone learning to cook.",
    "Describe a busy market in the afternoon.",
    "Explain how a bicycle stays upright.",
    "Write a postcard from a mountain village.",
)
NO_STOP = -1
"""An end-of-turn id no token has: tripod's replies run to the token cap, like TRL's with
`min_new_tokens`."""


# -- the task: one prompt, one reply, a continuous reward -------------------------------------
def vowel_share(text: str) -> float:
    """Share of the reply's characters that are vowels (0 for an empty reply)."""
    return sum(c in "aeiouAEIOU" for c in text) / len(text) if text else 0.0


class SingleTurnEnv:
    """Game i asks for `PROMPTS[i % len(PROMPTS)]`; the one reply is scored and ends it."""

    def __init__(self, env_id: str, split: str = "train") -> None:
        self.env_id, self.split = env_id, split

    def reset(self, game_index: int) -> tuple[str, StepInfo]:
        return PROMPTS[game_index % len(PROMPTS)], StepInfo(objective="Write.")

    def step(self, action: str) -> Step:
        r = vowel_share(action)
        return Step("", r, True, False, StepInfo(objective="Write.", score=r, progress=r))

    def close(self) -> None:
        pass


def register_env() -> None:
    """Make `bench/single-turn` known to `tripod.envs.make` (at run time, not on import)."""
    register(ENV_ID, lambda env_id, split="train": SingleTurnEnv(env_id, split), (ENV_ID,),
             "benchmarks/trl_grpo.py: one reply per prompt, scored by its share of vowels",
             action_parser=whole_reply_action, instruction=INSTRUCTION)


def chat(prompt_index: int) -> list[dict[str, str]]:
    """The messages tripod's rollout renders for a game (given to TRL as they are)."""
    return build_messages(PromptConfig(instruction=INSTRUCTION), "Write.",
                          PROMPTS[prompt_index], [])


# -- results -----------------------------------------------------------------------------------
@dataclasses.dataclass
class Side:
    """One framework's measurements."""

    name: str
    iteration_s: list[float] = dataclasses.field(default_factory=list)
    """Timed iterations (the warm-up excluded)."""
    warmup_s: float = 0.0
    losses: list[float] = dataclasses.field(default_factory=list)
    """The loss of every iteration (warm-up included)."""
    generated_tokens: list[int] = dataclasses.field(default_factory=list)
    sequence_tokens: list[int] = dataclasses.field(default_factory=list)
    """Prompt + reply tokens of every iteration's samples (the rows trained on)."""
    changed_tensors: int = 0
    total_tensors: int = 0
    max_abs_change: float = 0.0
    torch_threads: int = 0
    loadavg_before: list[float] = dataclasses.field(default_factory=list)
    loadavg_after: list[float] = dataclasses.field(default_factory=list)
    peak_rss_mb: float = 0.0
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Settings the framework resolved itself (precision, checkpointing, optimizer)."""
    phases_s: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    """tripod only: each timed iteration's rollout and training time (the rest of it)."""

    @property
    def median_s(self) -> float:
        return statistics.median(self.iteration_s) if self.iteration_s else math.nan


def snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def compare(side: Side, model: torch.nn.Module, before: dict[str, torch.Tensor]) -> None:
    """Count the parameter tensors that moved away from the starting weights."""
    after = dict(model.named_parameters())
    side.total_tensors = len(before)
    for name, old in before.items():
        diff = float((after[name].detach() - old).abs().max())
        side.changed_tensors += diff > 0
        side.max_abs_change = max(side.max_abs_change, diff)


# -- tripod ----------------------------------------------------------------------------------
def tripod_config(args: argparse.Namespace, out_dir: str) -> TrainConfig:
    rows = args.prompts * args.generations
    return load_config(None, [
        f"run.out_dir={out_dir}", f"model.name={args.model}", f"env.id={ENV_ID}",
        "env.max_turns=1", f"rollout.games_per_iter={args.prompts}",
        f"rollout.train_pool={args.prompts}", f"rollout.group_size={args.generations}",
        f"rollout.batch_size={rows}", "rollout.train.temperature=1.0",
        "rollout.train.top_p=1.0", f"rollout.train.max_new_tokens={args.new_tokens}",
        "rollout.truncated_action=step", "reward.kind=final_score", "algo.estimator=grpo",
        f"algo.lr={args.lr}", "algo.kl_coef=0.0", "algo.loss_agg=token_mean",
        "algo.epochs=1", f"algo.minibatch_size={rows}",
        f"algo.micro_batch_size={args.micro_batch}", "algo.grad_clip=1.0",
        "train.tensorboard=false", "train.trajectory_groups=0"])


class LossRecorder:
    """Records the learner's micro-batch losses (each already divided by its minibatch's
    normaliser, so their sum is the minibatch's loss) by wrapping `micro_loss`."""

    def __init__(self) -> None:
        self.sums: list[float] = []
        self._real = learner_module.micro_loss

    def __enter__(self) -> LossRecorder:
        def recording(*a, **k):
            out = self._real(*a, **k)
            self.sums[-1] += float(out.loss.detach())
            return out

        learner_module.micro_loss = recording
        return self

    def __exit__(self, *exc: object) -> None:
        learner_module.micro_loss = self._real


def run_tripod(args: argparse.Namespace, cfg: TrainConfig) -> Side:
    side = Side("tripod", loadavg_before=loadavg())
    seed_everything(cfg.run.seed)
    learner = build_learner(cfg, load_policy(cfg.model.name, seed=cfg.run.seed))
    policy: Policy = learner.policy
    before = snapshot(policy.model)
    pool = EnvPool()
    engine = RolloutEngine(policy, rollout_config(cfg), pool=pool)
    policy.eos_token_ids = (NO_STOP,)  # after the engine read its end-of-turn text
    try:
        with LossRecorder() as losses:
            for it in range(1 + args.iterations):
                start = time.perf_counter()
                losses.sums.append(0.0)
                trajs, _ = collect(engine, cfg, it)
                rollout_s = time.perf_counter() - start
                batch, _ = make_batch(trajs, cfg, policy.pad_token_id)
                batch = no_grad_passes(learner, batch)
                advantage(batch, cfg.algo)
                stats = update(learner, batch, it)
                seconds = time.perf_counter() - start
                if stats.get("skipped_updates"):
                    losses.sums[-1] = math.nan  # a skipped step: its loss was not finite
                turns = [u for t in trajs for u in t.turns]
                side.generated_tokens.append(sum(len(u.action_ids) for u in turns))
                side.sequence_tokens.append(sum(len(u.prompt_ids) + len(u.action_ids)
                                                for u in turns))
                _record_time(side, it, seconds)
                if it > 0:
                    side.phases_s.setdefault("rollout", []).append(rollout_s)
                    side.phases_s.setdefault("train", []).append(seconds - rollout_s)
            side.losses = losses.sums
    finally:
        pool.close()
    compare(side, policy.model, before)
    side.settings = {"optim": type(learner.optimizer).__name__, "loss_agg": cfg.algo.loss_agg,
                     "shared_prefix": batch_module.MIN_SHARED_PREFIX < 10**9,
                     "dtype": str(next(policy.model.parameters()).dtype)}
    side.torch_threads, side.loadavg_after = torch.get_num_threads(), loadavg()
    return side


def _record_time(side: Side, it: int, seconds: float) -> None:
    if it == 0:
        side.warmup_s = seconds
    else:
        side.iteration_s.append(seconds)
    progress(f"{side.name} iteration {it}{' (warm-up)' if it == 0 else ''}: {seconds:.1f} s")


# -- TRL ---------------------------------------------------------------------------------------
def _step_clock(side: Side):
    """A TRL callback timing each optimizer step (generation, losses, backward, step)."""
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            _record_time(side, state.global_step - 1, time.perf_counter() - self.start)

    return StepClock()


def trl_config(args: argparse.Namespace, out_dir: str):
    """GRPOConfig for the same work (see the module docstring)."""
    from trl import GRPOConfig

    rows = args.prompts * args.generations
    return GRPOConfig(
        # TRL defaults to bf16 autocast and activation checkpointing (recomputing the
        # forward in the backward); tripod trains in fp32 without either: same arithmetic.
        bf16=False, fp16=False, activation_checkpointing=False,
        output_dir=out_dir, use_cpu=True, report_to="none", save_strategy="no",
        logging_steps=1, disable_tqdm=True, dataloader_num_workers=0, seed=0,
        max_steps=1 + args.iterations, learning_rate=args.lr, lr_scheduler_type="constant",
        warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
        per_device_train_batch_size=args.micro_batch,
        gradient_accumulation_steps=rows // args.micro_batch,
        num_generations=args.generations, max_completion_length=args.new_tokens,
        generation_kwargs={"min_new_tokens": args.new_tokens}, temperature=1.0, top_p=1.0,
        top_k=0, beta=0.0, num_iterations=1, loss_type="dapo", scale_rewards="group")


def trl_reward(prompts, completions, **kwargs) -> list[float]:
    """The env's reward on TRL's completions (conversational: lists of messages)."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [vowel_share(t.strip()) for t in texts]


def run_trl(args: argparse.Namespace) -> Side:
    from datasets import Dataset
    from trl import GRPOTrainer

    side = Side("trl", loadavg_before=loadavg())
    policy = load_policy(args.model, seed=0)
    before = snapshot(policy.model)
    dataset = Dataset.from_list([{"prompt": chat(i)} for i in range(args.prompts)])
    # The trainer prints its logs on stdout: keep stdout for this script's report.
    with tempfile.TemporaryDirectory(prefix="trl-grpo-") as out_dir, \
            contextlib.redirect_stdout(sys.stderr):
        trainer = GRPOTrainer(model=policy.model, reward_funcs=trl_reward,
                              args=trl_config(args, out_dir), train_dataset=dataset,
                              processing_class=policy.tokenizer,
                              callbacks=[_step_clock(side)])
        torch.set_num_threads(args.threads)  # in case the trainer's set-up changed it
        trainer.train()
    a = trainer.args
    side.settings = {"bf16": a.bf16, "activation_checkpointing": a.activation_checkpointing,
                     "optim": str(a.optim), "loss_type": a.loss_type,
                     "dtype": str(next(trainer.model.parameters()).dtype)}
    side.losses = [float(e["loss"]) for e in trainer.state.log_history if "loss" in e]
    lengths = [e.get("completions/mean_length") for e in trainer.state.log_history
               if "loss" in e]
    side.generated_tokens = [round(n * args.prompts * args.generations) if n else 0
                             for n in lengths]
    seen = [0] + [int(e["num_tokens"]) for e in trainer.state.log_history if "loss" in e]
    side.sequence_tokens = [b - a for a, b in zip(seen, seen[1:])]  # TRL logs a running sum
    compare(side, trainer.accelerator.unwrap_model(trainer.model), before)
    side.torch_threads, side.loadavg_after = torch.get_num_threads(), loadavg()
    return side


# -- the run -------------------------------------------------------------------------------------
def checks(sides: list[Side], iterations: int) -> list[str]:
    """What must hold for the comparison to mean anything (empty: all good)."""
    problems = []
    for s in sides:
        if len(s.losses) != 1 + iterations or not all(math.isfinite(x) for x in s.losses):
            problems.append(f"{s.name}: losses {s.losses} (expected {1 + iterations} finite)")
        if s.changed_tensors == 0:
            problems.append(f"{s.name}: no parameter changed")
        if len(s.iteration_s) != iterations:
            problems.append(f"{s.name}: {len(s.iteration_s)} timed iterations")
    return problems


def _print(report: dict[str, Any]) -> None:
    m = report["machine"]
    print(f"command: {report['command']}")
    print(f"machine: nproc={m['nproc']} torch={m['torch']} trl={m['trl']} "
          f"transformers={m['transformers']} loadavg before={m['loadavg_before']} "
          f"after={m['loadavg_after']}")
    print(f"setup: {report['setup']}")
    for s in report["sides"]:
        print(f"  {s['name']:>6}: {s['median_s']:.2f} s per iteration (median of "
              f"{', '.join(f'{x:.2f}' for x in s['iteration_s'])}; warm-up "
              f"{s['warmup_s']:.2f} s), generated tokens {s['generated_tokens']} (with "
              f"prompts {s['sequence_tokens']}), losses "
              f"{', '.join(f'{x:.4g}' for x in s['losses'])}, changed tensors "
              f"{s['changed_tensors']}/{s['total_tensors']} (max |change| "
              f"{s['max_abs_change']:.2e}), threads {s['torch_threads']}, peak RSS "
              f"{s['peak_rss_mb']:.0f} MB, load {s['loadavg_before'][0]} -> "
              f"{s['loadavg_after'][0]}; {s['settings']}")
        for phase, times in s["phases_s"].items():
            print(f"         {phase}: {', '.join(f'{x:.2f}' for x in times)} s")
    print(f"tripod / trl wall time per iteration: x{report['ratio_tripod_over_trl']:.2f}")
    print(f"memory: ru_maxrss {report['ru_maxrss_mb']:.0f} MB (whole process)")
    print("checks: " + ("ok (both losses finite, both models changed)" if not report["problems"]
                        else "; ".join(report["problems"])))


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m",
                        help="smollm2-135m, tiny, or a local model folder")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--generations", type=int, default=4, help="samples per prompt")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--micro-batch", type=int, default=8, help="rows per forward/backward")
    parser.add_argument("--no-shared-prefix", action="store_true",
                        help="run every row whole in the trainer (the shared-prefix pass off)")
    parser.add_argument("--lr", type=float, default=1e-5, help="the quickstart's learning rate")
    parser.add_argument("--iterations", type=int, default=2, help="timed iterations per side")
    output_flags(parser)   # --tiny: the tiny model, 4 prompts x 2 samples x 8 tokens
    args = parser.parse_args()
    if args.tiny:
        args.model, args.prompts, args.generations = "tiny", 4, 2
        args.new_tokens, args.micro_batch, args.iterations = 8, 4, 1
    if args.prompts > len(PROMPTS) or (args.prompts * args.generations) % args.micro_batch:
        parser.error(f"--prompts must be at most {len(PROMPTS)} and prompts x generations a "
                     "multiple of --micro-batch")
    return args


def main() -> int:
    args = _args()
    register_env()
    torch.set_num_threads(args.threads)
    if args.no_shared_prefix:
        batch_module.MIN_SHARED_PREFIX = 10**9
    load_before = loadavg()
    with RssSampler() as rss, tempfile.TemporaryDirectory(prefix="tripod-grpo-") as out_dir:
        rss.phase("tripod")
        tripod = run_tripod(args, tripod_config(args, out_dir))
        tripod.peak_rss_mb = rss.peaks["tripod"]
        rss.phase("trl")
        trl = run_trl(args)
        trl.peak_rss_mb = rss.peaks["trl"]
    import transformers
    import trl as trl_package

    sides = [tripod, trl]
    report = {
        "command": command_line(),
        "setup": (f"{args.model}, {args.prompts} prompts x {args.generations} samples x "
                  f"{args.new_tokens} new tokens, temperature 1.0, lr {args.lr}, one AdamW "
                  f"step per iteration over micro-batches of {args.micro_batch}, fp32, "
                  f"{args.threads} torch threads, 1 warm-up + {args.iterations} timed "
                  "iterations per side (tripod first)"),
        "machine": {"nproc": os.cpu_count(), "torch": torch.__version__,
                    "trl": trl_package.__version__, "transformers": transformers.__version__,
                    "python": platform.python_version(), "loadavg_before": load_before,
                    "loadavg_after": loadavg()},
        "sides": [{**dataclasses.asdict(s), "median_s": s.median_s} for s in sides],
        "ratio_tripod_over_trl": tripod.median_s / trl.median_s,
        "ru_maxrss_mb": max_rss_mb(),
        "problems": checks(sides, args.iterations),
    }
    if args.json:
        print_json(report)
    else:
        _print(report)
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
