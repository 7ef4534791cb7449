"""`model.gradient_checkpointing`: the same gradients for less saved activation memory, in the
RL learner and in SFT, and sampling unaffected."""

from __future__ import annotations

import torch

from tripod.core.config import load_config
from tripod.train.batch import token_logprobs
from tripod.train.learner import build_learner
from tripod.train.sft import train_sft

BASE = ["model.name=tiny", "env.id=toy/letters-2", "algo.estimator=grpo"]


def _grads(model, ids: torch.Tensor) -> list[torch.Tensor]:
    """Gradients of the teacher-forced NLL the trainer computes."""
    model.train()
    model.zero_grad(set_to_none=True)
    logp, _, _ = token_logprobs(model, ids, torch.ones_like(ids))
    (-logp.sum()).backward()
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


def _saved_activation_bytes(model, ids: torch.Tensor) -> int:
    """Bytes autograd keeps for the decoder's backward, weights excluded (the LM head, whose
    logits dominate in the tiny model, is not checkpointed and left out)."""
    weights = {p.data_ptr() for p in model.parameters()}
    saved = [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.data_ptr() not in weights:
            saved[0] += t.numel() * t.element_size()
        return t

    model.train()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        hidden = model.get_decoder()(input_ids=ids).last_hidden_state
    hidden.sum().backward()
    return saved[0]


def test_checkpointing_gives_the_same_gradients_for_less_saved_memory(tiny_policy_factory):
    ids = torch.randint(0, 1000, (2, 96), generator=torch.Generator().manual_seed(0))
    plain = build_learner(load_config(overrides=BASE), tiny_policy_factory(seed=2))
    ckpt = build_learner(load_config(overrides=[*BASE, "model.gradient_checkpointing=true"]),
                         tiny_policy_factory(seed=2))
    assert ckpt.policy.model.is_activation_checkpointing
    assert not plain.policy.model.is_activation_checkpointing
    g_plain, g_ckpt = _grads(plain.policy.model, ids), _grads(ckpt.policy.model, ids)
    assert len(g_plain) == len(g_ckpt) > 0
    for a, b in zip(g_plain, g_ckpt, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    kept = [_saved_activation_bytes(m.policy.model, ids) for m in (plain, ckpt)]
    assert kept[1] < 0.5 * kept[0], kept


def test_sft_turns_it_on_and_sampling_still_uses_the_cache(tiny_policy_factory):
    cfg = load_config(overrides=[*BASE, "model.gradient_checkpointing=true"])
    policy = tiny_policy_factory(seed=2)
    train_sft(policy, [], cfg)
    assert policy.model.is_activation_checkpointing and not policy.model.training
    ids = torch.randint(0, 1000, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = policy.model(input_ids=ids, use_cache=True)
    assert out.past_key_values is not None


def test_checkpointing_with_lora_trains_the_adapters(tiny_policy_factory):
    cfg = load_config(overrides=[*BASE, "model.lora.enabled=true",
                                 "model.gradient_checkpointing=true"])
    learner = build_learner(cfg, tiny_policy_factory(seed=2))
    ids = torch.randint(0, 1000, (1, 32), generator=torch.Generator().manual_seed(0))
    grads = _grads(learner.policy.model, ids)
    trainable = [p for p in learner.policy.model.parameters() if p.requires_grad]
    assert len(grads) == len(trainable) > 0 and any(float(g.abs().sum()) > 0 for g in grads)
