"""TextWorld games as tripod envs: custom quests, tw-simple and tw-cooking.

Env ids (the environments of arXiv 2510.01132):

- ``textworld/w{W}-o{O}-q{Q}``: a custom game with W rooms, O objects and a quest of Q
  actions (e.g. ``textworld/w2-o3-q4``). The objective gives step-by-step instructions.
- ``textworld/simple-{dense,balanced,sparse}``: TextWorld's tw-simple challenge (a fixed
  house; find the food and put it on the stove) at three reward densities. Eating the food
  is a losing event: ``lost=True, won=False``.
- ``textworld/cooking``: TextWorld's tw-cooking challenge (the FTWP games), e.g.
  ``make("textworld/cooking", recipe=3, go=9)``.

Options (``make(env_id, split, **options)``, a recipe's ``env.options``) are keyword
arguments of the family's factory, so an unknown name fails before a run starts
(`tripod.envs.registry.check_options`). Every family takes the observation flags of
`TextWorldObsConfig` (``objective``, ``look``, ``inventory``, ``admissible_actions``), the
env's own turn cap ``max_turns`` (None: no cap) and the time-outs ``step_timeout_s`` and
``load_timeout_s``; tw-simple adds ``goal`` and ``test_foods`` (`SimpleGame`), tw-cooking
the fields of `CookingGame`.

Layout: `generate` (game configs, deterministic generation and the disk cache), `text`
(feedback clean-up, invalid-action rules), `process` (the child process that runs the game,
so that a crash or hang becomes `EnvError`), `env` (`TextWorldEnv`). Each family registers a
`prepare` hook that generates a run's games up front, in parallel (`prepare_games`); `reset`
generates a missing game itself.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tripod.envs.base import game_seed
from tripod.envs.registry import register
from tripod.envs.textworld.env import (
    LOAD_TIMEOUT_S,
    STEP_TIMEOUT_S,
    TextWorldEnv,
    TextWorldObsConfig,
    info_from_state,
)
from tripod.envs.textworld.generate import (
    CookingGame,
    CustomGame,
    GameConfig,
    SimpleGame,
    game_dir,
    generate_game,
    generate_games,
)
from tripod.envs.textworld.text import clean_feedback, is_parser_error

CUSTOM_PATTERN = r"textworld/w(\d+)-o(\d+)-q(\d+)"
SIMPLE_PATTERN = r"textworld/simple-(dense|balanced|sparse)"
COOKING_PATTERN = r"textworld/cooking"

_OBS = TextWorldObsConfig  # its class attributes are the flags' defaults
_SPLIT_FOODS = {"valid": "valid", "test": "test"}  # other splits draw TextWorld's train foods


def _id_match(pattern: str, env_id: str) -> re.Match[str]:
    """The id's parts (a factory called with another family's id is a caller bug)."""
    match = re.fullmatch(pattern, env_id)
    if match is None:
        raise KeyError(f"{env_id!r} does not match {pattern!r}")
    return match


def make_custom(env_id: str, split: str = "train", *, objective: bool = _OBS.objective,
                look: bool = _OBS.look, inventory: bool = _OBS.inventory,
                admissible_actions: bool = _OBS.admissible_actions,
                max_turns: int | None = None, step_timeout_s: float = STEP_TIMEOUT_S,
                load_timeout_s: float = LOAD_TIMEOUT_S) -> TextWorldEnv:
    """``textworld/wW-oO-qQ``: the sizes come from the id; options as in the module doc."""
    game = CustomGame(*(int(g) for g in _id_match(CUSTOM_PATTERN, env_id).groups()))
    obs = TextWorldObsConfig(objective, look, inventory, admissible_actions)
    return TextWorldEnv(env_id, split, game, obs, max_turns, step_timeout_s, load_timeout_s)


def make_simple(env_id: str, split: str = "train", *, goal: str = SimpleGame.goal,
                test_foods: bool = SimpleGame.test_foods, objective: bool = _OBS.objective,
                look: bool = _OBS.look, inventory: bool = _OBS.inventory,
                admissible_actions: bool = _OBS.admissible_actions,
                max_turns: int | None = None, step_timeout_s: float = STEP_TIMEOUT_S,
                load_timeout_s: float = LOAD_TIMEOUT_S) -> TextWorldEnv:
    """``textworld/simple-DENSITY``: `SimpleGame` options ``goal`` and ``test_foods``."""
    density = _id_match(SIMPLE_PATTERN, env_id).group(1)
    game = SimpleGame(rewards=density, goal=goal, test_foods=test_foods)
    obs = TextWorldObsConfig(objective, look, inventory, admissible_actions)
    return TextWorldEnv(env_id, split, game, obs, max_turns, step_timeout_s, load_timeout_s)


def make_cooking(env_id: str, split: str = "train", *, recipe: int = CookingGame.recipe,
                 take: int = CookingGame.take, go: int = CookingGame.go,
                 open: bool = CookingGame.open, cook: bool = CookingGame.cook,  # noqa: A002
                 cut: bool = CookingGame.cut, drop: bool = CookingGame.drop,
                 recipe_seed: int = CookingGame.recipe_seed, food_split: str | None = None,
                 objective: bool = _OBS.objective, look: bool = _OBS.look,
                 inventory: bool = _OBS.inventory,
                 admissible_actions: bool = _OBS.admissible_actions,
                 max_turns: int | None = None, step_timeout_s: float = STEP_TIMEOUT_S,
                 load_timeout_s: float = LOAD_TIMEOUT_S) -> TextWorldEnv:
    """``textworld/cooking``: the `CookingGame` options. ``food_split`` defaults to the
    env's split for ``valid`` and ``test`` (unseen foods) and to ``train`` otherwise."""
    _id_match(COOKING_PATTERN, env_id)
    game = CookingGame(recipe=recipe, take=take, go=go, open=open, cook=cook, cut=cut,
                       drop=drop, recipe_seed=recipe_seed,
                       food_split=food_split or _SPLIT_FOODS.get(split, "train"))
    obs = TextWorldObsConfig(objective, look, inventory, admissible_actions)
    return TextWorldEnv(env_id, split, game, obs, max_turns, step_timeout_s, load_timeout_s)


_FACTORIES: tuple[tuple[str, Callable[..., TextWorldEnv]], ...] = (
    (CUSTOM_PATTERN, make_custom), (SIMPLE_PATTERN, make_simple),
    (COOKING_PATTERN, make_cooking))


def game_config(env_id: str, split: str = "train", **options: Any) -> GameConfig:
    """The generation config that `make(env_id, split, **options)` plays (options are
    validated exactly as by `make`; the ones that do not shape the game are ignored)."""
    for pattern, factory in _FACTORIES:
        if re.fullmatch(pattern, env_id):
            return factory(env_id, split, **options).game
    raise KeyError(f"not a TextWorld env id: {env_id!r}")


def default_workers() -> int:
    """Generation processes for `prepare`: one per available core, at most 8 (each runs
    the Inform 7 compiler, which is single-threaded)."""
    return max(1, min(8, len(os.sched_getaffinity(0))))


def prepare_games(env_id: str, split: str, indices: Sequence[int], workers: int = 2,
                  progress: bool = True, **options: Any) -> list[Path]:
    """Generate (or find cached) games ``indices`` of `split` for `env_id`, in parallel.

    `options` are the env's options (those that do not shape the game are ignored).
    Returns the game folders in the order of `indices`."""
    game = game_config(env_id, split, **options)
    seeds = [game_seed(split, i) for i in indices]
    return generate_games(game, seeds, workers=workers, progress=progress, label=env_id)


def prepare(env_id: str, split: str, game_indices: list[int], options: dict[str, Any]) -> None:
    """The registry's `GamePreparer` for every TextWorld family: generate a run's games
    before it starts, with the run's env options, on `default_workers()` processes."""
    prepare_games(env_id, split, game_indices, workers=default_workers(), **options)


register(CUSTOM_PATTERN, make_custom, ("textworld/w2-o3-q4", "textworld/w4-o6-q8"),
         "TextWorld custom games: W rooms, O objects, quest of Q actions (step-by-step goal)",
         prepare=prepare)
register(SIMPLE_PATTERN, make_simple,
         ("textworld/simple-dense", "textworld/simple-balanced", "textworld/simple-sparse"),
         "TextWorld tw-simple: cook the food in a fixed house; eating it loses the game",
         prepare=prepare)
register(COOKING_PATTERN, make_cooking, ("textworld/cooking",),
         "TextWorld tw-cooking (FTWP): follow a recipe; options via overrides",
         prepare=prepare)

__all__ = [
    "COOKING_PATTERN",
    "CUSTOM_PATTERN",
    "SIMPLE_PATTERN",
    "CookingGame",
    "CustomGame",
    "GameConfig",
    "SimpleGame",
    "TextWorldEnv",
    "TextWorldObsConfig",
    "clean_feedback",
    "default_workers",
    "game_config",
    "game_dir",
    "generate_game",
    "generate_games",
    "info_from_state",
    "is_parser_error",
    "make_cooking",
    "make_custom",
    "make_simple",
    "prepare",
    "prepare_games",
]
