"""Would drafts from the context speed up decoding? Verify-step costs measured, a run's
trajectories replayed.

    python benchmarks/draft_replay.py --model PATH --run RUN_DIR [--rows 16] [--context 600]
        [--max-draft 4] [--repeats 5] [--threads 2] [--json] [--tiny]

Prompt-lookup decoding proposes, for each row, the tokens that followed the latest earlier
occurrence of its last two tokens in its own context, and checks them in one forward pass
of 1 + k tokens per row; the speculative sampling rule (accept a drafted token d with
probability p(d), else draw from p without d) keeps the sampled distribution unchanged. It
pays off only if a verify step of k + 1 tokens per row costs less than the steps it saves.
The script measures both sides:

1. **Verify-step cost**: a KV arena of `--rows` rows holding `--context` random tokens each
   (the sampler's `KVArena`, filled by its packed prefill); a step of Q = 1 .. k + 1 tokens
   per row is timed in alternating order over `--repeats` rounds (medians). Q = 1 is the
   sampler's own decode step (`sampler._forward`). Q > 1 runs the same decoder with an
   attention (`_VerifyAttention`) that writes the new keys into the arena and attends with
   SDPA's grouped-query mode and a per-row causal mask, so no key or value is copied (with
   Q > 1 transformers' `sdpa` repeats every key and value head first); the LM head runs on
   all Q positions. A 2-token step through the sampler's `_forward` (transformers' `sdpa`)
   is timed in the same rounds for comparison. Printed as seconds and as a multiple of the
   Q = 1 step.
2. **Replay**: the episodes of `--run`'s training iterations (`trajectories/iter_*`), their
   contexts rebuilt token for token as the rollout engine builds them (the chat template's
   first prompt, each turn's sampled ids, the template delta and the observation). The
   turns at the same index of one iteration file form a batch (the engine decodes an
   iteration's episodes together). For each draft length k = 0 .. `--max-draft` a batch is
   decoded step by step: the first token comes from the prefill, then every step each live
   row drafts up to k tokens by prompt lookup (never past its action's last token); the
   drafted tokens up to the first one that differs from what the policy really sampled are
   accepted, plus one drawn token. Replaying recorded samples gives the acceptance counts
   the speculative rule would give in distribution (a drafted token is accepted with
   probability p(d), the probability the policy sampled d). A step's cost is the measured
   cost of Q = 1 + the longest draft among its live rows (rows are padded to it); printed:
   batched steps, row steps and the summed cost in units of a plain step, against k = 0.

The load average is printed before and after. `--tiny` is a reduced run for tests (tiny
model, a synthetic run directory made by the caller); its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
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

from tripod.core.config import load_config
from tripod.policy import packed, sampler
from tripod.policy.chat import build_messages, render_prompt_ids, turn_delta_text
from tripod.policy.models import load_policy
from tripod.report.records import read_trajectories


class _VerifyAttention:
    """A verify step's attention over the arena (`policy.packed` hands it query, key and value
    after the rotary embedding): the sampler's own arena cache writes row b's Q new keys at
    positions[b] of its slot and returns the slots' keys; each query then attends over its
    slot's positions 0..its own, grouped-query heads unrepeated."""

    def __init__(self, arena: sampler.KVArena, rows: int, positions: torch.Tensor) -> None:
        kv_len = int(positions.max()) + 1
        self.cache = arena.cache(torch.arange(rows, device=arena.device), positions, kv_len)
        self.mask = sampler._attention_mask(positions, kv_len, arena.dtype)        # [B, 1, Q, K]

    def attend(self, query, key, value, scaling, module):
        keys, values = self.cache.update(key, value, module.layer_idx)             # [B, H, K, D]
        out = F.scaled_dot_product_attention(query, keys, values, attn_mask=self.mask,
                                             scale=scaling, enable_gqa=True)
        return out.transpose(1, 2)                                                 # [B, Q, H, D]


@torch.no_grad()
def _step(model, arena: sampler.KVArena, lengths: list[int], q: int, vocab: int,
          through_hf: bool = False) -> float:
    """Seconds of one step of q tokens per row at positions lengths[b] .. + q - 1 (the arena's
    row lengths are left as they are: the written keys are overwritten by the next step).
    `through_hf`: q > 1 through the sampler's `_forward` too (transformers' `sdpa`, logits
    at one position per row)."""
    rows = len(lengths)
    positions = torch.tensor([[n + j for j in range(q)] for n in lengths])
    ids = torch.randint(5, vocab, (rows, q))
    start = time.perf_counter()
    if q == 1 or through_hf:
        sampler._forward(model, arena, list(range(rows)), ids, positions,
                         torch.zeros(rows, dtype=torch.long))
    else:
        hidden = model.get_decoder()(
            input_ids=ids, position_ids=positions, use_cache=False,
            attention_mask=torch.zeros(1, 1, 1, 1, dtype=arena.dtype),
            **{packed.KWARG: _VerifyAttention(arena, rows, positions)}).last_hidden_state
        model.get_output_embeddings()(hidden).float()
    return time.perf_counter() - start


def step_costs(model, rows: int, context: int, max_q: int, repeats: int
               ) -> dict[str, list[float]]:
    """Seconds of steps of Q = 1..max_q tokens per row over `context` cached tokens (keys
    "1".."max_q"), and of a 2-token step through transformers' `sdpa` ("2-hf"), each round
    in alternating order."""
    vocab = model.config.vocab_size
    rng = random.Random(0)
    arena = sampler.KVArena(model, rows, context + max_q + 1)
    states = [sampler.RowState() for _ in range(rows)]
    arena.assign(states)
    new_ids = [[rng.randrange(5, vocab) for _ in range(context)] for _ in range(rows)]
    sampler._prefill_packed(model, arena, states, new_ids, list(range(rows)), [None] * rows)
    lengths = [s.length for s in states]
    kinds = [str(q) for q in range(1, max_q + 1)] + ["2-hf"]

    def step(kind: str) -> float:
        return _step(model, arena, lengths, int(kind[0]), vocab, kind.endswith("-hf"))

    for kind in kinds:  # warm-up
        step(kind)
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    for r in range(repeats):
        for kind in (kinds if r % 2 == 0 else kinds[::-1]):
            times[kind].append(step(kind))
    for s in states:
        s.release()
    return times


# -- replay -------------------------------------------------------------------------------------
def lookup(context: list[int], k: int, ngram: int = 2) -> list[int]:
    """Up to k tokens that followed the latest earlier occurrence of the context's last
    `ngram` tokens ([] when there is none)."""
    if k <= 0 or len(context) <= ngram:
        return []
    key = context[-ngram:]
    for s in range(len(context) - ngram - 1, -1, -1):
        if context[s:s + ngram] == key:
            return context[s + ngram:s + ngram + k]
    return []


def replay_batches(run: Path, tokenizer) -> list[list[tuple[list[int], list[int]]]]:
    """Per (iteration file, turn index): the (context before the action, sampled action ids)
    of every episode that played that turn, contexts rebuilt as the rollout engine does."""
    cfg = load_config(run / "config.yaml")
    eos_text = tokenizer.eos_token
    files = sorted((run / "trajectories").glob("iter_*.jsonl*"))
    if not files:
        raise SystemExit(f"no training trajectories under {run / 'trajectories'}")
    batches: dict[tuple[int, int], list[tuple[list[int], list[int]]]] = {}
    for f_idx, path in enumerate(files):
        for ep in read_trajectories(path):
            ctx = render_prompt_ids(tokenizer, build_messages(
                cfg.prompt, ep.objective, ep.first_observation, []))
            for t_idx, turn in enumerate(ep.turns):
                if turn.tokens is None or not turn.tokens.ids:
                    break
                ids = list(turn.tokens.ids)
                batches.setdefault((f_idx, t_idx), []).append((list(ctx), ids))
                delta = turn_delta_text(tokenizer, cfg.prompt, ep.objective,
                                        ep.first_observation, turn.observation or "", eos_text)
                ctx = ctx + ids + tokenizer(delta, add_special_tokens=False)["input_ids"]
    return list(batches.values())


def replay(batches, k: int, cost: dict[int, float]) -> dict:
    """Batched decode steps with drafts of up to k tokens (see the module's docstring)."""
    steps = row_steps = accepted = 0
    total = 0.0
    for rows in batches:
        done = [1] * len(rows)                     # tokens emitted (the first from the prefill)
        while True:
            live = [i for i, (_, ids) in enumerate(rows) if done[i] < len(ids)]
            if not live:
                break
            q = 1
            for i in live:
                ctx, ids = rows[i]
                draft = lookup(ctx + ids[:done[i]], min(k, len(ids) - done[i]))
                q = max(q, 1 + len(draft))
                j = 0
                while j < len(draft) and draft[j] == ids[done[i] + j]:
                    j += 1
                accepted += j
                done[i] = min(len(ids), done[i] + j + 1)
                row_steps += 1
            steps += 1
            total += cost[q]
    return {"draft": k, "steps": steps, "row_steps": row_steps, "accepted": accepted,
            "cost": total}


def run(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    load_before = loadavg()
    policy = load_policy(args.model)
    model = policy.model.eval()
    peaks = [matmul_peak()]
    progress(f"verify steps: {args.rows} rows, {args.context} cached tokens, "
             f"Q = 1..{args.max_draft + 1}")
    times = step_costs(model, args.rows, args.context, args.max_draft + 1, args.repeats)
    peaks.append(matmul_peak())
    medians = {kind: statistics.median(ts) for kind, ts in times.items()}
    cost = {kind: medians[kind] / medians["1"] for kind in medians}
    batches = replay_batches(Path(args.run), policy.tokenizer)
    by_q = {int(kind): c for kind, c in cost.items() if kind.isdigit()}
    replays = [replay(batches, k, by_q) for k in range(args.max_draft + 1)]
    base = replays[0]["cost"]
    for r in replays:
        r["relative_cost"] = r["cost"] / base if base else float("nan")
    return {"command": command_line(), "machine": machine_facts(load_before),
            "matmul_peak_gflops": peaks, "rows": args.rows, "context": args.context,
            "step_s": times, "step_median_s": medians, "step_cost": cost,
            "batches": len(batches), "rows_replayed": sum(len(b) for b in batches),
            "action_tokens": sum(len(ids) for b in batches for _, ids in b),
            "replay": replays}


def _print(report: dict) -> None:
    print_header(report)
    print(f"verify steps ({report['rows']} rows, {report['context']} cached tokens each; "
          f"medians of {len(report['step_s']['1'])} rounds):")
    for kind, s in report["step_median_s"].items():
        label = f"Q={kind[0]}" + (" through transformers' sdpa" if kind.endswith("-hf") else "")
        print(f"  {label}: {s * 1000:7.1f} ms  = {report['step_cost'][kind]:.2f} plain steps")
    print(f"replay: {report['batches']} batches (iteration file x turn), "
          f"{report['action_tokens']} action tokens")
    print(f"  {'draft k':>7} {'steps':>6} {'row steps':>9} {'accepted':>8} "
          f"{'cost (plain steps)':>18} {'vs k=0':>7}")
    for r in report["replay"]:
        print(f"  {r['draft']:>7} {r['steps']:>6} {r['row_steps']:>9} {r['accepted']:>8} "
              f"{r['cost']:>18.1f} {r['relative_cost']:>7.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="runs/quickstart/sft")
    parser.add_argument("--run", default="runs/quickstart",
                        help="a run directory with config.yaml and trajectories/iter_*")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--context", type=int, default=600, help="cached tokens per row")
    parser.add_argument("--max-draft", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    output_flags(parser)
    args = parser.parse_args()
    if args.tiny:
        args.rows, args.context, args.repeats, args.max_draft = 3, 24, 1, 2
    emit(run(args), args.json, _print)


if __name__ == "__main__":
    main()
