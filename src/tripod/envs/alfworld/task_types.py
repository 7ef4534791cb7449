"""ALFWorld's six task type names, importable without the `alfworld` wheel.

Kept apart from `tasks.py` because importing anything from the wheel runs its
``alfworld/info.py``, which creates a data folder and writes ``ALFWORLD_DATA`` into the
environment. The parent process (registry, factories, option checks) only needs the names;
the wheel is imported in the game's child process (see `tripod.envs.process`).
"""

from __future__ import annotations

TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
"""ALFWorld's task types, in its own numbering order (1..6)."""


EXPERT_TYPES = ("planner", "handcoded", "hybrid")
"""The env's `expert_type` option. `planner`: fast-downward's optimal plan from the full
state. `handcoded`: ALFWorld's handcoded agent, which searches receptacles as an agent that
sees only the text must (`searcher.py`). `hybrid`: the handcoded agent, and the planner's
next action wherever the handcoded agent gives up (`Searcher.gave_up`)."""
