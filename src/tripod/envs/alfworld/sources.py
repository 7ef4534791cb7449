"""Where game number `index` of a split comes from: generated or published ALFWorld games.

Built by the factories in the parent process and sent (pickled) to the game's child process,
which calls them; so this module imports nothing from the `alfworld` wheel at import time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tripod.envs.base import game_seed

if TYPE_CHECKING:
    from tripod.envs.alfworld.engine import Engine


@dataclass(frozen=True)
class GameRef:
    """A game file on disk and its stable id."""

    path: Path
    game_id: str


@dataclass(frozen=True)
class GeneratedGames:
    """Game `index` of `split`: task type ``task_types[index % len]``, generator seed
    ``game_seed(split, index)``; generated on first use and cached."""

    split: str
    task_types: tuple[str, ...]

    def __call__(self, index: int, engine: Engine) -> GameRef:
        # Imported here, in the game's child process: the generator imports the alfworld
        # wheel, whose import writes ALFWORLD_DATA and creates its data folder.
        from tripod.envs.alfworld import generator

        task_type = self.task_types[index % len(self.task_types)]
        seed = game_seed(self.split, index)
        path = generator.cached_game(self.split, seed, task_type, engine)
        return GameRef(path, f"alfworld/generated/{self.split}/{task_type}-{seed}")


@dataclass(frozen=True)
class RealGames:
    """Game `index` of the sorted real games of the split (wrapping around)."""

    games: tuple[Path, ...]
    root: Path

    def __call__(self, index: int, engine: Engine) -> GameRef:
        path = self.games[index % len(self.games)]
        return GameRef(path, "alfworld/real/" + path.parent.relative_to(self.root).as_posix())


GameSource = GeneratedGames | RealGames
"""(game index within the split, engine to reuse for generation) -> the game to play."""
