"""Offline, deterministic game generation: one small config per family, a disk cache by seed.

Game ``index`` of a split is generated from ``game_seed(split, index)``, compiled once with
Inform 7 and cached under ``cache_dir("textworld", <textworld version>, <every generation
parameter>, <seed>)``. `generate_games` builds many games in parallel worker processes.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Protocol

from tripod.core.paths import cache_dir


class GameConfig(Protocol):
    """What is needed to generate a game from a seed."""

    @property
    def key(self) -> str:
        """A folder name made of every generation parameter (the cache key)."""
        ...

    def build(self, options: Any) -> Any:
        """Build the `textworld.Game` for `options` (a seeded `textworld.GameOptions`)."""
        ...


@dataclass(frozen=True)
class CustomGame:
    """A custom TextWorld game (``tw-make custom``): rooms, objects, quest length."""

    world_size: int
    """Number of rooms."""
    nb_objects: int
    """Number of objects (quest objects plus distractors)."""
    quest_length: int
    """Number of actions in the winning walkthrough."""

    def __post_init__(self) -> None:
        if self.world_size < 1 or self.nb_objects < 0 or self.quest_length < 1:
            raise ValueError(f"invalid custom game sizes: {self}")

    @property
    def key(self) -> str:
        return f"custom-w{self.world_size}-o{self.nb_objects}-q{self.quest_length}"

    def build(self, options: Any) -> Any:
        from textworld.generator import make_game

        options.nb_rooms = self.world_size
        options.nb_objects = self.nb_objects
        options.quest_length = self.quest_length
        return make_game(options)


@dataclass(frozen=True)
class SimpleGame:
    """TextWorld's tw-simple challenge (see `textworld.challenges.tw_simple`)."""

    rewards: str = "dense"
    """Reward density: ``dense``, ``balanced`` or ``sparse`` (sparse: only the final goal)."""
    goal: str = "detailed"
    """Objective shown: ``detailed`` (step by step), ``brief`` or ``none``."""
    test_foods: bool = False
    """Draw the food from TextWorld's held-out food names (garlic, kiwi, carrot)."""

    def __post_init__(self) -> None:
        if self.rewards not in ("dense", "balanced", "sparse"):
            raise ValueError(f"rewards must be dense, balanced or sparse, got {self.rewards!r}")
        if self.goal not in ("detailed", "brief", "none"):
            raise ValueError(f"goal must be detailed, brief or none, got {self.goal!r}")

    @property
    def key(self) -> str:
        return f"simple-{self.rewards}-goal_{self.goal}-testfoods_{int(self.test_foods)}"

    def build(self, options: Any) -> Any:
        from textworld.challenges import CHALLENGES

        settings = {"rewards": self.rewards, "goal": self.goal, "test": self.test_foods}
        return CHALLENGES["tw-simple"][1](settings, options)


@dataclass(frozen=True)
class CookingGame:
    """TextWorld's tw-cooking challenge (the First TextWorld Problems games)."""

    recipe: int = 2
    """Number of ingredients in the recipe."""
    take: int = 1
    """How many ingredients must be found (at most `recipe`); the others are in hand."""
    go: int = 6
    """Number of rooms: 1, 6, 9 or 12."""
    open: bool = True
    """Containers and doors must be opened."""
    cook: bool = True
    """Some ingredients must be cooked (roasted, fried, grilled)."""
    cut: bool = True
    """Some ingredients must be cut (sliced, diced, chopped)."""
    drop: bool = False
    """The inventory has a limited capacity."""
    recipe_seed: int = 0
    """Fixed recipe seed (0: the recipe varies with the game seed)."""
    food_split: str = "train"
    """TextWorld's own food distribution: ``train``, ``valid`` or ``test`` (the env factory
    picks it from the env's split unless told: ``valid`` and ``test`` use unseen foods)."""

    def __post_init__(self) -> None:
        if self.go not in (1, 6, 9, 12):
            raise ValueError(f"go must be 1, 6, 9 or 12, got {self.go}")
        if self.recipe < 1 or not 0 <= self.take <= self.recipe:
            raise ValueError(f"need recipe >= 1 and 0 <= take <= recipe, got {self}")
        if self.food_split not in ("train", "valid", "test"):
            raise ValueError(f"food_split must be train, valid or test, got {self.food_split!r}")

    @property
    def key(self) -> str:
        flags = "".join(name for name in ("open", "cook", "cut", "drop") if getattr(self, name))
        return (f"cooking-recipe{self.recipe}-take{self.take}-go{self.go}-{flags or 'none'}"
                f"-rseed{self.recipe_seed}-{self.food_split}")

    def build(self, options: Any) -> Any:
        from textworld.challenges import CHALLENGES

        settings = {"recipe": self.recipe, "take": self.take, "go": self.go, "open": self.open,
                    "cook": self.cook, "cut": self.cut, "drop": self.drop,
                    "recipe_seed": self.recipe_seed, "split": self.food_split}
        return CHALLENGES["tw-cooking"][1](settings, options)


def _tw_version() -> str:
    import textworld

    return textworld.__version__


def game_dir(game: GameConfig, seed: int) -> Path:
    """The cache folder of one game: every generation parameter, the seed, the TextWorld
    version (a new generator may build a different game from the same seed)."""
    return cache_dir("textworld", f"tw{_tw_version()}", game.key) / f"seed{seed}"


def is_generated(game: GameConfig, seed: int) -> bool:
    """The game is complete in the cache (both the story file and its metadata)."""
    folder = game_dir(game, seed)
    return (folder / "game.z8").is_file() and (folder / "game.json").is_file()


def generate_game(game: GameConfig, seed: int) -> Path:
    """Generate and compile one game unless cached; returns its folder.

    Written atomically: the game is built in a private temporary folder next to the final
    one and renamed into place, so a crash or a concurrent generator never leaves a
    half-written game under the final name.
    """
    folder = game_dir(game, seed)
    if is_generated(game, seed):
        return folder
    from textworld import GameOptions
    from textworld.generator import compile_game

    tmp = folder.parent / f".tmp-{folder.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    try:
        options = GameOptions()
        options.seeds = seed
        options.path = str(tmp / "game.z8")
        options.force_recompile = True
        compile_game(game.build(options), options)
        try:
            os.rename(tmp, folder)
        except OSError:  # another process finished the same game first
            if not is_generated(game, seed):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def generate_games(game: GameConfig, seeds: Sequence[int], workers: int = 2,
                   progress: bool = True, label: str = "") -> list[Path]:
    """Generate (or find cached) the games of `seeds`; returns their folders in that order.

    Workers are separate processes (``spawn``: safe next to threads and CUDA); a progress
    bar shows while games are built. A generation error is re-raised here."""
    todo = sorted({s for s in seeds if not is_generated(game, s)})
    description = f"generating {label or game.key}"
    if todo and workers > 1 and len(todo) > 1:
        _generate_parallel(game, todo, workers, progress, description)
    else:
        for seed in _track(todo, progress, description):
            generate_game(game, seed)
    return [game_dir(game, s) for s in seeds]


def _generate_task(game: GameConfig, seed: int) -> str:
    return str(generate_game(game, seed))


def _track(items: list[int], show: bool, description: str) -> Iterable[int]:
    if not show or not items:
        return items
    from rich.progress import track

    return track(items, description=description)


def _generate_parallel(game: GameConfig, seeds: list[int], workers: int, show: bool,
                       description: str) -> None:
    from rich.progress import Progress

    with Progress(disable=not show) as bar, ProcessPoolExecutor(
            max_workers=min(workers, len(seeds)), mp_context=get_context("spawn")) as pool:
        task = bar.add_task(description, total=len(seeds))
        futures = [pool.submit(_generate_task, game, seed) for seed in seeds]
        for future in as_completed(futures):
            future.result()  # re-raise a generation error here
            bar.advance(task)
