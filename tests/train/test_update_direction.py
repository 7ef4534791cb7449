"""One update moves the policy toward the rewarded episode, for every estimator.

A hand-made batch of one group: two episodes of one turn from the same state, the first
rewarded 1 and the second 0. Through the trainer's own path (score -> advantage -> update)
with one plain SGD step, the first episode's sampled tokens must become more likely and the
second's less likely. The expected direction comes from the rewards, not from the batch's
advantages, so a sign flipped anywhere between the estimator and the optimizer step (the
estimator's output, the advantage step, the policy loss's sign) makes the policy climb the
loss and fails here, in seconds, instead of only in the minutes-long learning test.
"""

from __future__ import annotations

import random

import pytest
import torch

from tripod.core.config import load_config
from tripod.core.estimators import ESTIMATORS
from tripod.train.batch import Row, TrainBatch, collate, token_logprobs
from tripod.train.learner import build_learner, no_grad_passes, update
from tripod.train.rl import advantage

TEMPERATURE = 0.7
BASE = ["model.name=tiny", "env.id=toy/letters-2", "env.max_turns=1",
        f"rollout.train.temperature={TEMPERATURE}", "rollout.train.max_new_tokens=3",
        "algo.minibatch_size=2", "algo.micro_batch_size=2", "algo.critic=copy",
        "train.tensorboard=false"]


def _rows() -> list[Row]:
    """Two one-turn episodes of group 0 acting from the same state: the first earns 1."""
    rng = random.Random(0)
    rows = []
    for episode, reward in enumerate((1.0, 0.0)):
        prompt = [rng.randrange(3, 2000) for _ in range(6)]
        action = [rng.randrange(3, 2000) for _ in range(3)]
        n = len(prompt) + len(action)
        rows.append(Row(
            input_ids=prompt + action, loss_mask=[0] * 6 + [1] * 3,
            logprobs=[0.0] * n, rewards=[0.0] * (n - 1) + [reward],
            turn_ids=[-1] * 6 + [0] * 3, group_id=0, episode_id=episode,
            state_ids=[-1] * 6 + [7] * 3))
    return rows


def _logprobs(model, batch: TrainBatch) -> torch.Tensor:
    with torch.no_grad():
        return token_logprobs(model, batch.input_ids, batch.attention_mask, TEMPERATURE,
                              batch.loss_mask)[0]


@pytest.mark.parametrize("estimator", sorted(ESTIMATORS))
def test_one_step_raises_the_rewarded_episode_and_lowers_the_other(
        tmp_path, tiny_policy_factory, estimator):
    cfg = load_config(overrides=BASE + [f"run.out_dir={tmp_path}",
                                        f"algo.estimator={estimator}"])
    learner = build_learner(cfg, tiny_policy_factory(seed=2))
    params = [p for p in learner.policy.model.parameters() if p.requires_grad]
    learner.optimizer = torch.optim.SGD(params, lr=0.1)
    batch = collate(_rows(), learner.policy.pad_token_id)
    before = _logprobs(learner.policy.model, batch)
    batch.old_logprobs = before.clone()  # as if sampled by this policy
    batch = no_grad_passes(learner, batch)
    advantage(batch, cfg.algo)
    mask = batch.loss_mask.bool()
    assert (batch.advantages[0][mask[0]] > 0).all(), "the rewarded episode scores above"
    assert (batch.advantages[1][mask[1]] < 0).all(), "the other episode scores below"

    stats = update(learner, batch, iteration=0)
    assert stats["skipped_updates"] == 0
    moved = _logprobs(learner.policy.model, batch) - before
    assert (moved[0][mask[0]] > 1e-4).all(), f"{estimator}: rewarded tokens {moved[0][mask[0]]}"
    assert (moved[1][mask[1]] < -1e-4).all(), f"{estimator}: other tokens {moved[1][mask[1]]}"
