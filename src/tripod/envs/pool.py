"""`EnvPool`: idle environments kept for reuse, owned by whoever runs the episodes.

Starting an env can be costly (a TextWorld game process imports textworld for seconds, an
SWE workspace copies a repository), resetting one is cheap. A pool keeps healthy envs after
their episode and hands them out again for the same (env id, split, options). It is an
explicit object: a training run creates one, shares it between its rollout and evaluation
engines, and closes it at the end (`with EnvPool() as pool: ...`). Nothing is global.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any, Generic, Self, TypeVar

from tripod.envs.base import Env
from tripod.envs.registry import make


def _key(env_id: str, split: str, options: dict[str, Any]) -> tuple:
    return (env_id, split, repr(sorted(options.items())))


E = TypeVar("E")


class IdleEnvs(Generic[E]):
    """What every pool shares: idle envs by (env id, split, options) behind one lock, a
    count of the envs built, and `with pool:` closing it. `EnvPool` holds local envs,
    `ray_pool.RayEnvPool` handles of envs on Ray workers."""

    def __init__(self) -> None:
        self._idle: dict[tuple, list[E]] = {}
        self._lock = threading.Lock()
        self.created = 0
        """Envs this pool has built (for tests and benchmarks)."""

    def _pop_idle(self, env_id: str, split: str, options: dict[str, Any]) -> E | None:
        """An idle env for the key, or None; the caller holds `_lock`."""
        idle = self._idle.get(_key(env_id, split, options))
        return idle.pop() if idle else None

    def _keep(self, env: E, env_id: str, split: str, options: dict[str, Any]) -> None:
        with self._lock:
            self._idle.setdefault(_key(env_id, split, options), []).append(env)

    def _take_all(self) -> list[E]:
        """Every idle env, the pool emptied."""
        with self._lock:
            envs = [env for idle in self._idle.values() for env in idle]
            self._idle.clear()
        return envs

    def idle_count(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._idle.values())

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EnvPool(IdleEnvs[Env]):
    """Idle envs by (env id, split, options); `acquire` makes one when none is idle."""

    def __init__(self, factory: Callable[..., Env] = make) -> None:
        super().__init__()
        self._factory = factory

    def acquire(self, env_id: str, split: str, options: dict[str, Any]) -> Env:
        with self._lock:
            env = self._pop_idle(env_id, split, options)
            if env is not None:
                return env
            self.created += 1
        return self._factory(env_id, split=split, **options)

    def release(self, env: Env, env_id: str, split: str, options: dict[str, Any],
                healthy: bool) -> None:
        """Keep a healthy env for the next episode; close one that failed."""
        if not healthy:
            close_quietly(env)
            return
        self._keep(env, env_id, split, options)

    def close(self) -> None:
        for env in self._take_all():
            close_quietly(env)


def close_quietly(env: Env) -> None:
    """Best-effort close: the episode's trajectory is already safe, a failing close must not
    take the run down."""
    with contextlib.suppress(Exception):
        env.close()
