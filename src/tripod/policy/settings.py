"""A recipe's settings for the rollout engine and the sampler, read from its config: one
place that maps the recipe schema (`tripod.core.config`) onto `RolloutConfig` and
`SamplingParams`, shared by training, evaluation and `tripod rollout`."""

from __future__ import annotations

from tripod.core.config import TrainConfig, env_options, other_env_ids
from tripod.policy.rollout import RolloutConfig
from tripod.policy.sampler import SamplingParams


def rollout_config(cfg: TrainConfig, max_turns: int | None = None,
                   batch_size: int | None = None) -> RolloutConfig:
    """The rollout engine's settings of a run (`batch_size`: default `rollout.batch_size`;
    evaluations pass `cfg.eval_batch_size()`)."""
    return RolloutConfig(max_turns=max_turns or cfg.env.max_turns,
                         batch_size=batch_size or cfg.rollout.batch_size,
                         env_timeout_s=cfg.rollout.env_timeout_s,
                         env_overlap_s=cfg.rollout.env_overlap_s,
                         truncated_action=cfg.rollout.truncated_action,
                         restrict_actions=cfg.rollout.restrict_actions,
                         avoid_repeats=cfg.rollout.avoid_repeats,
                         prompt=cfg.prompt.model_copy(), env_options=dict(cfg.env.options),
                         faults=cfg.env.faults,
                         options_by_env={e: env_options(cfg, e) for e in other_env_ids(cfg)})


def sampling_params(section) -> SamplingParams:
    return SamplingParams(temperature=section.temperature, top_p=section.top_p,
                          max_new_tokens=section.max_new_tokens)
