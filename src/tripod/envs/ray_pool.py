"""`RayEnvPool`: envs hosted by Ray actors (`cluster.backend: ray`), a drop-in for `EnvPool`.

Why: some envs are expensive per step (SWE test runs, ALFWorld planning). On a cluster they
should step on other machines' CPUs while the learner's machine generates. Each of
`cluster.env_workers` actors (one CPU each) hosts several envs and steps them one call at a
time; the rollout engine sees ordinary `Env` objects (`RemoteEnv`) and keeps its threads,
time-outs and error handling unchanged, so for equal seeds the trajectories equal the local
backend's (envs are deterministic given their game and actions).

Faults: when a worker process dies (a crash, an OOM kill, a lost node), every call into it
raises `EnvWorkerDied`; the engine marks those episodes as env errors (excluded from the loss
and counted), and the pool replaces the dead worker once, so later episodes run on a fresh
one. A hung step is the engine's time-out, as locally.

Rollout workers holding policy copies (`cluster.rollout_workers`) are in
`policy.ray_workers`; they host their envs in their own processes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from tripod.core.config import ClusterSection
from tripod.envs.base import Env, Step, StepInfo
from tripod.envs.pool import EnvPool, IdleEnvs
from tripod.envs.registry import make


class EnvWorkerDied(RuntimeError):
    """The Ray actor hosting an env is gone; its episode is an env error."""


class EnvWorker:
    """The actor's body: envs by key, built with `factory` in the actor's process."""

    def __init__(self, factory: Callable[..., Env]) -> None:
        self.factory = factory
        self.envs: dict[int, Env] = {}

    def make(self, key: int, env_id: str, split: str, options: dict[str, Any]) -> None:
        self.envs[key] = self.factory(env_id, split=split, **options)

    def reset(self, key: int, game_index: int) -> tuple[str, StepInfo]:
        return self.envs[key].reset(game_index)

    def step(self, key: int, action: str) -> Step:
        return self.envs[key].step(action)

    def close(self, key: int) -> None:
        env = self.envs.pop(key, None)
        if env is not None:
            env.close()

    def pid(self) -> int:
        import os

        return os.getpid()


class RemoteEnv:
    """An env living in a worker actor; calls block until the actor answers."""

    def __init__(self, pool: RayEnvPool, worker: Any, key: int) -> None:
        self.pool, self.worker, self.key = pool, worker, key

    def _call(self, method: str, *args: Any) -> Any:
        import ray

        try:
            return ray.get(getattr(self.worker, method).remote(self.key, *args))
        except ray.exceptions.RayActorError as exc:
            self.pool.replace(self.worker)
            raise EnvWorkerDied(f"env worker died: {type(exc).__name__}") from None

    def reset(self, game_index: int) -> tuple[str, StepInfo]:
        return self._call("reset", game_index)

    def step(self, action: str) -> Step:
        return self._call("step", action)

    def close(self) -> None:
        if self.pool.alive(self.worker):
            self.worker.close.remote(self.key)


class RayEnvPool(IdleEnvs[RemoteEnv]):
    """`EnvPool`'s interface over Ray actors: idle envs kept per (env id, split, options),
    new envs placed on the worker hosting the fewest."""

    def __init__(self, workers: list[Any], new_worker: Callable[[], Any],
                 owns_ray: bool) -> None:
        super().__init__()
        self.workers = workers
        self._new_worker = new_worker
        self._owns_ray = owns_ray
        self._hosted = {id(w): 0 for w in workers}
        self._keys = itertools.count()
        self.replaced = 0
        """Workers replaced after they died."""

    def acquire(self, env_id: str, split: str, options: dict[str, Any]) -> RemoteEnv:
        import ray

        with self._lock:
            idle = self._pop_idle(env_id, split, options)
            if idle is not None:
                return idle
            worker = min(self.workers, key=lambda w: self._hosted[id(w)])
            self._hosted[id(worker)] += 1
            self.created += 1
            key = next(self._keys)
        env = RemoteEnv(self, worker, key)
        try:
            ray.get(worker.make.remote(key, env_id, split, options))
        except ray.exceptions.RayActorError:
            self.replace(worker)
            raise EnvWorkerDied("env worker died while building an env") from None
        return env

    def release(self, env: RemoteEnv, env_id: str, split: str, options: dict[str, Any],
                healthy: bool) -> None:
        """Keep a healthy env of a live worker for the next episode; close the others."""
        if not healthy or not self.alive(env.worker):
            env.close()
            with self._lock:
                if id(env.worker) in self._hosted:
                    self._hosted[id(env.worker)] -= 1
            return
        self._keep(env, env_id, split, options)

    def alive(self, worker: Any) -> bool:
        with self._lock:
            return any(w is worker for w in self.workers)

    def replace(self, dead: Any) -> None:
        """Swap a dead worker for a fresh one (once, however many of its envs notice)."""
        with self._lock:
            if not any(w is dead for w in self.workers):
                return
            fresh = self._new_worker()
            self.workers = [fresh if w is dead else w for w in self.workers]
            self._hosted.pop(id(dead), None)
            self._hosted[id(fresh)] = 0
            for key, envs in self._idle.items():
                self._idle[key] = [e for e in envs if e.worker is not dead]
            self.replaced += 1

    def close(self) -> None:
        """Stop the workers (their envs close with them) and a Ray this pool started."""
        import ray

        self._take_all()
        with self._lock:
            workers, self.workers = self.workers, []
        for w in workers:
            ray.kill(w)
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()


def init_ray(cluster: ClusterSection) -> bool:
    """Join (`cluster.address`) or start a local Ray unless this process is connected
    already; True if this call started it (its caller then shuts it down)."""
    try:
        import ray
    except ImportError:
        raise ImportError("cluster.backend=ray needs Ray: pip install 'tripod[ray]'") from None
    if ray.is_initialized():
        return False
    ray.init(address=cluster.address, num_cpus=None if cluster.address else cluster.num_cpus,
             include_dashboard=False, log_to_driver=False)
    return True


def start_ray_pool(cluster: ClusterSection, factory: Callable[..., Env] = make) -> RayEnvPool:
    """Join (`cluster.address`) or start a local Ray, and start the env workers."""
    owns = init_ray(cluster)
    import ray

    actor = ray.remote(num_cpus=1, max_restarts=0)(EnvWorker)

    def new_worker() -> Any:
        return actor.remote(factory)

    return RayEnvPool([new_worker() for _ in range(cluster.env_workers)], new_worker, owns)


def open_pool(cluster: ClusterSection) -> EnvPool | RayEnvPool:
    """The env pool a recipe's `cluster` section asks for."""
    return start_ray_pool(cluster) if cluster.backend == "ray" else EnvPool()
