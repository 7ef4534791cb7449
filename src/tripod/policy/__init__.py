"""Policy pillar: offline model loading, chat formatting and the token-exact rollout engine."""

from tripod.policy.models import Policy, load_policy

__all__ = ["Policy", "load_policy"]
