"""Scripted play: run any registered env with an expert, random or human policy.

Backs ``tripod play ENV_ID --policy {expert,random,human} --episodes N --seed S [--json]``.
It only uses the `Env` protocol, so it works for every env family: a quick check that an
env is solvable (the expert wins), not trivial (random play mostly fails), and playable by
a person in a terminal.

    >>> summary = play("textworld/w2-o3-q4", "expert", episodes=3)  # doctest: +SKIP
    >>> summary.to_json()["success_rate"]  # doctest: +SKIP
    1.0

Episode ``i`` plays game index ``seed + i`` of `split`, so a run is reproducible and two
runs with different seeds play different games.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from tripod.core.config import default_max_turns
from tripod.envs.base import Env, EnvError, StepInfo
from tripod.envs.registry import make

POLICIES = ("expert", "random", "human")


@dataclass(frozen=True)
class ScriptedAction:
    """What a scripted policy does in one turn."""

    text: str
    """The reply, exactly as a model would write it (the env family's action format)."""
    trainable: bool = True
    """False for a deliberate mistake (recovery demonstrations): it is played but never
    imitated."""
    by_policy: bool = False
    """The model being trained replies this turn instead (DAgger-style demonstrations,
    `sft.dagger_games`): the rollout engine samples it, and it is never imitated. `text` is
    then unused. Outside the rollout engine there is no model: `tripod play` refuses it."""


class ScriptedPolicy(Protocol):
    """A policy that is not a model: the expert, random play, or a person. The same object
    plays in `tripod play` and, one per episode, in the rollout engine (SFT demonstrations)."""

    def act(self, observation: str, info: StepInfo) -> ScriptedAction: ...


class QuitPlay(Exception):
    """The human player asked to stop (end of input or Ctrl-C)."""


@dataclass
class ExpertPolicy:
    """Follows the env's expert (for TextWorld, the shortest plan from the current state).

    With `noise` > 0, a random admissible action replaces the expert's with that probability
    and is marked not trainable: demonstrations then show the expert recovering from
    mistakes (walkthroughs alone contain none)."""

    env_id: str
    noise: float = 0.0
    rng: random.Random = field(default_factory=random.Random)
    policy_share: float = 0.0
    """Probability per turn of handing the turn to the model being trained (`by_policy`)."""

    def act(self, observation: str, info: StepInfo) -> ScriptedAction:
        if info.expert_action is None:
            raise ValueError(f"{self.env_id} gave no expert_action; the expert policy needs one")
        if self.policy_share > 0 and self.rng.random() < self.policy_share:
            return ScriptedAction("", trainable=False, by_policy=True)
        if self.noise > 0 and info.admissible_actions and self.rng.random() < self.noise:
            return ScriptedAction(self.rng.choice(info.admissible_actions), trainable=False)
        return ScriptedAction(info.expert_action)


@dataclass
class RandomPolicy:
    """Uniform over the admissible actions: the floor any trained agent should beat."""

    rng: random.Random

    def act(self, observation: str, info: StepInfo) -> ScriptedAction:
        if not info.admissible_actions:
            return ScriptedAction("look")  # no list to draw from: a harmless command
        return ScriptedAction(self.rng.choice(info.admissible_actions))


QUIT_WORDS = ("quit", "exit")
"""What a human player types to stop (unless the game itself accepts the word)."""


@dataclass
class HumanPolicy:
    """Reads commands from `input_fn`; ``?`` lists the admissible actions, ``quit`` (or
    ``exit``, end of input, Ctrl-C) stops."""

    input_fn: Callable[[str], str]
    print_fn: Callable[..., None]
    greeted: bool = False

    def act(self, observation: str, info: StepInfo) -> ScriptedAction:
        if not self.greeted:
            self.print_fn('(type a command; "?" lists the valid ones, "quit" stops)')
            self.greeted = True
        self.print_fn(f"\n{observation}")
        while True:
            try:
                action = self.input_fn("> ")
            except (EOFError, KeyboardInterrupt) as exc:
                raise QuitPlay from exc
            word = action.strip().lower()
            if word in QUIT_WORDS and word not in (info.admissible_actions or []):
                raise QuitPlay
            if word != "?":
                return ScriptedAction(action)
            self.print_fn(", ".join(info.admissible_actions or ["(no list available)"]))


def make_policy(name: str, env_id: str, seed: int = 0,
                input_fn: Callable[[str], str] = input,
                print_fn: Callable[..., None] = print) -> ScriptedPolicy:
    """Build one of `POLICIES` by name."""
    if name == "expert":
        return ExpertPolicy(env_id)
    if name == "random":
        return RandomPolicy(random.Random(seed))
    if name == "human":
        return HumanPolicy(input_fn, print_fn)
    raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}")


@dataclass
class EpisodeRecord:
    """One played episode."""

    index: int
    """Game index within the split."""
    game_id: str
    won: bool
    lost: bool
    truncated: bool
    """Stopped by the turn cap (or the env's own cap) before the game ended."""
    turns: int
    score: float
    max_score: float
    invalid_actions: int
    actions: list[str] = field(default_factory=list)
    error: str | None = None
    """Why the episode failed from the env's side (an `EnvError`), if it did."""


@dataclass
class PlaySummary:
    """Results of `play`: counts, rates and one record per episode."""

    env_id: str
    policy: str
    split: str
    seed: int
    records: list[EpisodeRecord]

    @property
    def episodes(self) -> int:
        return len(self.records)

    @property
    def won(self) -> int:
        return sum(r.won for r in self.records)

    @property
    def lost(self) -> int:
        return sum(r.lost for r in self.records)

    @property
    def errors(self) -> int:
        return sum(r.error is not None for r in self.records)

    @property
    def success_rate(self) -> float:
        return self.won / self.episodes if self.records else 0.0

    @property
    def mean_turns(self) -> float:
        return sum(r.turns for r in self.records) / self.episodes if self.records else 0.0

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (``tripod play --json``)."""
        return {"env_id": self.env_id, "policy": self.policy, "split": self.split,
                "seed": self.seed, "episodes": self.episodes, "won": self.won,
                "lost": self.lost, "errors": self.errors, "success_rate": self.success_rate,
                "mean_turns": self.mean_turns, "records": [asdict(r) for r in self.records]}


def play_episode(env: Env, policy: ScriptedPolicy, index: int, max_turns: int,
                 print_fn: Callable[..., None] = print) -> EpisodeRecord:
    """Play game `index` until it ends or `max_turns` actions were taken.

    A human player quitting raises `QuitPlay` (the partial episode is not a result)."""
    observation, info = env.reset(index)
    record = EpisodeRecord(index, info.game_id, False, False, False, 0, info.score,
                           info.max_score, 0)
    terminated = False
    while record.turns < max_turns and not terminated:
        chosen = policy.act(observation, info)
        if chosen.by_policy:
            raise ValueError("a scripted policy handed a turn to a model; only the rollout "
                             "engine has one")
        action = chosen.text
        step = env.step(action)
        observation, info = step.observation, step.info
        record.turns += 1
        record.actions.append(action)
        record.invalid_actions += int(info.invalid_action)
        terminated = step.terminated
        if step.truncated:
            break
    record.won, record.lost, record.truncated = info.won, info.lost, not terminated
    record.score, record.max_score = info.score, info.max_score
    if isinstance(policy, HumanPolicy):
        print_fn(f"\n{observation}")
    return record


def play(env_id: str, policy: str, episodes: int, seed: int = 0, split: str = "test",
         max_turns: int | None = None, input_fn: Callable[[str], str] = input,
         print_fn: Callable[..., None] = print, **env_overrides: Any) -> PlaySummary:
    """Play `episodes` games of `env_id` (indices ``seed .. seed + episodes - 1``).

    `max_turns` defaults to `default_max_turns(env_id)`. An episode whose env fails is
    recorded with its error and counted as not won; the run goes on.
    """
    turns = max_turns if max_turns is not None else default_max_turns(env_id)
    agent = make_policy(policy, env_id, seed, input_fn, print_fn)
    env = make(env_id, split=split, **env_overrides)
    records: list[EpisodeRecord] = []
    try:
        for index in range(seed, seed + episodes):
            try:
                record = play_episode(env, agent, index, turns, print_fn)
            except EnvError as exc:
                record = EpisodeRecord(index, "", False, False, False, 0, 0.0, 1.0, 0,
                                       error=str(exc))
            except QuitPlay:
                break
            records.append(record)
            print_fn(_describe(record))
    finally:
        env.close()
    return PlaySummary(env_id, policy, split, seed, records)


def _describe(record: EpisodeRecord) -> str:
    if record.error is not None:
        outcome = f"error: {record.error.splitlines()[0]}"
    else:
        outcome = "won" if record.won else "lost" if record.lost else "not won"
    return (f"episode {record.index}: {outcome} in {record.turns} turns "
            f"(score {record.score:g}/{record.max_score:g}, {record.invalid_actions} invalid)")
