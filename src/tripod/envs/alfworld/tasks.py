"""ALFWorld's six task types: goals from ALFRED's goal library, and goal conditions met.

The goal PDDL and the task sentences are taken from `alfworld.gen.goal_library` unchanged
(only its ``#`` type separators become PDDL's ``-``, as ALFRED's own writer does). Progress
for dense rewards counts the goal conditions met in the current state, in task order
(e.g. heat: holding the object, holding it hot, hot object in place), so it costs no planner
call and telescopes: per-turn differences sum to 1 on a won game.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import alfworld.gen.constants as constants
import alfworld.gen.goal_library as goal_library

from tripod.envs.alfworld.scenes import Scene

_APPLIANCE = {
    "pick_clean_then_place_in_recep": ("SinkBasin", "Cleanable", "isclean"),
    "pick_heat_then_place_in_recep": ("Microwave", "Heatable", "ishot"),
    "pick_cool_then_place_in_recep": ("Fridge", "Coolable", "iscool"),
}
"""Task -> (receptacle type the domain requires, object property list, state predicate)."""

MAX_STAGE = {
    "pick_and_place_simple": 2,
    "look_at_obj_in_light": 3,
    "pick_clean_then_place_in_recep": 3,
    "pick_heat_then_place_in_recep": 3,
    "pick_cool_then_place_in_recep": 3,
    "pick_two_obj_and_place": 4,
}

Facts = frozenset[tuple[str, ...]]
"""A state as (predicate, arg, ...) tuples, lower case, as the PDDL translator writes them."""


@dataclass(frozen=True)
class TaskSpec:
    """One task instance, as ALFRED's ``pddl_params`` name it."""

    task_type: str
    obj: str
    """Object type to handle (e.g. Apple)."""
    recep: str | None
    """Receptacle type to put it in (None for look_at_obj_in_light)."""
    toggle: str | None = None
    """Lamp type to switch on (look_at_obj_in_light only)."""

    def goal_pddl(self) -> str:
        """The ``(:goal ...)`` block, closing the problem's ``(define`` as the library does."""
        text = goal_library.gdict[self.task_type]["pddl"]
        text = text.format(obj=self.obj, recep=self.recep or "", toggle=self.toggle or "",
                           mrecep="")
        return text.replace("#", "-")

    def describe(self, rng: random.Random) -> str:
        """A task sentence from the library's templates (e.g. 'put a hot apple in fridge')."""
        template = rng.choice(goal_library.gdict[self.task_type]["templates"])
        return template.format(obj=self.obj.lower(), recep=(self.recep or "").lower(),
                               toggle=(self.toggle or "").lower(), mrecep="")

    def pddl_params(self) -> dict[str, object]:
        """ALFRED's ``traj_data.json`` parameters (read by ALFWorld's hand-coded expert)."""
        return {"object_target": self.obj, "parent_target": self.recep or "",
                "toggle_target": self.toggle or "", "mrecep_target": "",
                "object_sliced": False}


def can_contain(rtype: str, otype: str) -> bool:
    return otype in constants.VAL_RECEPTACLE_OBJECTS.get(rtype, ())


def candidate_specs(scene: Scene, task_type: str) -> list[TaskSpec]:
    """Every task of `task_type` this scene supports (ALFRED's per-room task validity, the
    appliance the domain requires, a receptacle able to hold the object, and somewhere
    else for the object to start)."""
    if scene.kind not in constants.GOALS_VALID[task_type]:
        return []
    if task_type == "look_at_obj_in_light":
        return [TaskSpec(task_type, obj, None, lamp)
                for lamp in scene.lamp_types for obj in scene.object_types]
    rtypes = sorted(scene.receptacle_types())
    appliance, prop_list, _ = _APPLIANCE.get(task_type, (None, None, None))
    if appliance and appliance not in rtypes:
        return []
    specs = []
    for obj in scene.object_types:
        if prop_list and obj not in constants.VAL_ACTION_OBJECTS[prop_list]:
            continue
        start_types = {rt for rt in rtypes if can_contain(rt, obj)}
        for recep in rtypes:
            if recep == appliance or not can_contain(recep, obj) or not start_types - {recep}:
                continue
            specs.append(TaskSpec(task_type, obj, recep))
    return specs


def stage(spec: TaskSpec, facts: Facts, won: bool) -> int:
    """Goal conditions met, in [0, MAX_STAGE[task_type]]; the last one is winning."""
    top = MAX_STAGE[spec.task_type]
    if won:
        return top
    otype = spec.obj.lower() + "type"
    objs = {f[1] for f in facts if f[0] == "objecttype" and f[2] == otype}
    held = {f[2] for f in facts if f[0] == "holds"} & objs
    if spec.task_type == "look_at_obj_in_light":
        ltype = (spec.toggle or "").lower() + "type"
        lamps = {f[1] for f in facts if f[0] == "objecttype" and f[2] == ltype}
        toggled = any(("istoggled", lamp) in facts for lamp in lamps)
        return int(bool(held)) + int(toggled)
    rtype = (spec.recep or "").lower() + "type"
    receps = {f[1] for f in facts if f[0] == "receptacletype" and f[2] == rtype}
    placed = {f[1] for f in facts if f[0] == "inreceptacle" and f[2] in receps} & objs
    if spec.task_type == "pick_two_obj_and_place":
        return min(2 * len(placed) + int(bool(held)), top - 1)
    if spec.task_type in _APPLIANCE:
        predicate = _APPLIANCE[spec.task_type][2]
        done = any((predicate, o) in facts for o in held)
        return int(bool(held)) + int(done)
    return int(bool(held))
