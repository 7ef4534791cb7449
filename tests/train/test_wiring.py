"""The learner's wiring against a hand composition of the public functions it joins.

The parts are pinned by their own tests (estimators and losses by hand-computed values, the
sampler by an uncached forward pass); these pin the seams between them, at the settings a
recipe trains with: sampling at temperature 0.7 (at T = 1 a trainer that forgot the
temperature would agree with the sampler), a KL penalty against a reference that differs
from the policy (at initialisation the reference IS the policy, so a dropped KL term would
change nothing), in the reward or in the loss, and an entropy bonus. One optimizer step of
plain SGD with lr 1 and no clipping makes the parameter change equal minus the gradient, so
the learner's whole loss is compared, not only its logged statistics.
"""

from __future__ import annotations

import pytest
import torch

from tripod.algos.advantages import AdvantageInput, get_estimator
from tripod.algos.losses import aggregate, kl_penalty, policy_loss
from tripod.core.config import TrainConfig, load_config
from tripod.policy.rollout import RolloutEngine
from tripod.policy.settings import rollout_config
from tripod.train.batch import TrainBatch, token_logprobs
from tripod.train.learner import Learner, build_learner, no_grad_passes, update
from tripod.train.rl import advantage, collect, make_batch

TEMPERATURE = 0.7
"""The sampling temperature of every recipe; the hand composition uses this literal, not the
config, so a learner that reads another temperature disagrees with it."""
KL_COEF, ENTROPY_COEF = 0.2, 0.01
BASE = ["model.name=tiny", "env.id=toy/letters-2", "env.max_turns=2",
        "env.options={vocabulary: 4}", "rollout.games_per_iter=2", "rollout.group_size=2",
        "rollout.batch_size=4", f"rollout.train.temperature={TEMPERATURE}",
        "rollout.train.max_new_tokens=3", "rollout.truncated_action=step",
        "reward.kind=dense", "algo.estimator=grpo", f"algo.kl_coef={KL_COEF}",
        f"algo.entropy_coef={ENTROPY_COEF}", "algo.minibatch_size=4",
        "algo.micro_batch_size=4", "algo.grad_clip=1e9", "train.tensorboard=false"]
"""One minibatch of all 4 rows, one micro-batch (so the logged statistics are the whole
batch's), no gradient clipping (so the step is exactly minus the gradient)."""


def _cfg(tmp_path, *extra: str) -> TrainConfig:
    return load_config(overrides=BASE + [f"run.out_dir={tmp_path}", *extra])


def _perturbed_reference(learner: Learner) -> None:
    """Move the frozen reference away from the policy it was copied from."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in learner.ref_model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))


def _sgd(learner: Learner) -> list[torch.nn.Parameter]:
    """Plain SGD with lr 1 on the trained parameters: a step is minus the gradient."""
    params = [p for p in learner.policy.model.parameters() if p.requires_grad]
    learner.optimizer = torch.optim.SGD(params, lr=1.0)
    return params


def _scored_batch(learner: Learner) -> TrainBatch:
    """collect -> batch -> score -> advantage, the trainer's own calls."""
    engine = RolloutEngine(learner.policy, rollout_config(learner.cfg))
    trajs, _ = collect(engine, learner.cfg, 0)
    engine.close()
    batch, _ = make_batch(trajs, learner.cfg, learner.policy.pad_token_id)
    batch = no_grad_passes(learner, batch)
    advantage(batch, learner.cfg.algo)
    return batch


def _estimator_advantages(batch: TrainBatch, rewards: torch.Tensor, cfg: TrainConfig):
    return get_estimator(cfg.algo.estimator)(
        AdvantageInput(token_rewards=rewards, loss_mask=batch.loss_mask,
                       turn_ids=batch.turn_ids, group_ids=batch.group_ids,
                       episode_ids=batch.episode_ids, state_ids=batch.state_ids),
        cfg.algo).advantages


def _hand_loss(model, batch: TrainBatch, ref: torch.Tensor, cfg: TrainConfig):
    """The learner's loss composed by hand: logprobs at T = 0.7, the recorded old logprobs,
    token-mean aggregation, the entropy bonus and the KL term over the loss mask only."""
    mask = batch.loss_mask
    logp, entropy, _ = token_logprobs(model, batch.input_ids, batch.attention_mask,
                                      TEMPERATURE, mask, with_entropy=True)
    per_token, stats = policy_loss(logp, batch.old_logprobs, batch.advantages, mask,
                                   cfg.algo.clip_low, cfg.algo.clip_high)
    kl = kl_penalty(logp, ref, cfg.algo.kl_kind)
    loss = aggregate(per_token, mask) - ENTROPY_COEF * aggregate(entropy, mask)
    if cfg.algo.kl_in == "loss":
        loss = loss + KL_COEF * aggregate(kl, mask)
    stats["entropy"] = float(aggregate(entropy.detach(), mask))
    stats["kl"] = float(aggregate(kl.detach(), mask))
    return loss, stats, logp.detach()


@pytest.mark.parametrize("kl_in", ["reward", "loss"])
def test_learner_equals_the_hand_composition(tmp_path, tiny_policy_factory, kl_in):
    cfg = _cfg(tmp_path, f"algo.kl_in={kl_in}", "algo.kl_kind=k1" if kl_in == "reward"
               else "algo.kl_kind=k3")
    learner = build_learner(cfg, tiny_policy_factory(seed=1))
    _perturbed_reference(learner)
    params = _sgd(learner)
    batch = _scored_batch(learner)
    mask = batch.loss_mask.bool()

    # the reference's logprobs: the frozen (moved) copy, at the sampling temperature
    with torch.no_grad():
        ref = token_logprobs(learner.ref_model, batch.input_ids, batch.attention_mask,
                             TEMPERATURE, batch.loss_mask)[0]
    torch.testing.assert_close(batch.ref_logprobs[mask], ref[mask], rtol=0, atol=1e-5)

    # the advantages: the estimator on the task rewards minus the KL on agent tokens (k1 of
    # the sampled tokens: sampling logprob minus reference logprob), or on the task rewards
    plain = _estimator_advantages(batch, batch.token_rewards, cfg)
    if kl_in == "reward":
        kl = torch.where(mask, batch.old_logprobs - ref, 0.0)
        expected = _estimator_advantages(batch, batch.token_rewards - KL_COEF * kl, cfg)
        assert (expected - plain)[mask].abs().max() > 0.1, "the KL term must matter here"
    else:
        expected = plain
        assert batch.kl_rewards is None
    torch.testing.assert_close(batch.advantages, expected, rtol=0, atol=1e-5)

    # the loss: one SGD step with lr 1 is minus its gradient; the statistics match too
    hand_loss, hand_stats, hand_logp = _hand_loss(learner.policy.model, batch, ref, cfg)
    grads = torch.autograd.grad(hand_loss, params)
    before = [p.detach().clone() for p in params]
    stats = update(learner, batch, iteration=0)
    for p, b, g in zip(params, before, grads):
        torch.testing.assert_close(p.detach() - b, -g, rtol=1e-3, atol=1e-7)
    assert sum(float(g.abs().sum()) for g in grads) > 0
    for key in ("entropy", "kl", "approx_kl", "ratio_mean"):
        assert stats[key] == pytest.approx(hand_stats[key], rel=1e-4, abs=1e-6), key

    # first step: the policy is the sampler, so ratio 1, nothing clipped, equal logprobs
    assert stats["clip_fraction"] == 0.0 and stats["ratio_mean"] == pytest.approx(1, abs=1e-4)
    torch.testing.assert_close(batch.trainer_logprobs[mask], batch.old_logprobs[mask],
                               rtol=0, atol=1e-4)
    torch.testing.assert_close(batch.trainer_logprobs[mask], hand_logp[mask],
                               rtol=0, atol=1e-5)


def test_a_temperature_mistake_shows_at_this_temperature(tmp_path, tiny_policy_factory):
    """The oracle's premise: at T = 0.7 the logprobs at T = 1 differ from the sampled ones by
    far more than the 1e-4 the learner must meet (at T = 1 they would not differ at all)."""
    learner = build_learner(_cfg(tmp_path), tiny_policy_factory(seed=1))
    batch = _scored_batch(learner)
    mask = batch.loss_mask.bool()
    with torch.no_grad():
        at_one = token_logprobs(learner.policy.model, batch.input_ids, batch.attention_mask,
                                1.0, batch.loss_mask)[0]
    assert (at_one - batch.old_logprobs)[mask].abs().max() > 0.1


def test_each_turn_reward_sits_on_its_last_agent_token():
    """The batch puts turn k's reward on turn k's last sampled token (the estimators read it
    there: a per-token discount counts from it), and nowhere else."""
    from tripod.core.types import EpisodeEnd, EpisodeJob, Trajectory, Turn, TurnStatus
    from tripod.train.batch import trajectory_rows

    first = Turn([5, 6], [7, 8, 9], [-0.1] * 3, "a", "o", 0.5, TurnStatus.OK)
    second = Turn([5, 6, 7, 8, 9, 10], [11, 12, 13], [-0.2] * 3, "b", "o", 1.0,
                  TurnStatus.OK)
    traj = Trajectory(EpisodeJob("toy/letters-2", "train", 0, 0, 0, 0), "obj", "obs",
                      [first, second], end=EpisodeEnd.MAX_TURNS)
    (row,) = trajectory_rows(traj, [0.5, 1.0])
    assert row.loss_mask == [0, 0, 1, 1, 1, 0, 1, 1, 1]
    assert row.rewards == [0, 0, 0, 0, 0.5, 0, 0, 0, 1.0]
