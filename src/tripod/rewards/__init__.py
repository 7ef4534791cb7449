"""Reward pillar: per-turn rewards from trajectories (sparse, dense, shaped)."""

from tripod.rewards.per_turn import turn_rewards

__all__ = ["turn_rewards"]
