"""Batched sampling over per-episode KV caches (the engine under `policy.rollout`).

Each episode keeps its own KV cache between turns (`RowState`). A turn first *extends* each
row with the tokens the model has not seen yet (one batch-1 forward per row: prefill is
compute-bound, so batching it gains little and would need padding), then *decodes* all rows
together: the per-row caches are left-padded with zeros into one batch, attention masks hide
the padding, and explicit position ids keep every row's positions exactly those of its
unpadded sequence. Decoding is where batching pays (batch-1 decoding is overhead-bound).

Logprobs are recorded from the tempered fp32 distribution `log_softmax(logits / T)`, the same
quantity the trainer recomputes with a teacher-forced forward pass. Nucleus (top-p) filtering
changes which token is drawn but not the recorded logprob (as in verl).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers import DynamicCache, PreTrainedModel

KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values [1, H, L, D]


@dataclass
class SamplingParams:
    """How actions are sampled. Training and evaluation each get their own instance."""

    temperature: float = 0.7
    """0 means greedy decoding."""
    top_p: float = 1.0
    max_new_tokens: int = 24
    """Cap on tokens per action; a turn that reaches it without the end-of-turn token is
    truncated (and ends the episode)."""

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass
class RowState:
    """One episode's KV cache and how many tokens it holds."""

    kv: KV | None = None
    length: int = 0
    last_logits: torch.Tensor | None = None  # [V] logits after the last cached token


@dataclass
class Sample:
    """One row's sampled action."""

    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    ended: bool = False
    """True when the end-of-turn token was sampled."""
    trainable: bool = True
    """False for scripted turns that must not be imitated (e.g. injected random actions)."""


def _cache_to_kv(cache: DynamicCache) -> KV:
    return [(layer.keys, layer.values) for layer in cache.layers]


@torch.no_grad()
def extend(model: PreTrainedModel, row: RowState, new_ids: list[int]) -> None:
    """Feed `new_ids` after the row's cached tokens (batch 1, no padding)."""
    if not new_ids:
        raise ValueError("extend needs at least one new token")
    device = next(model.parameters()).device
    ids = torch.tensor([new_ids], device=device)                           # [1, d]
    pos = torch.arange(row.length, row.length + len(new_ids), device=device)[None]
    cache = DynamicCache(ddp_cache_data=row.kv) if row.kv else DynamicCache()
    out = model(input_ids=ids, position_ids=pos, past_key_values=cache, use_cache=True,
                logits_to_keep=1)
    row.kv = _cache_to_kv(out.past_key_values)
    row.length += len(new_ids)
    row.last_logits = out.logits[0, -1].float()                             # [V]


def _batch_cache(rows: list[RowState]) -> tuple[DynamicCache, torch.Tensor]:
    """Left-pad every row's cache with zeros to the longest; mask [B, Lmax] hides padding."""
    lmax = max(r.length for r in rows)
    layers = []
    for li in range(len(rows[0].kv)):
        keys = torch.cat([F.pad(r.kv[li][0], (0, 0, lmax - r.length, 0)) for r in rows])
        vals = torch.cat([F.pad(r.kv[li][1], (0, 0, lmax - r.length, 0)) for r in rows])
        layers.append((keys, vals))                                         # [B, H, Lmax, D]
    mask = torch.zeros(len(rows), lmax, dtype=torch.long, device=layers[0][0].device)
    for i, r in enumerate(rows):
        mask[i, lmax - r.length:] = 1
    return DynamicCache(ddp_cache_data=layers), mask


def _draw(logits: torch.Tensor, params: SamplingParams,
          generators: list[torch.Generator]) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row; returns (tokens [B], logprobs [B])."""
    if params.greedy:
        logp = torch.log_softmax(logits, dim=-1)                            # [B, V]
        tokens = logp.argmax(dim=-1)
        return tokens, logp.gather(-1, tokens[:, None])[:, 0]
    logp = torch.log_softmax(logits / params.temperature, dim=-1)           # [B, V]
    probs = logp.exp()
    if params.top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        drop = sorted_p.cumsum(-1) - sorted_p > params.top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    # Inverse-CDF sampling with one generator per row: an episode's samples do not depend
    # on its batch neighbours (and it is much faster than torch.multinomial on CPU).
    cdf = probs.cumsum(dim=-1)                                               # [B, V]
    u = torch.cat([torch.rand(1, generator=g, dtype=cdf.dtype) for g in generators])
    tokens = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None])[:, 0]
    tokens = tokens.clamp(max=probs.shape[-1] - 1)
    return tokens, logp.gather(-1, tokens[:, None])[:, 0]


@torch.no_grad()
def decode(model: PreTrainedModel, rows: list[RowState], params: SamplingParams,
           generators: list[torch.Generator], eos_ids: tuple[int, ...],
           pad_id: int) -> list[Sample]:
    """Sample one action per row, all rows batched. Every row must have been `extend`ed.

    Afterwards each row's cache holds every sampled token except the last one, which the
    caller feeds at the start of the next turn.
    """
    device = rows[0].last_logits.device
    cache, mask = _batch_cache(rows)
    lengths = torch.tensor([r.length for r in rows], device=device)        # [B]
    logits = torch.stack([r.last_logits for r in rows])                    # [B, V]
    samples = [Sample() for _ in rows]
    active = torch.ones(len(rows), dtype=torch.bool, device=device)
    eos = torch.tensor(eos_ids, device=device)
    for step in range(params.max_new_tokens):
        tokens, logps = _draw(logits, params, generators)
        for i in torch.nonzero(active).flatten().tolist():
            samples[i].ids.append(int(tokens[i]))
            samples[i].logprobs.append(float(logps[i]))
        finished = active & torch.isin(tokens, eos)
        for i in torch.nonzero(finished).flatten().tolist():
            samples[i].ended = True
        active = active & ~finished
        if not active.any() or step == params.max_new_tokens - 1:
            break
        # Feed this step's tokens: active rows for real, finished rows as masked padding.
        fed = torch.where(active, tokens, torch.full_like(tokens, pad_id))
        mask = torch.cat([mask, active.long()[:, None]], dim=1)            # [B, L+1]
        pos = (lengths + step)[:, None]                                     # [B, 1]
        out = model(input_ids=fed[:, None], attention_mask=mask, position_ids=pos,
                    past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        logits = out.logits[:, -1].float()
    _split_cache(rows, cache, mask)
    return samples


def _split_cache(rows: list[RowState], cache: DynamicCache, mask: torch.Tensor) -> None:
    """Write each row's unpadded cache back (only positions its mask marks as real)."""
    kv = _cache_to_kv(cache)
    for i, row in enumerate(rows):
        keep = torch.nonzero(mask[i]).flatten()                            # [L_i']
        row.kv = [(k[i:i + 1, :, keep], v[i:i + 1, :, keep]) for k, v in kv]
        row.length = int(keep.numel())
        row.last_logits = None
