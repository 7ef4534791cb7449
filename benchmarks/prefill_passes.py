"""The rollout's prefill, packed against padded, on the same turns.

    python benchmarks/prefill_passes.py [--model smollm2-135m|tiny|PATH] [--rows 16]
        [--budgets 1024 2048 4096] [--repeats 3] [--threads 2] [--json] [--tiny]

Each round plays the same synthetic turns into a fresh KV arena of `--rows` rows (random
token ids, seeded): a first turn of prompts of 264-377 tokens (the quickstart's w2-o3-q4
first prompts), then `--later` turns of 26-120 new tokens per row over the cached context
(what a turn's observation and template glue add). It prefills them

- `padded`: rows of similar length in right-padded passes (`_prefill_padded`, what every
  model used before the packed prefill and what models without `sdpa` still use);
- `packed-N`: all rows' new tokens end to end in passes of at most N tokens
  (`_prefill_packed`, the default with N = `sampler._PACKED_TOKENS`).

Modes run in alternating order each round (A B C, C B A, ...) so drift in the machine's speed
hits all of them. Printed per mode: median seconds of the first turn and of a later turn, the
model's GFLOP/s on them (linear layers and LM head of the real tokens, attention left out),
and that as a share of the fp32 matmul peak measured at the start and end (`torch.mm`). The
load average is printed with them. `--tiny` is a reduced run for tests; its numbers mean
nothing.
"""

from __future__ import annotations

import argparse
import random
import time

import torch
from _common import (
    command_line,
    emit,
    loadavg,
    machine_facts,
    matmul_peak,
    output_flags,
    print_header,
    progress,
)

from tripod.policy import sampler
from tripod.policy.models import load_policy


def _turns(rows: int, later: int, seed: int, first: tuple[int, int], each: tuple[int, int],
           vocab: int) -> list[list[list[int]]]:
    rng = random.Random(seed)
    lengths = [[rng.randint(*first) for _ in range(rows)]]
    lengths += [[rng.randint(*each) for _ in range(rows)] for _ in range(later)]
    return [[[rng.randrange(5, vocab) for _ in range(n)] for n in turn] for turn in lengths]


@torch.no_grad()
def play(model, turns: list[list[list[int]]], mode: str) -> list[float]:
    """Seconds of each turn's prefill in a fresh arena."""
    rows = [sampler.RowState() for _ in turns[0]]
    capacity = sum(max(map(len, t)) for t in turns)
    arena = sampler.KVArena(model, len(rows), capacity)
    arena.assign(rows)
    todo = list(range(len(rows)))
    seconds, default = [], sampler._PACKED_TOKENS
    for new_ids in turns:
        logits = [None] * len(rows)
        start = time.perf_counter()
        if mode == "padded":
            sampler._prefill_padded(model, arena, rows, new_ids, todo, logits, pad_id=0)
        else:
            sampler._PACKED_TOKENS = int(mode.split("-")[1])
            try:
                sampler._prefill_packed(model, arena, rows, new_ids, todo, logits)
            finally:
                sampler._PACKED_TOKENS = default
        seconds.append(time.perf_counter() - start)
    for r in rows:
        r.release()
    return seconds


def _gflop(model, tokens: int) -> float:
    """Linear layers of `tokens` tokens plus the LM head once per row (no attention)."""
    cfg = model.config
    h, i, layers = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    kv = h // cfg.num_attention_heads * cfg.num_key_value_heads
    per_token = layers * 2 * (h * h * 2 + h * kv * 2 + 3 * h * i)
    return per_token * tokens / 1e9


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def run(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    load_before = loadavg()
    model = load_policy(args.model).model.eval()
    vocab = model.config.vocab_size
    first, each = ((264, 377), (26, 120)) if not args.tiny else ((20, 40), (3, 12))
    turns = _turns(args.rows, args.later, 0, first, each, vocab)
    modes = ["padded"] + [f"packed-{b}" for b in args.budgets]
    peaks = [matmul_peak()]
    play(model, turns[:2], modes[-1])  # warm-up
    times: dict[str, list[list[float]]] = {m: [] for m in modes}
    loads: dict[str, list[float]] = {m: [] for m in modes}
    for r in range(args.repeats):
        for m in (modes if r % 2 == 0 else modes[::-1]):
            loads[m].append(loadavg()[0])
            times[m].append(play(model, turns, m))
            progress(f"{m} (round {r + 1}): {[round(s, 2) for s in times[m][-1]]}")
    peaks.append(matmul_peak())
    peak = sum(peaks) / 2
    tokens = [sum(map(len, t)) for t in turns]
    results = {}
    for m in modes:
        first_s = _median([t[0] for t in times[m]])
        later_s = _median([s for t in times[m] for s in t[1:]])
        later_tokens = sum(tokens[1:]) / max(len(tokens) - 1, 1)
        results[m] = {
            "first_turn_s": first_s, "later_turn_s": later_s,
            "first_gflops": _gflop(model, tokens[0]) / first_s,
            "later_gflops": _gflop(model, later_tokens) / later_s,
            "runs": times[m], "loadavg": loads[m]}
        for k in ("first", "later"):
            results[m][f"{k}_of_peak"] = results[m][f"{k}_gflops"] / peak
    return {"command": command_line(), "machine": machine_facts(load_before),
            "matmul_peak_gflops": peaks, "rows": args.rows, "turn_tokens": tokens,
            "modes": results, "default_budget": sampler._PACKED_TOKENS}


def _print(report: dict) -> None:
    print_header(report)
    t = report["turn_tokens"]
    print(f"turns: {report['rows']} rows; first turn {t[0]} tokens, later turns "
          f"{min(t[1:])}-{max(t[1:])} tokens (medians over rounds and later turns)")
    print(f"  {'mode':>12} {'first s':>8} {'GFLOP/s':>8} {'of peak':>8} {'later s':>8} "
          f"{'GFLOP/s':>8} {'of peak':>8} {'load':>10}")
    for name, r in report["modes"].items():
        print(f"  {name:>12} {r['first_turn_s']:8.2f} {r['first_gflops']:8.1f} "
              f"{r['first_of_peak']:8.0%} {r['later_turn_s']:8.2f} {r['later_gflops']:8.1f} "
              f"{r['later_of_peak']:8.0%} {min(r['loadavg']):4.1f}-{max(r['loadavg']):.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--later", type=int, default=4, help="turns after the first")
    parser.add_argument("--budgets", type=int, nargs="+", default=[1024, 2048, 4096])
    parser.add_argument("--repeats", type=int, default=3)
    output_flags(parser)
    args = parser.parse_args()
    if args.tiny:
        args.model, args.rows, args.later, args.repeats = "tiny", 4, 2, 1
        args.budgets = [16, 2048]
    report = run(args)
    emit(report, args.json, _print)


if __name__ == "__main__":
    main()
