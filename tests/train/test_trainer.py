"""Trainer invariants on the tiny model: accumulation equivalence, NaN skipping, exact resume."""

from __future__ import annotations

import copy

import pytest
import torch

from tripod.core.config import load_config
from tripod.policy.rollout import RolloutEngine
from tripod.train.common import rollout_config
from tripod.train.rl import build_learner, collect, prepare_batch, train_rl, update

BASE = ["model.name=tiny", "env.id=toy/letters-2", "env.max_turns=2",
        "env.options={vocabulary: 4}", "rollout.games_per_iter=2", "rollout.group_size=2",
        "rollout.batch_size=4", "rollout.train.temperature=1.0", "rollout.train.max_new_tokens=3",
        "rollout.truncated_action=step", "reward.kind=dense", "algo.lr=1e-3",
        "train.tensorboard=false"]


def _cfg(tmp_path, *extra):
    return load_config(overrides=BASE + [f"run.out_dir={tmp_path}", *extra])


def _params(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.mark.parametrize("estimator", ["grpo", "gae"])
def test_micro_batch_accumulation_equivalence(tmp_path, tiny_policy_factory, estimator):
    """micro-batch 1 x accumulation 4 == micro-batch 4 x accumulation 1 (one optimizer step)."""
    results = []
    batch = None
    for micro in (1, 4):
        cfg = _cfg(tmp_path, f"algo.estimator={estimator}", "algo.minibatch_size=4",
                   f"algo.micro_batch_size={micro}", "algo.kl_coef=0.01", "algo.entropy_coef=0.01")
        learner = build_learner(cfg, tiny_policy_factory(seed=1))
        # Plain SGD with lr 1: the parameter change IS the accumulated gradient (Adam would
        # amplify float noise on near-zero gradients into lr-sized differences).
        learner.optimizer = torch.optim.SGD(learner.policy.model.parameters(), lr=1.0)
        if batch is None:
            engine = RolloutEngine(learner.policy, rollout_config(cfg))
            trajs, _ = collect(engine, cfg, 0)
            batch = prepare_batch(learner, trajs)
        update(learner, copy.deepcopy(batch), iteration=0)
        results.append(_params(learner.policy.model))
    assert not torch.equal(results[0], _params(tiny_policy_factory(seed=1).model))
    start = _params(tiny_policy_factory(seed=1).model)
    torch.testing.assert_close(results[0] - start, results[1] - start, rtol=1e-4, atol=1e-7)


def test_nan_loss_skips_update_and_is_counted(tmp_path, tiny_policy_factory):
    cfg = _cfg(tmp_path, "algo.estimator=grpo")
    learner = build_learner(cfg, tiny_policy_factory())
    engine = RolloutEngine(learner.policy, rollout_config(cfg))
    trajs, _ = collect(engine, cfg, 0)
    batch = prepare_batch(learner, trajs)
    batch["advantages"] = torch.full_like(batch["advantages"], float("nan"))
    before = _params(learner.policy.model)
    metrics = update(learner, batch, iteration=0)
    assert metrics["nan_skips"] >= 1 and learner.nan_skips >= 1
    assert torch.equal(before, _params(learner.policy.model))


def test_resume_continues_exactly(tmp_path, tiny_policy_factory):
    """2 iterations straight == 1 iteration, checkpoint, resume, 1 more (optimizer, RNG, data)."""
    straight = train_rl(_cfg(tmp_path, "run.name=straight", "algo.estimator=rloo",
                             "train.iterations=2"), policy=tiny_policy_factory(), quiet=True)
    first = train_rl(_cfg(tmp_path, "run.name=split", "algo.estimator=rloo",
                          "train.iterations=1", "train.checkpoint_every=1"),
                     policy=tiny_policy_factory(), quiet=True)
    resumed = train_rl(_cfg(tmp_path, "run.name=split", "algo.estimator=rloo",
                            "train.iterations=2", "train.checkpoint_every=1"),
                       resume=first.final_checkpoint, quiet=True)
    torch.testing.assert_close(_params(straight.policy.model), _params(resumed.policy.model),
                               rtol=0, atol=1e-6)
    assert [h["return"] for h in straight.history][1] == resumed.history[0]["return"]


def test_corrupt_checkpoint_gives_clear_error(tmp_path):
    from tripod.train.checkpoint import CheckpointError, load_trainer_state

    (tmp_path / "ckpt").mkdir()
    with pytest.raises(CheckpointError, match="missing"):
        load_trainer_state(tmp_path / "ckpt")
    (tmp_path / "ckpt" / "state.json").write_text("{not json")
    (tmp_path / "ckpt" / "trainer.pt").write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="cannot read"):
        load_trainer_state(tmp_path / "ckpt")


def test_lora_reference_is_base_without_adapters(tmp_path, tiny_policy_factory):
    cfg = _cfg(tmp_path, "algo.estimator=grpo", "model.lora.enabled=true", "model.lora.r=4",
               "algo.kl_coef=0.01")
    learner = build_learner(cfg, tiny_policy_factory())
    assert learner.ref_model is None and learner.uses_lora  # no second copy
    engine = RolloutEngine(learner.policy, rollout_config(cfg))
    trajs, _ = collect(engine, cfg, 0)
    batch = prepare_batch(learner, trajs)
    # Fresh LoRA adapters are zero-initialised: reference == policy logprobs on agent tokens.
    mask = batch["loss_mask"].bool()
    torch.testing.assert_close(batch["ref_logprobs"][mask], batch["old_logprobs"][mask],
                               atol=1e-4, rtol=0)
    before = _params(learner.policy.model)
    update(learner, batch, iteration=0)
    trainable = [n for n, p in learner.policy.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora" in n for n in trainable)
    assert not torch.equal(before, _params(learner.policy.model))


def test_zero_variance_fraction_counts_groups_with_equal_task_rewards():
    from tripod.train.rl import zero_variance_fraction

    # Group 0: episodes 0 and 1 both return 1 (zero variance); group 1: episode 2 returns 1,
    # episode 3 (two rows, 0.5 each) returns 1 too -> zero variance; group 2: 1 vs 0.
    rewards = torch.tensor([[0, 1.0], [1.0, 0], [0, 1.0], [0.5, 0], [0, 0.5], [1.0, 0], [0, 0]])
    batch = {"token_rewards": rewards,
             "episode_ids": torch.tensor([0, 1, 2, 3, 3, 4, 5]),
             "group_ids": torch.tensor([0, 0, 1, 1, 1, 2, 2])}
    assert zero_variance_fraction(batch) == pytest.approx(2 / 3)
