"""The trainer runs a prefix its rows share once: same logprobs, same gradients.

The episodes of a group start with the same prompt (and often the same first actions); the
trainer's forward pass runs that prefix once and lets every row attend to its keys and
values (`train.batch.decoder_hidden`). These tests hold it to the plain forward pass over
whole rows: hidden states, logprobs and every parameter's gradient agree to float rounding,
with right padding, rows of different lengths, and the longest shared prefix possible.
"""

from __future__ import annotations

import pytest
import torch

from tripod.policy.models import use_checkpointing
from tripod.policy.packed import KWARG, _prefix_causal_mask, masked_attention
from tripod.train import batch as batch_module
from tripod.train.batch import (
    MIN_SHARED_PREFIX,
    decoder_hidden,
    prefix_clusters,
    token_logprobs,
)


def _rows(lengths: list[int], prefix: int, vocab: int = 1000, seed: int = 0):
    """Right-padded rows [B, T] sharing their first `prefix` tokens, then random tokens."""
    gen = torch.Generator().manual_seed(seed)
    t = max(lengths)
    ids = torch.randint(5, vocab, (len(lengths), t), generator=gen)
    ids[:, :prefix] = ids[0, :prefix]
    mask = torch.zeros(len(lengths), t, dtype=torch.long)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
        ids[i, n:] = 0                                                       # pad id
    return ids, mask


def test_one_shared_prefix():
    ids, _ = _rows([60, 50, 70], prefix=40)
    assert prefix_clusters(ids, [60, 50, 70]) == [([0, 1, 2], 40)]
    same, _ = _rows([40, 40], prefix=40)
    assert prefix_clusters(same, [40, 40]) == [([0, 1], 39)]                # one token left each
    ids[1, 0] += 1
    assert prefix_clusters(ids, [60, 50, 70]) == [([0, 2], 40), ([1], 0)]


def _two_groups_and_a_stranger(seed: int = 0):
    """Rows 0-2: one game (60 shared tokens); rows 3-4: another (45); row 5 shares only the
    first 40 tokens (a system prompt) with everyone. All rows share those 40 tokens."""
    ids, mask = _rows([90, 75, 100, 70, 82, 66], prefix=40, seed=seed)
    ids[1:3, 40:60] = ids[0, 40:60]
    ids[4, 40:45] = ids[3, 40:45]
    return ids, mask


def test_prefix_clusters():
    ids, mask = _two_groups_and_a_stranger()
    lengths = mask.sum(1).tolist()
    # row 5 would cut the second game's 45 shared tokens to 40: it stays alone
    assert prefix_clusters(ids, lengths) == [([0, 1, 2], 60), ([3, 4], 45), ([5], 0)]
    # a group's rows apart from each other: the first prefix found is kept, never shortened
    order = [0, 3, 1, 4, 2, 5]
    assert prefix_clusters(ids[order], [lengths[i] for i in order]) == [
        ([0, 1, 2, 3, 4, 5], 40)]
    ids[5, 0] += 1                                            # the stranger shares nothing
    assert prefix_clusters(ids[[5, 0, 1]], [lengths[i] for i in (5, 0, 1)]) == [
        ([0], 0), ([1, 2], 60)]
    assert prefix_clusters(ids[:1], lengths[:1]) == [([0], 0)]


def _plain(model, ids, mask):
    """The reference: whole rows in one pass (no prefix sharing)."""
    old = batch_module.MIN_SHARED_PREFIX
    batch_module.MIN_SHARED_PREFIX = 10**9
    try:
        return decoder_hidden(model, ids, mask)
    finally:
        batch_module.MIN_SHARED_PREFIX = old


def _strangers(seed: int = 0):
    """Two games of two rows each, and two rows of similar length that share nothing."""
    ids, mask = _rows([90, 86, 84, 88, 70, 72], prefix=40, seed=seed)
    ids[2:4, :40] = ids[0, :40] + 1                           # the second game's own prompt
    ids[4, 0], ids[5, 0] = 1, 2                               # strangers
    return ids, mask


@pytest.mark.parametrize("lengths, prefix", [
    ([80, 64, 96, 70], 48), ([90, 90], 90), ([120, 40], 39), ([80, 82, 84, 70], 48),
    (None, None), ("stranger", None), ("strangers", None)])
def test_shared_prefix_pass_equals_the_plain_one(tiny_policy_factory, lengths, prefix):
    """One cluster; rows of similar length in one own-token pass; two clusters of different
    prefix lengths; two and a row alone; rows alone that run together."""
    model = tiny_policy_factory(seed=1).model
    if lengths == "strangers":
        ids, mask = _strangers()
    elif lengths is None or lengths == "stranger":
        ids, mask = _two_groups_and_a_stranger()
        if lengths == "stranger":
            ids[5, 0] += 1
    else:
        ids, mask = _rows(lengths, prefix)
        lengths = mask.sum(1).tolist()
        assert prefix_clusters(ids, lengths) == [(list(range(len(lengths))),
                                                  min(prefix, min(lengths) - 1))]
        assert prefix_clusters(ids, lengths)[0][1] >= MIN_SHARED_PREFIX
    plain, shared = _plain(model, ids, mask), decoder_hidden(model, ids, mask)
    real = mask.bool()
    torch.testing.assert_close(shared[real], plain[real], atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("rows, checkpointing", [(_two_groups_and_a_stranger, False),
                                                (_strangers, False),
                                                (_two_groups_and_a_stranger, True)])
def test_shared_prefix_gradients_equal_the_plain_ones(tiny_policy_factory, rows, checkpointing):
    """Logprobs and every parameter's gradient of a loss on each row's tokens after the
    prefix and inside it (agent tokens can sit in a shared prefix: equal first actions);
    also with per-layer activation checkpointing, whose recomputation repacks the layer."""
    model = tiny_policy_factory(seed=2).model
    use_checkpointing(model, checkpointing)
    model.train()
    ids, mask = rows(seed=3)
    if rows is _two_groups_and_a_stranger:
        ids[5, 0] += 1
    loss_mask = mask.clone().float()
    loss_mask[:, :38] = 0                                     # the loss starts inside the prefix
    weights = torch.linspace(-1.0, 1.0, 6)[:, None]           # a different advantage per row

    packed_calls = []
    hook = model.get_decoder().register_forward_pre_hook(
        lambda m, a, kw: packed_calls.append(KWARG in kw), with_kwargs=True)

    def grads(shared: bool):
        model.zero_grad()
        old = batch_module.MIN_SHARED_PREFIX
        batch_module.MIN_SHARED_PREFIX = MIN_SHARED_PREFIX if shared else 10**9
        try:
            logp, _, _ = token_logprobs(model, ids, mask, 0.7, loss_mask)
        finally:
            batch_module.MIN_SHARED_PREFIX = old
        (logp * weights * loss_mask).sum().backward()
        return logp.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    try:
        logp_plain, g_plain = grads(shared=False)
        logp_shared, g_shared = grads(shared=True)
    finally:
        hook.remove()
    assert packed_calls == [False, True]
    torch.testing.assert_close(logp_shared, logp_plain, atol=2e-5, rtol=1e-4)
    assert g_plain.keys() == g_shared.keys()
    for name, g in g_plain.items():
        torch.testing.assert_close(g_shared[name], g, atol=1e-5, rtol=1e-3, msg=name)
    assert any(g.abs().sum() > 0 for g in g_plain.values())


def test_a_micro_batch_runs_in_one_packed_pass(tiny_policy_factory):
    """Each shared prefix once, then each row's own real tokens, end to end in one pass: no
    padding position and no token twice; each segment keeps its unpacked positions."""
    model = tiny_policy_factory(seed=1).model
    ids, mask = _two_groups_and_a_stranger()
    ids[5, 0] += 1
    seen = []

    def note(module, args, kwargs):
        packing = kwargs[KWARG]
        seen.append((tuple(kwargs["inputs_embeds"].shape[:2]), kwargs["position_ids"],
                     [(s.start, s.length, s.position, s.prefix and s.prefix.start)
                      for s in packing.segments], packing.saved))

    hook = model.get_decoder().register_forward_pre_hook(note, with_kwargs=True)
    try:
        decoder_hidden(model, ids, mask)
    finally:
        hook.remove()
    # rows 90, 75, 100 share 60 tokens; rows 70, 82 share 45; row 66 shares nothing
    assert seen[0][2] == [(0, 60, 0, None), (60, 30, 60, 0), (90, 15, 60, 0), (105, 40, 60, 0),
                          (145, 45, 0, None), (190, 25, 45, 145), (215, 37, 45, 145),
                          (252, 66, 0, None)]
    assert len(seen) == 1 and seen[0][0] == (1, 318) == (1, int(mask.sum()) - 2 * 60 - 45)
    assert seen[0][3] == 2 * 60 + 45
    expected = torch.cat([torch.arange(0, 60), torch.arange(60, 90), torch.arange(60, 75),
                          torch.arange(60, 100), torch.arange(0, 45), torch.arange(45, 70),
                          torch.arange(45, 82), torch.arange(0, 66)])
    assert torch.equal(seen[0][1][0], expected)


def test_packing_falls_back_to_whole_rows_without_sdpa(tiny_policy_factory, monkeypatch):
    """A model whose attention is not `sdpa` never sees the packing (its attention would
    ignore it): its rows run whole."""
    model = tiny_policy_factory(seed=1).model
    ids, mask = _two_groups_and_a_stranger()
    monkeypatch.setattr(model.get_decoder().config, "_attn_implementation", "eager")
    seen = []
    hook = model.get_decoder().register_forward_pre_hook(
        lambda m, a, kw: seen.append(KWARG in kw), with_kwargs=True)
    try:
        hidden = decoder_hidden(model, ids, mask)
    finally:
        hook.remove()
    assert seen == [False] and hidden.shape == (*ids.shape, model.config.hidden_size)


def test_masked_attention_with_repeated_kv_heads_equals_grouped_query_attention():
    """The CUDA form of a prefix segment's attention (key / value heads repeated, no
    `enable_gqa`) gives what the CPU form (grouped heads) gives, values and gradients."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 6, 5, 8, generator=gen, requires_grad=True)      # 6 query heads
    k = torch.randn(1, 2, 9, 8, generator=gen, requires_grad=True)      # 2 kv heads, prefix 4
    v = torch.randn(1, 2, 9, 8, generator=gen, requires_grad=True)
    mask = _prefix_causal_mask(4, 5, q.dtype, q.device)
    outs, grads = [], []
    for expand in (False, True):
        o = masked_attention(q, k, v, mask, None, expand_kv=expand)
        o.square().sum().backward()
        outs.append(o.detach())
        grads.append([t.grad.clone() for t in (q, k, v)])
        for t in (q, k, v):
            t.grad = None
    torch.testing.assert_close(outs[0], outs[1])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)
