"""Recipes fail before any work, with a message naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from tripod.cli import main
from tripod.core.config import ConfigError, load_config

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


@pytest.mark.parametrize("override, key", [
    (["algo.unknown_knob=1"], "algo.unknown_knob: unknown key"),
    (["algo.lr=fast"], "algo.lr"),
    (["algo.estimator=grpo", "rollout.group_size=1"], "rollout.group_size"),
    (["algo.estimator=rloo", "rollout.group_size=1"], "rollout.group_size"),
    (["algo.estimator=ppo2"], "algo.estimator"),
    (["nonsense.key=1"], "nonsense: unknown key"),
    (["rollout.train.temperature=-1"], "rollout.train.temperature"),
])
def test_bad_overrides_name_the_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(overrides=override)


def test_overrides_apply_and_types_are_parsed():
    cfg = load_config(overrides=["algo.estimator=grpo", "rollout.group_size=8", "algo.lr=1e-5",
                                 "env.options={vocabulary: 4}", "prompt.history_window=2"])
    assert cfg.rollout.group_size == 8 and cfg.algo.lr == 1e-5
    assert cfg.env.options == {"vocabulary": 4} and cfg.prompt.history_window == 2


def test_every_shipped_recipe_is_valid():
    recipes = sorted(RECIPES.glob("*.yaml"))
    assert len(recipes) >= 7
    for path in recipes:
        load_config(path)


def test_cli_reports_bad_recipe_without_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("algo: {estimator: grpo}\nrollout: {group_size: 1}\n")
    assert main(["train", str(bad)]) == 2
    assert "rollout.group_size" in capsys.readouterr().err
