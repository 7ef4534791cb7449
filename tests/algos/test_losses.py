"""Per-token losses and aggregation: hand examples and the micro-batch invariant."""

from __future__ import annotations

import math

import pytest
import torch

from tripod.algos.losses import (
    add_kl_to_rewards,
    aggregate,
    entropy_from_logits,
    kl_penalty,
    loss_normaliser,
    policy_loss,
    value_loss,
)

E = math.e**0.5  # ratio for a log-ratio of +0.5


def close(actual: torch.Tensor, expected: list, tol: float = 1e-5) -> None:
    torch.testing.assert_close(
        actual, torch.tensor(expected, dtype=actual.dtype), atol=tol, rtol=tol
    )


# ----------------------------------------------------------------------------- policy loss


def four_tokens() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # ratios [e^0.5 = 1.6487, 0.5, e^0.5, 0.5] with advantages [+1, +1, -1, -1]
    old = torch.zeros(1, 4)
    logprobs = torch.tensor([[0.5, math.log(0.5), 0.5, math.log(0.5)]], requires_grad=True)
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
    return logprobs, old, adv


def test_policy_loss_clipping_by_hand() -> None:
    # loss = max(-A r, -A clip(r, 0.8, 1.2)):
    # A=+1, r=1.6487: max(-1.6487, -1.2) = -1.2  (clipped: no gradient)
    # A=+1, r=0.5   : max(-0.5,    -0.8) = -0.5  (unclipped: d/dlogp = -A r = -0.5)
    # A=-1, r=1.6487: max( 1.6487,  1.2) = 1.6487 (unclipped: d/dlogp = 1.6487)
    # A=-1, r=0.5   : max( 0.5,     0.8) = 0.8   (clipped: no gradient)
    logprobs, old, adv = four_tokens()
    loss, stats = policy_loss(logprobs, old, adv, torch.ones(1, 4))
    close(loss, [[-1.2, -0.5, E, 0.8]])
    loss.sum().backward()
    close(logprobs.grad, [[0.0, -0.5, E, 0.0]])
    assert stats["clip_fraction"] == pytest.approx(0.5)
    assert stats["ratio_mean"] == pytest.approx((2 * E + 1.0) / 4)
    # k3 of KL(old || new) per token: (r - 1) - log r
    k3 = [(E - 1) - 0.5, (0.5 - 1) - math.log(0.5)] * 2
    assert stats["approx_kl"] == pytest.approx(sum(k3) / 4)


def test_policy_loss_dual_clip_caps_negative_advantages() -> None:
    # dual_clip = 1.5: the A=-1, r=1.6487 token is capped at 1.5 * |A| = 1.5 (no gradient);
    # the others are unchanged (0.8 < 1.5; positive advantages are never dual-clipped).
    logprobs, old, adv = four_tokens()
    loss, stats = policy_loss(logprobs, old, adv, torch.ones(1, 4), dual_clip=1.5)
    close(loss, [[-1.2, -0.5, 1.5, 0.8]])
    loss.sum().backward()
    close(logprobs.grad, [[0.0, -0.5, 0.0, 0.0]])
    assert stats["dual_clip_fraction"] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="dual_clip"):
        policy_loss(logprobs, old, adv, torch.ones(1, 4), dual_clip=0.9)


def test_policy_loss_asymmetric_clip() -> None:
    # r = 1.25, A = 1: inside [0.8, 1.28] -> -1.25; with clip_high 0.2 -> -1.2
    logprobs = torch.tensor([[math.log(1.25)]])
    zero, one = torch.zeros(1, 1), torch.ones(1, 1)
    close(policy_loss(logprobs, zero, one, one, clip_high=0.28)[0], [[-1.25]])
    close(policy_loss(logprobs, zero, one, one)[0], [[-1.2]])


def test_policy_loss_masked_tokens_are_zero_even_with_garbage() -> None:
    logprobs = torch.tensor([[0.1, float("inf"), float("nan")]], requires_grad=True)
    old = torch.tensor([[0.0, -1e9, 0.0]])
    mask = torch.tensor([[1, 0, 0]])
    loss, stats = policy_loss(logprobs, old, torch.ones(1, 3), mask)
    close(loss, [[-math.exp(0.1), 0.0, 0.0]])
    aggregate(loss, mask).backward()
    assert torch.isfinite(logprobs.grad).all()
    assert stats["clip_fraction"] == 0.0


def test_policy_gradient_at_ratio_one_is_minus_advantage() -> None:
    # On-policy (r = 1) the PPO gradient equals the vanilla policy gradient -A grad log pi.
    logprobs = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    adv = torch.tensor([[0.3, -0.7]])
    loss, _ = policy_loss(logprobs, logprobs.detach(), adv, torch.ones(1, 2))
    loss.sum().backward()
    close(logprobs.grad, [[-0.3, 0.7]])


# ----------------------------------------------------------------------------- KL, entropy


def test_kl_estimators_known_values() -> None:
    # p = 0.5, q_ref = 0.25: k1 = log 2; k2 = 0.5 (log 2)^2; k3 = 0.5 - (-log 2) - 1
    logp, ref = torch.tensor([[math.log(0.5)]]), torch.tensor([[math.log(0.25)]])
    close(kl_penalty(logp, ref, "k1"), [[math.log(2)]])
    close(kl_penalty(logp, ref, "k2"), [[0.5 * math.log(2) ** 2]])
    close(kl_penalty(logp, ref, "k3"), [[0.5 + math.log(2) - 1]])
    for kind in ("k1", "k2", "k3"):
        close(kl_penalty(logp, logp, kind), [[0.0]])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k4"):
        kl_penalty(logp, ref, "k4")  # type: ignore[arg-type]


def test_k1_and_k3_are_unbiased_in_expectation() -> None:
    # E_{x ~ p}[k] = KL(p || q) exactly for k1 and k3 (Schulman 2020); k3 >= 0 per sample.
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    q = torch.tensor([0.2, 0.2, 0.6], dtype=torch.float64)
    kl = float((p * (p / q).log()).sum())
    logp, logq = p.log()[None], q.log()[None]
    assert float((p * kl_penalty(logp, logq, "k1")[0]).sum()) == pytest.approx(kl)
    assert float((p * kl_penalty(logp, logq, "k3")[0]).sum()) == pytest.approx(kl)
    assert (kl_penalty(logp, logq, "k3") >= 0).all()


def test_k3_is_clamped_for_stability() -> None:
    out = kl_penalty(torch.tensor([[-100.0]]), torch.tensor([[0.0]]), "k3")
    assert torch.isfinite(out).all() and float(out) == pytest.approx(10.0)


def test_entropy_from_logits() -> None:
    close(entropy_from_logits(torch.zeros(2, 3, 8)), [[math.log(8)] * 3] * 2)
    logits = torch.randn(2, 5, 11, generator=torch.Generator().manual_seed(0)) * 3
    expected = torch.distributions.Categorical(logits=logits).entropy()
    torch.testing.assert_close(entropy_from_logits(logits), expected)


# ----------------------------------------------------------------------------- value loss


def test_value_loss_clipping_by_hand() -> None:
    # old = 0, clip 0.2, so v_clip = clamp(v, -0.2, 0.2):
    # v=0.5, R=1: sq = 0.25, clipped (0.2 - 1)^2 = 0.64 -> 0.5 * 0.64 = 0.32
    # v=0.5, R=0: sq = 0.25, clipped (0.2 - 0)^2 = 0.04 -> 0.5 * 0.25 = 0.125
    # third token masked out -> 0
    values = torch.tensor([[0.5, 0.5, 3.0]])
    returns = torch.tensor([[1.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0]])
    close(value_loss(values, torch.zeros(1, 3), returns, mask), [[0.32, 0.125, 0.0]])
    close(value_loss(values, torch.zeros(1, 3), returns, mask, clip=None), [[0.125, 0.125, 0]])


# ----------------------------------------------------------------------------- aggregation


def test_aggregation_modes_by_hand() -> None:
    # rows: [1, 2, 3 | nan] and [4 | 0, 0, inf]; off-mask garbage must not leak
    x = torch.tensor([[1.0, 2.0, 3.0, float("nan")], [4.0, 0.0, 0.0, float("inf")]])
    m = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    assert float(aggregate(x, m, "token_mean")) == pytest.approx(10 / 4)
    assert float(aggregate(x, m, "token_mean", normaliser=20)) == pytest.approx(10 / 20)
    assert float(aggregate(x, m, "seq_mean")) == pytest.approx((2 + 4) / 2)
    assert float(aggregate(x, m, "seq_mean", normaliser=3)) == pytest.approx((2 + 4) / 3)
    assert float(aggregate(x, m, "constant", normaliser=8)) == pytest.approx(10 / 8)
    with pytest.raises(ValueError, match="normaliser"):
        aggregate(x, m, "constant")
    with pytest.raises(ValueError, match="token_mean"):
        aggregate(x, m, "sum")  # type: ignore[arg-type]


def test_seq_mean_skips_empty_rows_and_empty_mask_is_zero() -> None:
    x = torch.tensor([[2.0, 4.0], [7.0, 7.0]])
    assert float(aggregate(x, torch.tensor([[1, 1], [0, 0]]), "seq_mean")) == pytest.approx(3)
    assert float(aggregate(x, torch.zeros(2, 2), "token_mean")) == 0.0


def test_loss_normaliser_by_hand() -> None:
    # 3 rows: 3 agent tokens, none, 1 -> token_mean 4, seq_mean 2 (non-empty rows),
    # constant: rows x the row budget = 3 x 10 whatever was sampled.
    m = torch.tensor([[1, 1, 1, 0], [0, 0, 0, 0], [0, 0, 0, 1]])
    assert loss_normaliser(m, "token_mean") == 4.0
    assert loss_normaliser(m, "seq_mean") == 2.0
    assert loss_normaliser(m, "constant", max_row_tokens=10) == 30.0
    with pytest.raises(ValueError, match="max_row_tokens"):
        loss_normaliser(m, "constant")


def grads_of(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters()]


def micro_batch_setup() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    b, t, d, vocab = 4, 6, 5, 7
    model = torch.nn.Linear(d, vocab)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    mask = torch.zeros(b, t)
    for i, n in enumerate([6, 1, 3, 2]):  # very different lengths
        mask[i, t - n :] = 1
    data = {
        "x": torch.randn(b, t, d, generator=g),
        "ids": torch.randint(0, vocab, (b, t), generator=g),
        "old": torch.randn(b, t, generator=g) * 0.1 - 2.0,
        "adv": torch.randn(b, t, generator=g),
        "mask": mask,
    }
    return model, data


def loss_on(
    model: torch.nn.Module,
    data: dict[str, torch.Tensor],
    rows: slice,
    mode: str,
    normaliser: float | None,
) -> torch.Tensor:
    logits = model(data["x"][rows])  # [b, T, V]
    logprobs = torch.log_softmax(logits, -1).gather(-1, data["ids"][rows, :, None])[..., 0]
    per_token, _ = policy_loss(logprobs, data["old"][rows], data["adv"][rows], data["mask"][rows])
    return aggregate(per_token, data["mask"][rows], mode, normaliser)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["token_mean", "seq_mean"])
def test_micro_batches_with_global_normaliser_equal_one_batch(mode: str) -> None:
    # One batch of 4 rows vs 4 micro-batches of 1 row with gradients accumulated: equal
    # gradients when every micro-batch gets the whole minibatch's normaliser
    # (token_mean: total agent tokens = 12; seq_mean: number of rows = 4).
    model, data = micro_batch_setup()
    loss_on(model, data, slice(0, 4), mode, None).backward()
    full = grads_of(model)

    model.zero_grad()
    normaliser = loss_normaliser(data["mask"], mode)  # type: ignore[arg-type]
    assert normaliser == (12.0 if mode == "token_mean" else 4.0)
    for i in range(4):
        loss_on(model, data, slice(i, i + 1), mode, normaliser).backward()
    for a, b in zip(full, grads_of(model)):
        torch.testing.assert_close(a, b)

    # Without it (each micro-batch normalised by its own count, averaged over the 4
    # micro-batches) token_mean gives a different gradient: short rows are over-weighted.
    if mode == "token_mean":
        model.zero_grad()
        for i in range(4):
            (loss_on(model, data, slice(i, i + 1), mode, None) / 4).backward()
        assert not all(torch.allclose(a, b) for a, b in zip(full, grads_of(model)))


# ----------------------------------------------------------------------------- KL in reward


def test_add_kl_to_rewards_only_on_agent_tokens() -> None:
    rewards = torch.tensor([[0.0, 0.0, 1.0, 5.0]])
    logprobs = torch.tensor([[0.0, -1.0, -0.5, -3.0]], requires_grad=True)
    ref = torch.tensor([[-2.0, -1.5, -0.5, -1.0]])
    mask = torch.tensor([[0, 1, 1, 0]])
    # k1 on agent tokens: [-, 0.5, 0.0, -]; coef 0.1
    out = add_kl_to_rewards(rewards, logprobs, ref, mask, coef=0.1)
    close(out, [[0.0, -0.05, 1.0, 5.0]])
    assert not out.requires_grad
