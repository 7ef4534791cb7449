"""ALFWorld's text engine: TextWorld's PDDL env behind ALFWorld's demangler and infos wrappers.

This is the stack ALFWorld itself plays (`alfworld.agents.environment.alfred_tw_env`), so the
observations and admissible commands are ALFWorld's. The planner expert is the same call
ALFWorld's ``AlfredExpert(expert_type="planner")`` makes (fast-downward's ``replan`` from
the current state), but made on demand: ALFWorld's wrapper replans after every step
(0.03-1.3 s each on these machines), while an optimal plan stays valid as long as the agent
follows it, so `Engine.plan` is only called again when the agent leaves the plan.
"""

from __future__ import annotations

import math
import os
import pickle
import resource
import select
import signal
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import textworld
from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
from textworld.core import GameState
from textworld.envs import PddlEnv

from tripod.envs.alfworld.tasks import Facts, facts_of

BANNER = "-= Welcome to TextWorld, ALFRED! =-"
T = TypeVar("T")


class _PddlEnvReusingLoad(PddlEnv):
    """TextWorld's PddlEnv, except that the first reset after `load` reuses the state `load`
    just built. Building one translates the problem twice (0.5-2 s); PddlEnv.reset always
    rebuilds it. The rest mirrors PddlEnv.reset of textworld 1.7.0 (pinned)."""

    def load(self, filename_or_data: Any) -> None:
        super().load(filename_or_data)
        self._fresh = True

    def reset(self) -> GameState:
        if not getattr(self, "_fresh", False):
            return super().reset()
        self._fresh = False
        self.prev_state = None
        self.state = GameState()
        self._last_action = None
        self._moves = 0
        context = {"state": self._pddl_state, "facts": list(self._pddl_state.facts),
                   "variables": {}, "mapping": {}, "entity_infos": self._entity_infos}
        self.state.feedback = self._logic.grammar.derive("#intro#", context)
        self.state.raw = self.state.feedback
        self._gather_infos()
        return self.state


class Engine:
    """One TextWorld PDDL game at a time. Reuses its planner library across games."""

    def __init__(self) -> None:
        self._env: Any = None
        self._loaded: str | None = None
        self.state: Any = None

    def _stack(self) -> Any:
        if self._env is None:
            infos = textworld.EnvInfos(admissible_commands=True, won=True, extras=["gamefile"])
            self._env = AlfredInfos(AlfredDemangler(_PddlEnvReusingLoad(infos), shuffle=False))
        return self._env

    def load(self, game: str | Mapping[str, Any]) -> None:
        """Load a ``game.tw-pddl`` (path or parsed JSON); a no-op for the game already loaded
        (loading translates the PDDL problem, about 0.5-1.5 s)."""
        path = game if isinstance(game, str) else None
        if path is None or path != self._loaded:
            self._stack().load(game)
            self._loaded = path

    def reset(self) -> Any:
        self.state = self._stack().reset()
        return self.state

    def step(self, command: str) -> Any:
        self.state, _, _ = self._stack().step(command)
        return self.state

    @property
    def admissible(self) -> list[str]:
        return list(self.state["admissible_commands"])

    @property
    def won(self) -> bool:
        return bool(self.state["won"])

    @property
    def facts(self) -> Facts:
        return facts_of(self.state["_facts"])

    def plan(self) -> list[str]:
        """An optimal plan (commands) from the current state; [] if the planner finds none."""
        pddl = self._stack().unwrapped
        return list(pddl._pddl_state.replan(pddl._entity_infos))

    def plan_within(self, cpu_s: float) -> list[str] | None:
        """`plan`, or None if the planner needs more than `cpu_s` CPU seconds (it has no
        limit of its own, and some states take minutes; see `call_with_timeout`)."""
        return call_with_timeout(self.plan, cpu_s)

    def close(self) -> None:
        # The planner library copy is left to the garbage collector: unloading it with
        # fast_downward.close_lib crashed the interpreter at exit (segfault, measured).
        if self._env is not None:
            self._env.close()
            self._env = None
            self._loaded = None


def intro_text(feedback: str) -> str:
    """The first observation without TextWorld's banner (ALFWorld agents drop it too)."""
    return feedback.replace(BANNER, "").strip()


def objective_of(feedback: str) -> str:
    """The 'Your task is to: ...' sentence of the intro text."""
    for paragraph in reversed(feedback.split("\n")):
        if paragraph.strip().startswith("Your task is to:"):
            return paragraph.strip()
    return ""


def call_with_timeout(fn: Callable[[], T], cpu_s: float) -> T | None:
    """Run `fn` in a forked child and return its (picklable) result, or None if the child
    uses more than `cpu_s` CPU seconds (or 10x that in wall time) or dies. Forking hands the
    child a snapshot of this process, the planner's loaded task included, and is the only
    way to stop fast-downward's C search. The limit is on CPU time so that a busy machine
    does not change which generated games are kept. Plain `os.fork` (not multiprocessing),
    so it also works inside daemonic pool workers."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: compute, write, and leave without running any exit handlers
        code = 1
        try:
            limit = math.ceil(cpu_s)
            resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 1))
            os.close(read_end)
            with os.fdopen(write_end, "wb") as out:
                out.write(pickle.dumps(fn()))
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    chunks, finished = [], False
    deadline = time.monotonic() + 10 * cpu_s
    try:
        while not finished and (left := deadline - time.monotonic()) > 0:
            if not select.select([read_end], [], [], left)[0]:
                break
            chunk = os.read(read_end, 1 << 20)
            chunks.append(chunk)
            finished = not chunk
    finally:
        os.close(read_end)
        if not finished:  # timed out (or interrupted): stop the search
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    if not finished or status != 0:
        return None
    return pickle.loads(b"".join(chunks))
