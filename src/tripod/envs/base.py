"""The environment pillar's contract: a text-level, Gymnasium-shaped episode API.

An `Env` knows nothing about tokens. `reset(game_index)` starts the episode for game number
`game_index`
of the env's split and returns the first observation with a typed `StepInfo`; `step(action)`
applies one action (free text) and returns a `Step`. `terminated` means the game ended (won
or lost); `truncated` means it was cut short from outside (turn cap, time-out).

Splits are disjoint by construction: the game played for (split, index) is generated from
`game_seed(split, index)`, and the offsets of the splits are far apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

SPLITS = ("train", "sft", "valid", "test")
"""Named game splits. `train` feeds RL, `sft` expert demonstrations, `valid` periodic
evaluation during training, `test` the final held-out evaluation."""

_SPLIT_OFFSET = {"train": 0, "sft": 10_000_000, "valid": 20_000_000, "test": 30_000_000}
_SPLIT_SIZE = 10_000_000


def game_seed(split: str, index: int) -> int:
    """The generator seed of game `index` in `split` (disjoint ranges per split)."""
    if split not in _SPLIT_OFFSET:
        raise ValueError(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")
    if not 0 <= index < _SPLIT_SIZE:
        raise ValueError(f"game index must be in [0, {_SPLIT_SIZE}), got {index}")
    return _SPLIT_OFFSET[split] + index


@dataclass
class StepInfo:
    """What an env reports besides the observation text (same fields for every env)."""

    objective: str = ""
    """The task statement shown to the agent at the start of the episode."""
    won: bool = False
    """The task was completed. The only notion of success."""
    lost: bool = False
    """The episode ended in failure inside the game (e.g. eating the food in tw-simple).
    `won` and `lost` are never both true; `terminated` is `won or lost` (or an env error)."""
    score: float = 0.0
    """The game's own running score."""
    max_score: float = 1.0
    """The best score reachable in this game (normaliser for dense rewards)."""
    progress: float = 0.0
    """Task progress in [0, 1] (score / max_score for TextWorld; env specific elsewhere)."""
    expert_action: str | None = None
    """Next action of an optimal plan from the current state, when the env has an expert."""
    admissible_actions: list[str] | None = None
    """Valid commands in the current state; for analysis and the random policy, not shown
    to the agent unless the observation config asks for it."""
    invalid_action: bool = False
    """The last action was empty, malformed or not understood by the game."""
    game_id: str = ""
    """A stable identifier of the game being played (for grouping and reports)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Env-specific details (never required by the trainer)."""


@dataclass
class Step:
    """The result of one `Env.step`."""

    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: StepInfo


@runtime_checkable
class Env(Protocol):
    """A text environment: one episode at a time, text in and text out."""

    env_id: str
    split: str

    def reset(self, game_index: int) -> tuple[str, StepInfo]:
        """Start game number `game_index` of this env's split (not an RNG seed: the game is
        a pure function of split and index); returns (observation, info)."""
        ...

    def step(self, action: str) -> Step:
        """Apply one action. Never raises for bad action text: it is reported instead."""
        ...

    def close(self) -> None:
        """Release resources (processes, temporary folders)."""
        ...


_PREFIX = re.compile(r"^(?:action|command|your action|>)\s*[:>]?\s*", re.IGNORECASE)


def last_line_action(reply: str) -> str:
    """The action in a text-game reply: its last non-empty line, minus 'Action:' style
    prefixes, quotes and trailing punctuation. Returns '' when the reply has no text."""
    lines = [ln.strip() for ln in reply.strip().splitlines() if ln.strip()]
    if not lines:
        return ""
    action = _PREFIX.sub("", lines[-1]).strip()
    return action.strip("`'\"").rstrip(".!").strip()


def whole_reply_action(reply: str) -> str:
    """The whole reply, stripped (for envs that parse structured actions themselves)."""
    return reply.strip()


class EnvError(RuntimeError):
    """An environment failed (crashed, hung, or broke its contract)."""


def clean_action(action: str, max_chars: int = 200) -> str:
    """Normalise raw action text for a text game: drop control characters and surrogates,
    collapse whitespace to one line and cap the length. Never raises."""
    if not isinstance(action, str):
        action = str(action)
    # Invalid UTF-8 decoded with errors="surrogateescape" leaves lone surrogates: drop them.
    chars = [c for c in action if c.isprintable() or c in " \t\n"]
    text = "".join(c for c in chars if not 0xD800 <= ord(c) <= 0xDFFF)
    text = " ".join(text.split())
    return text[:max_chars]
