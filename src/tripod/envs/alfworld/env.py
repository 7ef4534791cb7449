"""`AlfworldEnv`: ALFWorld games behind tripod's `Env` protocol.

One class serves generated and real games; they differ only in where game number `index`
of a split comes from (a `GameSource`). Per step the env reports ALFWorld's text, its
admissible commands, the planner's next action (`expert_action`, recomputed only when the
agent leaves the current plan) and `progress` = goal conditions met / all of them
(`tasks.stage`). Rewards: ``sparse`` gives 1 on the winning turn; ``dense`` gives the
change in progress each turn (it can be negative, e.g. putting the object down again, and
sums to exactly 1 over a won game).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tripod.envs.alfworld import generator, real
from tripod.envs.alfworld.engine import Engine, intro_text, objective_of
from tripod.envs.alfworld.tasks import MAX_STAGE, TASK_TYPES, TaskSpec, stage
from tripod.envs.base import SPLITS, EnvError, Step, StepInfo, clean_action, game_seed

REWARD_MODES = ("dense", "sparse")
PLAN_CPU_S = 10.0
"""A replan (after the agent leaves the plan) needing more CPU seconds gives no expert
action for that turn."""


@dataclass(frozen=True)
class GameRef:
    """A game file on disk and its stable id."""

    path: Path
    game_id: str


GameSource = Callable[[int, Engine], GameRef]
"""(game index within the split, engine to reuse for generation) -> the game to play."""


@dataclass(frozen=True)
class GeneratedGames:
    """Game `index` of `split`: task type ``task_types[index % len]``, generator seed
    ``game_seed(split, index)``; generated on first use and cached."""

    split: str
    task_types: tuple[str, ...]

    def __call__(self, index: int, engine: Engine) -> GameRef:
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


def _spec_of(traj: dict) -> TaskSpec:
    params = traj["pddl_params"]
    return TaskSpec(traj["task_type"], params["object_target"],
                    params.get("parent_target") or None, params.get("toggle_target") or None)


class AlfworldEnv:
    """ALFWorld text games, one episode at a time (see the module docstring)."""

    def __init__(self, env_id: str, split: str, games: GameSource, reward: str = "dense",
                 expert: bool = True, max_turns: int | None = None) -> None:
        if reward not in REWARD_MODES:
            raise ValueError(f"reward must be one of {REWARD_MODES}, got {reward!r}")
        self.env_id = env_id
        self.split = split
        self.reward_mode = reward
        self.expert = expert
        self.max_turns = max_turns
        self._games = games
        self._engine = Engine()
        self._game: GameRef | None = None
        self._spec: TaskSpec | None = None
        self._plan: list[str] | None = None
        self._progress = 0.0
        self._turn = 0
        self._done = True
        self._objective = ""
        self._last_obs = ""

    def reset(self, seed: int) -> tuple[str, StepInfo]:
        self._game = self._games(seed, self._engine)
        traj = json.loads((self._game.path.parent / "traj_data.json").read_text())
        self._spec = _spec_of(traj)
        walkthrough = json.loads(self._game.path.read_text()).get("walkthrough")
        self._engine.load(str(self._game.path))
        state = self._engine.reset()
        self._plan = list(walkthrough) if isinstance(walkthrough, list) else None
        self._turn, self._done = 0, False
        self._last_obs = intro_text(state.feedback)
        self._objective = objective_of(self._last_obs)
        info = self._info(invalid=False)
        self._progress = info.progress
        return self._last_obs, info

    def step(self, action: str) -> Step:
        if self._game is None:
            raise EnvError("step() before reset()")
        if self._done:  # past the end: report the terminal state again, change nothing
            return Step(self._last_obs, 0.0, self._engine.won, not self._engine.won,
                        self._info(invalid=False))
        command = clean_action(action).lower()
        invalid = command not in self._engine.admissible
        state = self._engine.step(command)
        self._turn += 1
        self._follow_plan(command, invalid)
        info = self._info(invalid)
        reward = self._reward(info)
        self._progress = info.progress
        terminated = info.won
        truncated = not terminated and self.max_turns is not None and self._turn >= self.max_turns
        self._done = terminated or truncated
        self._last_obs = state.feedback.strip()
        return Step(self._last_obs, reward, terminated, truncated, info)

    def close(self) -> None:
        self._engine.close()

    def _reward(self, info: StepInfo) -> float:
        if self.reward_mode == "sparse":
            return 1.0 if info.won else 0.0
        return info.progress - self._progress

    def _follow_plan(self, command: str, invalid: bool) -> None:
        """Keep the plan while the agent follows it; a rejected command changes nothing."""
        if invalid or self._plan is None:
            return
        self._plan = self._plan[1:] if self._plan and command == self._plan[0] else None

    def _expert_action(self) -> str | None:
        if not self.expert or self._engine.won:
            return None
        if not self._plan or self._plan[0] not in self._engine.admissible:
            self._plan = self._engine.plan_within(PLAN_CPU_S)
        return self._plan[0] if self._plan else None

    def _info(self, invalid: bool) -> StepInfo:
        assert self._spec is not None and self._game is not None
        won = self._engine.won
        score = stage(self._spec, self._engine.facts, won)
        top = MAX_STAGE[self._spec.task_type]
        return StepInfo(
            objective=self._objective, won=won, lost=False, score=float(score),
            max_score=float(top), progress=score / top, expert_action=self._expert_action(),
            admissible_actions=self._engine.admissible, invalid_action=invalid,
            game_id=self._game.game_id,
            extra={"task_type": self._spec.task_type, "turn": self._turn,
                   "game_file": str(self._game.path)})


def _task_types(env_id: str, prefix: str, override: list[str] | tuple[str, ...] | None
                ) -> tuple[str, ...]:
    suffix = env_id[len(prefix):].lstrip("-")
    if override is not None and suffix:
        raise ValueError(f"{env_id} names its task type; drop the task_types override")
    types = tuple(override) if override is not None else ((suffix,) if suffix else TASK_TYPES)
    unknown = [t for t in types if t not in TASK_TYPES]
    if unknown or not types:
        raise ValueError(f"unknown task types {unknown}; valid: {', '.join(TASK_TYPES)}")
    return types


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")


def make_generated(env_id: str, split: str = "train", *, reward: str = "dense",
                   expert: bool = True, max_turns: int | None = None,
                   task_types: list[str] | None = None) -> AlfworldEnv:
    """``alfworld/generated[-TASK_TYPE]``; ``task_types`` mixes several types round-robin."""
    _check_split(split)
    types = _task_types(env_id, "alfworld/generated", task_types)
    return AlfworldEnv(env_id, split, GeneratedGames(split, types), reward, expert, max_turns)


def make_real(env_id: str, split: str = "train", *, reward: str = "dense", expert: bool = True,
              max_turns: int | None = None, task_types: list[str] | None = None,
              data_dir: str | None = None) -> AlfworldEnv:
    """``alfworld/real[-TASK_TYPE]`` from ``data_dir`` or ``$ALFWORLD_DATA`` (checked now, so
    missing data fails here with the expected layout rather than at the first reset)."""
    _check_split(split)
    types = _task_types(env_id, "alfworld/real", task_types)
    games = real.list_games(split, types, data_dir)
    source = RealGames(games, real.data_root(data_dir) / real.REAL_SPLITS[split])
    return AlfworldEnv(env_id, split, source, reward, expert, max_turns)
