"""Fault injection: an env wrapper that makes a seeded share of steps fail on purpose.

Long RL runs meet environments that crash, hang, break their contract or lose their
process. `FaultyEnv` produces each of these on demand (recipe: ``env.faults: {rate: 0.1,
kinds: [raise, hang, garbage, kill]}``), so that tests and smoke runs can show that the
rollout engine turns every one of them into an env-error episode (marked, excluded from the
loss, counted), that no step waits past the step time-out, and that nothing leaks.

The kinds:
- ``raise``: the step raises `InjectedFault` (not an `EnvError`: any exception must do).
- ``hang``: the step blocks until the env is closed (at most `hang_s`), far past the
  rollout's step time-out.
- ``garbage``: the step returns a malformed result, one of `GARBAGE` (None, a tuple, wrong
  field types, a 10 MB observation, an observation that is not valid UTF-8, a NaN reward).
- ``kill``: the env's child process (`envs/process.py` `ChildProcess`, as TextWorld and
  ALFWorld games run) is SIGKILLed before the step, which then fails as a real crash would.
  An env without a child process (SWE, toy) is marked dead instead: this and every later
  call raise `EnvError`, as calls into a dead process would.

Which steps fail, and how, is drawn from ``Random(f"{seed}:{episode_seed}")``: a pure function
of the recipe's fault seed and the episode, whatever the thread timing or pool order.
Resets never fail (a reset failure is already covered by the engine's reset path).
"""

from __future__ import annotations

import math
import os
import random
import signal
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from tripod.envs.base import Env, EnvError, Step, StepInfo
from tripod.envs.process import ChildProcess

FAULT_KINDS = ("raise", "hang", "garbage", "kill")

TEN_MB = 10 * 1024 * 1024


class InjectedFault(RuntimeError):
    """The exception of a ``raise`` fault (a plain RuntimeError on purpose)."""


def _bad_utf8() -> str:
    # bytes that are not UTF-8, decoded as a careless reader would: lone surrogates
    return b"You see \xff\xfe\xc3(".decode("utf-8", errors="surrogateescape")


GARBAGE: dict[str, Callable[[], Any]] = {
    "none": lambda: None,
    "tuple": lambda: ("obs", 0.0, False, False, {}),
    "bytes_observation": lambda: Step(b"\xff\xfe obs", 0.0, False, False, StepInfo()),
    "str_reward": lambda: Step("obs", "1.0", False, False, StepInfo()),
    "dict_info": lambda: Step("obs", 0.0, False, False, {"won": True}),
    "huge_observation": lambda: Step("x" * TEN_MB, 0.0, False, False, StepInfo()),
    "invalid_utf8": lambda: Step(_bad_utf8(), 0.0, False, False, StepInfo()),
    "nan_reward": lambda: Step("obs", math.nan, False, False, StepInfo()),
}
"""Malformed step results a broken env might return, by name."""


def child_processes(env: Any) -> list[ChildProcess]:
    """The `ChildProcess` objects an env holds directly (its game processes)."""
    return [v for v in vars(env).values() if isinstance(v, ChildProcess)]


class FaultyEnv:
    """Wraps one env for one episode; a share `rate` of its steps fail with a kind drawn
    uniformly from `kinds`. `injected` counts the faults by kind."""

    def __init__(self, env: Env, rate: float, kinds: Iterable[str], seed: str,
                 hang_s: float = 60.0) -> None:
        unknown = set(kinds) - set(FAULT_KINDS)
        if unknown or not 0.0 <= rate <= 1.0:
            raise ValueError(f"faults: rate must be in [0, 1] and kinds among {FAULT_KINDS}; "
                             f"got rate={rate}, unknown kinds {sorted(unknown)}")
        self.env = env
        self.env_id, self.split = env.env_id, env.split
        self.rate, self.kinds, self.hang_s = rate, sorted(set(kinds)), hang_s
        self.injected: Counter[str] = Counter()
        self._rng = random.Random(seed)
        self._closed = threading.Event()
        self._dead = False

    def reset(self, game_index: int) -> tuple[str, StepInfo]:
        self._check_alive()
        return self.env.reset(game_index)

    def step(self, action: str) -> Step:
        self._check_alive()
        # both draws happen every step, so a step's fate does not depend on earlier ones
        fails, kind = self._rng.random() < self.rate, self._rng.choice(self.kinds or ["raise"])
        if not fails or not self.kinds:
            return self.env.step(action)
        self.injected[kind] += 1
        return getattr(self, f"_{kind}")(action)

    def close(self) -> None:
        """Close the env; a step hanging in another thread returns at once."""
        self._closed.set()
        self.env.close()

    # -- the faults ----------------------------------------------------------------------
    def _raise(self, action: str) -> Step:
        raise InjectedFault(f"injected fault: step({action[:40]!r}) raised")

    def _hang(self, action: str) -> Step:
        self._closed.wait(self.hang_s)
        raise InjectedFault("injected fault: a hung step returned (the env was closed)")

    def _garbage(self, action: str) -> Any:
        return GARBAGE[self._rng.choice(sorted(GARBAGE))]()

    def _kill(self, action: str) -> Step:
        procs = [p for p in child_processes(self.env) if p.pid is not None]
        if not procs:
            self._dead = True
            self._check_alive()
        for proc in procs:
            os.kill(proc.pid, signal.SIGKILL)
        return self.env.step(action)  # the dead child makes this raise EnvError

    def _check_alive(self) -> None:
        if self._dead:
            raise EnvError(f"injected fault: {self.env_id}'s process was killed (the env has "
                           "no child process; it is treated as dead)")


def unwrap(env: Env) -> Env:
    """The env under a `FaultyEnv` (the env itself otherwise)."""
    return env.env if isinstance(env, FaultyEnv) else env
