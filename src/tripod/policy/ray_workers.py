"""Rollout workers on Ray (`cluster.rollout_workers`): copies of the policy that play the
training episodes in other processes, possibly on other machines.

Why: an iteration's rollout (generation plus env steps) can be spread over a cluster while
the learner keeps one copy of the trainable state. Each worker actor holds a CPU copy of the
policy, built from the recipe's model spec, and a rollout engine with its own envs.
`RolloutWorkers.collect` has `RolloutEngine.collect`'s signature, so the RL loop does not
change: worker w plays the groups w, w + N, ... (whole groups, as torchrun ranks do) and the
trajectories come back in job order. Every episode samples from its own generator, so for
equal seeds the trajectories equal the learner-process engine's (the logprobs up to float
summation order, since batches are made of other episodes).

How weights travel: `publish` copies the trainable tensors into Ray's object store once
(`ray.put`: a snapshot, the learner may update right after) and every worker loads them
from there; tensors that never train (LoRA's frozen base, buffers) travel once per worker,
when it starts. Each publish raises the weights' version. Before a rollout the group checks
(1) that the learner's weights did not change after the last publish (an update that was
not broadcast: `StaleWeights`; under `cluster.overlap` the policy trains while the workers
play the next batch, one update behind by design, so this is allowed there) and (2) each
worker checks that it holds the published version (a lost or failed load: `StaleWeights`).

Faults: a worker that dies mid-rollout (a crash, an OOM kill, a lost node) loses its share
of the episodes: they come back as env errors (excluded from the loss, counted, as with
`envs.ray_pool`'s env workers), and a fresh worker, loaded with the published weights,
takes its place.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from tripod.core.config import LoraSection, TrainConfig
from tripod.core.types import EpisodeEnd, EpisodeJob, Trajectory
from tripod.envs.base import Env
from tripod.envs.pool import EnvPool
from tripod.envs.ray_pool import init_ray
from tripod.envs.registry import make
from tripod.policy.models import load_policy, wrap_lora
from tripod.policy.rollout import RolloutConfig, RolloutEngine, RolloutStats
from tripod.policy.sampler import SamplingParams

State = dict[str, torch.Tensor]

START_TIMEOUT_S = 600.0
"""How long `start_rollout_workers` waits for its workers to start and load the weights
before failing: an actor that cannot be placed (no free CPU) would otherwise wait forever."""


class StaleWeights(RuntimeError):
    """A rollout would sample from weights older than the learner's."""


# -- what travels ----------------------------------------------------------------------------
def trainable_state(model: torch.nn.Module) -> State:
    """The parameters that require gradients, on the CPU: all of them in full fine-tuning,
    the adapters with LoRA. Sent after every update."""
    return {n: p.detach().cpu() for n, p in model.named_parameters() if p.requires_grad}


def frozen_state(model: torch.nn.Module) -> State:
    """The rest of the state dict (LoRA's base weights, buffers), on the CPU; sent once per
    worker. A tensor tied to a trainable one (embeddings and LM head) is left out: loading
    the trainable one into the worker's equally tied model sets both."""
    tied = {p.data_ptr() for p in model.parameters() if p.requires_grad}
    return {k: v.detach().cpu() for k, v in model.state_dict().items()
            if v.data_ptr() not in tied}


def weights_mark(model: torch.nn.Module) -> int:
    """A number that changes whenever the trainable weights are modified in place (an
    optimizer step, a `load_state_dict`): the sum of their autograd version counters."""
    return sum(p._version for p in model.parameters() if p.requires_grad)


# -- the actor -------------------------------------------------------------------------------
@dataclass(frozen=True)
class WorkerSpec:
    """What a worker builds its policy copy and its engine from (sent pickled)."""

    model_name: str
    seed: int
    lora: LoraSection | None
    rollout: RolloutConfig
    env_factory: Callable[..., Env] = make
    """Builds the worker's envs (`EnvPool`'s factory; tests inject faulty envs here)."""


@dataclass
class WorkerResult:
    """One worker's share of a rollout."""

    trajectories: list[Trajectory]
    stats: RolloutStats
    faults: Counter[str]


class RolloutWorker:
    """The actor's body (built in the actor's process): a CPU copy of the policy and a
    rollout engine with its own env pool. Weights arrive through `load`."""

    def __init__(self, spec: WorkerSpec) -> None:
        policy = load_policy(spec.model_name, device="cpu", seed=spec.seed)
        if spec.lora is not None:
            policy.model = wrap_lora(policy.model, spec.lora)
        policy.model.eval().requires_grad_(False)
        self.policy = policy
        self.engine = RolloutEngine(policy, spec.rollout, pool=EnvPool(spec.env_factory))
        self.version: int | None = None
        self.load_error: str | None = None

    def load(self, version: int, *parts: State) -> str | None:
        """Load the parts of a state dict in order, then hold weights `version`. A failure is
        returned and kept: the next `play` reports it (the learner waits only on the first
        load)."""
        try:
            for part in parts:
                unexpected = self.policy.model.load_state_dict(part, strict=False).unexpected_keys
                if unexpected:
                    raise KeyError(f"tensors the worker's model lacks: {unexpected[:3]}")
        except Exception as exc:  # reported at the next rollout, with the version it missed
            self.version, self.load_error = None, f"{type(exc).__name__}: {exc}"
            return self.load_error
        self.version, self.load_error = version, None
        return None

    def play(self, jobs: list[EpisodeJob], sampling: SamplingParams,
             version: int) -> WorkerResult:
        """Play `jobs` with weights `version`, or refuse (`StaleWeights`)."""
        if self.version != version:
            why = f" (its last load failed: {self.load_error})" if self.load_error else ""
            raise StaleWeights(f"rollout worker holds weights version {self.version}, the "
                               f"learner published {version}{why}")
        before = Counter(self.engine.faults_injected)
        trajs, stats = self.engine.collect(jobs, sampling)
        return WorkerResult(trajs, stats, self.engine.faults_injected - before)

    def state_dict(self) -> State:
        """The copy's weights (for tests)."""
        return self.policy.model.state_dict()


# -- the learner's side ----------------------------------------------------------------------
def lost_episode(job: EpisodeJob, exc: BaseException) -> Trajectory:
    """The trajectory of an episode whose worker died: an env error, nothing to train on."""
    return Trajectory(job, objective="", first_observation="", end=EpisodeEnd.ENV_ERROR,
                      error=f"rollout worker died: {type(exc).__name__}")


def merge_stats(results: list[WorkerResult], seconds: float) -> RolloutStats:
    """The workers' rollout statistics summed; `seconds` is the group's wall time and the
    env wait the longest of the workers' (they wait side by side)."""
    out = RolloutStats(seconds=seconds)
    for r in results:
        out.env_steps += r.stats.env_steps
        out.generated_tokens += r.stats.generated_tokens
        out.overlapped_steps += r.stats.overlapped_steps
        out.env_wait_seconds = max(out.env_wait_seconds, r.stats.env_wait_seconds)
    return out


class RolloutWorkers:
    """`RolloutEngine.collect` over Ray rollout workers (built by `start_rollout_workers`).

    `model` is the learner's policy model: `publish` broadcasts its weights, and `collect`
    refuses to play when they changed after the last publish (`max_staleness` 0), or lets
    the workers play one update behind (`max_staleness` 1, overlapped rollouts)."""

    def __init__(self, workers: list[Any], new_worker: Callable[[], Any],
                 model: torch.nn.Module, max_staleness: int, owns_ray: bool) -> None:
        self.workers = workers
        self.model = model
        self.max_staleness = max_staleness
        self._new_worker = new_worker
        self._owns_ray = owns_ray
        self._lock = threading.Lock()
        self._frozen: Any = None
        self._trainable: Any = None
        self._mark: int | None = None
        self._loads: list[Any] = []
        self.version = -1
        """Version of the weights last published (-1: none yet)."""
        self.replaced = 0
        """Workers replaced after they died."""
        self.faults_injected: Counter[str] = Counter()
        """Faults injected by `env.faults` in the workers' episodes so far, by kind."""

    def publish(self) -> int:
        """Broadcast the learner's current weights to every worker; their new version."""
        import ray

        mark = weights_mark(self.model)  # read first: a later change shows as stale
        with self._lock:
            first = self._frozen is None  # the workers hold the spec's weights until now
            if first:
                self._frozen = ray.put(frozen_state(self.model))
            self._trainable, self._mark = ray.put(trainable_state(self.model)), mark
            self.version += 1
            parts = (self._frozen, self._trainable) if first else (self._trainable,)
            self._loads = [w.load.remote(self.version, *parts) for w in self.workers]
        return self.version

    def wait_loaded(self, timeout_s: float) -> None:
        """Wait until every worker has loaded the last broadcast: a worker that could not
        start raises its error here, and one not placed in `timeout_s` fails loudly."""
        import ray

        _, pending = ray.wait(self._loads, num_returns=len(self._loads), timeout=timeout_s)
        if pending:
            free = ray.available_resources().get("CPU", 0)
            raise RuntimeError(
                f"{len(pending)} of {len(self._loads)} rollout workers did not start in "
                f"{timeout_s:.0f} s; each needs a free Ray CPU ({free:g} free now; env workers "
                f"take cluster.env_workers more)")
        errors = [e for e in ray.get(self._loads) if e is not None]
        if errors:
            raise RuntimeError(f"a rollout worker could not load the weights: {errors[0]}")

    def check_learner(self) -> None:
        """Refuse to play when the learner's weights moved after the last publish, unless
        one update of staleness is allowed (overlapped rollouts)."""
        if self.version < 0:
            raise StaleWeights("no weights published to the rollout workers yet")
        if self.max_staleness < 1 and weights_mark(self.model) != self._mark:
            raise StaleWeights("the learner's weights changed after the last publish: the "
                               "rollout workers would play an older policy (publish after "
                               "every update)")

    def collect(self, jobs: list[EpisodeJob],
                sampling: SamplingParams) -> tuple[list[Trajectory], RolloutStats]:
        """Play every job on the workers (whole groups each); trajectories in job order."""
        import ray

        self.check_learner()
        start = time.perf_counter()
        with self._lock:
            workers, version = list(self.workers), self.version
        owner = {g: k % len(workers) for k, g in enumerate(sorted({j.group_id for j in jobs}))}
        shares = [[j for j in jobs if owner[j.group_id] == w] for w in range(len(workers))]
        calls = [w.play.remote(share, sampling, version) if share else None
                 for w, share in zip(workers, shares, strict=True)]
        done: dict[int, Trajectory] = {}
        results: list[WorkerResult] = []
        for worker, share, call in zip(workers, shares, calls, strict=True):
            if call is None:
                continue
            try:
                results.append(ray.get(call))
            except ray.exceptions.RayActorError as exc:
                self.replace(worker)
                done.update({j.episode_id: lost_episode(j, exc) for j in share})
        for r in results:
            done.update({t.job.episode_id: t for t in r.trajectories})
            self.faults_injected.update(r.faults)
        trajs = [done[j.episode_id] for j in jobs]
        stats = merge_stats(results, time.perf_counter() - start)
        stats.episodes = len(trajs)
        stats.env_errors = sum(t.failed for t in trajs)
        stats.context_limits = sum(t.end is EpisodeEnd.CONTEXT_LIMIT for t in trajs)
        return trajs, stats

    def replace(self, dead: Any) -> None:
        """Swap a dead worker for a fresh one holding the published weights."""
        with self._lock:
            if not any(w is dead for w in self.workers):
                return
            fresh = self._new_worker()
            fresh.load.remote(self.version, self._frozen, self._trainable)
            self.workers = [fresh if w is dead else w for w in self.workers]
            self.replaced += 1

    def close(self) -> None:
        """Stop the workers (their envs close with them) and a Ray this group started."""
        import ray

        with self._lock:
            workers, self.workers = self.workers, []
        for w in workers:
            ray.kill(w)
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()


def start_rollout_workers(cfg: TrainConfig, rollout: RolloutConfig, model: torch.nn.Module,
                          env_factory: Callable[..., Env] = make) -> RolloutWorkers:
    """Join or start Ray (as the env pool does), start `cfg.cluster.rollout_workers`
    workers (one CPU each) and publish the learner's weights (`model`) to them."""
    owns = init_ray(cfg.cluster)
    import ray

    spec = WorkerSpec(cfg.model.name, cfg.run.seed,
                      cfg.model.lora if cfg.model.lora.enabled else None, rollout, env_factory)
    actor = ray.remote(num_cpus=1, max_restarts=0)(RolloutWorker)

    def new_worker() -> Any:
        return actor.remote(spec)

    group = RolloutWorkers([new_worker() for _ in range(cfg.cluster.rollout_workers)],
                           new_worker, model, max_staleness=1 if cfg.cluster.overlap else 0,
                           owns_ray=owns)
    try:
        group.publish()
        group.wait_loaded(START_TIMEOUT_S)
    except BaseException:
        group.close()
        raise
    return group
