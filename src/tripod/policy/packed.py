"""A micro-batch in one forward pass: shared prefixes and rows' own tokens packed end to end.

`train.batch.decoder_hidden` runs the prefix a group's rows share once and each row's own
tokens after it. Run as separate forward passes, every pass computes its own gradient for
every weight, and autograd adds them up: one full-size gradient sum per extra pass (on a
2-core CPU with little memory bandwidth, about as costly as a pass's arithmetic for short
rows; measured in docs/performance.md), plus each pass's host overhead. Here the
micro-batch's segments (each cluster's prefix, each row's own tokens) are laid end to end
in one sequence [1, S]: the linear layers, norms and LM head run once over all of it, and
only attention is computed segment by segment (`PackedSegments.attend`): a prefix attends
causally to itself, a row's own tokens to their cluster's whole prefix and causally to
themselves. Each segment's rotary positions are those of its unpacked row.

The attention is reached through transformers' attention registry: `sdpa` is registered
as `attention`, which computes the packed attention when the forward pass carries a
`tripod_packing` argument (any object with this `attend`: the rollout's packed prefill,
`policy.sampler._PackedPrefill`, is the other) (transformers hands extra forward arguments down to the
attention function) and is transformers' own `sdpa` otherwise. Models whose attention is not
`sdpa` run their rows whole, unpacked (`supports_packing`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

KWARG = "tripod_packing"
"""The forward argument that carries a `PackedSegments` down to the attention."""


@dataclass
class Segment:
    """Tokens [start, start + length) of the packed sequence. `prefix`: the segment whose
    keys it sees whole before its own (its cluster's shared prefix), or None."""

    start: int
    length: int
    prefix: Segment | None = None
    position: int = 0
    """Position id of its first token in its unpacked row."""


@dataclass
class PackedSegments:
    """The segments of one packed pass, in packed order (they tile [0, S) without gaps)."""

    segments: list[Segment] = field(default_factory=list)
    saved: int = 0
    """Prefix tokens that ran once instead of once per row (for benchmarks)."""

    def add(self, length: int, prefix: Segment | None = None) -> Segment:
        seg = Segment(self.total, length, prefix, prefix.length if prefix is not None else 0)
        self.segments.append(seg)
        return seg

    @property
    def total(self) -> int:
        return self.segments[-1].start + self.segments[-1].length if self.segments else 0

    def position_ids(self, device) -> Tensor:
        """[1, S]: each token's position in its unpacked row."""
        return torch.cat([torch.arange(s.position, s.position + s.length, device=device)
                          for s in self.segments])[None]

    def attend(self, query: Tensor, key: Tensor, value: Tensor, scaling: float | None,
               module=None) -> Tensor:
        """query [1, Hq, S, D], key / value [1, Hkv, S, D] -> output [1, S, Hq, D]. (`module`,
        the attention layer, is not needed here; the rollout's packed prefill reads its
        `layer_idx`.)"""
        gqa = query.shape[1] != key.shape[1]
        out = []
        for seg in self.segments:
            sl = slice(seg.start, seg.start + seg.length)
            q, k, v = query[:, :, sl], key[:, :, sl], value[:, :, sl]
            if seg.prefix is None:
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scaling,
                                                   enable_gqa=gqa)
            else:
                p = slice(seg.prefix.start, seg.prefix.start + seg.prefix.length)
                k = torch.cat([key[:, :, p], k], dim=2)
                v = torch.cat([value[:, :, p], v], dim=2)
                mask = _prefix_causal_mask(seg.prefix.length, seg.length, q.dtype, q.device)
                o = masked_attention(q, k, v, mask, scaling, expand_kv=q.device.type == "cuda")
            out.append(o)
        return torch.cat(out, dim=2).transpose(1, 2)


def masked_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scaling: float | None,
                     expand_kv: bool) -> Tensor:
    """SDPA with an additive mask, query heads [1, Hq, n, D] over key heads [1, Hkv, m, D].
    With `expand_kv` the key and value heads are repeated to Hq first: on CUDA, a mask
    together with `enable_gqa` rules out the memory-efficient kernel and falls back to the
    math kernel (which keeps fp32 scores [Hq, n, m]); repeated heads keep it eligible. On the
    CPU the flash kernel takes both, so nothing is repeated there. Either way the result is
    the same (tested)."""
    groups = q.shape[1] // k.shape[1]
    if expand_kv and groups > 1:
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scaling,
                                          enable_gqa=q.shape[1] != k.shape[1])


def _prefix_causal_mask(prefix: int, n: int, dtype: torch.dtype, device) -> Tensor:
    """Additive mask [n, prefix + n]: every prefix key, then causal over the segment's own."""
    own = torch.arange(n, device=device)
    allowed = torch.cat([torch.ones(n, prefix, dtype=torch.bool, device=device),
                         own[None, :] <= own[:, None]], dim=1)
    return torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill_(
        ~allowed, torch.finfo(dtype).min)


def attention(module, query: Tensor, key: Tensor, value: Tensor, attention_mask, *args,
              **kwargs):
    """transformers' `sdpa`, or the packed attention when the pass carries a packing."""
    packing = kwargs.pop(KWARG, None)
    if packing is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, *args, **kwargs)
    return packing.attend(query, key, value, kwargs.get("scaling"), module), None


AttentionInterface.register("sdpa", attention)


def supports_packing(decoder) -> bool:
    """True when the decoder's attention is transformers' `sdpa` (reached through the
    registry), so a packed pass computes its attention segment by segment."""
    config = getattr(decoder, "config", None)
    return getattr(config, "_attn_implementation", None) == "sdpa"
