"""`AlfworldGame`: one ALFWorld episode at a time, in the process that holds its engine.

This is the episode logic behind `AlfworldEnv` (env.py), which runs one of these in a child
process of its own (textworld's PDDL layer is not thread-safe, see engine.py). Tests and
benchmarks may use it directly, one per process.

Per step it reports ALFWorld's text, its admissible commands, the planner's next action
(`expert_action`, recomputed only when the agent leaves the current plan) and `progress` =
goal conditions met / all of them (`tasks.stage`), in [0, 1]. `Step.reward` is the change in
progress (informational: training rewards come from the reward pillar, which reads `won`,
`lost` and `progress`). It can be negative (putting the object down again) and sums to
exactly 1 over a won game.
"""

from __future__ import annotations

import json

from tripod.envs.alfworld.engine import Engine, intro_text, objective_of
from tripod.envs.alfworld.searcher import Searcher
from tripod.envs.alfworld.sources import GameRef, GameSource
from tripod.envs.alfworld.task_types import EXPERT_TYPES
from tripod.envs.alfworld.tasks import MAX_STAGE, TaskSpec, stage
from tripod.envs.base import EnvError, Step, StepInfo, clean_action

PLAN_CPU_S = 10.0
"""A replan (after the agent leaves the plan) needing more CPU seconds gives no expert
action for that turn."""


def _spec_of(traj: dict) -> TaskSpec:
    params = traj["pddl_params"]
    return TaskSpec(traj["task_type"], params["object_target"],
                    params.get("parent_target") or None, params.get("toggle_target") or None)


class AlfworldGame:
    """ALFWorld text games, one episode at a time (see the module docstring)."""

    def __init__(self, env_id: str, split: str, games: GameSource, expert: bool = True,
                 max_turns: int | None = None, admissible_actions: bool = False,
                 expert_type: str = "planner", objective: bool = False,
                 inventory: bool = False) -> None:
        if expert_type not in EXPERT_TYPES:
            raise ValueError(f"unknown expert_type {expert_type!r}; valid: {', '.join(EXPERT_TYPES)}")
        self.env_id = env_id
        self.split = split
        self.expert = expert
        self.expert_type = expert_type
        self._searcher: Searcher | None = None
        self.max_turns = max_turns
        self.list_admissible = admissible_actions
        self.restate_objective = objective
        self.show_inventory = inventory
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

    def prepare(self, game_index: int) -> str:
        """Generate game `game_index` if it is not cached yet; returns its file."""
        return str(self._games(game_index, self._engine).path)

    def reset(self, game_index: int) -> tuple[str, StepInfo]:
        self._game = self._games(game_index, self._engine)
        traj = json.loads((self._game.path.parent / "traj_data.json").read_text())
        self._spec = _spec_of(traj)
        walkthrough = json.loads(self._game.path.read_text()).get("walkthrough")
        self._engine.load(str(self._game.path))
        state = self._engine.reset()
        self._searcher = (Searcher(self._game.path, state.feedback, game_index)
                          if self.expert and self.expert_type != "planner" else None)
        self._plan = list(walkthrough) if isinstance(walkthrough, list) else None
        self._turn, self._done = 0, False
        self._last_obs = intro_text(state.feedback)
        self._objective = objective_of(self._last_obs)
        info = self._info(invalid=False)
        self._progress = info.progress
        return self._shown(self._last_obs, info), info

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
        if self._searcher is not None:
            self._searcher.after(state, self._engine.readable_facts(), command,
                                 self._engine.admissible)
        info = self._info(invalid)
        reward, self._progress = info.progress - self._progress, info.progress
        terminated = info.won
        truncated = not terminated and self.max_turns is not None and self._turn >= self.max_turns
        self._done = terminated or truncated
        self._last_obs = state.feedback.strip()
        return Step(self._shown(self._last_obs, info), reward, terminated, truncated, info)

    def _shown(self, observation: str, info: StepInfo) -> str:
        """The observation as the agent sees it. After a step, the `objective` option restates
        the task and the `inventory` option says what the agent carries (in the words of the
        game's own `inventory` command), so the task's phase is in every observation, not only
        in one far back in a long history; with `admissible_actions`, the commands valid now
        follow (as verl-agent's ALFWorld prompt lists them)."""
        parts = [observation]
        if self._turn > 0 and self.restate_objective and self._objective:
            parts.append(self._objective)
        if self._turn > 0 and self.show_inventory:
            parts.append(self._carrying())
        if self.list_admissible and not self._done and info.admissible_actions:
            parts.append(f"Admissible actions: {', '.join(info.admissible_actions)}")
        return "\n".join(parts)

    def _carrying(self) -> str:
        held = sorted(" ".join(fact.names[1:]) for fact in self._engine.readable_facts()
                      if fact.name == "holds")
        return f"You are carrying: {', '.join(f'a {h}' for h in held)}." if held else \
            "You are not carrying anything."

    def close(self) -> None:
        self._engine.close()

    def _follow_plan(self, command: str, invalid: bool) -> None:
        """Keep the plan while the agent follows it; a rejected command changes nothing."""
        if invalid or self._plan is None:
            return
        self._plan = self._plan[1:] if self._plan and command == self._plan[0] else None

    def _expert_action(self) -> str | None:
        if not self.expert or self._engine.won:
            return None
        if self._searcher is not None and not (self.expert_type == "hybrid"
                                               and self._searcher.gave_up):
            return self._searcher.next_action
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
