"""Recipes fail before any work, with a message naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from tripod.cli import main
from tripod.core.config import ConfigError, TrainConfig, load_config

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


def test_an_override_sets_its_key_a_mapping_included(tmp_path):
    """`key={}` clears the recipe's mapping (it used to merge into it and keep every entry);
    a dotted key below a mapping sets that one entry; the last of two overrides wins."""
    recipe = RECIPES / "best-cpu.yaml"
    assert load_config(recipe).eval.games_by_env  # the recipe has entries
    assert load_config(recipe, ["eval.games_by_env={}"]).eval.games_by_env == {}
    cfg = load_config(recipe, ["env.options.look=true", "algo.lr=1", "algo.lr=2e-5"])
    assert cfg.env.options == {"inventory": True, "look": True} and cfg.algo.lr == 2e-5
    cfg = load_config(recipe, ["env.options={look: true}"])
    assert cfg.env.options == {"look": True} and cfg.env.max_turns == 12
    with pytest.raises(ConfigError, match="'id' is not a section"):
        load_config(recipe, ["env.id.x=1"])


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


def _nested_sections(model, prefix=""):
    """(dotted path, section class) for every nested section of the recipe schema."""
    from pydantic import BaseModel

    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            yield f"{prefix}{name}", value
            yield from _nested_sections(value, f"{prefix}{name}.")


def test_overriding_one_key_keeps_every_other_default_of_its_section():
    """`rollout.eval.max_new_tokens=4` must not turn greedy evaluation into sampling."""
    default = TrainConfig()
    sections = list(_nested_sections(default))
    assert "rollout.eval" in [path for path, _ in sections]
    for path, section in sections:
        for key, value in section.model_dump().items():
            if isinstance(value, dict) or isinstance(getattr(section, key), BaseModel):
                continue
            cfg = load_config(None, [f"{path}.{key}={yaml.safe_dump(value).strip()}"])
            node = cfg
            for part in path.split("."):
                node = getattr(node, part)
            assert node.model_dump() == section.model_dump(), (path, key)
    cfg = load_config(None, ["rollout.eval.max_new_tokens=4"])
    assert cfg.rollout.eval.temperature == 0.0 and cfg.rollout.eval.max_new_tokens == 4


def test_every_config_field_is_documented():
    sections = [("", TrainConfig()), *_nested_sections(TrainConfig())]
    undocumented = [f"{path}.{name}" for path, section in sections
                    for name, field in type(section).model_fields.items()
                    if not field.description]
    assert not undocumented


def test_validating_a_recipe_does_not_import_torch():
    import subprocess
    import sys

    code = ("import sys; from tripod.core.config import load_config; "
            "load_config('recipes/textworld-grpo-sparse.yaml'); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.strip() == "False"


def test_unknown_env_option_fails_before_any_work(tmp_path):
    from tripod.train.pipeline import run_recipe

    cfg = load_config(None, ["model.name=tiny", "env.id=textworld/w2-o3-q4",
                             "env.options={bogus: 1}", f"run.out_dir={tmp_path}"])
    with pytest.raises(ConfigError, match="bogus"):
        run_recipe(cfg)
    assert not any(tmp_path.iterdir())  # not even a run directory was made
