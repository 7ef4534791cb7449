"""Peak resident memory while an RL checkpoint is saved: weights, AdamW moments and RNG states
written in place (today) vs every tensor cloned first (before 2026-12-03).

    python benchmarks/checkpoint_memory.py [--model smollm2-135m|tiny|PATH] [--out DIR]

Loads the model, takes one fused AdamW step on random gradients (the trainers' optimizer,
so its moments exist), frees the gradients as `update` does, then saves the learner's
checkpoint (`save_checkpoint`: model, trainer state, manifest) twice: once as the code does
now and once with the old copy of every trainer tensor. For each it prints the resident
memory before the save and the kernel's high-water mark during it (VmHWM, reset just before:
Linux), and the load average. Run it under the allocator you train with
(`LD_PRELOAD=.../libjemalloc.so.2 python benchmarks/checkpoint_memory.py`).
"""

from __future__ import annotations

import argparse
import gc
import tempfile
from pathlib import Path

import torch
from _common import command_line, loadavg

from tripod.policy import load_policy
from tripod.train import checkpoint as ck
from tripod.train.common import StagePeaks, adamw, resident_mb


def _clone_all(value: torch.Tensor, seen: set[int]) -> torch.Tensor:
    """The old encoder: every tensor copied before it is written."""
    return value.detach().cpu().contiguous().clone()


def _save_peak(policy, trainer: dict, path: Path) -> tuple[float, float]:
    gc.collect()
    before = resident_mb()
    peaks = StagePeaks()
    ck.save_checkpoint(path, policy, trainer, {"iteration": 1})
    return before, peaks.end("save")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--out", help="folder for the two checkpoints (default: a temporary one)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    load_before = loadavg()
    policy = load_policy(args.model, seed=0)
    params = [p for p in policy.model.parameters() if p.requires_grad]
    opt = adamw(params, lr=1e-5)
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    opt.step()
    opt.zero_grad(set_to_none=True)
    trainer = {"optimizer": opt.state_dict(), "critic": None}
    weights = sum(p.numel() * p.element_size() for p in params) / 2**20
    moments = sum(t.numel() * t.element_size() for st in opt.state.values()
                  for t in st.values()) / 2**20
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.out or tmp)
        now = _save_peak(policy, trainer, root / "in_place")
        original = ck._storable
        ck._storable = _clone_all
        try:
            old = _save_peak(policy, trainer, root / "cloned")
        finally:
            ck._storable = original
    print(f"command: {command_line()}")
    print(f"setup: {args.model}, fp32 weights {weights:,.0f} MB, AdamW moments {moments:,.0f} MB; "
          f"loadavg before={load_before} after={loadavg()}")
    for name, (before, peak) in (("in place (now)", now), ("cloned (before)", old)):
        print(f"save, {name}: resident before {before:,.0f} MB, peak during the save "
              f"{peak:,.0f} MB (+{peak - before:,.0f} MB)")


if __name__ == "__main__":
    main()
