"""Peak memory and time of one training forward + backward, with and without the padding mask.

`tripod.train.batch.decoder_mask` drops the attention mask of right-padded batches (the
model then skips building a [B, 1, T, T] mask and runs SDPA's causal path). This script runs the same right-padded batch (SmolLM2-135M by default, fp32, CPU) both ways, each
in a fresh subprocess so the peak resident memory of one does not hide the other's, and
prints peak RSS, time and the largest logprob difference between the two at real positions.

    python benchmarks/attention_memory.py --rows 4 --tokens 1500
    python benchmarks/attention_memory.py --model tiny --rows 2 --tokens 64   # smoke size
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import command_line, loadavg  # noqa: E402


def one_pass(model_name: str, rows: int, tokens: int, masked: bool, out: str) -> None:
    """Forward + backward of the batch; writes peak RSS (MB), seconds and the logprobs."""
    import torch

    from tripod.policy.models import load_policy
    from tripod.train import batch as tb

    torch.manual_seed(0)
    model = load_policy(model_name).model
    model.train()
    ids = torch.randint(5, 10_000, (rows, tokens))
    mask = torch.ones_like(ids)
    for r in range(1, rows):  # right padding: row r is shorter by r/rows of the length
        mask[r, tokens - tokens * r // (rows + 1):] = 0
    ids = ids.masked_fill(mask == 0, 0)
    if masked:  # force the padding mask through, as before decoder_mask existed
        tb.decoder_mask = lambda m: m
    t0 = time.perf_counter()
    logp, _, _ = tb.token_logprobs(model, ids, mask, 1.0, mask.float())
    logp.sum().backward()
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    Path(out).write_text(json.dumps({"peak_mb": peak, "seconds": seconds,
                                     "logp": logp.detach().tolist()}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=1500)
    ap.add_argument("--child", choices=["masked", "unmasked"], help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        one_pass(args.model, args.rows, args.tokens, args.child == "masked", args.out)
        return
    print(f"command: {command_line()}\nload average before: {loadavg()}")
    results = {}
    for how in ("masked", "unmasked"):
        out = Path(f"/tmp/attention_memory_{how}.json")
        subprocess.run([sys.executable, __file__, "--model", args.model, "--rows",
                        str(args.rows), "--tokens", str(args.tokens), "--child", how,
                        "--out", str(out)], check=True)
        results[how] = json.loads(out.read_text())
    a, b = results["masked"]["logp"], results["unmasked"]["logp"]
    gap = max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb))
    print(f"{args.model}, {args.rows} rows x {args.tokens} tokens (right-padded), fp32, "
          "forward + backward of token_logprobs")
    for how in ("masked", "unmasked"):
        r = results[how]
        print(f"  {how:9s} peak RSS {r['peak_mb']:8.0f} MB   {r['seconds']:6.1f} s")
    print(f"  largest logprob difference at loss positions: {gap:.2e}")
    print(f"load average after: {loadavg()}")


if __name__ == "__main__":
    main()
