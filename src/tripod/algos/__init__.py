"""The policy pillar's math: advantage estimators (one registry) and per-token losses."""

from tripod.algos.advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageInput,
    AdvantageOutput,
    EstimatorSpec,
    compute_advantages,
    get_estimator,
    register_estimator,
)
from tripod.algos.losses import (
    add_kl_to_rewards,
    aggregate,
    entropy_from_logits,
    kl_penalty,
    loss_normaliser,
    policy_loss,
    value_loss,
)

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AdvantageInput",
    "AdvantageOutput",
    "EstimatorSpec",
    "add_kl_to_rewards",
    "aggregate",
    "compute_advantages",
    "entropy_from_logits",
    "get_estimator",
    "kl_penalty",
    "loss_normaliser",
    "policy_loss",
    "register_estimator",
    "value_loss",
]
