"""The 120 AI2-THOR FloorPlans as the `alfworld` wheel ships them, and ALFRED's scene splits.

A FloorPlan gives two files under ``alfworld/gen/layouts/``: ``FloorPlanN-openable.json``
(the receptacles the agent can walk to, keyed by their THOR id, e.g.
``Sink|-01.90|+00.97|-01.50|SinkBasin``) and ``FloorPlanN-objects.json`` (the object types
present). Objects have no positions there: the generator places them in receptacles that
can hold them (``VAL_RECEPTACLE_OBJECTS``), as ALFRED's scene randomiser does.

Splits mirror ALFRED and ALFWorld: scenes 7-30 of each room kind are the train scenes, 1-6
the held-out ("unseen") scenes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import alfworld.gen.constants as constants

LAYOUTS_DIR = Path(constants.__file__).parent / "layouts"

STATIC_RECEPTACLE_TYPES = frozenset(constants.VAL_RECEPTACLE_OBJECTS) - frozenset(
    constants.MOVABLE_RECEPTACLES)
"""Receptacle types the agent walks to. Movable receptacles (bowl, mug, pan...) are plain
objects in text ALFWorld: the PDDL domain ships with its put-into-object actions disabled."""

PICKUPABLE_TYPES = frozenset().union(*constants.VAL_RECEPTACLE_OBJECTS.values()) - (
    STATIC_RECEPTACLE_TYPES)
LAMP_TYPES = frozenset(constants.VAL_ACTION_OBJECTS["Toggleable"])
LAMP_STANDS = frozenset({"Desk", "SideTable", "Dresser", "Shelf", "CoffeeTable", "DiningTable",
                         "TVStand", "Ottoman", "Bed", "ArmChair", "Sofa", "CounterTop"})
"""Where a lamp may stand: ToggleObject needs the lamp `inReceptacle` of the agent's spot."""


@dataclass(frozen=True)
class Scene:
    """One FloorPlan: its receptacles and the object types it holds."""

    number: int
    kind: str
    """Kitchen, LivingRoom, Bedroom or Bathroom."""
    receptacles: tuple[tuple[str, str], ...]
    """(THOR id, receptacle type), sorted by id."""
    object_types: tuple[str, ...]
    """Pickupable object types present (sorted)."""
    lamp_types: tuple[str, ...]

    def receptacle_types(self) -> set[str]:
        return {rtype for _, rtype in self.receptacles}

    def homes(self, object_type: str) -> list[str]:
        """Receptacle ids that can hold `object_type`."""
        return [rid for rid, rtype in self.receptacles
                if object_type in constants.VAL_RECEPTACLE_OBJECTS.get(rtype, ())]


def receptacle_type(thor_id: str) -> str:
    """``Cabinet|+00.68|+00.50|-02.20`` -> Cabinet; ``Sink|x|y|z|SinkBasin`` -> SinkBasin."""
    parts = thor_id.split("|")
    return parts[4] if len(parts) > 4 else parts[0]


def scene_kind(number: int) -> str:
    for kind, numbers in constants.SCENE_TYPE.items():
        if number in numbers:
            return kind
    raise ValueError(f"FloorPlan{number} is not an ALFRED scene")


@cache
def load_scene(number: int) -> Scene:
    """Read FloorPlan `number` from the wheel's layouts folder."""
    openable = json.loads((LAYOUTS_DIR / f"FloorPlan{number}-openable.json").read_text())
    present = set(json.loads((LAYOUTS_DIR / f"FloorPlan{number}-objects.json").read_text()))
    receptacles = {rid: receptacle_type(rid) for rid in openable}
    receptacles = {rid: rt for rid, rt in receptacles.items() if rt in STATIC_RECEPTACLE_TYPES}
    # Stove burners, toasters, coffee machines, garbage cans... are listed as objects of the
    # scene but have no entry in the openable file: add one of each so they can be visited.
    for rtype in sorted(present & STATIC_RECEPTACLE_TYPES - set(receptacles.values())):
        receptacles[f"{rtype}|+00.00|+00.00|+00.00"] = rtype
    object_types = sorted(t for t in present & PICKUPABLE_TYPES if not t.endswith("Sliced"))
    scene = Scene(number, scene_kind(number), tuple(sorted(receptacles.items())), (), ())
    object_types = [t for t in object_types if scene.homes(t)]
    lamps = sorted(present & LAMP_TYPES) if scene.receptacle_types() & LAMP_STANDS else []
    return Scene(number, scene.kind, scene.receptacles, tuple(object_types), tuple(lamps))


def split_scenes(split: str) -> tuple[int, ...]:
    """ALFRED's train scenes for train/sft/valid, its held-out scenes for test."""
    numbers = constants.TEST_SCENE_NUMBERS if split == "test" else constants.TRAIN_SCENE_NUMBERS
    return tuple(n for n in numbers if (LAYOUTS_DIR / f"FloorPlan{n}-openable.json").exists())
