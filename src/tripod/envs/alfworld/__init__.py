"""ALFWorld: household tasks in text, played on ALFWorld's own engine (TextWorld + PDDL).

Two families share one `Env` (see `env.py`):

- ``alfworld/generated[-TASK_TYPE]``: games written offline by `generator.py` from what the
  `alfworld` wheel ships (FloorPlan layouts, object constants, goal library), kept only when
  the planner solves them, cached by seed. Train/sft/valid games come from ALFRED's train
  scenes, test games from its held-out scenes.
- ``alfworld/real[-TASK_TYPE]``: the published ALFWorld games under
  ``$ALFWORLD_DATA/json_2.1.1`` (see `real.py`).

Overrides (``make(env_id, split, **overrides)``): ``reward`` (``dense`` | ``sparse``),
``expert`` (compute the planner's next action), ``max_turns``, ``task_types`` (a list, to
mix some of the six types), and for ``alfworld/real`` also ``data_dir``.
"""

from __future__ import annotations

import os

from tripod.core.paths import cache_dir

# `import alfworld` creates ~/.cache/alfworld unless ALFWORLD_DATA is set (alfworld/info.py),
# so point it into tripod's cache first. A user's own setting is kept (it locates real data).
os.environ.setdefault("ALFWORLD_DATA", str(cache_dir("alfworld", "data")))

from tripod.envs.alfworld.env import AlfworldEnv, make_generated, make_real  # noqa: E402
from tripod.envs.alfworld.tasks import TASK_TYPES  # noqa: E402
from tripod.envs.registry import register  # noqa: E402

_TYPES = "|".join(TASK_TYPES)

register(
    rf"alfworld/generated(-({_TYPES}))?",
    make_generated,
    ("alfworld/generated", "alfworld/generated-pick_heat_then_place_in_recep"),
    "ALFWorld games generated offline from the alfworld package (6 task types; test split "
    "on unseen scenes); planner expert, dense progress rewards",
)
register(
    rf"alfworld/real(-({_TYPES}))?",
    make_real,
    ("alfworld/real", "alfworld/real-pick_and_place_simple"),
    "the published ALFWorld text games from $ALFWORLD_DATA/json_2.1.1 "
    "(train -> train, valid -> valid_seen, test -> valid_unseen)",
)

__all__ = ["TASK_TYPES", "AlfworldEnv", "make_generated", "make_real"]
