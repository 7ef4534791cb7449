"""Typed records that flow between the pillars: `Turn`, `Trajectory`, `EpisodeJob`.

Tokens live only in `Turn` (written by the rollout engine); everything the environment said
is kept as text next to them so a trajectory can be inspected without a tokenizer.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class TurnStatus(StrEnum):
    """How one agent turn went."""

    OK = "ok"
    INVALID = "invalid"
    """The action was empty or not understood by the env (it still got an observation)."""
    TRUNCATED = "truncated"
    """The model hit the per-action token cap without its end-of-turn token; the paper
    treats this turn as invalid and ends the episode."""
    ENV_ERROR = "env_error"
    """The environment crashed or hung on this action; the episode is excluded from loss."""


class EpisodeEnd(StrEnum):
    """Why an episode stopped."""

    WON = "won"
    LOST = "lost"
    MAX_TURNS = "max_turns"
    TRUNCATED_ACTION = "truncated_action"
    ENV_TRUNCATED = "env_truncated"
    ENV_ERROR = "env_error"
    CONTEXT_LIMIT = "context_limit"
    """The next prompt plus `max_new_tokens` would not fit the model's context window. The
    episode ends like one that hit the turn cap: its turns are trained on, and the turns it
    could not play earn nothing."""


@dataclass
class Turn:
    """One agent turn: the exact tokens the model saw and sampled, and what the env did."""

    prompt_ids: list[int]
    """The whole context the model was conditioned on for this turn."""
    action_ids: list[int]
    """The sampled token ids, including the end-of-turn token when it was emitted."""
    logprobs: list[float]
    """Sampling log-probabilities of `action_ids` (tempered distribution, fp32)."""
    action_text: str
    """The action string sent to the env (parsed from the decoded sample)."""
    observation: str
    """The env's observation after this action."""
    reward: float
    """The env's raw reward for this turn (the score gained); shaping happens later."""
    status: TurnStatus
    score: float = 0.0
    progress: float = 0.0
    expert_action: str | None = None
    """The expert's action in the state this turn was taken from (for analysis)."""
    trainable: bool = True
    """False for turns excluded from imitation (injected random actions in SFT data)."""
    allowed_ids: list[list[int]] | None = None
    """With restricted replies (`rollout.restrict_actions`): per id of `action_ids`, the ids
    the sampler allowed at that step; the trainer recomputes the same restricted
    distribution from them. None when the reply was sampled freely."""


@dataclass(frozen=True)
class EpisodeJob:
    """What the rollout engine should play: game `game_index` of `split`, sampled with
    `sample_seed`. Episodes of one group share the game and differ only in the seed."""

    env_id: str
    split: str
    game_index: int
    group_id: int
    episode_id: int
    sample_seed: int
    max_turns: int | None = None
    """This episode's turn cap (None: the engine's `max_turns`); set when one batch mixes
    env ids whose caps differ."""


@dataclass
class Trajectory:
    """One episode: the job it played, its turns and how it ended."""

    job: EpisodeJob
    objective: str
    first_observation: str
    turns: list[Turn] = field(default_factory=list)
    won: bool = False
    lost: bool = False
    max_score: float = 1.0
    start_progress: float = 0.0
    """`info.progress` at reset (an SWE task starts with most of its tests passing): dense
    rewards pay gains from here, not from 0."""
    end: EpisodeEnd = EpisodeEnd.MAX_TURNS
    error: str | None = None
    env_status: str = ""
    """The env's last `info.extra["status"]` (e.g. an SWE episode's "tampering")."""
    resolved: bool | None = None
    """The env's verdict on the task where it gives one apart from `won`
    (`info.extra["resolved"]`: an SWE task whose every target and regression test passes
    under the trusted scorer, whether or not the episode was submitted); None elsewhere."""

    @property
    def outcome(self) -> bool:
        """The raw outcome, before any reward shaping: `resolved` where the env reports it,
        else `won`."""
        return self.won if self.resolved is None else self.resolved

    @property
    def env_id(self) -> str:
        return self.job.env_id

    @property
    def split(self) -> str:
        return self.job.split

    @property
    def game_index(self) -> int:
        return self.job.game_index

    @property
    def group_id(self) -> int:
        return self.job.group_id

    @property
    def episode_id(self) -> int:
        return self.job.episode_id

    @property
    def sample_seed(self) -> int:
        return self.job.sample_seed

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    @property
    def failed(self) -> bool:
        """An env error makes an episode unusable for training (excluded, counted)."""
        return self.end is EpisodeEnd.ENV_ERROR

    @property
    def total_reward(self) -> float:
        return sum(t.reward for t in self.turns)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Trajectory:
        """Inverse of `to_json` (round trip exact: ids, logprobs, statuses)."""
        data = dict(data)
        data["job"] = EpisodeJob(**data["job"])
        data["turns"] = [Turn(**{**t, "status": TurnStatus(t["status"])}) for t in data["turns"]]
        data["end"] = EpisodeEnd(data["end"])
        return cls(**data)
