"""Fixtures of the study tests: a toy base recipe (the helpers are in helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

TOY_RECIPE = """\
env: {id: toy/letters-2, max_turns: 2}
model: {name: tiny}
run: {name: toy}
algo: {estimator: grpo}
rollout: {group_size: 2, games_per_iter: 2, train: {max_new_tokens: 3}, eval: {max_new_tokens: 3}}
train: {iterations: 2, tensorboard: false, trajectory_groups: 0}
eval: {games: 4}
"""


@pytest.fixture
def toy_dir(tmp_path: Path) -> Path:
    (tmp_path / "toy.yaml").write_text(TOY_RECIPE)
    return tmp_path
