"""Overlapped rollouts (`cluster.overlap`): iteration k+1 is played by the weights from
before update k, and nothing else changes (the loop equals that schedule run by hand)."""

from __future__ import annotations

import pytest
import torch

from tripod.core.config import load_config
from tripod.policy import load_policy
from tripod.policy.rollout import RolloutEngine
from tripod.policy.settings import rollout_config
from tripod.train.common import seed_everything
from tripod.train.learner import build_learner
from tripod.train.rl import collect, rl_iteration, train_rl

from ._dp_worker import RECIPE

FLAGS = ["train.iterations=3", "algo.lr=1e-3", "run.name=overlap"]


def _cfg(tmp_path, overlap: bool):
    return load_config(overrides=RECIPE + FLAGS + [f"run.out_dir={tmp_path}",
                                                   f"cluster.overlap={str(overlap).lower()}"])


def _weights(policy) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in policy.model.parameters()])


def _by_hand(cfg) -> torch.Tensor:
    """The one-step off-policy schedule, sequentially: batch k+1 is played after batch k
    was played and before update k."""
    seed_everything(cfg.run.seed)
    learner = build_learner(cfg, load_policy("tiny", seed=1))
    learner.add_rollout_copy()
    engine = RolloutEngine(learner.actor, rollout_config(cfg))
    batches = [collect(engine, cfg, 0)]
    for it in range(cfg.train.iterations):
        if it + 1 < cfg.train.iterations:
            learner.sync_rollout_policy()
            batches.append(collect(engine, cfg, it + 1))
        rl_iteration(learner, engine, it, batches[it])
    engine.close()
    return _weights(learner.policy)


def test_overlapped_loop_is_one_step_off_policy(tmp_path):
    cfg = _cfg(tmp_path / "a", overlap=True)
    result = train_rl(cfg, load_policy("tiny", seed=1), quiet=True)
    assert [h["staleness"] for h in result.history] == [0.0, 1.0, 1.0]
    assert all(h["wait_s"] >= 0 for h in result.history)
    overlapped = _weights(result.policy)
    torch.testing.assert_close(overlapped, _by_hand(cfg), rtol=1e-5, atol=1e-7)
    # ... and it is not the on-policy loop: batches 2 and 3 came from older weights
    on_policy = train_rl(_cfg(tmp_path / "b", overlap=False), load_policy("tiny", seed=1),
                         quiet=True)
    assert [h["staleness"] for h in on_policy.history] == [0.0, 0.0, 0.0]
    assert not torch.allclose(_weights(on_policy.policy), overlapped, rtol=1e-5, atol=1e-7)


def test_overlap_needs_one_process(tmp_path, monkeypatch):
    from tripod.train import rl

    monkeypatch.setattr(rl, "init_parallel", lambda device, fsdp: (
        rl.Parallel(rank=0, world_size=2), device))
    with pytest.raises(ValueError, match="one process"):
        train_rl(_cfg(tmp_path, overlap=True), load_policy("tiny", seed=1), quiet=True)
