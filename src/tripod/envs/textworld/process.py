"""What TextWorld's game process runs: one game, loaded and stepped by request.

Jericho, the Z-machine interpreter under TextWorld, is a C library that can hang or crash the
whole process on odd input (a NUL byte makes it spin forever). So each env plays its games in
a child process of its own (`tripod.envs.process.ChildProcess`, which owns the time-outs, the
crash handling and the restart); this module is the part that runs in that child: a
`TextWorldGame` answers ``load`` and ``step`` with plain state dicts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tripod.envs.process import ChildProcess

GAME_TARGET = "tripod.envs.textworld.process:TextWorldGame"
LABEL = "TextWorld game process"


@dataclass(frozen=True)
class LoadRequest:
    """The argument of a ``load`` request."""

    story_file: str
    """The compiled game (``game.z8``)."""
    infos: dict[str, Any]
    """Keyword arguments of `textworld.EnvInfos`: which state fields to compute."""


class TextWorldGame:
    """One TextWorld game at a time, in the child process (imports textworld on first load)."""

    def __init__(self) -> None:
        self._game: Any = None

    def load(self, request: LoadRequest) -> dict[str, Any]:
        """Start the game in `request.story_file` (closing the previous one); its first state."""
        import textworld

        self.close()
        self._game = textworld.start(request.story_file, textworld.EnvInfos(**request.infos))
        return state_dict(self._game.reset())

    def step(self, command: str) -> dict[str, Any]:
        """Send one command to the loaded game; the state after it."""
        if self._game is None:
            raise RuntimeError("step before load")
        return state_dict(self._game.step(command)[0])

    def close(self) -> None:
        if self._game is not None:
            self._game.close()
            self._game = None


def game_process() -> ChildProcess:
    """A (not yet started) child process for one `TextWorldGame`. Its stdout is kept in the
    log with stderr: Jericho and Inform print their fatal errors there."""
    return ChildProcess(GAME_TARGET, label=LABEL, keep_stdout=True)


def state_dict(state: Any) -> dict[str, Any]:
    """The parts of a TextWorld `GameState` the env uses, as plain picklable values."""
    return {
        "feedback": state.feedback or "",
        "won": bool(state.won),
        "lost": bool(state.lost),
        "score": float(state.score or 0),
        "max_score": float(state.max_score or 0),
        "objective": state.objective or "",
        "policy_commands": list(state.policy_commands or []),
        "admissible_commands": list(state.admissible_commands or []),
        "description": state.description,
        "inventory": state.inventory,
        "walkthrough": list(state.get("extra.walkthrough") or []),
    }
