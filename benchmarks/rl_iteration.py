"""One RL iteration of the quickstart, phase by phase: collect, score, advantage, update.

    python benchmarks/rl_iteration.py [--model smollm2-135m|tiny|PATH] [--lora]
        [--recipe recipes/quickstart.yaml] [--iterations 1] [--threads 2] [--json] [--tiny]
        [section.key=value ...]

The iteration is the training loop's own (`tripod.train.rl`: `collect`, `make_batch`,
`no_grad_passes`, `advantage`, `update` on a `build_learner` learner), with the recipe's settings
(the quickstart: 4 games x 4 episodes = 16 episodes, 12-turn cap, 16 tokens per action,
RLOO, one epoch of 16-row minibatches in micro-batches of 4). `--model` replaces the
recipe's model (e.g. `runs/quickstart/sft`, the quickstart's SFT checkpoint), `--lora`
trains LoRA adapters instead of all weights; any recipe key can be overridden
(`algo.kl_coef=0.05` adds the reference pass to the scoring phase).

Before timing, a warm-up collection (the iteration's jobs, one turn, two tokens) starts the
env processes and runs the model once; their start-up is excluded (training pays it once
per run, not per iteration), as is game generation. Timed iterations play the training
games of iterations 0, 1, ... as training would.

Figures per iteration:
- wall time of each phase (`batch` is `make_batch`: rewards and collation);
- the rollout: episodes, turns, generated tokens, what the sampler ran (prefill tokens,
  padding, prompt tokens shared inside a group, decode steps), the prefill and decode
  FLOPs of the work and its FLOP limit (FLOPs / the matmul peak) and efficiency;
- the update: agent tokens/s (tokens under the loss), all tokens/s (every real token the
  decoder ran, forward and backward), padding positions run,
  the tokens of a prefix the rows of a micro-batch share that ran once instead of once per
  row (`train.batch.decoder_hidden`), and model FLOP utilisation:
  the update's useful FLOPs (layers on real tokens, attention over each token's context,
  the LM head on agent tokens; backward = 2x forward when all weights train, 1x with LoRA,
  whose adapters' own arithmetic is left out) / wall time / the matmul peak;
- scoring (reference / critic passes, when the recipe has them) counted the same way.

The matmul peak (fp32 `torch.mm`, best of a few shapes) is measured at the start and end of
the run; efficiency uses their mean. Memory: `ru_maxrss` (the process's high-water mark,
model loading included) and the peak of each phase sampled from /proc every 0.1 s (env
child processes not counted). The load average is printed before and after each iteration:
on a shared machine compare ratios within one run, not absolute times.

`--tiny` is a reduced run for tests (tiny model, `toy/letters-2`): it checks the script end
to end; its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import tempfile
import time
from typing import Any

import torch
from _common import (
    ArenaCountingEngine,
    FlopModel,
    RssSampler,
    command_line,
    emit,
    loadavg,
    matmul_peak,
    max_rss_mb,
    output_flags,
    progress,
    rollout_work,
)

from tripod.core.config import TrainConfig, load_config
from tripod.envs.pool import EnvPool
from tripod.envs.registry import family_of
from tripod.policy.packed import KWARG as PACKING
from tripod.policy.rollout import make_jobs
from tripod.policy.settings import rollout_config, sampling_params
from tripod.train import batch as batch_module
from tripod.train.batch import TrainBatch
from tripod.train.common import seed_everything
from tripod.train.learner import Learner, build_learner, no_grad_passes, update
from tripod.train.rl import advantage, collect, iteration_games, make_batch

PHASES = ("collect", "batch", "score", "advantage", "update")


# -- counting the decoder's and the LM head's work ----------------------------------------------
@dataclasses.dataclass
class PassTotals:
    """What the model ran during one phase (forward passes; FLOPs include backward)."""

    passes: int = 0
    """Decoder forward passes."""
    real_tokens: int = 0
    """Tokens of the rows (padding excluded)."""
    processed_tokens: int = 0
    """Positions run, padding included (rows x width of each pass)."""
    shared_tokens: int = 0
    """Row tokens not run again: a prefix the rows of a pass share runs once (rows - 1)."""
    head_tokens: int = 0
    """Positions the LM head ran on."""
    flops: float = 0.0
    """Useful arithmetic: layers on real tokens and the head, forward + backward."""


class PassCounter:
    """Forward hooks on every decoder stack and LM head of a learner (policy, reference,
    critic copy). A pass run with gradients costs 3x its forward when the module's weights
    train (input and weight gradients), 2x when they are frozen (LoRA: input gradients
    only); without gradients 1x."""

    def __init__(self, learner: Learner, fm: FlopModel) -> None:
        self.fm, self.totals = fm, PassTotals()
        roots = [learner.policy.model, learner.ref_model, learner.critic]
        roots = [r for r in roots if r is not None]
        decoder_type = type(learner.policy.model.get_decoder())
        heads = [learner.policy.model.get_output_embeddings()]
        if learner.ref_model is not None:
            heads.append(learner.ref_model.get_output_embeddings())
        decoders = {id(m): m for r in roots for m in r.modules() if type(m) is decoder_type}
        self.handles = [m.register_forward_pre_hook(self._decoder, with_kwargs=True)
                        for m in decoders.values()]
        self.handles += [h.register_forward_hook(self._head) for h in heads]
        # the trainer drops the mask of right-padded rows (`batch.decoder_mask`): note the
        # rows' real lengths there, for the pass that follows
        self.pending: torch.Tensor | None = None
        self._decoder_mask = batch_module.decoder_mask
        batch_module.decoder_mask = self._noting_mask

    def _noting_mask(self, attention_mask: torch.Tensor) -> torch.Tensor | None:
        self.pending = attention_mask
        return self._decoder_mask(attention_mask)

    @staticmethod
    def _multiplier(module: torch.nn.Module) -> int:
        if not torch.is_grad_enabled():
            return 1
        trains = any(p.requires_grad for n, p in module.named_parameters() if "lora_" not in n)
        return 3 if trains else 2

    def _decoder(self, module, args, kwargs) -> None:
        ids, mask = kwargs.get("input_ids"), kwargs.get("attention_mask")
        if ids is None:  # a packed pass is given its embeddings
            ids = kwargs.get("inputs_embeds")
            if ids is None:
                return
            ids = ids[..., 0]
        b, t = ids.shape
        if mask is None and self.pending is not None and self.pending.shape == ids.shape:
            mask = self.pending
        self.pending = None
        lengths = mask.sum(1).tolist() if mask is not None and mask.dim() == 2 else [t] * b
        starts, packing = [0] * b, kwargs.get(PACKING)
        if hasattr(packing, "pieces"):  # the rollout's packed prefill: rows' new tokens
            starts = [start for _, start, _ in packing.pieces]
            lengths = [n for _, _, n in packing.pieces]
        elif packing is not None:  # shared prefixes and rows' own tokens packed end to end
            starts = [seg.position for seg in packing.segments]
            lengths = [seg.length for seg in packing.segments]
            self.totals.shared_tokens += packing.saved
        mult = self._multiplier(module)
        self.totals.passes += 1
        self.totals.real_tokens += int(sum(lengths))
        self.totals.processed_tokens += b * t
        self.totals.flops += mult * sum(self.fm.tokens(s, s + int(n))
                                        for s, n in zip(starts, lengths))

    def _head(self, module, args, output) -> None:
        n = args[0].shape[:-1].numel()
        self.totals.head_tokens += n
        self.totals.flops += self._multiplier(module) * n * self.fm.head

    def take(self) -> PassTotals:
        """The totals since the last call (and start afresh)."""
        out, self.totals = self.totals, PassTotals()
        return out

    def close(self) -> None:
        for h in self.handles:
            h.remove()
        batch_module.decoder_mask = self._decoder_mask


# -- one iteration -------------------------------------------------------------------------
@dataclasses.dataclass
class Timer:
    """Wall time of named phases, each also switching the memory sampler's phase."""

    rss: RssSampler
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)

    def run(self, name: str, fn, *args):
        self.rss.phase(name)
        start = time.perf_counter()
        out = fn(*args)
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
        return out


def _rollout_figures(engine: ArenaCountingEngine, trajs, fm: FlopModel) -> dict[str, Any]:
    work = rollout_work(fm, trajs, reuse=True)
    return {
        "episodes": len(trajs), "turns": sum(t.num_turns for t in trajs),
        "generated_tokens": sum(len(u.action_ids) for t in trajs for u in t.turns),
        "arena": dataclasses.asdict(engine.arena_stats()),
        "prefill_tflop": work.prefill_flops / 1e12, "decode_tflop": work.decode_flops / 1e12,
        "head_tflop": work.head_flops / 1e12, "model_tflop": work.flops / 1e12,
        "success_rate": sum(t.won for t in trajs) / max(len(trajs), 1),
    }


def _pass_figures(totals: PassTotals, seconds: float) -> dict[str, Any]:
    return {**dataclasses.asdict(totals), "seconds": seconds,
            "tflop": totals.flops / 1e12,
            "real_tokens_per_s": totals.real_tokens / max(seconds, 1e-9)}


def run_iteration(learner: Learner, engine: ArenaCountingEngine, counter: PassCounter,
                  rss: RssSampler, it: int) -> dict[str, Any]:
    """collect -> batch -> score -> advantage -> update, each phase timed apart."""
    cfg, timer = learner.cfg, Timer(rss)
    fm = counter.fm
    before, cpu = loadavg(), time.process_time()
    engine.arenas.clear()
    trajs, _ = timer.run("collect", collect, engine, cfg, it)
    rollout = _rollout_figures(engine, trajs, fm)
    rollout["tokens_per_s"] = rollout["generated_tokens"] / timer.seconds["collect"]
    batch, _ = timer.run("batch", make_batch, trajs, cfg, learner.policy.pad_token_id)
    if batch is None:
        raise RuntimeError("no trainable episode in the iteration: nothing to time")
    counter.take()  # the rollout's own passes are counted above, from its records
    batch = timer.run("score", no_grad_passes, learner, batch)
    scored = _pass_figures(counter.take(), timer.seconds["score"])
    timer.run("advantage", advantage, batch, cfg.algo)
    stats = timer.run("update", update, learner, batch, it)
    updated = _update_figures(counter.take(), batch, cfg.algo.epochs, timer.seconds["update"])
    rss.phase("idle")
    return {"iteration": it, "phases_s": timer.seconds,
            "total_s": sum(timer.seconds.values()), "rollout": rollout, "score": scored,
            "update": {**updated, "skipped_updates": stats.get("skipped_updates", 0.0),
                       "grad_norm": stats.get("grad_norm", float("nan"))},
            "rows": batch.num_rows, "loadavg_before": before, "loadavg_after": loadavg(),
            "cpu_seconds": time.process_time() - cpu}


def _update_figures(totals: PassTotals, batch: TrainBatch, epochs: int,
                    seconds: float) -> dict[str, Any]:
    agent = int(batch.loss_mask.sum()) * epochs
    out = _pass_figures(totals, seconds)
    out.update({"agent_tokens": agent, "agent_tokens_per_s": agent / max(seconds, 1e-9),
                "padding_share": 1 - totals.real_tokens / max(totals.processed_tokens, 1)})
    return out


# -- set-up, warm-up and the whole run ------------------------------------------------------
def _prepare(cfg: TrainConfig, iterations: int) -> None:
    """Build the timed iterations' training games up front (not timed, as in training)."""
    family = family_of(cfg.env.id)
    if family.prepare is None:
        return
    games = sorted({g for it in range(iterations) for g in iteration_games(cfg, it)})
    family.prepare(cfg.env.id, "train", games, dict(cfg.env.options))


def _warm_up(engine: ArenaCountingEngine, cfg: TrainConfig) -> float:
    """Play the first iteration's jobs for one turn of two tokens: starts the envs."""
    jobs = make_jobs(cfg.env.id, "train", iteration_games(cfg, 0), cfg.rollout.group_size,
                     seed=cfg.run.seed)
    sampling = sampling_params(cfg.rollout.train).model_copy(update={"max_new_tokens": 2})
    saved, start = engine.cfg, time.perf_counter()
    engine.cfg = dataclasses.replace(saved, max_turns=1)
    try:
        engine.collect(jobs, sampling)
    finally:
        engine.cfg = saved
    return time.perf_counter() - start


def measure(cfg: TrainConfig, iterations: int) -> dict[str, Any]:
    """Load, warm up, then time `iterations` iterations; peaks measured around them."""
    with RssSampler() as rss:
        rss.phase("load")
        seed_everything(cfg.run.seed)
        _prepare(cfg, iterations)
        learner = build_learner(cfg)
        fm = FlopModel.of(learner.policy.model)
        peaks = [matmul_peak()]
        pool = EnvPool()
        engine = ArenaCountingEngine(learner.policy, rollout_config(cfg), pool=pool)
        counter = PassCounter(learner, fm)
        try:
            rss.phase("warm-up")
            progress(f"warm-up (env start-up included) {_warm_up(engine, cfg):.1f} s")
            runs = []
            for it in range(iterations):
                runs.append(run_iteration(learner, engine, counter, rss, it))
                progress(f"iteration {it + 1}: {runs[-1]['total_s']:.1f} s, "
                         f"load {runs[-1]['loadavg_before'][0]}")
        finally:
            counter.close()
            pool.close()
        peaks.append(matmul_peak())
    peak = sum(peaks) / len(peaks)
    for r in runs:
        _efficiencies(r, peak)
    trainable = sum(p.numel() for p in learner.policy.model.parameters() if p.requires_grad)
    return {"runs": runs, "matmul_peak_gflops": peaks, "trainable_params": trainable,
            "memory": {"ru_maxrss_mb": max_rss_mb(), "sampled_peak_mb": rss.peak_mb,
                       "phase_peaks_mb": rss.peaks}}


def _efficiencies(run: dict[str, Any], peak_gflops: float) -> None:
    """FLOP limits (work / peak) and efficiencies (limit / wall time) of a run's phases."""
    rollout = run["rollout"]
    rollout["flop_limit_s"] = rollout["model_tflop"] * 1e3 / peak_gflops
    rollout["efficiency"] = rollout["flop_limit_s"] / run["phases_s"]["collect"]
    for key in ("score", "update"):
        part = run[key]
        part["flop_limit_s"] = part["tflop"] * 1e3 / peak_gflops
        part["mfu"] = part["flop_limit_s"] / max(part["seconds"], 1e-9)


# -- report ------------------------------------------------------------------------------------
def _print(report: dict[str, Any]) -> None:
    m = report["machine"]
    print(f"command: {report['command']}")
    print(f"machine: nproc={m['nproc']} torch_threads={m['torch_threads']} torch={m['torch']} "
          f"matmul peak {m['matmul_peak_gflops'][0]:.0f} / {m['matmul_peak_gflops'][1]:.0f} "
          f"GFLOP/s (start / end) loadavg before={m['loadavg_before']} "
          f"after={m['loadavg_after']}")
    print(f"setup: {report['setup']}")
    for r in report["runs"]:
        ph, ro, up, sc = r["phases_s"], r["rollout"], r["update"], r["score"]
        print(f"iteration {r['iteration']}: {r['total_s']:.1f} s (load {r['loadavg_before'][0]}"
              f" -> {r['loadavg_after'][0]}, cpu {r['cpu_seconds']:.1f} s): "
              + ", ".join(f"{k} {ph[k]:.2f} s" for k in PHASES))
        a = ro["arena"]
        print(f"  rollout: {ro['episodes']} episodes, {ro['turns']} turns, "
              f"{ro['generated_tokens']} generated tokens ({ro['tokens_per_s']:.3g}/s), "
              f"prefill {a['prefill_tokens']} tokens "
              f"(+{a['padded_tokens']} padding, {a['shared_tokens']} shared), "
              f"{a['decode_steps']} decode steps; prefill {ro['prefill_tflop']:.3f} TFLOP, "
              f"decode {ro['decode_tflop']:.3f}, head {ro['head_tflop']:.3f}; FLOP limit "
              f"{ro['flop_limit_s']:.1f} s, efficiency {ro['efficiency']:.0%}")
        print(f"  score: {sc['passes']} passes, {sc['real_tokens']} tokens "
              f"(+{sc['shared_tokens']} shared), "
              f"{sc['tflop']:.3f} TFLOP, MFU {sc['mfu']:.0%}")
        print(f"  update: {r['rows']} rows, {up['agent_tokens']} agent tokens "
              f"({up['agent_tokens_per_s']:.3g}/s), {up['real_tokens']} tokens run "
              f"({up['real_tokens_per_s']:.3g}/s, padding {up['padding_share']:.0%} of "
              f"positions, {up['shared_tokens']} more in shared prefixes run once), "
              f"{up['tflop']:.3f} TFLOP, MFU {up['mfu']:.0%}, "
              f"skipped steps {up['skipped_updates']:.0f}")
    mem = report["memory"]
    print(f"memory: ru_maxrss {mem['ru_maxrss_mb']:.0f} MB; sampled peaks "
          + ", ".join(f"{k} {v:.0f} MB" for k, v in mem["phase_peaks_mb"].items()))


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", help="recipe overrides, section.key=value")
    parser.add_argument("--recipe", default=os.path.join(os.path.dirname(__file__), "..",
                                                         "recipes", "quickstart.yaml"))
    parser.add_argument("--model", default=None,
                        help="smollm2-135m, tiny, or a local model folder (default: the recipe's)")
    parser.add_argument("--lora", action="store_true", help="train LoRA adapters")
    parser.add_argument("--no-shared-prefix", action="store_true",
                        help="run every row whole in the trainer (the shared-prefix pass off)")
    parser.add_argument("--iterations", type=int, default=1, help="timed iterations")
    output_flags(parser)   # --tiny: the tiny model on toy/letters-2
    return parser.parse_args()


def _config(args: argparse.Namespace, out_dir: str) -> TrainConfig:
    overrides = [f"run.out_dir={out_dir}", "train.tensorboard=false",
                 "train.trajectory_groups=0"]
    if args.tiny:
        overrides += ["model.name=tiny", "env.id=toy/letters-2", "env.max_turns=2"]
    if args.model:
        overrides.append(f"model.name={args.model}")
    if args.lora:
        overrides.append("model.lora.enabled=true")
    return load_config(args.recipe, overrides + args.overrides)


def main() -> None:
    args = _args()
    torch.set_num_threads(args.threads)
    if args.no_shared_prefix:
        batch_module.MIN_SHARED_PREFIX = 10**9
    load_before = loadavg()
    with tempfile.TemporaryDirectory(prefix="rl-iteration-") as out_dir:
        cfg = _config(args, out_dir)
        measured = measure(cfg, args.iterations)
    r, a = cfg.rollout, cfg.algo
    report = {
        "command": command_line(),
        "setup": (f"{cfg.model.name}{' + LoRA' if cfg.model.lora.enabled else ''} "
                  f"({measured['trainable_params'] / 1e6:.2f}M trainable) on {cfg.env.id}, "
                  f"{r.games_per_iter} games x {r.group_size} episodes, "
                  f"max_turns={cfg.env.max_turns}, max_new_tokens={r.train.max_new_tokens}, "
                  f"temperature={r.train.temperature}, {a.estimator}, kl_coef={a.kl_coef}, "
                  f"epochs={a.epochs}, minibatch={a.minibatch_size}, "
                  f"micro-batch={a.micro_batch_size}, fp32, shared-prefix pass "
                  f"{'off' if args.no_shared_prefix else 'on'}"),
        "machine": {"nproc": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                    "torch": torch.__version__, "python": platform.python_version(),
                    "matmul_peak_gflops": measured["matmul_peak_gflops"],
                    "loadavg_before": load_before, "loadavg_after": loadavg()},
        "runs": measured["runs"], "memory": measured["memory"],
    }
    emit(report, args.json, _print)


if __name__ == "__main__":
    main()
