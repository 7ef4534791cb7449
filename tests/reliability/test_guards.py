"""Numerical guards of the learner, per source of non-finite values: logits (NaN or inf
weights), advantages, losses and gradients each skip the optimizer step with the reason
counted, and MAX_CONSECUTIVE_SKIPS in a row stop the run with a message naming the likely
cause. (tests/train/test_trainer.py covers NaN logits, NaN advantages once, NaN loss once.)"""

from __future__ import annotations

import pytest
import torch

from tripod.policy.rollout import RolloutEngine
from tripod.policy.settings import rollout_config
from tripod.train.learner import (
    LIKELY_CAUSE,
    TrainingStopped,
    build_learner,
    no_grad_passes,
    update,
)
from tripod.train.rl import advantage, collect, make_batch, train_rl, warnings_for

STEPS = ["algo.minibatch_size=1", "algo.micro_batch_size=1", "algo.epochs=2"]
"""One row per optimizer step, two epochs: 8 steps over the 4 rows of an iteration."""


def _params(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _learner_and_batch(tmp_path, policy, tiny_cfg, *extra):
    cfg = tiny_cfg(tmp_path, *STEPS, *extra)
    learner = build_learner(cfg, policy)
    trajs, _ = collect(RolloutEngine(learner.policy, rollout_config(cfg)), cfg, 0)
    batch, _ = make_batch(trajs, cfg, learner.policy.pad_token_id)
    batch = no_grad_passes(learner, batch)
    advantage(batch, cfg.algo)
    return learner, batch


def _break(kind: str, learner, batch) -> None:
    """Make every optimizer step see a non-finite value of `kind`."""
    with torch.no_grad():
        if kind == "inf logits":
            learner.policy.model.get_output_embeddings().weight[:, 0] = float("inf")
        elif kind == "advantages":
            batch.advantages[:] = float("inf")
        elif kind == "loss":
            batch.ref_logprobs = torch.full_like(batch.ref_logprobs, float("nan"))
        elif kind == "gradient":  # finite loss, exploding backward pass
            for p in learner.policy.model.parameters():
                p.register_hook(lambda g: g * float("inf"))


@pytest.mark.parametrize("kind, reason", [("inf logits", "logits"), ("advantages", "advantages"),
                                          ("loss", "loss"), ("gradient", "gradient")])
def test_each_source_skips_then_stops_naming_the_cause(tmp_path, tiny_policy_factory,
                                                       tiny_cfg, kind, reason):
    learner, batch = _learner_and_batch(tmp_path, tiny_policy_factory(), tiny_cfg,
                                        "algo.kl_coef=0.01", "algo.kl_in=loss")
    _break(kind, learner, batch)
    one = batch.select([0])
    before = _params(learner.policy.model)
    metrics = update(learner, one, iteration=0)  # 2 steps (2 epochs), both skipped
    assert metrics[f"skipped_{reason}"] == metrics["skipped_updates"] == 2
    assert f"non-finite {reason} 2" in warnings_for(metrics)[0]
    if kind != "inf logits":  # the broken weight is part of the parameters
        assert torch.equal(before, _params(learner.policy.model))
    with pytest.raises(TrainingStopped, match=rf"in a row were skipped \(last: non-finite "
                       rf"{reason}\)\. Likely cause: {LIKELY_CAUSE[reason][:30]}"):
        update(learner, batch, iteration=1)


def test_a_run_whose_weights_break_stops_instead_of_training_on_garbage(tmp_path,
                                                                        tiny_policy_factory,
                                                                        tiny_cfg):
    """Sampling with NaN weights does not crash (the logprobs are NaN); the update refuses
    every step, and the run stops in its first iteration naming the weights."""
    policy = tiny_policy_factory()
    with torch.no_grad():
        policy.model.get_output_embeddings().weight[:, 0] = float("nan")
    cfg = tiny_cfg(tmp_path, *STEPS, "train.iterations=3")
    with pytest.raises(TrainingStopped, match=r"non-finite logits.*learning rate"):
        train_rl(cfg, policy=policy, quiet=True)
    assert not (cfg.run_dir / "checkpoints").exists()  # nothing saved from a broken run
