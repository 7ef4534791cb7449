"""Data-parallel training on torch.distributed: DDP-style gradient all-reduce or FSDP2 shards.

Launch any training command with `torchrun --nproc_per_node N -m tripod.cli train ...`;
`init_parallel` reads torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK) and joins the
process group (gloo on CPU, NCCL on CUDA). Without those variables it returns the
single-process `Parallel`, whose every method is the identity, so the one-process path is
the reference and nothing in the loop branches on the world size.

How the work is split (and why it stays exact):
- Rollouts: rank r plays the groups g with g % world == r (`share`), whole groups, so a
  group baseline never straddles two processes; `gather` then gives every rank all
  trajectories in job order. Everything after (rewards, advantages, the normalisation of
  advantages over the batch) is computed on that global batch, identically on every rank.
- Update: every rank draws the same minibatch order and computes the normaliser of the
  WHOLE minibatch; rank r runs micro-batches r, r + world, ...; their gradients are summed
  across ranks (`reduce_gradients`, SUM: each micro-loss is already divided by the whole
  minibatch's normaliser). The sum is the one-process gradient up to float summation order.
- Skips: a rank that sees a non-finite value makes every rank skip the step (`agree`).

Why a hand-written all-reduce and not the `DistributedDataParallel` wrapper: the wrapper
averages (we need the sum), needs every rank to run the same number of backward passes
(a minibatch's micro-batches do not always divide evenly) and hides the HF model behind
`.module` (the sampler, LoRA's `disable_adapter` and the shared critic call into the HF
model). One bucketed all-reduce per optimizer step costs the same bytes; what it gives up
is overlapping communication with the backward pass.

FSDP2 (`cluster.fsdp: true`): each decoder layer (of the policy, the reference and a
copied critic) is `fully_shard`ed, so those parameters, gradients and optimizer states are
split across ranks. Its forward and backward
passes communicate, so all ranks must run the same number of them: `lockstep` pads a
rank's share of micro-batches with zero-weight copies and a non-finite micro-batch does not
end the accumulation early. FSDP already reduce-scatters gradients, summed here by setting
a loss weight of world_size (FSDP averages; gloo cannot run the pre-scaled sum FSDP uses
for a divide factor of 1). Only the decoder layers are sharded (they hold most of the
weights: 1.31 of Qwen2.5-1.5B's 1.54 billion parameters); the embeddings, final norm and
head stay replicated and are all-reduced like DDP's, because the trainer calls the decoder
and the head separately and FSDP's hooks only run around a sharded module's own forward.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")

SKIP_REASONS = ("logits", "advantages", "loss", "gradient")
"""Skip reasons in the order `agree` ranks them (a code per reason; any rank's wins)."""

COLLECTIVE_TIMEOUT = timedelta(hours=2)
"""How long a rank waits in a collective. Rank 0 evaluates alone while the others wait at
the next gather; NCCL's default (10 minutes) would abort a run during a long evaluation."""

_BUCKET_ELEMENTS = 32 * 1024 * 1024
"""Gradient elements per all-reduce (128 MiB of fp32): few calls, bounded extra memory."""


@dataclass
class Parallel:
    """This process's place among the data-parallel ranks (one process: rank 0 of 1)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    fsdp: bool = False
    """Parameters are FSDP2-sharded (ranks must run forwards and backwards in lockstep)."""

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """The rank that logs, records trajectories, evaluates and saves checkpoints."""
        return self.rank == 0

    # -- rollouts -------------------------------------------------------------------------
    def share(self, items: list[T]) -> list[T]:
        """This rank's items: every world_size-th one, starting at its rank."""
        return items[self.rank::self.world_size]

    def gather(self, items: list[T]) -> list[list[T]]:
        """Every rank's list (picklable objects), in rank order; [items] on one process."""
        if not self.enabled:
            return [items]
        out: list[list[T] | None] = [None] * self.world_size
        dist.all_gather_object(out, items)
        return [o or [] for o in out]

    # -- the update's seams ---------------------------------------------------------------
    def micro_share(self, micros: list[T]) -> list[tuple[T, float]]:
        """This rank's micro-batches with their loss weights. Under FSDP the share is padded
        to the same count on every rank with weight-0 repeats (lockstep collectives)."""
        if not self.fsdp:
            return [(m, 1.0) for m in self.share(micros)]
        weight = float(self.world_size)  # FSDP averages the shards' gradients over ranks
        mine = [(m, weight) for m in self.share(micros)]
        per_rank = -(-len(micros) // self.world_size)
        return mine + [(micros[0], 0.0)] * (per_rank - len(mine))

    def reduce_gradients(self, params: list[torch.nn.Parameter]) -> None:
        """Sum the gradients of `params` over ranks. FSDP-sharded ones (DTensors) are
        reduced already; under FSDP the replicated ones carry the world_size loss weight,
        so their sum is divided by it."""
        if not self.enabled:
            return
        plain = [p for p in params if not _is_dtensor(p)]
        for p in plain:  # a rank with no micro-batch of this minibatch contributes zeros
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        for bucket in _buckets(plain):
            flat = torch.cat([p.grad.reshape(-1) for p in bucket])
            dist.all_reduce(flat, op=dist.ReduceOp.SUM)
            if self.fsdp:
                flat /= self.world_size
            offset = 0
            for p in bucket:
                n = p.numel()
                p.grad.copy_(flat[offset:offset + n].view_as(p.grad))
                offset += n

    def clip_grad_norm(self, params: list[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
        """Clip to a global gradient norm; returns the norm before clipping. Under FSDP the
        squared norms of the shards are summed over ranks, those of replicated parameters
        counted once."""
        if not self.fsdp:
            return torch.nn.utils.clip_grad_norm_(params, max_norm)
        grads = [p.grad for p in params if p.grad is not None]
        sharded = sum((g.to_local().float().pow(2).sum() for g in grads if _is_dtensor(g)),
                      torch.zeros((), device=self.device))
        dist.all_reduce(sharded, op=dist.ReduceOp.SUM)
        plain = sum((g.float().pow(2).sum() for g in grads if not _is_dtensor(g)),
                    torch.zeros(()))
        norm = (sharded.cpu() + plain.cpu()).sqrt()
        scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
        if torch.isfinite(norm):
            for g in grads:
                (g.to_local() if _is_dtensor(g) else g).mul_(scale.to(g.device))
        return norm

    def agree(self, reason: str | None) -> str | None:
        """The skip reason of the first rank (in `SKIP_REASONS` order) that has one."""
        if not self.enabled:
            return reason
        code = torch.tensor([SKIP_REASONS.index(reason) + 1 if reason else 0],
                            device=self.device)
        dist.all_reduce(code, op=dist.ReduceOp.MAX)
        return SKIP_REASONS[int(code) - 1] if int(code) else None

    def mean_stats(self, stats: dict[str, list[float]]) -> dict[str, list[float]]:
        """Every rank's per-micro-batch statistics, pooled (so rank 0 logs the global mean)."""
        if not self.enabled:
            return stats
        pooled: dict[str, list[float]] = {}
        for (part,) in self.gather([stats]):
            for k, v in part.items():
                pooled.setdefault(k, []).extend(v)
        return pooled

    def broadcast_module(self, module: torch.nn.Module) -> None:
        """Give every rank rank 0's parameters and buffers (equal starts, whatever the init:
        under `tripod train`, rank 0 alone ran SFT). Called before FSDP shards the module."""
        if not self.enabled:
            return
        tensors = list(module.parameters()) + list(module.buffers())
        if any(_is_dtensor(t) for t in tensors):
            raise RuntimeError("broadcast_module: the module is already sharded (broadcast "
                               "before fully_shard)")
        with torch.no_grad():
            for t in tensors:
                dist.broadcast(t.data, src=0)

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    @property
    def device(self) -> torch.device:
        """Where collectives' small tensors live (NCCL needs CUDA tensors)."""
        if dist.is_initialized() and dist.get_backend() == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")


def _is_dtensor(t: torch.Tensor) -> bool:
    return type(t).__name__ == "DTensor"


def _buckets(params: list[torch.nn.Parameter]) -> list[list[torch.nn.Parameter]]:
    """Parameters grouped (in order, by dtype and device) into buckets of bounded size."""
    out: list[list[torch.nn.Parameter]] = []
    size = 0
    for p in params:
        if not out or size + p.numel() > _BUCKET_ELEMENTS or (
                out[-1][0].dtype, out[-1][0].device) != (p.dtype, p.device):
            out.append([])
            size = 0
        out[-1].append(p)
        size += p.numel()
    return out


def launched_by_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def init_parallel(device: str, fsdp: bool = False) -> tuple[Parallel, str]:
    """Join torchrun's process group (if launched by it): (parallel, this rank's device).

    `device` is the recipe's `model.device`; with CUDA each rank takes `cuda:LOCAL_RANK`.
    A process group that is already initialised (a test's, or a second call) is reused.
    """
    if not launched_by_torchrun():
        return Parallel(fsdp=False), device
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    if device.startswith("cuda"):
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo",
                                timeout=COLLECTIVE_TIMEOUT)
    return Parallel(rank, world, local, fsdp and world > 1), device


def shutdown_parallel(parallel: Parallel) -> None:
    """Leave the process group (at the end of a torchrun job)."""
    if parallel.enabled and dist.is_initialized():
        dist.destroy_process_group()


def shard_layers(decoder: torch.nn.Module) -> None:
    """FSDP2: shard each layer of a decoder stack (in place); the rest stays replicated."""
    from torch.distributed.fsdp import fully_shard

    for layer in decoder.layers:
        fully_shard(layer)


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter whole, on every rank (a collective: all ranks call it together).
    Used to refresh the un-sharded rollout copy of an FSDP policy after an update."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
