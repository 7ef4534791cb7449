"""The paper's settings as recipes (recipes/paper/): each validates and carries the published
values (arXiv 2510.01132), so a typo in a learning rate or KL weight fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from tripod.core.config import load_config

PAPER = Path(__file__).resolve().parents[2] / "recipes" / "paper"

PUBLISHED = {
    "ppo": {"algo.estimator": "gae", "algo.gamma": 1.0, "algo.lam": 1.0, "algo.clip_low": 0.2,
            "algo.clip_high": 0.2, "algo.kl_coef": 0.01, "algo.kl_in": "reward",
            "algo.kl_kind": "k1", "algo.lr": 1e-6, "algo.critic_lr": 1e-5,
            "algo.critic": "copy", "algo.loss_agg": "token_mean", "algo.grad_clip": 1.0,
            "rollout.train.temperature": 0.7, "algo.minibatch_size": 256},
    "grpo": {"algo.estimator": "grpo", "algo.lr": 1e-6, "algo.kl_coef": 0.001,
             "algo.kl_in": "loss", "rollout.group_size": 4, "rollout.train.temperature": 0.7},
    "rloo": {"algo.estimator": "rloo", "algo.lr": 1e-6, "algo.kl_coef": 0.001,
             "rollout.train.temperature": 0.7},
}
TURNS = {"w2-o3-q4": 12, "w4-o6-q8": 24}


def _get(cfg, dotted: str):
    node = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def test_there_are_paper_recipes():
    assert len(list(PAPER.glob("*.yaml"))) >= 4


@pytest.mark.parametrize("path", sorted(PAPER.glob("*.yaml")), ids=lambda p: p.stem)
def test_paper_recipe_validates_with_the_published_settings(path):
    cfg = load_config(path)
    algo = path.stem.split("-")[0]
    for key, value in PUBLISHED[algo].items():
        assert _get(cfg, key) == pytest.approx(value) if isinstance(value, float) else (
            _get(cfg, key) == value), key
    game = cfg.env.id.split("/")[1]
    assert cfg.env.max_turns == TURNS[game]
    episodes = cfg.rollout.games_per_iter * cfg.rollout.group_size
    assert episodes == 256  # one update per batch of 256 episodes
    assert cfg.model.device == "cuda" and cfg.run.name == f"paper-{path.stem}"
