"""`AlfworldEnv`: ALFWorld games behind tripod's `Env` protocol, each in its own process.

The episode logic is `game.AlfworldGame`; this env runs one in a child process
(`tripod.envs.process.ChildProcess`) and forwards `reset` and `step` to it. The child is
needed for correctness, not speed: textworld's PDDL layer keeps module-level state, so two
games in threads of one process corrupt each other (the rollout engine steps its envs in
threads). With one process per env, any number of envs may run at once and give the same
episodes as one at a time (tests/envs/test_alfworld_parallel.py). The child starts on the
first `reset` (about 1 s: it imports textworld and alfworld) and is reused across episodes;
a crash, a hang past the time-out or an exception in it raises `EnvError`, and the next
`reset` starts a fresh one.

The parent never imports the `alfworld` wheel (its import creates a data folder and writes
``ALFWORLD_DATA``); the child gets ``ALFWORLD_DATA`` in its own environment (`real.alfworld_data`).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tripod.envs.alfworld import real
from tripod.envs.alfworld.sources import GameSource, GeneratedGames, RealGames
from tripod.envs.alfworld.task_types import EXPERT_TYPES, TASK_TYPES
from tripod.envs.base import SPLITS, EnvError, Step, StepInfo
from tripod.envs.process import ChildProcess

GAME_TARGET = "tripod.envs.alfworld.game:AlfworldGame"
STEP_TIMEOUT_S = 120.0
"""Default cap on one step: a replan may use 10 CPU seconds (`game.PLAN_CPU_S`), more in
wall time on a loaded machine."""
RESET_TIMEOUT_S = 900.0
"""Default cap on one reset, which generates a missing game (pick_two: up to minutes)."""


class AlfworldEnv:
    """ALFWorld text games, one episode at a time, played in a child process (see the
    module docstring; the episode rules are `game.AlfworldGame`'s)."""

    def __init__(self, env_id: str, split: str, games: GameSource, expert: bool = True,
                 max_turns: int | None = None, step_timeout_s: float = STEP_TIMEOUT_S,
                 reset_timeout_s: float = RESET_TIMEOUT_S,
                 admissible_actions: bool = False, expert_type: str = "planner",
                 objective: bool = False, inventory: bool = False) -> None:
        self.env_id = env_id
        self.split = split
        self.step_timeout_s = step_timeout_s
        self.reset_timeout_s = reset_timeout_s
        kwargs = {"env_id": env_id, "split": split, "games": games, "expert": expert,
                  "max_turns": max_turns, "admissible_actions": admissible_actions,
                  "expert_type": expert_type, "objective": objective, "inventory": inventory}
        environ = {"ALFWORLD_DATA": real.alfworld_data()}  # the child's only, see real.py
        self._process = ChildProcess(GAME_TARGET, kwargs, environ=environ,
                                     label=f"ALFWorld game process ({env_id}, {split})")
        self._in_episode = False

    @property
    def pid(self) -> int | None:
        """The game process's id (None until the first reset, or after a failure)."""
        return self._process.pid

    def reset(self, game_index: int) -> tuple[str, StepInfo]:
        """Start game number `game_index` of this env's split."""
        self._in_episode = False
        observation, info = self._process.call("reset", game_index,
                                               timeout_s=self.reset_timeout_s)
        self._in_episode = True
        return observation, info

    def step(self, action: str) -> Step:
        if not self._in_episode:
            raise EnvError("step() before reset() (or after the game process failed)")
        try:
            return self._process.call("step", action, timeout_s=self.step_timeout_s)
        except EnvError:
            self._in_episode = False
            raise

    def prepare(self, game_index: int) -> Path:
        """Generate game `game_index` if it is not cached yet (in the child); its file."""
        return Path(self._process.call("prepare", game_index, timeout_s=self.reset_timeout_s))

    def close(self) -> None:
        self._in_episode = False
        self._process.close()


def _task_types(env_id: str, prefix: str, override: Sequence[str] | None) -> tuple[str, ...]:
    suffix = env_id[len(prefix):].lstrip("-")
    if override is not None and suffix:
        raise ValueError(f"{env_id} names its task type; drop the task_types override")
    types = tuple(override) if override is not None else ((suffix,) if suffix else TASK_TYPES)
    unknown = [t for t in types if t not in TASK_TYPES]
    if unknown or not types:
        raise ValueError(f"unknown task types {unknown}; valid: {', '.join(TASK_TYPES)}")
    return types


def _check(split: str, max_turns: int | None, expert_type: str = "planner") -> None:
    if expert_type not in EXPERT_TYPES:
        raise ValueError(f"unknown expert_type {expert_type!r}; valid: {', '.join(EXPERT_TYPES)}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")
    if max_turns is not None and max_turns < 1:
        raise ValueError(f"max_turns must be at least 1 (or None), got {max_turns}")


def make_generated(env_id: str, split: str = "train", *, expert: bool = True,
                   max_turns: int | None = None, task_types: Sequence[str] | None = None,
                   step_timeout_s: float = STEP_TIMEOUT_S,
                   reset_timeout_s: float = RESET_TIMEOUT_S,
                   admissible_actions: bool = False, expert_type: str = "planner",
                   objective: bool = False, inventory: bool = False) -> AlfworldEnv:
    """``alfworld/generated[-TASK_TYPE]``; ``task_types`` mixes several types round-robin.

    `expert`: fill `info.expert_action` from the planner (a replan after every detour;
    turn it off for RL rollouts). `max_turns`: truncate after this many actions.
    `admissible_actions`: list the valid commands after each observation. `expert_type`:
    `planner` (optimal plans from the full state), `handcoded` (ALFWorld's searching
    agent, `searcher.py`) or `hybrid` (the searching agent, the planner where it gives up).
    `objective` / `inventory`: restate the task / say what the agent carries after each
    step's observation."""
    _check(split, max_turns, expert_type)
    types = _task_types(env_id, "alfworld/generated", task_types)
    return AlfworldEnv(env_id, split, GeneratedGames(split, types), expert, max_turns,
                       step_timeout_s, reset_timeout_s, admissible_actions, expert_type,
                       objective, inventory)


def make_real(env_id: str, split: str = "train", *, expert: bool = True,
              max_turns: int | None = None, task_types: Sequence[str] | None = None,
              data_dir: str | None = None, step_timeout_s: float = STEP_TIMEOUT_S,
              reset_timeout_s: float = RESET_TIMEOUT_S,
              admissible_actions: bool = False, expert_type: str = "planner",
              objective: bool = False, inventory: bool = False) -> AlfworldEnv:
    """``alfworld/real[-TASK_TYPE]`` from ``data_dir`` or ``$ALFWORLD_DATA`` (checked now, so
    missing data fails here with the expected layout rather than at the first reset); the
    options are `make_generated`'s."""
    _check(split, max_turns, expert_type)
    types = _task_types(env_id, "alfworld/real", task_types)
    games = real.list_games(split, types, data_dir)
    source = RealGames(games, real.data_root(data_dir) / real.REAL_SPLITS[split])
    return AlfworldEnv(env_id, split, source, expert, max_turns, step_timeout_s,
                       reset_timeout_s, admissible_actions, expert_type, objective, inventory)


def prepare_games(env_id: str, split: str, indices: Sequence[int], workers: int = 2, *,
                  task_types: Sequence[str] | None = None) -> list[Path]:
    """Generate (or find cached) games `indices` of `split` for an ``alfworld/generated``
    id, `workers` games at a time (one child process each); their files, in order."""
    envs = [make_generated(env_id, split, expert=False, task_types=task_types)
            for _ in range(max(1, min(workers, len(indices))))]
    chunks = [list(indices)[k::len(envs)] for k in range(len(envs))]
    try:
        with ThreadPoolExecutor(len(envs)) as pool:
            done = pool.map(lambda ec: [ec[0].prepare(i) for i in ec[1]], zip(envs, chunks))
            paths = dict(zip((i for c in chunks for i in c), (p for ps in done for p in ps)))
    finally:
        for env in envs:
            env.close()
    return [paths[i] for i in indices]
