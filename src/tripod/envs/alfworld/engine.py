"""ALFWorld's text engine: textworld's PDDL env with ALFWorld's object names.

These are the observations and admissible commands ALFWorld itself plays
(`alfworld.agents.environment.alfred_tw_env`). The planner expert is the same call ALFWorld's
``AlfredExpert(expert_type="planner")`` makes (fast-downward's ``replan`` from the current
state), but made on demand: ALFWorld's wrapper replans after every step (0.03-1.3 s each on
these machines), while an optimal plan stays valid as long as the agent follows it, so
`Engine.plan` is only called again when the agent leaves the plan.

Not safe to share between threads, nor to run next to another `Engine` in other threads of
the same process: textworld's PDDL loader and fast-downward's translator keep module-level
state (a shared parser, global options, a swapped ``sys.stdout``). Each ALFWorld env
therefore runs its engine in a child process of its own (`tripod.envs.process`).
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

from textworld.core import GameState
from textworld.envs import PddlEnv

from tripod.envs.alfworld import textworld_adapter as adapter
from tripod.envs.alfworld.tasks import Facts

BANNER = "-= Welcome to TextWorld, ALFRED! =-"
T = TypeVar("T")


class Engine:
    """One textworld PDDL game at a time. Reuses its planner library across games."""

    def __init__(self) -> None:
        self._env: PddlEnv | None = None
        self._loaded: str | None = None
        self._fresh = False
        """The state `load` built is untouched: the next reset can reuse it."""
        self.state: GameState | None = None

    def _pddl(self) -> PddlEnv:
        if self._env is None:
            self._env = adapter.new_pddl_env()
        return self._env

    def load(self, game: str | Mapping[str, Any]) -> None:
        """Load a ``game.tw-pddl`` (path or parsed JSON); a no-op for the game already loaded
        (loading translates the PDDL problem, about 0.5-1.5 s)."""
        path = game if isinstance(game, str) else None
        if path is None or path != self._loaded:
            adapter.load(self._pddl(), game)
            self._loaded, self._fresh = path, True

    def reset(self) -> GameState:
        env = self._pddl()
        self.state = adapter.first_reset(env) if self._fresh else env.reset()
        self._fresh = False
        return self.state

    def step(self, command: str) -> GameState:
        self.state, _, _ = self._pddl().step(command)
        return self.state

    @property
    def admissible(self) -> list[str]:
        return list(self._current()["admissible_commands"])

    @property
    def won(self) -> bool:
        return bool(self._current()["won"])

    @property
    def facts(self) -> Facts:
        return adapter.facts(self._current())

    def readable_facts(self) -> list:
        """The facts with ALFWorld's object names (`adapter.readable_facts`)."""
        return adapter.readable_facts(self._pddl(), self._current())

    def _current(self) -> GameState:
        if self.state is None:
            raise RuntimeError("no game state: call reset() first")
        return self.state

    def plan(self) -> list[str]:
        """An optimal plan (commands) from the current state; [] if the planner finds none."""
        return adapter.replan(self._pddl())

    def plan_within(self, cpu_s: float) -> list[str] | None:
        """`plan`, or None if the planner needs more than `cpu_s` CPU seconds (it has no
        limit of its own, and some states take minutes; see `call_with_timeout`)."""
        return call_with_timeout(self.plan, cpu_s)

    def close(self) -> None:
        # The planner library copy is left to the garbage collector: unloading it with
        # fast_downward.close_lib crashed the interpreter at exit (segfault, measured).
        if self._env is not None:
            self._env.close()
        self._env, self._loaded, self._fresh, self.state = None, None, False, None


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
