"""What a recipe may name as an advantage estimator, without importing torch.

Validating a recipe must stay cheap (no torch import), so the names of the estimators and the
two facts a trainer or a config check needs about each live here. `tripod.algos.advantages`
registers the implementations and checks that they match this table.
"""

from __future__ import annotations

from dataclasses import dataclass

GROUP_MIN_SIZE = 2
"""Group baselines (GRPO, Dr.GRPO, RLOO) need at least two episodes per group: with one, the
GRPO advantage is identically 0 and the RLOO leave-one-out baseline is undefined."""


@dataclass(frozen=True)
class EstimatorInfo:
    """What a trainer must know about an estimator before it runs."""

    needs_critic: bool = False
    """The estimator reads critic values (a value model must be trained)."""
    min_group_size: int = 1
    """Smallest number of episodes per group the estimator accepts."""


ESTIMATORS: dict[str, EstimatorInfo] = {
    "gae": EstimatorInfo(needs_critic=True),
    "gae_turn": EstimatorInfo(needs_critic=True),
    "grpo": EstimatorInfo(min_group_size=GROUP_MIN_SIZE),
    "dr_grpo": EstimatorInfo(min_group_size=GROUP_MIN_SIZE),
    "rloo": EstimatorInfo(min_group_size=GROUP_MIN_SIZE),
    "reinforce_pp": EstimatorInfo(),
    "gigpo": EstimatorInfo(min_group_size=GROUP_MIN_SIZE),
}
"""Every estimator a recipe may name (`algo.estimator`)."""
