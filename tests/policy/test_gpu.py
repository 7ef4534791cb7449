"""The rollout invariants on a CUDA device (skipped on CPU-only machines such as CI)."""

from __future__ import annotations

import pytest
import torch

from tripod.policy.chat import PromptConfig
from tripod.policy.rollout import RolloutConfig, RolloutEngine, make_jobs
from tripod.policy.sampler import SamplingParams
from tripod.train.batch import collate, token_logprobs, trajectory_rows


@pytest.mark.gpu
def test_sampling_logprobs_match_the_trainer_on_cuda():
    from tripod.policy import load_policy

    policy = load_policy("tiny", device="cuda")
    engine = RolloutEngine(policy, RolloutConfig(max_turns=3, batch_size=4,
                                                 truncated_action="step",
                                                 prompt=PromptConfig()))
    trajs, _ = engine.collect(make_jobs("toy/letters-3", "train", [0, 1], 2, 0),
                              SamplingParams(temperature=0.7, max_new_tokens=8))
    engine.close()
    rows = [r for t in trajs for r in trajectory_rows(t, [0.0] * t.num_turns)]
    batch = collate(rows, policy.pad_token_id)
    mask = batch.loss_mask.cuda()
    with torch.no_grad():
        logp, _, _ = token_logprobs(policy.model, batch.input_ids.cuda(),
                                    batch.attention_mask.cuda(), 0.7, mask)
    gap = ((logp.cpu() - batch.old_logprobs).abs() * batch.loss_mask).max()
    assert float(gap) < 1e-3
