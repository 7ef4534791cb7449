"""TextWorld families without playing: option validation, factories, the `prepare` hook, the
state -> StepInfo rules, text clean-up, and no side effects on import.

Only `test_prepare_hook_generates_a_runs_games` builds games (two, in a fresh cache)."""

from __future__ import annotations

import inspect
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tripod
from tripod.envs import make
from tripod.envs.registry import check_options, family_of
from tripod.envs.textworld import (
    CookingGame,
    CustomGame,
    SimpleGame,
    TextWorldEnv,
    clean_feedback,
    game_config,
    info_from_state,
    is_parser_error,
    prepare,
)
from tripod.envs.textworld.generate import is_generated

CUSTOM = "textworld/w2-o3-q4"
SIMPLE = "textworld/simple-dense"
COOKING = "textworld/cooking"
IDS = (CUSTOM, SIMPLE, COOKING)


@pytest.mark.parametrize("env_id", IDS)
def test_every_option_is_an_explicit_keyword(env_id: str) -> None:
    factory = family_of(env_id).factory
    kinds = {p.kind for p in inspect.signature(factory).parameters.values()}
    assert inspect.Parameter.VAR_KEYWORD not in kinds
    names = family_of(env_id).option_names()
    assert {"look", "inventory", "admissible_actions", "objective", "max_turns",
            "step_timeout_s", "load_timeout_s"} <= names
    assert "max_steps" not in names and "obs" not in names


@pytest.mark.parametrize(("env_id", "key"), [(CUSTOM, "recipe"), (CUSTOM, "goal"),
                                             (SIMPLE, "recipe"), (COOKING, "goal"),
                                             (COOKING, "max_steps")])
def test_unknown_option_fails_naming_the_key(env_id: str, key: str) -> None:
    with pytest.raises(ValueError, match=f"unknown key.*{key}"):
        check_options(env_id, {"look": True, key: 1})
    with pytest.raises(TypeError, match=key):
        make(env_id, **{key: 1})


def test_family_options_are_accepted() -> None:
    check_options(CUSTOM, {"look": True, "max_turns": 12})
    check_options(SIMPLE, {"goal": "brief", "test_foods": True})
    check_options(COOKING, {"recipe": 3, "go": 9, "food_split": "test", "inventory": True})


def test_unknown_ids_and_bad_values() -> None:
    with pytest.raises(KeyError, match="w2-o3-q4"):
        make("textworld/w2-o3")
    with pytest.raises(ValueError, match="go must be"):
        make(COOKING, go=7)
    with pytest.raises(ValueError, match="max_turns"):
        make(CUSTOM, max_turns=0)


def test_factories_build_the_game_the_id_and_options_say() -> None:
    assert make(CUSTOM).game == CustomGame(2, 3, 4)
    assert make("textworld/simple-sparse", goal="brief").game == SimpleGame("sparse", "brief")
    env = make(COOKING, split="valid", recipe=1, take=1, go=1)
    assert isinstance(env, TextWorldEnv)
    assert env.game == CookingGame(recipe=1, take=1, go=1, food_split="valid")
    assert "recipe1" in env.game.key and "valid" in env.game.key
    assert make(COOKING, split="sft").game.food_split == "train"
    assert make(COOKING, split="test", food_split="train").game.food_split == "train"


def test_factory_defaults_are_the_configs_defaults() -> None:
    env = make(COOKING)
    assert env.game == CookingGame() and env.max_turns is None
    assert make(SIMPLE).game == SimpleGame("dense")


def test_game_config_ignores_options_that_do_not_shape_the_game() -> None:
    assert game_config(CUSTOM, "test", look=True, max_turns=5) == CustomGame(2, 3, 4)
    assert game_config(COOKING, "test", recipe=3).key == CookingGame(
        recipe=3, food_split="test").key
    with pytest.raises(TypeError, match="recipe"):
        game_config(CUSTOM, "test", recipe=3)


@pytest.mark.parametrize("env_id", IDS)
def test_every_family_registers_the_prepare_hook(env_id: str) -> None:
    hook = family_of(env_id).prepare
    assert hook is prepare
    assert list(inspect.signature(hook).parameters) == ["env_id", "split", "game_indices",
                                                        "options"]


def test_prepare_hook_generates_a_runs_games(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("TRIPOD_CACHE", str(tmp_path))
    prepare(CUSTOM, "valid", [0, 1], {"look": True, "max_turns": 12})
    game = CustomGame(2, 3, 4)
    assert is_generated(game, 20_000_000) and is_generated(game, 20_000_001)
    assert not is_generated(game, 20_000_002)
    with pytest.raises(TypeError, match="recipe"):
        prepare(CUSTOM, "valid", [0], {"recipe": 3})


def test_reset_takes_a_game_index() -> None:
    assert list(inspect.signature(TextWorldEnv.reset).parameters) == ["self", "game_index"]


def _state(**fields: object) -> dict:
    base = {"won": False, "lost": False, "score": 0.0, "max_score": 4.0, "objective": "o",
            "policy_commands": ["go north"], "admissible_commands": ["go north", "look"]}
    return {**base, **fields}


def test_progress_is_score_over_max_score() -> None:
    info = info_from_state(_state(score=1.0), "g")
    assert info.progress == 0.25 and not info.won and not info.lost
    assert info.expert_action == "go north"


@pytest.mark.parametrize(("fields", "progress"), [
    ({"score": 4.0, "won": True}, 1.0),
    ({"score": 3.0, "won": True}, 1.0),  # won: every quest done, whatever the score says
    ({"score": 6.0}, 1.0),               # clamped to [0, 1]
    ({"score": -1.0}, 0.0),
    ({"score": 0.0, "max_score": 0.0}, 0.0),  # no scored quest: only a win gives progress
    ({"score": 2.0, "max_score": math.inf}, 0.0),  # a repeatable quest: no finite max
])
def test_progress_stays_in_unit_interval(fields: dict, progress: float) -> None:
    assert info_from_state(_state(**fields), "g").progress == progress


def test_won_and_lost_are_never_both_true() -> None:
    both = info_from_state(_state(won=True, lost=True, score=4.0), "g")
    assert both.won and not both.lost
    lost = info_from_state(_state(lost=True, score=1.0), "g")
    assert lost.lost and not lost.won and lost.progress == 0.25
    for info in (both, lost):  # a finished game has no expert move and no commands
        assert info.expert_action is None and info.admissible_actions == []


def test_parser_error_detection() -> None:
    assert is_parser_error("That's not a verb I recognise.")
    assert is_parser_error("\nWhat do you want to take?")
    assert not is_parser_error("You can't go that way.")
    assert clean_feedback("\nHi.\n\n\n\n>    -= Attic =-0/3") == "Hi."


def test_import_sets_no_environment_variables() -> None:
    code = ("import os, tripod.envs.registry, tripod.core.paths; before = dict(os.environ); "
            "import tripod.envs.textworld, tripod.envs.textworld.process; "
            "import tripod.envs.textworld.generate, tripod.envs.textworld.text; "
            "print(sorted(set(os.environ.items()) ^ set(before.items())))")
    src = str(Path(tripod.__file__).resolve().parent.parent)  # this checkout, not another
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (src, os.environ.get("PYTHONPATH")) if p)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=env)
    assert out.stdout.strip() == "[]"

