"""Shared pieces of the reliability tests: the tiny-model recipe and a finished run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tripod.core.config import load_config

TINY = ["model.name=tiny", "env.id=toy/letters-2", "env.max_turns=2",
        "env.options={vocabulary: 4}", "rollout.games_per_iter=2", "rollout.group_size=2",
        "rollout.batch_size=4", "rollout.train.temperature=0.7", "rollout.train.max_new_tokens=3",
        "rollout.truncated_action=step", "reward.kind=dense", "algo.lr=1e-3",
        "algo.estimator=rloo", "train.tensorboard=false", "train.trajectory_groups=0"]
"""A recipe that trains the tiny random model on `toy/letters-2` in about a second an
iteration on CPU."""


def tiny_cfg(out_dir: Path, *extra: str):
    return load_config(overrides=[*TINY, f"run.out_dir={out_dir}", *extra])


@pytest.fixture(name="tiny_cfg")
def tiny_cfg_fixture():
    """`tiny_cfg(out_dir, *overrides)`: the tiny recipe with overrides."""
    return tiny_cfg


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_policy_factory) -> Path:
    """A run folder with checkpoints after iterations 1 and 2 (built once per module)."""
    from tripod.train.rl import train_rl

    out = tmp_path_factory.mktemp("run")
    cfg = tiny_cfg(out, "run.name=base", "train.iterations=2", "train.checkpoint_every=1")
    train_rl(cfg, policy=tiny_policy_factory(), quiet=True)
    return cfg.run_dir


@pytest.fixture
def run_copy(finished_run, tmp_path) -> Path:
    """A private copy of `finished_run` that a test may damage."""
    dst = tmp_path / "run"
    shutil.copytree(finished_run, dst)
    return dst
