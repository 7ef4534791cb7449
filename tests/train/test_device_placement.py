"""Device placement on a CPU-only machine: the policy is moved to PyTorch's `meta` device (no
storage, shapes only), which stands in for CUDA. An operation that mixes a CPU tensor into a
`meta` computation raises, as it would with a CUDA model; so a module built on the CPU and
never moved, or a batch handed to the model without being moved, is caught here. (Found by
reading the CUDA path: the critic's head and SFT's micro-batches stayed on the CPU.)"""

from __future__ import annotations

import pytest
import torch

import tripod.train.sft as sft
from tripod.core.config import load_config
from tripod.train.batch import Row
from tripod.train.learner import build_learner

META = torch.device("meta")


@pytest.mark.parametrize("mode", ["copy", "shared"])
def test_the_critic_is_built_on_the_policy_device(tiny_policy_factory, mode):
    policy = tiny_policy_factory(seed=0)
    policy.model.to(META)
    cfg = load_config(overrides=["model.name=tiny", "algo.estimator=gae",
                                 f"algo.critic={mode}"])
    learner = build_learner(cfg, policy=policy)
    assert {p.device for p in learner.critic.parameters()} == {META}
    # The head on the policy's hidden states (a copied backbone's own forward needs data:
    # the packed pass reads row lengths, which a meta tensor does not have).
    hidden = torch.zeros(2, 5, policy.model.config.hidden_size, device=META)
    values = learner.critic.head(hidden)
    assert values.shape == (2, 5, 1) and values.device == META


def test_sft_moves_each_micro_batch_to_the_model_device(tiny_policy_factory, monkeypatch):
    policy = tiny_policy_factory(seed=0)
    policy.model.to(META)
    seen = []

    def recording_loss(policy, batch, restricted=False):
        seen.extend({getattr(batch, name).device for name in ("input_ids", "attention_mask",
                                                              "loss_mask")})
        return torch.zeros((), requires_grad=True), 0

    monkeypatch.setattr(sft, "sft_loss", recording_loss)
    rows = [Row([5, 6, 7, 8], [0, 0, 1, 1], [0.0] * 4, [0.0] * 4, [-1, -1, 0, 0], 0, k)
            for k in range(3)]
    cfg = load_config(overrides=["model.name=tiny", "sft.micro_batch_size=2"])
    params = [p for p in policy.model.parameters() if p.requires_grad]
    sft.sft_step(policy, rows, cfg, torch.optim.SGD(params, lr=0.0), params)
    assert seen and set(seen) == {META}
