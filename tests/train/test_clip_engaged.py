"""PPO's clip engaged through the learner, not only in `policy_loss` on its own.

At the first minibatch of an update the policy is the sampler, every ratio is 1 and the clip
never acts, so a learner that handed `policy_loss` the current logprobs as the old ones
(ratio always 1) would look right there. Here the ratios leave the clip range: (1) with the
recorded old logprobs shifted on some tokens, the clipped tokens must add no gradient (the
update equals the one from the unclipped tokens alone, and is exactly zero when every token
is clipped); (2) with two epochs of one-row minibatches the later steps see moved weights,
and the learner reports clipped tokens.
"""

from __future__ import annotations

import random

import pytest
import torch

from tripod.core.config import load_config
from tripod.policy.rollout import RolloutEngine
from tripod.policy.settings import rollout_config
from tripod.train.batch import Row, TrainBatch, collate, token_logprobs
from tripod.train.learner import build_learner, update
from tripod.train.rl import collect, make_batch

TEMPERATURE = 0.7
SHIFT = 0.5
"""Log-ratio put on a shifted token: exp(0.5) = 1.65 and exp(-0.5) = 0.61, both outside the
clip range [0.8, 1.2]."""
BASE = ["model.name=tiny", "env.id=toy/letters-2", "env.max_turns=2",
        "env.options={vocabulary: 4}", "rollout.games_per_iter=2", "rollout.group_size=2",
        "rollout.batch_size=4", f"rollout.train.temperature={TEMPERATURE}",
        "rollout.train.max_new_tokens=3", "rollout.truncated_action=step",
        "reward.kind=dense", "algo.estimator=grpo", "train.tensorboard=false"]


def _rows() -> list[Row]:
    """Two rows of four agent tokens each (advantages are set by hand)."""
    rng = random.Random(1)
    rows = []
    for episode in range(2):
        ids = [rng.randrange(3, 2000) for _ in range(9)]
        rows.append(Row(ids, [0] * 5 + [1] * 4, [0.0] * 9, [0.0] * 9, [-1] * 5 + [0] * 4,
                        group_id=0, episode_id=episode))
    return rows


def _batch(model, pad_id: int) -> TrainBatch:
    """Rows whose old logprobs are this model's own (ratio 1) and advantages +1 / -1."""
    batch = collate(_rows(), pad_id)
    with torch.no_grad():
        batch.old_logprobs = token_logprobs(model, batch.input_ids, batch.attention_mask,
                                            TEMPERATURE, batch.loss_mask)[0]
    batch.advantages = torch.where(batch.loss_mask.bool(), 1.0, 0.0)
    batch.advantages[1] *= -1
    return batch


def _clipped(batch: TrainBatch, tokens: list[tuple[int, int]]) -> torch.Tensor:
    """Shift the old logprob of `tokens` (row, position) so that the clip acts on them: a
    positive advantage with the ratio above 1 + clip, a negative one with it below 1 - clip."""
    chosen = torch.zeros_like(batch.loss_mask, dtype=torch.bool)
    for row, pos in tokens:
        chosen[row, pos] = True
        batch.old_logprobs[row, pos] -= SHIFT * float(batch.advantages[row, pos].sign())
    return chosen


def _step(learner, batch: TrainBatch) -> tuple[dict[str, float], list[torch.Tensor]]:
    """One SGD step (lr 1, no clipping of the norm): the statistics and minus the gradient."""
    params = [p for p in learner.policy.model.parameters() if p.requires_grad]
    learner.optimizer = torch.optim.SGD(params, lr=1.0)
    before = [p.detach().clone() for p in params]
    stats = update(learner, batch, iteration=0)
    return stats, [p.detach() - b for p, b in zip(params, before)]


def _learner(tmp_path, tiny_policy_factory, *extra: str):
    cfg = load_config(overrides=BASE + [f"run.out_dir={tmp_path}", "algo.minibatch_size=2",
                                        "algo.micro_batch_size=2", "algo.grad_clip=1e9",
                                        *extra])
    return build_learner(cfg, tiny_policy_factory(seed=4))


def test_clipped_tokens_add_no_gradient(tmp_path, tiny_policy_factory):
    learner = _learner(tmp_path, tiny_policy_factory)
    batch = _batch(learner.policy.model, learner.policy.pad_token_id)
    mask = batch.loss_mask.bool()
    positions = mask.nonzero().tolist()
    chosen = _clipped(batch, [tuple(p) for p in positions[::2]])  # half the agent tokens
    old = batch.old_logprobs.clone()

    # by hand: the surrogate of the unclipped tokens only (ratio 1 there), over all tokens
    params = [p for p in learner.policy.model.parameters() if p.requires_grad]
    logp = token_logprobs(learner.policy.model, batch.input_ids, batch.attention_mask,
                          TEMPERATURE, batch.loss_mask)[0]
    keep = mask & ~chosen
    surrogate = (batch.advantages * torch.exp(logp - old))[keep].sum() / mask.sum()
    grads = torch.autograd.grad(-surrogate, params)

    stats, steps = _step(learner, batch)
    assert stats["clip_fraction"] == pytest.approx(int(chosen.sum()) / int(mask.sum()))
    for step, g in zip(steps, grads):
        torch.testing.assert_close(step, -g, rtol=1e-3, atol=1e-7)


def test_every_token_clipped_leaves_the_weights_alone(tmp_path, tiny_policy_factory):
    learner = _learner(tmp_path, tiny_policy_factory)
    batch = _batch(learner.policy.model, learner.policy.pad_token_id)
    _clipped(batch, [tuple(p) for p in batch.loss_mask.bool().nonzero().tolist()])
    stats, steps = _step(learner, batch)
    assert stats["clip_fraction"] == 1.0 and stats["grad_norm"] == 0.0
    assert all(not s.any() for s in steps)


def test_later_epochs_see_ratios_outside_the_clip_range(tmp_path, tiny_policy_factory):
    """A real rollout, two epochs of one-row minibatches and a large Adam step: from the
    second minibatch on, the ratios are those of a moved policy and the clip acts."""
    learner = _learner(tmp_path, tiny_policy_factory, "algo.minibatch_size=1",
                       "algo.micro_batch_size=1", "algo.epochs=2", "algo.lr=0.05")
    engine = RolloutEngine(learner.policy, rollout_config(learner.cfg))
    trajs, _ = collect(engine, learner.cfg, 0)
    engine.close()
    batch, _ = make_batch(trajs, learner.cfg, learner.policy.pad_token_id)
    batch.advantages = torch.where(batch.loss_mask.bool(), 1.0, 0.0)  # every step moves
    stats = update(learner, batch, iteration=0)
    assert stats["clip_fraction"] > 0.1 and stats["ratio_mean"] != pytest.approx(1.0)
