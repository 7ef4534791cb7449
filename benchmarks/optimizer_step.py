"""One AdamW step over SmolLM2-135M's weights: torch's default (for-each) implementation vs
the fused kernel the trainers use (`tripod.train.common.adamw`).

    python benchmarks/optimizer_step.py [--model smollm2-135m|tiny|PATH] [--threads 2]
        [--repeats 5]

Random gradients on every weight; one untimed step each, then the mean of `--repeats`
steps. Prints both times, the ratio, the largest difference between the two updated weight
sets after the timed steps (the same update up to float rounding), and the load average.
"""

from __future__ import annotations

import argparse
import time

import torch
from _common import command_line, loadavg

from tripod.policy import load_policy
from tripod.train.common import adamw


def _time_steps(opt: torch.optim.Optimizer, repeats: int) -> float:
    opt.step()  # untimed: allocates the moments
    start = time.perf_counter()
    for _ in range(repeats):
        opt.step()
    return (time.perf_counter() - start) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    before = loadavg()
    model = load_policy(args.model, seed=0).model
    start = [p.detach().clone() for p in model.parameters()]
    grads = [torch.randn_like(p) * 1e-3 for p in start]
    seconds, results = {}, {}
    for name in ("default", "fused"):
        params = [torch.nn.Parameter(p.clone()) for p in start]
        for p, g in zip(params, grads):
            p.grad = g
        opt = (torch.optim.AdamW(params, lr=1e-5) if name == "default"
               else adamw(params, lr=1e-5))
        seconds[name] = _time_steps(opt, args.repeats)
        results[name] = params
    gap = max(float((a - b).abs().max()) for a, b in zip(results["default"], results["fused"]))
    n = sum(p.numel() for p in start)
    print(f"command: {command_line()}")
    print(f"setup: {args.model} ({n / 1e6:.1f}M weights), fp32, {args.threads} torch threads, "
          f"{args.repeats} timed steps each; loadavg before={before} after={loadavg()}")
    print(f"AdamW step: default {seconds['default']:.3f} s, fused {seconds['fused']:.3f} s "
          f"(x{seconds['fused'] / seconds['default']:.2f}); largest weight difference "
          f"{gap:.2e}")


if __name__ == "__main__":
    main()
