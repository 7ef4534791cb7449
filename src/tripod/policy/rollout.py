"""The multi-turn rollout engine: the only place that tokenizes.

It plays many episodes at once. Up to `batch_size` episodes are active; each turn, every
active episode is extended with the tokens it has not seen (its first prompt, or the last
action's final token plus the template delta and observation), actions are sampled for all of
them in one batched decode, and the environments are stepped in parallel threads with a
per-step time-out. Finished episodes leave the batch and queued ones take their place, so the
batch mixes episodes at different turns.

Env work and decoding (`env_overlap_s`): by default the engine waits for every step of a turn
before it decodes again, so which episodes share a decode batch never depends on env timing
and a run is reproducible. With `env_overlap_s` set, it waits at most that long; episodes
whose steps have returned decode their next turn while the others' steps go on in their
threads, and those rejoin the batch once their steps return. That hides slow, uneven env
steps behind decoding when they wait on something other than the cores decoding uses (on
2 cores, sandboxed SWE test runs gained nothing), at the price of timing-dependent batches
(sampled ids stay exact; a run is no longer bit-for-bit repeatable).

Token-in-token-out: each `Turn` records the exact context ids and the sampled ids with their
logprobs; training uses these ids, never a re-tokenization of decoded text. How a reply
becomes an action is the env family's rule (`EnvFamily.action_parser`: the last command line
for text games, one whole tool call for SWE), and the default instruction describes that rule.

Env failures: every reset and step result is checked against the `Step` contract in its
worker thread (malformed results become `EnvError`), and the envs of a turn share one
deadline, so no step is waited for past `env_timeout_s`. An episode whose env raised, hung
or broke the contract ends as an env error (marked, excluded from the loss, counted). Fault
injection (`env.faults`, `envs/faults.py`) wraps each episode's env here, in `_acquire`.

Context window: before each turn, an episode whose prompt plus `max_new_tokens` would not fit
the model's context ends with `EpisodeEnd.CONTEXT_LIMIT` (counted; its turns are kept for
training, as with the turn cap). Nothing is ever truncated silently.
"""

from __future__ import annotations

import math
import numbers
import random
import time
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from tripod.core.config import FaultsSection
from tripod.core.types import EpisodeEnd, EpisodeJob, Trajectory, Turn, TurnStatus
from tripod.envs import Env, Step
from tripod.envs.base import EnvError, StepInfo, last_line_action
from tripod.envs.faults import FaultyEnv, unwrap
from tripod.envs.play import ExpertPolicy, RandomPolicy, ScriptedAction, ScriptedPolicy
from tripod.envs.pool import EnvPool, close_quietly
from tripod.envs.registry import family_of
from tripod.policy.chat import (
    DEFAULT_INSTRUCTION,
    PromptConfig,
    build_messages,
    render_prompt_ids,
    turn_delta_text,
)
from tripod.policy.models import Policy
from tripod.policy.restrict import CommandTrie
from tripod.policy.sampler import KVArena, RowState, Sample, SamplingParams, sample_turn

ScriptedFactory = Callable[[EpisodeJob], ScriptedPolicy]
"""Builds the scripted policy of one episode (seeded from the job: episodes stay
independent and reproducible whatever the batch)."""


@dataclass
class RolloutConfig:
    """How episodes are played. Built from a recipe by `policy.settings.rollout_config`; each
    field is documented on the recipe field it comes from (`core/config.py`)."""

    max_turns: int = 12                                   # env.max_turns
    batch_size: int = 16                                  # rollout.batch_size
    env_timeout_s: float = 30.0                           # rollout.env_timeout_s
    env_overlap_s: float | None = None                    # rollout.env_overlap_s
    truncated_action: Literal["end", "step"] = "end"      # rollout.truncated_action
    restrict_actions: bool = False                        # rollout.restrict_actions
    avoid_repeats: bool = False                           # rollout.avoid_repeats
    prompt: PromptConfig = field(default_factory=PromptConfig)   # prompt.*
    env_options: dict = field(default_factory=dict)       # env.options
    faults: FaultsSection | None = None                   # env.faults
    options_by_env: dict[str, dict] = field(default_factory=dict)
    """Options of the run's other env ids (mixes, other evaluated envs: `env.options_by_env`
    or their defaults), where `env_options` (the recipe's env) must not apply."""

    def options_for(self, env_id: str) -> dict:
        return self.options_by_env.get(env_id, self.env_options)


@dataclass
class RolloutStats:
    episodes: int = 0
    env_steps: int = 0
    generated_tokens: int = 0
    env_errors: int = 0
    context_limits: int = 0
    seconds: float = 0.0
    env_wait_seconds: float = 0.0
    """Wall time the engine spent waiting for env resets and steps, nothing else running:
    the most that overlapping env work with decoding could hide."""
    overlapped_steps: int = 0
    """Env steps still running when the engine went on decoding other episodes
    (`env_overlap_s`): their episodes rejoined the batch later."""

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
class _PendingStep:
    """An env step sent and not yet taken back, with what its turn record needs."""

    future: Future
    deadline: float
    """`time.monotonic()` past which the step is an env error (timed out)."""
    prompt_ids: list[int]
    sample: Sample
    action: str
    overlapped: bool = False
    """Decoding went on while it ran (counted once in `RolloutStats.overlapped_steps`)."""


@dataclass
class _Episode:
    job: EpisodeJob
    env: Env | None
    traj: Trajectory
    generator: torch.Generator
    context: list[int]
    prompt: PromptConfig
    parse: Callable[[str], str]
    row: RowState = field(default_factory=RowState)
    history: list[tuple[str, str]] = field(default_factory=list)
    observation: str = ""
    info: StepInfo = field(default_factory=StepInfo)
    """The env's latest info (the expert's next action, admissible actions)."""
    scripted: ScriptedPolicy | None = None
    pending: _PendingStep | None = None
    """Its env step in flight; the episode does not decode until it is taken back."""
    done: bool = False


def played_here(traj: Trajectory, observation: str, progress: float) -> set[str]:
    """The actions `traj` has already played from the state it is in now: each turn's state is
    the observation it acted on with the env's progress there (a `look` reads the same before
    and after a goal condition is met); an action the env did not carry out leaves the state
    as it was."""
    here = (observation, progress)
    state = (traj.first_observation, traj.start_progress)
    played: set[str] = set()
    for turn in traj.turns:
        if state == here:
            played.add(turn.action_text.strip())
        if turn.status is TurnStatus.OK:
            state = (turn.observation, turn.progress)
    return played


class RolloutEngine:
    """Plays `EpisodeJob`s with a policy and returns token-exact `Trajectory`s.

    Envs come from `pool` (shared with other engines of the same run; the caller closes it)
    or, when none is given, from a pool the engine owns and closes in `close()`. An
    `env_factory` (for tests) builds a fresh env per episode instead and closes it after.
    """

    def __init__(self, policy: Policy, cfg: RolloutConfig, pool: EnvPool | None = None,
                 env_factory: Callable[[EpisodeJob], Env] | None = None) -> None:
        self.policy = policy
        self.cfg = cfg
        self.env_factory = env_factory
        self._owns_pool = pool is None
        self.pool = pool or EnvPool()
        self._eos_text = policy.tokenizer.decode([policy.eos_token_ids[0]])
        self.context_length: int | None = getattr(
            policy.model.config, "max_position_embeddings", None)
        """Longest sequence the model takes (prompt + reply); None: unchecked."""
        self.faults_injected: Counter[str] = Counter()
        """Faults injected by `env.faults` so far, by kind (each one ended its episode)."""

    def close(self) -> None:
        """Close the envs of the pool this engine owns (a shared pool is its owner's)."""
        if self._owns_pool:
            self.pool.close()

    def collect(self, jobs: list[EpisodeJob], sampling: SamplingParams,
                actor: ScriptedFactory | None = None) -> tuple[list[Trajectory], RolloutStats]:
        """Play every job; trajectories come back in job order.

        With an `actor` (a scripted policy per episode, e.g. the expert for SFT data) the
        model is not run, except on the turns the actor hands to it: the actor's text is
        tokenized as the reply, so demonstrations get exactly the prompt formatting and
        action parsing that RL rollouts get.
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
                    active.append(self._start(queue.popleft(), pool, actor, stats))
                self._end_over_context([e for e in active if e.pending is None], sampling,
                                       actor)
                playing = [e for e in active if not e.done and e.pending is None]
                if playing:  # one arena for the rollout, even when only new rows decode
                    held = next((e.row.arena for e in active if e.row.arena is not None), None)
                    self._turn(playing, sampling, pool, stats, held)
                self._take_steps(active, stats)
                for ep in [e for e in active if e.done]:
                    finished[ep.job.episode_id] = ep.traj
                    ep.row.release()
                    self._release(ep)
                active = [e for e in active if not e.done]
        finally:
            for ep in active:  # stopped by an error: the arena must not outlive the call
                ep.row.release()
            pool.shutdown(wait=False, cancel_futures=True)
            self.policy.model.train(was_training)
        stats.episodes = len(finished)
        stats.env_errors = sum(t.failed for t in finished.values())
        stats.context_limits = sum(t.end is EpisodeEnd.CONTEXT_LIMIT for t in finished.values())
        stats.seconds = time.perf_counter() - start
        return [finished[j.episode_id] for j in jobs], stats

    # -- episode life cycle -------------------------------------------------------------
    def _start(self, job: EpisodeJob, pool: ThreadPoolExecutor,
               actor: ScriptedFactory | None, stats: RolloutStats) -> _Episode:
        """Acquire the episode's env and reset it. Resets run one at a time: a reset may
        generate its game first, and TextWorld's generator is not thread-safe (two resets
        generating at once both fail)."""
        traj = Trajectory(job, objective="", first_observation="")
        gen = torch.Generator().manual_seed(job.sample_seed)
        prompt, parse = self._family_rules(job.env_id)
        ep = _Episode(job, None, traj, gen, [], prompt, parse,
                      scripted=actor(job) if actor else None)
        waited = time.perf_counter()
        try:
            ep.env = self._acquire(job)
            obs, info = pool.submit(_checked_reset, ep.env, job.game_index).result(
                self.cfg.env_timeout_s)
        except Exception as exc:  # a broken env must not take the run down: mark and count
            traj.end, traj.error = EpisodeEnd.ENV_ERROR, f"reset failed: {_describe(exc)}"
            ep.done = True
            return ep
        finally:
            stats.env_wait_seconds += time.perf_counter() - waited
        traj.objective, traj.first_observation, traj.max_score = info.objective, obs, info.max_score
        traj.start_progress = info.progress
        ep.observation, ep.info = obs, info
        ep.context = render_prompt_ids(self.policy.tokenizer, self._messages(ep))
        return ep

    def _family_rules(self, env_id: str) -> tuple[PromptConfig, Callable[[str], str]]:
        """The prompt (with the family's default instruction) and the family's action parser."""
        try:
            family = family_of(env_id)
        except KeyError:  # an env built by a test's factory under an unregistered id
            return self.cfg.prompt, last_line_action
        prompt = self.cfg.prompt
        if prompt.instruction is None:
            prompt = prompt.model_copy(
                update={"instruction": family.instruction or DEFAULT_INSTRUCTION})
        return prompt, family.action_parser

    def _acquire(self, job: EpisodeJob) -> Env:
        if self.env_factory is not None:
            env = self.env_factory(job)
        else:
            env = self.pool.acquire(job.env_id, job.split, self.cfg.options_for(job.env_id))
        faults = self.cfg.faults
        if faults is None or faults.rate == 0 or job.split not in faults.splits:
            return env
        # the one place faults enter: per episode, seeded by the episode, so a faulty run
        # repeats exactly
        return FaultyEnv(env, faults.rate, faults.kinds, f"{faults.seed}:{job.sample_seed}",
                         hang_s=10 * self.cfg.env_timeout_s)

    def _messages(self, ep: _Episode) -> list[dict[str, str]]:
        return build_messages(ep.prompt, ep.traj.objective, ep.traj.first_observation,
                              ep.history)

    def _release(self, ep: _Episode) -> None:
        if ep.env is None:
            return
        if isinstance(ep.env, FaultyEnv):
            self.faults_injected.update(ep.env.injected)
        if self.env_factory is not None:
            close_quietly(ep.env)
        else:  # a failed env is closed (with its fault wrapper: a hung step returns)
            env = ep.env if ep.traj.failed else unwrap(ep.env)
            self.pool.release(env, ep.job.env_id, ep.job.split,
                              self.cfg.options_for(ep.job.env_id),
                              healthy=not ep.traj.failed)

    def _end_over_context(self, active: list[_Episode], sampling: SamplingParams,
                          actor: ScriptedFactory | None) -> None:
        """End episodes whose next prompt + reply would not fit the model's context."""
        if self.context_length is None:
            return
        for ep in active:
            if not ep.done and len(ep.context) + sampling.max_new_tokens > self.context_length:
                ep.traj.end, ep.done = EpisodeEnd.CONTEXT_LIMIT, True
                ep.traj.error = (f"prompt of {len(ep.context)} tokens + {sampling.max_new_tokens}"
                                 f" new tokens exceeds the context of {self.context_length}")

    # -- one turn for every active episode -------------------------------------------------
    def _sample(self, active: list[_Episode], sampling: SamplingParams,
                arena: KVArena | None = None) -> list[Sample]:
        restrict = ([self._trie(ep, sampling) for ep in active]
                    if self.cfg.restrict_actions else None)
        return sample_turn(self.policy.model, [ep.row for ep in active],
                           [ep.context for ep in active], sampling,
                           [ep.generator for ep in active], self.policy.eos_token_ids,
                           self.policy.pad_token_id, arena, restrict=restrict)

    def _trie(self, ep: _Episode, sampling: SamplingParams) -> CommandTrie | None:
        """The episode's admissible commands as a token trie (None: the env lists none);
        with `avoid_repeats`, less those already played from its current state."""
        commands = ep.info.admissible_actions or []
        if self.cfg.avoid_repeats:
            played = played_here(ep.traj, ep.observation, ep.info.progress)
            commands = [c for c in commands if c.strip() not in played] or commands
        return CommandTrie.of_commands(self.policy.tokenizer, commands,
                                       self.policy.eos_token_ids[0], sampling.max_new_tokens)

    def _scripted(self, active: list[_Episode], sampling: SamplingParams,
                  arena: KVArena | None = None) -> list[Sample]:
        """The actors' replies. With restricted replies each records, as sampling would, the
        ids the admissible commands allow at each of its steps (None where the reply is not
        an admissible command): what teacher-forced accuracy under the restriction reads.
        A turn an actor hands to the model (`ScriptedAction.by_policy`) is sampled as in RL
        and marked not trainable: the actor's own turns after it start from states the
        model led to (DAgger)."""
        tok, eos = self.policy.tokenizer, self.policy.eos_token_ids[0]
        samples: list[Sample | None] = []
        handed = []
        for k, ep in enumerate(active):
            action: ScriptedAction = ep.scripted.act(ep.observation, ep.info)
            if action.by_policy:
                samples.append(None)
                handed.append(k)
                continue
            ids = tok(action.text, add_special_tokens=False)["input_ids"] + [eos]
            trie = self._trie(ep, sampling) if self.cfg.restrict_actions else None
            samples.append(Sample(ids, [0.0] * len(ids), ended=True, trainable=action.trainable,
                                  allowed=trie.path(ids) if trie is not None else None))
        if handed:
            for k, sample in zip(handed, self._sample([active[k] for k in handed], sampling,
                                                      arena)):
                sample.trainable = False
                samples[k] = sample
        return samples

    def _turn(self, active: list[_Episode], sampling: SamplingParams,
              pool: ThreadPoolExecutor, stats: RolloutStats,
              arena: KVArena | None = None) -> None:
        """Sample every episode's reply and send its action to its env (not waited for).
        `arena`: the KV arena of the episodes in flight, for new episodes to join."""
        scripted = active[0].scripted is not None
        samples = (self._scripted(active, sampling, arena) if scripted
                   else self._sample(active, sampling, arena))
        stats.generated_tokens += sum(len(s.ids) for s in samples)
        texts = [self.policy.tokenizer.decode(s.ids, skip_special_tokens=True) for s in samples]
        actions = [ep.parse(t) for ep, t in zip(active, texts)]
        futures = {i: pool.submit(_checked_step, ep.env, actions[i])
                   for i, (ep, s) in enumerate(zip(active, samples))
                   if s.ended or self.cfg.truncated_action == "step"}
        # the steps of a turn share one deadline: none is waited for past the time-out
        deadline = time.monotonic() + self.cfg.env_timeout_s
        for i, (ep, sample) in enumerate(zip(active, samples)):
            prompt_ids = list(ep.context)
            ep.context.extend(sample.ids)
            if i not in futures:  # no end-of-turn token: the turn is invalid, episode ends
                self._record(ep, prompt_ids, sample, actions[i], None, TurnStatus.TRUNCATED)
                ep.traj.end, ep.done = EpisodeEnd.TRUNCATED_ACTION, True
                continue
            stats.env_steps += 1
            ep.pending = _PendingStep(futures[i], deadline, prompt_ids, sample, actions[i])

    def _take_steps(self, active: list[_Episode], stats: RolloutStats) -> None:
        """Wait for the env steps in flight and record the ones that returned.

        Without `env_overlap_s`, every step is waited for (up to its deadline). With it, the
        steps just sent are waited for at most `env_overlap_s` (steps already overlapped are
        only checked), then for one step if none has returned; steps still running stay in
        flight and their episodes sit out the next decode. A step past its deadline ends its
        episode as an env error either way.
        """
        flying = [e for e in active if e.pending is not None]
        if not flying:
            return
        futures = [e.pending.future for e in flying]
        waited = time.perf_counter()
        overlap = self.cfg.env_overlap_s
        if overlap is None:  # the steps of one turn: one shared deadline
            wait(futures, timeout=max(0.0, flying[0].pending.deadline - time.monotonic()))
        else:  # wait for the steps just sent, not again for those already overlapped
            first = min(e.pending.deadline for e in flying)
            fresh = [e.pending.future for e in flying if not e.pending.overlapped]
            if fresh:
                wait(fresh, timeout=max(0.0, min(overlap, first - time.monotonic())))
            if not any(f.done() for f in futures):  # nothing to decode: wait for one
                wait(futures, timeout=max(0.0, first - time.monotonic()),
                     return_when=FIRST_COMPLETED)
        stats.env_wait_seconds += time.perf_counter() - waited
        now = time.monotonic()
        for ep in flying:
            pending = ep.pending
            if pending.future.done():
                ep.pending = None
                self._took(ep, pending)
            elif overlap is None or now >= pending.deadline:  # (None: the wait timed out)
                ep.pending = None
                self._env_error(ep, pending, _describe(FutureTimeout()))
            elif not pending.overlapped:
                pending.overlapped = True
                stats.overlapped_steps += 1

    def _took(self, ep: _Episode, pending: _PendingStep) -> None:
        """Record the turn whose env step returned (or raised) and move the episode on."""
        sample, action = pending.sample, pending.action
        try:
            step = pending.future.result(timeout=0)
        except Exception as exc:
            self._env_error(ep, pending, _describe(exc))
            return
        status = TurnStatus.INVALID if step.info.invalid_action else TurnStatus.OK
        if not sample.ended:
            status = TurnStatus.TRUNCATED
        self._record(ep, pending.prompt_ids, sample, action, step, status)
        self._after_step(ep, step, action)

    def _env_error(self, ep: _Episode, pending: _PendingStep, error: str) -> None:
        """The step raised, broke the contract or timed out: the turn is recorded as an env
        error and the episode ends."""
        self._record(ep, pending.prompt_ids, pending.sample, pending.action, None,
                     TurnStatus.ENV_ERROR)
        ep.traj.end, ep.traj.error, ep.done = EpisodeEnd.ENV_ERROR, error, True

    def _record(self, ep: _Episode, prompt_ids: list[int], sample, action: str,
                step: Step | None, status: TurnStatus) -> None:
        ep.traj.turns.append(Turn(
            prompt_ids=prompt_ids, action_ids=list(sample.ids), logprobs=list(sample.logprobs),
            action_text=action, observation=step.observation if step else "",
            reward=float(step.reward) if step else 0.0, status=status,
            score=step.info.score if step else 0.0,
            progress=step.info.progress if step else 0.0,
            expert_action=ep.info.expert_action, trainable=sample.trainable,
            allowed_ids=sample.allowed,
        ))

    def _after_step(self, ep: _Episode, step: Step, action: str) -> None:
        info, traj = step.info, ep.traj
        ep.observation, ep.info = step.observation, info
        traj.won, traj.lost = info.won, info.lost
        traj.env_status = str(info.extra.get("status", ""))
        resolved = info.extra.get("resolved")
        traj.resolved = None if resolved is None else bool(resolved)
        if step.terminated or info.won or info.lost:
            traj.end = EpisodeEnd.WON if info.won else EpisodeEnd.LOST
        elif step.truncated:
            traj.end = EpisodeEnd.ENV_TRUNCATED
        elif traj.num_turns >= (traj.job.max_turns or self.cfg.max_turns):
            traj.end = EpisodeEnd.MAX_TURNS
        else:
            ep.history.append((action, step.observation))
            self._next_context(ep, step.observation)
            return
        ep.done = True

    def _next_context(self, ep: _Episode, observation: str) -> None:
        """Grow the context by the template delta, or rebuild it for a finite window."""
        tok = self.policy.tokenizer
        if ep.prompt.history_window is None:
            delta = turn_delta_text(tok, ep.prompt, ep.traj.objective,
                                    ep.traj.first_observation, observation, self._eos_text)
            ep.context.extend(tok(delta, add_special_tokens=False)["input_ids"])
        else:  # the prompt changes at its start: no cache reuse possible
            ep.context = render_prompt_ids(tok, self._messages(ep))
            ep.row.release()


def expert_actor(noise: float = 0.0, policy_share: float = 0.0) -> ScriptedFactory:
    """The env's expert for each episode; with `noise` > 0 a random admissible action is taken
    instead with that probability and marked not trainable (recovery demonstrations); with
    `policy_share` > 0 the model replies instead with that probability, not trainable either
    (DAgger: the expert labels the states the model leads to)."""
    return lambda job: ExpertPolicy(job.env_id, noise, random.Random(job.sample_seed),
                                    policy_share)


def random_actor() -> ScriptedFactory:
    """A uniformly random admissible action, trainable (a format-only prior for tests)."""
    return lambda job: RandomPolicy(random.Random(job.sample_seed))


def _describe(exc: BaseException) -> str:
    if isinstance(exc, FutureTimeout):
        return "env step timed out"
    return f"{type(exc).__name__}: {str(exc)[:10_000]}"  # an odd env may say megabytes


MAX_OBSERVATION_CHARS = 1_000_000
"""An observation longer than this is an env error, not text for the prompt (a broken env
can return megabytes; no model context holds them)."""


def _check_text(obs: object, what: str) -> None:
    if not isinstance(obs, str):
        raise EnvError(f"env broke its contract: {what} is a {type(obs).__name__}, not str")
    if len(obs) > MAX_OBSERVATION_CHARS:
        raise EnvError(f"env broke its contract: {what} has {len(obs)} characters "
                       f"(limit {MAX_OBSERVATION_CHARS})")
    try:
        obs.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise EnvError(f"env broke its contract: {what} is not valid UTF-8 ({exc.reason} at "
                       f"character {exc.start})") from None


def _finite(x: object) -> bool:
    """A finite real number (numpy scalars included)."""
    return isinstance(x, numbers.Real) and math.isfinite(x)


def _boolean(x: object) -> bool:
    return isinstance(x, bool | int | np.bool_)


def _check_info(info: object, what: str) -> None:
    if not isinstance(info, StepInfo):
        raise EnvError(f"env broke its contract: {what} info is a {type(info).__name__}, "
                       "not StepInfo")
    bad = [k for k in ("score", "max_score", "progress") if not _finite(getattr(info, k))]
    if bad:
        raise EnvError(f"env broke its contract: {what} info.{bad[0]} is not a finite number")


def _checked_reset(env: Env, game_index: int) -> tuple[str, StepInfo]:
    """`env.reset`, with a malformed result turned into `EnvError` (runs in a worker
    thread, so a huge or odd result is inspected off the main thread)."""
    out = env.reset(game_index)
    if not isinstance(out, tuple) or len(out) != 2:
        raise EnvError(f"env broke its contract: reset returned a {type(out).__name__}, "
                       "not (observation, info)")
    _check_text(out[0], "reset observation")
    _check_info(out[1], "reset")
    return out


def _checked_step(env: Env, action: str) -> Step:
    """`env.step`, with a result that breaks the `Step` contract (None, wrong types, a
    non-finite reward, a huge or invalid UTF-8 observation) turned into `EnvError`."""
    step = env.step(action)
    if not isinstance(step, Step):
        raise EnvError(f"env broke its contract: step returned a {type(step).__name__}, "
                       "not a Step")
    _check_text(step.observation, "observation")
    if not _finite(step.reward):
        raise EnvError(f"env broke its contract: reward {step.reward!r} is not a finite number")
    if not (_boolean(step.terminated) and _boolean(step.truncated)):
        raise EnvError("env broke its contract: terminated / truncated are not booleans")
    _check_info(step.info, "step")
    return step


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
