"""Environment pillar: text environments behind one Gymnasium-shaped protocol."""

from tripod.envs.base import SPLITS, Env, EnvError, Step, StepInfo, clean_action, game_seed
from tripod.envs.registry import example_ids, families, make, register

__all__ = [
    "SPLITS",
    "Env",
    "EnvError",
    "Step",
    "StepInfo",
    "clean_action",
    "example_ids",
    "families",
    "game_seed",
    "make",
    "register",
]
