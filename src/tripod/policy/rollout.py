"""The multi-turn rollout engine: the only place that tokenizes.

It plays many episodes at once. Up to `batch_size` episodes are active; each turn, every
active episode is extended with the tokens it has not seen (its first prompt, or the last
action's final token plus the template delta and observation), actions are sampled for all of
them in one batched decode, and the environments are stepped in parallel threads with a
per-step time-out. Finished episodes leave the batch and queued ones take their place, so the
batch mixes episodes at different turns.

Token-in-token-out: each `Turn` records the exact context ids and the sampled ids with their
logprobs; training uses these ids, never a re-tokenization of decoded text.
"""

from __future__ import annotations

import atexit
import contextlib
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Literal

import torch

from tripod.core.types import EpisodeEnd, EpisodeJob, Trajectory, Turn, TurnStatus
from tripod.envs import Env, Step, make
from tripod.policy.chat import (
    PromptConfig,
    build_messages,
    parse_action,
    render_prompt_ids,
    turn_delta_text,
)
from tripod.policy.models import Policy
from tripod.policy.sampler import RowState, Sample, SamplingParams, sample_turn

Actor = Callable[[str | None, list[str] | None, torch.Generator], tuple[str, bool]]
"""A scripted policy: (expert_action, admissible_actions, rng) -> (action text, trainable)."""


@dataclass
class RolloutConfig:
    """How episodes are played."""

    max_turns: int = 12
    """Turn cap per episode (12 for w2-o3-q4, 24 for larger games in the paper)."""
    batch_size: int = 16
    """Episodes played at once (the decode batch)."""
    env_timeout_s: float = 30.0
    """An env step slower than this is an env error (the episode is excluded, counted)."""
    truncated_action: Literal["end", "step"] = "end"
    """A reply without the end-of-turn token: `end` marks the turn truncated and ends the
    episode (the paper's rule); `step` still sends the parsed text to the env (for tests
    with models that have not learnt to stop)."""
    prompt: PromptConfig = field(default_factory=PromptConfig)
    env_options: dict = field(default_factory=dict)
    """Overrides passed to `tripod.envs.make` for every episode."""


@dataclass
class RolloutStats:
    episodes: int = 0
    env_steps: int = 0
    generated_tokens: int = 0
    env_errors: int = 0
    seconds: float = 0.0

    @property
    def episodes_per_s(self) -> float:
        return self.episodes / max(self.seconds, 1e-9)

    @property
    def steps_per_s(self) -> float:
        return self.env_steps / max(self.seconds, 1e-9)

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / max(self.seconds, 1e-9)


@dataclass
class _Episode:
    job: EpisodeJob
    env: Env
    traj: Trajectory
    generator: torch.Generator
    context: list[int]
    row: RowState = field(default_factory=RowState)
    history: list[tuple[str, str]] = field(default_factory=list)
    expert: str | None = None
    """The expert's action in the current state (recorded on the next turn)."""
    admissible: list[str] | None = None
    done: bool = False


class RolloutEngine:
    """Plays `EpisodeJob`s with a policy and returns token-exact `Trajectory`s."""

    def __init__(self, policy: Policy, cfg: RolloutConfig,
                 env_factory: Callable[[EpisodeJob], Env] | None = None) -> None:
        self.policy = policy
        self.cfg = cfg
        self.env_factory = env_factory or (
            lambda job: make(job.env_id, split=job.split, **cfg.env_options))
        # Idle envs, reused across episodes, `collect` calls and (with the default factory)
        # engines: starting an env can be costly (a TextWorld game process imports textworld
        # for seconds), resetting one is cheap.
        self._idle: dict[tuple, list[Env]] = _SHARED_IDLE if env_factory is None else {}
        self._eos_text = policy.tokenizer.decode([policy.eos_token_ids[0]])

    def _key(self, job: EpisodeJob) -> tuple:
        return (job.env_id, job.split, repr(sorted(self.cfg.env_options.items())))

    def _acquire(self, job: EpisodeJob) -> Env:
        idle = self._idle.get(self._key(job))
        return idle.pop() if idle else self.env_factory(job)

    def close(self) -> None:
        """Close this engine's idle envs; shared ones stay for other engines until exit."""
        if self._idle is not _SHARED_IDLE:
            _close_all(self._idle)

    def collect(self, jobs: list[EpisodeJob], sampling: SamplingParams,
                actor: Actor | None = None) -> tuple[list[Trajectory], RolloutStats]:
        """Play every job; trajectories come back in job order.

        With an `actor` (a scripted policy, e.g. the expert for SFT data) the model is not
        run: the actor's text is tokenized as the reply, so demonstrations get exactly the
        prompt formatting that RL rollouts get.
        """
        stats = RolloutStats()
        start = time.perf_counter()
        queue: deque[EpisodeJob] = deque(jobs)
        active: list[_Episode] = []
        finished: dict[int, Trajectory] = {}
        was_training = self.policy.model.training
        self.policy.model.eval()
        # Threads step the envs in parallel; a hung env's thread is abandoned, not joined.
        pool = ThreadPoolExecutor(max_workers=max(1, self.cfg.batch_size))
        try:
            while queue or active:
                while queue and len(active) < self.cfg.batch_size:
                    ep = self._start(queue.popleft(), pool)
                    if ep.done:
                        finished[ep.job.episode_id] = ep.traj
                    else:
                        active.append(ep)
                if not active:
                    continue
                self._turn(active, sampling, pool, stats, actor)
                for ep in [e for e in active if e.done]:
                    finished[ep.job.episode_id] = ep.traj
                    self._release(ep)
                active = [e for e in active if not e.done]
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
            self.policy.model.train(was_training)
        stats.episodes = len(finished)
        stats.env_errors = sum(t.failed for t in finished.values())
        stats.seconds = time.perf_counter() - start
        return [finished[j.episode_id] for j in jobs], stats

    # -- episode life cycle -------------------------------------------------------------
    def _start(self, job: EpisodeJob, pool: ThreadPoolExecutor) -> _Episode:
        traj = Trajectory(job.env_id, job.split, job.game_index, job.group_id, job.episode_id,
                          job.sample_seed, objective="", first_observation="")
        gen = torch.Generator().manual_seed(job.sample_seed)
        env = None
        try:
            env = self._acquire(job)
            obs, info = pool.submit(env.reset, job.game_index).result(self.cfg.env_timeout_s)
        except Exception as exc:  # a broken env must not take the run down: mark and count
            traj.end, traj.error = EpisodeEnd.ENV_ERROR, f"reset failed: {_describe(exc)}"
            if env is not None:
                _close_quietly(env)
            return _Episode(job, None, traj, gen, [], done=True)  # type: ignore[arg-type]
        traj.objective, traj.first_observation, traj.max_score = info.objective, obs, info.max_score
        ids = render_prompt_ids(self.policy.tokenizer, self._messages(traj, []))
        return _Episode(job, env, traj, gen, ids, expert=info.expert_action,
                        admissible=info.admissible_actions)

    def _messages(self, traj: Trajectory, history: list[tuple[str, str]]) -> list[dict[str, str]]:
        return build_messages(self.cfg.prompt, traj.objective, traj.first_observation, history)

    def _release(self, ep: _Episode) -> None:
        """Keep a healthy env for the next episode; close one that failed."""
        if ep.env is None:
            return
        if ep.traj.failed:
            _close_quietly(ep.env)
        else:
            self._idle.setdefault(self._key(ep.job), []).append(ep.env)

    # -- one turn for every active episode -------------------------------------------------
    def _sample(self, active: list[_Episode], sampling: SamplingParams) -> list[Sample]:
        return sample_turn(self.policy.model, [ep.row for ep in active],
                           [ep.context for ep in active], sampling,
                           [ep.generator for ep in active], self.policy.eos_token_ids,
                           self.policy.pad_token_id)

    def _scripted(self, active: list[_Episode], actor: Actor) -> list[Sample]:
        tok, eos = self.policy.tokenizer, self.policy.eos_token_ids[0]
        samples = []
        for ep in active:
            text, trainable = actor(ep.expert, ep.admissible, ep.generator)
            ids = tok(text, add_special_tokens=False)["input_ids"] + [eos]
            samples.append(Sample(ids, [0.0] * len(ids), ended=True, trainable=trainable))
        return samples

    def _turn(self, active: list[_Episode], sampling: SamplingParams,
              pool: ThreadPoolExecutor, stats: RolloutStats, actor: Actor | None) -> None:
        samples = self._scripted(active, actor) if actor else self._sample(active, sampling)
        stats.generated_tokens += sum(len(s.ids) for s in samples)
        texts = [self.policy.tokenizer.decode(s.ids, skip_special_tokens=True) for s in samples]
        actions = [parse_action(t) for t in texts]
        futures = {i: pool.submit(ep.env.step, actions[i])
                   for i, (ep, s) in enumerate(zip(active, samples))
                   if s.ended or self.cfg.truncated_action == "step"}
        for i, (ep, sample) in enumerate(zip(active, samples)):
            prompt_ids = list(ep.context)
            ep.context.extend(sample.ids)
            if i not in futures:  # no end-of-turn token: the turn is invalid, episode ends
                self._record(ep, prompt_ids, sample, actions[i], None, TurnStatus.TRUNCATED)
                ep.traj.end, ep.done = EpisodeEnd.TRUNCATED_ACTION, True
                continue
            stats.env_steps += 1
            try:
                step = futures[i].result(timeout=self.cfg.env_timeout_s)
            except Exception as exc:
                self._record(ep, prompt_ids, sample, actions[i], None, TurnStatus.ENV_ERROR)
                ep.traj.end, ep.traj.error, ep.done = EpisodeEnd.ENV_ERROR, _describe(exc), True
                continue
            status = TurnStatus.INVALID if step.info.invalid_action else TurnStatus.OK
            if not sample.ended:
                status = TurnStatus.TRUNCATED
            self._record(ep, prompt_ids, sample, actions[i], step, status)
            self._after_step(ep, step, actions[i])

    def _record(self, ep: _Episode, prompt_ids: list[int], sample, action: str,
                step: Step | None, status: TurnStatus) -> None:
        ep.traj.turns.append(Turn(
            prompt_ids=prompt_ids, action_ids=list(sample.ids), logprobs=list(sample.logprobs),
            action_text=action, observation=step.observation if step else "",
            reward=float(step.reward) if step else 0.0, status=status,
            score=step.info.score if step else 0.0,
            progress=step.info.progress if step else 0.0,
            expert_action=ep.expert, trainable=sample.trainable,
        ))

    def _after_step(self, ep: _Episode, step: Step, action: str) -> None:
        info, traj = step.info, ep.traj
        ep.expert, ep.admissible = info.expert_action, info.admissible_actions
        traj.won, traj.lost = info.won, info.lost
        if step.terminated or info.won or info.lost:
            traj.end = EpisodeEnd.WON if info.won else EpisodeEnd.LOST
        elif step.truncated:
            traj.end = EpisodeEnd.ENV_TRUNCATED
        elif traj.num_turns >= self.cfg.max_turns:
            traj.end = EpisodeEnd.MAX_TURNS
        else:
            ep.history.append((action, step.observation))
            self._next_context(ep, step.observation)
            return
        ep.done = True

    def _next_context(self, ep: _Episode, observation: str) -> None:
        """Grow the context by the template delta, or rebuild it for a finite window."""
        tok = self.policy.tokenizer
        if self.cfg.prompt.history_window is None:
            delta = turn_delta_text(tok, self.cfg.prompt, ep.traj.objective,
                                    ep.traj.first_observation, observation, self._eos_text)
            ep.context.extend(tok(delta, add_special_tokens=False)["input_ids"])
        else:  # the prompt changes at its start: no cache reuse possible
            ep.context = render_prompt_ids(tok, self._messages(ep.traj, ep.history))
            ep.row = RowState()


def expert_actor(noise: float = 0.0) -> Actor:
    """The env's expert; with `noise` > 0 a random admissible action is taken instead with that
    probability and marked not trainable, so demonstrations show recovery from mistakes."""

    def act(expert: str | None, admissible: list[str] | None,
            rng: torch.Generator) -> tuple[str, bool]:
        if expert is None:
            raise ValueError("this env exposes no expert_action; it cannot give demonstrations")
        if noise > 0 and admissible and float(torch.rand(1, generator=rng)) < noise:
            return admissible[int(torch.randint(len(admissible), (1,), generator=rng))], False
        return expert, True

    return act


def random_actor() -> Actor:
    """A uniformly random admissible action, trainable (a format-only prior for tests)."""

    def act(expert: str | None, admissible: list[str] | None,
            rng: torch.Generator) -> tuple[str, bool]:
        if not admissible:
            raise ValueError("this env exposes no admissible_actions")
        return admissible[int(torch.randint(len(admissible), (1,), generator=rng))], True

    return act


_SHARED_IDLE: dict[tuple, list[Env]] = {}


def _close_all(idle: dict[tuple, list[Env]]) -> None:
    for envs in idle.values():
        for env in envs:
            _close_quietly(env)
    idle.clear()


atexit.register(_close_all, _SHARED_IDLE)


def _close_quietly(env: Env) -> None:
    with contextlib.suppress(Exception):  # best effort; the trajectory is already safe
        env.close()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, FutureTimeout):
        return "env step timed out"
    return f"{type(exc).__name__}: {exc}"


def make_jobs(env_id: str, split: str, games: list[int], group_size: int,
              seed: int) -> list[EpisodeJob]:
    """`group_size` episodes for each game; episode seeds are distinct per (seed, episode)."""
    jobs = []
    for g, game in enumerate(games):
        for k in range(group_size):
            eid = g * group_size + k
            jobs.append(EpisodeJob(env_id, split, game, group_id=g, episode_id=eid,
                                   sample_seed=seed * 1_000_003 + eid))
    return jobs
