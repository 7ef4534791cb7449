"""GPU check: rollout and update throughput, MFU, peak memory and the sampler-vs-trainer
logprob gap, for a randomly initialised model of Qwen2.5-1.5B's shape (no network).

    python benchmarks/gpu/check.py                      # one CUDA device, ~1-3 minutes
    python benchmarks/gpu/check.py --tiny --device cpu  # the CI smoke run (numbers mean nothing)

What it runs, with the engine and learner the recipes use:
- the model: `transformers.Qwen2Config` with Qwen2.5-1.5B's dimensions (28 layers, hidden
  1536, MLP 8960, 12 query / 2 key-value heads, vocabulary 151936, tied embeddings), random
  weights in bf16 (`--tiny`: 2 layers, hidden 64). No weights are downloaded: the tokenizer
  is SmolLM2's, which tripod already keeps offline. Its ids are all below Qwen's vocabulary
  size; ids it cannot decode become empty text, which the env reads as a wrong answer.
- rollouts: 64 episodes (16 games x groups of 4) of `toy/letters-8`, which always lasts 8
  turns; a random model rarely ends its reply, so almost every turn samples
  `--max-new-tokens` ids (replies without the end-of-turn token still step the env).
- the logprob gap: the trainer's teacher-forced logprobs (bf16 weights, fp32 log-softmax)
  against the sampler's recorded ones on every agent token, before any update.
- update: one GRPO update over those episodes (AdamW, micro-batches of `--micro-batch`);
  update tokens/s counts every token of every row (prompts and observations included).
- MFU: the update's model FLOPs / seconds / the device's peak. The FLOPs are counted by
  `benchmarks/rl_iteration.py`'s hooks on the passes the trainer actually ran: the layers'
  matmuls on the tokens run, attention over each token's context, the LM head on the agent
  tokens only, x3 for forward + backward. A group's shared first prompt runs once per
  micro-batch (the packed pass), so it is counted once (`update_shared_tokens`: the
  row tokens not run again). Peak: `--peak-tflops`, else a table of dense bf16 peaks by
  device name; on CPU a measured matmul rate.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the FLOP counter
from _common import FlopModel  # noqa: E402
from rl_iteration import PassCounter  # noqa: E402

from tripod.core.config import load_config
from tripod.policy.models import Policy, _end_of_turn_ids, smollm2_dir
from tripod.policy.rollout import RolloutEngine
from tripod.policy.settings import rollout_config
from tripod.train.batch import TrainBatch, on_device, token_logprobs
from tripod.train.learner import build_learner, update
from tripod.train.rl import advantage, collect, make_batch

QWEN25_15B = dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                  num_attention_heads=12, num_key_value_heads=2, vocab_size=151936,
                  max_position_embeddings=32768, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                  tie_word_embeddings=True, use_sliding_window=False)
"""Qwen2.5-1.5B's config.json dimensions (1.54 billion parameters)."""

TINY = dict(QWEN25_15B, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, vocab_size=49152)

PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0,
                    "A10G": 125.0, "L4": 121.0, "4090": 165.0}
"""Dense bf16 tensor-core peaks (vendor data sheets, without sparsity), by name fragment."""


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def build_policy(tiny: bool, device: str, dtype: torch.dtype) -> Policy:
    """A random Qwen2 of the chosen shape with SmolLM2's (offline) tokenizer."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(smollm2_dir()), local_files_only=True)
    config = Qwen2Config(**(TINY if tiny else QWEN25_15B), bos_token_id=1, eos_token_id=2,
                         pad_token_id=2)
    torch.manual_seed(0)
    # Built in `dtype` directly: no fp32 copy first (9 GB at this shape, which would count in
    # the peak), and the rotary frequencies stay fp32 as `from_pretrained` leaves them
    # (`.to(bf16)` would round them too).
    with torch.device(device):
        model = Qwen2ForCausalLM._from_config(config, dtype=dtype).eval()
    return Policy(model, tok, "qwen2.5-1.5b-shape" + ("-tiny" if tiny else ""),
                  _end_of_turn_ids(tok))


def recipe(args: argparse.Namespace, out_dir: str):
    games = args.episodes // 4
    return load_config(overrides=[
        "model.name=tiny", f"model.device={args.device}", "env.id=toy/letters-8",
        f"env.max_turns={args.turns}", f"rollout.games_per_iter={games}",
        "rollout.group_size=4", f"rollout.batch_size={args.episodes}",
        "rollout.train.temperature=1.0", f"rollout.train.max_new_tokens={args.max_new_tokens}",
        "rollout.truncated_action=step", "reward.kind=dense", "algo.estimator=grpo",
        f"algo.minibatch_size={args.episodes}", f"algo.micro_batch_size={args.micro_batch}",
        "train.tensorboard=false", f"run.out_dir={out_dir}"])


def peak_tflops(device: str, given: float | None) -> float | None:
    if given:
        return given
    if device.startswith("cuda"):
        name = torch.cuda.get_device_name()
        return next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
    a, b = torch.randn(1024, 1024, dtype=torch.bfloat16), torch.randn(1024, 1024,
                                                                        dtype=torch.bfloat16)
    start, reps = time.perf_counter(), 0
    while time.perf_counter() - start < 0.3:
        torch.mm(a, b)
        reps += 1
    return 2 * 1024**3 * reps / (time.perf_counter() - start) / 1e12


def logprob_gap(policy: Policy, batch: TrainBatch, temperature: float,
                micro: int) -> tuple[float, float]:
    """(mean, max) |trainer - sampler| logprob over agent tokens."""
    device = policy.device
    diffs = []
    with torch.no_grad():
        for start in range(0, batch.num_rows, micro):
            mb = batch.select(list(range(start, min(start + micro, batch.num_rows))))
            dev = on_device(mb, device)
            logp, _, _ = token_logprobs(policy.model, dev.input_ids, dev.attention_mask,
                                        temperature, dev.loss_mask)
            diffs.append((logp.cpu() - mb.old_logprobs)[mb.loss_mask.bool()].abs())
    gap = torch.cat(diffs)
    return float(gap.mean()), float(gap.max())


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def peak_memory_gb(device: str) -> float:
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB (RSS)


def run(args: argparse.Namespace) -> dict:
    """Every figure of the check, as a dict (printed as text or JSON by `main`)."""
    import tempfile

    start = time.perf_counter()
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    policy = build_policy(args.tiny, args.device, torch.bfloat16)
    params = sum(p.numel() for p in policy.model.parameters())
    _log(f"model: {params / 1e9:.3f}B parameters, bf16 on {args.device}")
    with tempfile.TemporaryDirectory() as out_dir:
        cfg = recipe(args, out_dir)
        engine = RolloutEngine(policy, rollout_config(cfg))
        _sync(args.device)
        t = time.perf_counter()
        trajs, _ = collect(engine, cfg, 0)
        _sync(args.device)
        rollout_s = time.perf_counter() - t
        engine.close()
        generated = sum(len(turn.action_ids) for tr in trajs for turn in tr.turns)
        _log(f"rollout: {len(trajs)} episodes, {generated} tokens in {rollout_s:.1f} s")
        batch, _ = make_batch(trajs, cfg, policy.pad_token_id)
        gap_mean, gap_max = logprob_gap(policy, batch, cfg.rollout.train.temperature,
                                        args.micro_batch)
        learner = build_learner(cfg, policy)
        advantage(batch, cfg.algo)
        counter = PassCounter(learner, FlopModel.of(policy.model))
        _sync(args.device)
        t = time.perf_counter()
        stats = update(learner, batch, 0)
        _sync(args.device)
        update_s = time.perf_counter() - t
        work = counter.take()
        counter.close()
    tokens = int(batch.attention_mask.sum())
    peak = peak_tflops(args.device, args.peak_tflops)
    achieved = work.flops / update_s / 1e12
    return {
        "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
        "parameters_b": params / 1e9, "episodes": len(trajs),
        "turns": sum(tr.num_turns for tr in trajs), "generated_tokens": generated,
        "rollout_s": rollout_s, "rollout_tokens_per_s": generated / rollout_s,
        "update_rows": batch.num_rows, "update_tokens": tokens, "update_s": update_s,
        "update_tokens_per_s": tokens / update_s,
        "update_shared_tokens": work.shared_tokens, "update_tflop": work.flops / 1e12,
        "update_tflops": achieved,
        "peak_tflops": peak, "mfu": achieved / peak if peak else None,
        "peak_memory_gb": peak_memory_gb(args.device),
        "logprob_gap_mean": gap_mean, "logprob_gap_max": gap_max,
        "skipped_updates": stats["skipped_updates"],
        "total_s": time.perf_counter() - start, "loadavg": list(os.getloadavg()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="2 layers, hidden 64 (CI)")
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="the device's dense bf16 peak (default: a table by name)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if args.episodes % 4:
        parser.error("--episodes must be a multiple of 4 (groups of 4)")
    report = run(args)
    if args.json:
        print(json.dumps(report))
        return
    for key, value in report.items():
        print(f"{key:>22}: {value:.4g}" if isinstance(value, float) else f"{key:>22}: {value}")


if __name__ == "__main__":
    main()
