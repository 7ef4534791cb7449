"""`TextWorldEnv`: one TextWorld game at a time behind tripod's `Env` protocol.

What the agent sees (`TextWorldObsConfig`). By default the first observation is the game's
introduction (the objective and the starting room, ASCII-art banner removed) and every later
observation is the game's feedback to the last command, without the status line. Flags
append the room description (``look``), the inventory (``inventory``) and the valid
commands (``admissible_actions``). The first observation of a w2-o3-q4 game::

    Hey, thanks for coming over to the TextWorld today, there is something I need you to
    do for me. First of all, go north. Following that, take the broom from the stand. If
    you have taken the broom, venture south. Then, sit the broom on the counter inside the
    cellar. And once you've done that, you win!

    -= Cellar =-
    You are in a cellar. An ordinary kind of place.
    ...
    There is an unblocked exit to the north.

and with ``make("textworld/w2-o3-q4", inventory=True)``, after ``open fridge``::

    You open the fridge, revealing a teacup.

    Inventory: You are carrying nothing.

How the game's state maps onto `StepInfo` (the reward pillar reads only ``won``, ``lost``
and ``progress``), see `info_from_state`: ``won`` is TextWorld's "every quest completed";
``lost`` is TextWorld's "a quest failed" (e.g. eating the food in tw-simple) and is never
true together with ``won``; ``progress`` is score / the game's own max score, clamped to
[0, 1], and 1 once won. ``terminated`` is ``won or lost``: TextWorld's ``done`` (won OR
lost) is never read as success. ``truncated`` is the env's own turn cap (``max_turns``),
only when the game did not end on that turn.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from tripod.envs.base import EnvError, Step, StepInfo, clean_action, game_seed
from tripod.envs.textworld.generate import GameConfig, generate_game
from tripod.envs.textworld.process import LoadRequest, game_process
from tripod.envs.textworld.text import (
    clean_feedback,
    is_meta_command,
    is_parser_error,
    strip_banner,
)

STEP_TIMEOUT_S = 30.0
"""Default wait for the game's answer to one command before it counts as hung."""
LOAD_TIMEOUT_S = 120.0
"""Default wait for a game to load (the first load also starts the game process)."""


@dataclass(frozen=True)
class TextWorldObsConfig:
    """What the agent sees besides the game's feedback to its last command."""

    objective: bool = True
    """Make sure the objective is in the first observation (TextWorld's introduction
    already contains it; it is prepended when it does not)."""
    look: bool = False
    """Append the current room description after every feedback."""
    inventory: bool = False
    """Append the inventory after every feedback."""
    admissible_actions: bool = False
    """Append TextWorld's admissible commands (the paper trains without these hints)."""


def info_from_state(state: dict[str, Any], game_id: str) -> StepInfo:
    """`StepInfo` for one game state (a `process.state_dict`), under base.py's rules."""
    won = state["won"]
    lost = state["lost"] and not won
    over = won or lost
    max_score = state["max_score"] or 1.0  # a game without scored quests: progress = won
    ratio = state["score"] / max_score if math.isfinite(max_score) else 0.0
    return StepInfo(
        objective=state["objective"], won=won, lost=lost, score=state["score"],
        max_score=max_score, progress=1.0 if won else min(max(ratio, 0.0), 1.0),
        expert_action=None if over or not state["policy_commands"]
        else state["policy_commands"][0],
        admissible_actions=[] if over else state["admissible_commands"],
        game_id=game_id)


class TextWorldEnv:
    """One TextWorld game at a time behind the tripod `Env` protocol.

    `reset(game_index)` plays game number `game_index` of the split (generated on first
    use); `step` sends one command. `Step.reward` is the game's score gain on that step (the
    reward pillar turns progress into sparse or dense rewards). The constructor starts
    nothing: the game process starts on the first `reset`.
    """

    def __init__(self, env_id: str, split: str, game: GameConfig,
                 obs: TextWorldObsConfig | None = None, max_turns: int | None = None,
                 step_timeout_s: float = STEP_TIMEOUT_S,
                 load_timeout_s: float = LOAD_TIMEOUT_S) -> None:
        game_seed(split, 0)  # an unknown split fails here, not at the first reset
        if max_turns is not None and max_turns < 1:
            raise ValueError(f"max_turns must be >= 1 (or None for no cap), got {max_turns}")
        self.env_id = env_id
        self.split = split
        self.game = game
        self.obs = obs or TextWorldObsConfig()
        self.max_turns = max_turns
        self.step_timeout_s = step_timeout_s
        self.load_timeout_s = load_timeout_s
        self._process = game_process()
        self._info: StepInfo | None = None
        self._turns = 0
        self._over = False

    def _request(self) -> dict[str, Any]:
        """The `textworld.EnvInfos` fields to ask for (policy commands for the expert)."""
        return {"feedback": True, "won": True, "lost": True, "score": True,
                "max_score": True, "objective": True, "policy_commands": True,
                "admissible_commands": True, "description": self.obs.look,
                "inventory": self.obs.inventory, "extras": ["walkthrough"]}

    def reset(self, game_index: int) -> tuple[str, StepInfo]:
        """Start game `game_index` of the split: generated from ``game_seed(split, index)``
        (on first use), loaded in the game process. Returns the first observation."""
        seed = game_seed(self.split, game_index)
        try:
            folder = generate_game(self.game, seed)
        except Exception as exc:  # a generator or Inform 7 failure: say which game
            raise EnvError(f"could not generate {self.game.key} seed {seed}: "
                           f"{type(exc).__name__}: {exc}") from exc
        self._info = None  # a failed load leaves no game to step
        request = LoadRequest(str(folder / "game.z8"), self._request())
        state = self._process.call("load", request, self.load_timeout_s)
        self._turns, self._over = 0, False
        info = info_from_state(state, game_id=f"{self.game.key}/seed{seed}")
        info.extra["walkthrough"] = state["walkthrough"]
        info.extra["seed"] = seed
        self._info = info
        text = strip_banner(clean_feedback(state["feedback"]))
        if self.obs.objective and info.objective and info.objective not in text:
            text = f"{info.objective}\n\n{text}"
        return self._decorate(text, state), info

    def step(self, action: str) -> Step:
        """Send one command. Bad text is reported (``invalid_action``), never raised; a
        failed game process raises `EnvError`."""
        if self._info is None:
            raise EnvError("step() called before a successful reset()")
        self._turns += 1
        command = clean_action(action)
        if self._over:
            return self._refuse("The game is over.", invalid=False)
        if not command:
            return self._refuse("I beg your pardon?", invalid=True)
        if is_meta_command(command):
            return self._refuse("That command is not available in this game.", invalid=True)
        prev_score = self._info.score
        state = self._process.call("step", command, self.step_timeout_s)
        text = clean_feedback(state["feedback"])
        info = info_from_state(state, game_id=self._info.game_id)
        info.invalid_action = is_parser_error(text)
        info.extra["admissible"] = command in (self._info.admissible_actions or [])
        info.extra["command"] = command
        self._info = info
        self._over = info.won or info.lost
        text = text if self._over else self._decorate(text, state)
        return Step(text, info.score - prev_score, self._over, self._truncated(), info)

    def _truncated(self) -> bool:
        return self.max_turns is not None and self._turns >= self.max_turns and not self._over

    def _refuse(self, text: str, invalid: bool) -> Step:
        """Answer without touching the game (empty, meta or post-game commands)."""
        assert self._info is not None
        info = StepInfo(**{**asdict(self._info), "invalid_action": invalid, "extra": {}})
        return Step(text, 0.0, self._over, self._truncated(), info)

    def _decorate(self, text: str, state: dict[str, Any]) -> str:
        """Append the optional room description, inventory and admissible commands."""
        parts = [text]
        if self.obs.look and state["description"]:
            parts.append(clean_feedback(state["description"]))
        if self.obs.inventory and state["inventory"]:
            parts.append(f"Inventory: {clean_feedback(state['inventory'])}")
        if self.obs.admissible_actions and state["admissible_commands"]:
            parts.append("Admissible actions: " + ", ".join(state["admissible_commands"]))
        return "\n\n".join(p for p in parts if p)

    def close(self) -> None:
        """Stop the game process (a later `reset` starts a new one)."""
        self._process.close()
