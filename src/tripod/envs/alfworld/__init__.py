"""ALFWorld: household tasks in text, played on ALFWorld's own engine (TextWorld + PDDL).

Two families share one `Env` (see `env.py`):

- ``alfworld/generated[-TASK_TYPE]``: games written offline by `generator.py` from what the
  `alfworld` wheel ships (FloorPlan layouts, object constants, goal library), kept only when
  the planner solves them, cached by seed. Train/sft/valid games come from ALFRED's train
  scenes, test games from its held-out scenes.
- ``alfworld/real[-TASK_TYPE]``: the published ALFWorld games under
  ``$ALFWORLD_DATA/json_2.1.1`` (see `real.py`).

Options (``make(env_id, split, **options)``, all keyword arguments of `make_generated` and
`make_real`): ``expert`` (compute the planner's next action), ``max_turns`` (turn cap),
``task_types`` (a list, to mix some of the six types), ``step_timeout_s``,
``reset_timeout_s``, and for ``alfworld/real`` also ``data_dir``. Rewards are the reward
pillar's (`tripod.rewards`): the env reports ``won`` and ``progress``.

Each env plays in a child process of its own (see `env.py`), so importing this package sets
nothing and imports nothing from the `alfworld` wheel; it only checks that the wheel is
installed (the registry then lists the family as unavailable, with this reason).
"""

from __future__ import annotations

import importlib.util

if importlib.util.find_spec("alfworld") is None:
    raise ImportError("the alfworld package is not installed: pip install tripod[alfworld]")

from tripod.envs.alfworld.env import (  # noqa: E402
    AlfworldEnv,
    make_generated,
    make_real,
    prepare_games,
)
from tripod.envs.alfworld.task_types import TASK_TYPES  # noqa: E402
from tripod.envs.registry import register  # noqa: E402

_TYPES = "|".join(TASK_TYPES)


def _prepare(env_id: str, split: str, games: list[int], options: dict) -> None:
    """The registry's preparation hook: generate a run's games up front, two at a time
    (a pick_two game alone takes ~20 s, more than an episode's reset time-out)."""
    prepare_games(env_id, split, games, workers=2, task_types=options.get("task_types"))


register(
    rf"alfworld/generated(-({_TYPES}))?",
    make_generated,
    ("alfworld/generated", "alfworld/generated-pick_heat_then_place_in_recep"),
    "ALFWorld games generated offline from the alfworld package (6 task types; test split "
    "on unseen scenes); planner expert, progress = share of goal conditions met",
    prepare=_prepare,
)
register(
    rf"alfworld/real(-({_TYPES}))?",
    make_real,
    ("alfworld/real", "alfworld/real-pick_and_place_simple"),
    "the published ALFWorld text games from $ALFWORLD_DATA/json_2.1.1 "
    "(train -> train, valid -> valid_seen, test -> valid_unseen)",
)

__all__ = ["TASK_TYPES", "AlfworldEnv", "make_generated", "make_real", "prepare_games"]
