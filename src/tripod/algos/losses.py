"""Per-token objectives and their aggregation.

Every loss here returns a per-token tensor [B, T] that is to be MINIMISED (the policy loss
is the negative of PPO's surrogate objective). Turning it into a scalar is a separate,
named step, `aggregate`, so the choice of normaliser (token mean, sequence mean, constant)
is visible in the recipe rather than buried in a loss.

Masked-out positions (prompt, environment, pad tokens) are set to exactly 0 and never reach
``exp``, so garbage logprobs there cannot produce NaN gradients.

References: PPO (Schulman et al. 2017, arXiv 1707.06347); dual-clip PPO (Ye et al. 2020,
arXiv 1912.09729); KL estimators k1/k2/k3 (Schulman 2020, "Approximating KL divergence",
http://joschu.net/blog/kl-approx.html); Dr.GRPO's constant normaliser (Liu et al. 2025,
arXiv 2503.20783).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

_MAX_LOG_RATIO = 20.0
"""Log-ratios are clamped to +-20 before ``exp`` (exp(20) ~ 5e8): a finite, huge ratio
instead of inf. Only reached by tokens whose probability changed by a factor of ~1e8."""


def _masked_mean(x: Tensor, mask: Tensor) -> float:
    """Mean of `x` over `mask` as a Python float (0.0 for an empty mask); for logging."""
    m = mask.bool()
    n = int(m.sum())
    return float(torch.where(m, x, 0.0).sum() / n) if n else 0.0


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    loss_mask: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Clipped PPO surrogate per token (Schulman et al. 2017, eq. 7), to minimise.

    ``r = exp(logprobs - old_logprobs)``,
    ``loss = max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high))``.
    Separate `clip_low` / `clip_high` allow asymmetric ("clip-higher") ranges.

    Dual clip (Ye et al. 2020): for A < 0 the loss above grows without bound as r grows;
    with ``dual_clip = c > 1`` it is capped at ``c * |A|`` (= ``-c A``), so a single stale
    token with a huge ratio cannot dominate the update.

    Args:
        logprobs: [B, T] log pi(a_t | s_t) under the current policy (carries the gradient).
        old_logprobs: [B, T] log-probs under the policy that sampled the tokens.
        advantages: [B, T].
        loss_mask: [B, T], 1 on agent tokens.

    Returns:
        per-token loss [B, T] (0 off the mask) and stats: ``clip_fraction`` (tokens where
        the clipped term is active), ``dual_clip_fraction``, ``approx_kl`` (k3 estimate of
        KL(old || new), Schulman 2020) and ``ratio_mean``, all over agent tokens.
    """
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1 (Ye et al. 2020), got {dual_clip}")
    mask = loss_mask.bool()  # [B, T]
    log_ratio = torch.where(mask, logprobs - old_logprobs, 0.0)  # [B, T]
    ratio = torch.exp(log_ratio.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO))  # [B, T]
    unclipped = -advantages * ratio  # [B, T]
    clipped = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)  # [B, T]
    loss = torch.maximum(unclipped, clipped)  # [B, T]
    dual_active = torch.zeros_like(mask)
    if dual_clip is not None:
        cap = -dual_clip * advantages  # [B, T] = c |A| where A < 0
        dual_active = (advantages < 0) & (loss > cap)
        loss = torch.where(dual_active, cap, loss)
    loss = torch.where(mask, loss, 0.0)  # [B, T]
    with torch.no_grad():
        stats = {
            "clip_fraction": _masked_mean((clipped > unclipped).float(), mask),
            "dual_clip_fraction": _masked_mean(dual_active.float(), mask),
            "approx_kl": _masked_mean((ratio - 1.0) - log_ratio, mask),
            "ratio_mean": _masked_mean(ratio, mask),
        }
    return loss, stats


def kl_penalty(
    logprobs: Tensor, ref_logprobs: Tensor, kind: Literal["k1", "k2", "k3"] = "k1"
) -> Tensor:
    """Per-token estimate of KL(pi || pi_ref) from samples of pi (Schulman 2020), [B, T].

    - k1 = log pi - log pi_ref (unbiased, high variance, can be negative);
    - k2 = 0.5 (log pi - log pi_ref)^2 (biased, low variance, >= 0);
    - k3 = exp(d) - d - 1 with d = log pi_ref - log pi (unbiased, >= 0). d is clamped to
      +-20 and k3 to at most 10 (as in verl) so one far-off token cannot blow up the loss.

    Not masked: aggregate it with `aggregate` (which ignores masked positions).
    """
    diff = logprobs - ref_logprobs  # [B, T]
    if kind == "k1":
        return diff
    if kind == "k2":
        return 0.5 * diff.square()
    if kind == "k3":
        d = (-diff).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)  # [B, T]
        return (torch.exp(d) - d - 1.0).clamp(max=10.0)
    raise ValueError(f"unknown KL estimator {kind!r}; valid: k1, k2, k3")


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of the softmax over the last dim: [B, T, V] -> [B, T].

    ``H = logsumexp(z) - sum_v softmax(z)_v z_v`` (avoids materialising log-softmax).
    """
    probs = torch.softmax(logits, dim=-1)  # [B, T, V]
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(-1)  # [B, T]


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    loss_mask: Tensor,
    clip: float | None = 0.2,
) -> Tensor:
    """PPO's clipped value loss per token, to minimise: [B, T] (0 off the mask).

    ``v_clip = old + clip(v - old, -clip, clip)``,
    ``loss = 0.5 max((v - R)^2, (v_clip - R)^2)``; with ``clip=None``, ``0.5 (v - R)^2``.
    """
    loss = (values - returns).square()  # [B, T]
    if clip is not None:
        v_clipped = old_values + (values - old_values).clamp(-clip, clip)  # [B, T]
        loss = torch.maximum(loss, (v_clipped - returns).square())
    return torch.where(loss_mask.bool(), 0.5 * loss, 0.0)


def aggregate(
    per_token: Tensor,
    loss_mask: Tensor,
    mode: Literal["token_mean", "seq_mean", "constant"] = "token_mean",
    normaliser: float | None = None,
) -> Tensor:
    """Reduce a per-token loss [B, T] to a scalar over the masked tokens.

    - ``token_mean``: ``sum(x m) / (normaliser or sum(m))`` - every token weighs the same.
    - ``seq_mean``: mean over rows of each row's token mean; the default denominator is the
      number of rows with at least one agent token, `normaliser` overrides it.
    - ``constant``: ``sum(x m) / normaliser`` with a fixed normaliser (e.g. rows x max
      tokens, Dr.GRPO), so a sequence's length does not rescale its tokens' gradients.

    Micro-batching: to get exactly the gradient of one big minibatch when it is split into
    micro-batches whose losses are summed (gradient accumulation), pass the normaliser of
    the WHOLE minibatch to every micro-batch (`loss_normaliser`): its total ``sum(m)`` for
    token_mean, its number of non-empty rows for seq_mean. Without it each micro-batch divides by its own count
    and tokens in short micro-batches are over-weighted.
    """
    mask = loss_mask.bool()  # [B, T]
    masked = torch.where(mask, per_token, 0.0)  # [B, T]; where, not *, so NaN off-mask is safe
    if mode == "token_mean":
        denom = normaliser if normaliser is not None else mask.sum().clamp(min=1)
        return masked.sum() / denom
    if mode == "seq_mean":
        counts = mask.sum(-1)  # [B]
        row_means = masked.sum(-1) / counts.clamp(min=1)  # [B]
        denom = normaliser if normaliser is not None else (counts > 0).sum().clamp(min=1)
        return row_means.sum() / denom
    if mode == "constant":
        if normaliser is None:
            raise ValueError("aggregate(mode='constant') needs a normaliser")
        return masked.sum() / normaliser
    raise ValueError(f"unknown aggregation {mode!r}; valid: token_mean, seq_mean, constant")


def loss_normaliser(
    loss_mask: Tensor,
    mode: Literal["token_mean", "seq_mean", "constant"],
    max_row_tokens: int | None = None,
) -> float:
    """The denominator `aggregate` needs for a WHOLE minibatch [B, T] (see its docstring).

    - ``token_mean``: its number of agent tokens;
    - ``seq_mean``: its number of rows with at least one agent token;
    - ``constant``: rows x `max_row_tokens`, the most agent tokens a row can hold (e.g. max
      new tokens per action x max turns): a fixed budget, not the sampled lengths.
    """
    if mode == "token_mean":
        return float(loss_mask.sum())
    if mode == "seq_mean":
        return float((loss_mask.sum(-1) > 0).sum())
    if mode == "constant":
        if max_row_tokens is None:
            raise ValueError("loss_normaliser(mode='constant') needs max_row_tokens")
        return float(loss_mask.shape[0] * max_row_tokens)
    raise ValueError(f"unknown aggregation {mode!r}; valid: token_mean, seq_mean, constant")


def add_kl_to_rewards(
    token_rewards: Tensor,
    logprobs: Tensor,
    ref_logprobs: Tensor,
    loss_mask: Tensor,
    coef: float,
    kind: Literal["k1", "k2", "k3"] = "k1",
) -> Tensor:
    """PPO's KL-in-reward: ``r_t - coef * KL_t`` on agent tokens, [B, T] (no gradient).

    The published PPO recipe uses k1 with coef 0.01. Environment tokens are left unchanged.
    """
    with torch.no_grad():
        kl = kl_penalty(logprobs.detach(), ref_logprobs.detach(), kind)  # [B, T]
        return token_rewards - coef * torch.where(loss_mask.bool(), kl, 0.0)
