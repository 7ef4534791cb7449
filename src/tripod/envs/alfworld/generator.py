"""Write ALFWorld games offline from what the `alfworld` wheel ships.

A game is sampled from a seed: a FloorPlan of the split's scenes (`scenes.split_scenes`), a
task of the requested type that the scene supports (`tasks.candidate_specs`), and the
scene's objects placed in receptacles that can hold them. The PDDL problem is written in
ALFRED's format (THOR ids mangled as ``Apple_bar__plus_00_dot_68...``) with the goal from
ALFRED's goal library. A game is kept only if the planner finds a plan and playing that
plan in the engine wins; otherwise the next attempt (a derived seed) is drawn. The result is
a ``game.tw-pddl`` + ``traj_data.json`` pair, the layout of ALFWorld's own data, cached
under ``cache_dir("alfworld", ...)``.

Two pitfalls of the format, both handled here: a ``(:metric ...)`` before ``:objects``
breaks the planner's parser (no metric is written: every action costs 1), and a missing
``canContain`` fact makes a task silently unsolvable (they are written for every
receptacle/object type pair of the scene, and unsolvable games are rejected anyway).
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import tempfile
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import alfworld.gen.constants as constants
import alfworld.info

from tripod.core.paths import cache_dir
from tripod.envs.alfworld.engine import Engine, call_with_timeout
from tripod.envs.alfworld.scenes import (
    LAMP_STANDS,
    LAMP_TYPES,
    PICKUPABLE_TYPES,
    STATIC_RECEPTACLE_TYPES,
    Scene,
    load_scene,
    split_scenes,
)
from tripod.envs.alfworld.task_types import TASK_TYPES
from tripod.envs.alfworld.tasks import TaskSpec, can_contain, candidate_specs
from tripod.envs.base import EnvError

GENERATOR_VERSION = 1
"""Bump when the output for a given seed changes, so stale cached games are not reused."""
MAX_ATTEMPTS = 20
SOLVE_CPU_S = 30.0
"""A candidate whose check (translate, plan, play the plan) needs more CPU seconds is
rejected: the planner has no limit of its own and some pick_two problems take minutes."""
MAX_DISTRACTOR_TYPES = 8
"""Other object types placed besides the targets. Translation and planning time grow with
objects x receptacles (a pick_two game of FloorPlan30 with its 25 object types took over
3 minutes to plan), so a scene shows a sample of its object types, one instance each."""
_OBJECT_PROPERTIES = (("cleanable", "Cleanable"), ("heatable", "Heatable"),
                      ("coolable", "Coolable"), ("sliceable", "Sliceable"))
_ALL_OTYPES = sorted(PICKUPABLE_TYPES | LAMP_TYPES)
"""Declared in every problem: the domain's actions name some type constants (KnifeType,
SinkBasinType...), which must exist even in scenes without them (as in ALFRED's files)."""
_ALL_RTYPES = sorted(STATIC_RECEPTACLE_TYPES)


@dataclass
class Placement:
    """Where everything starts: objects in receptacles, receptacles at locations."""

    objects: dict[str, tuple[str, str]] = field(default_factory=dict)
    """THOR-style object id -> (object type, receptacle id)."""
    locations: dict[str, str] = field(default_factory=dict)
    """Receptacle id -> location id (one location per receptacle)."""
    start: str = "loc|0"


@dataclass
class GeneratedGame:
    """The two files of one game, plus how many sampled problems were rejected."""

    game: dict[str, Any]
    traj_data: dict[str, Any]
    rejected: int


def mangle(thor_id: str) -> str:
    """THOR id -> PDDL name, as ALFRED writes it (``|`` -> ``_bar_``, ``-`` -> ``_minus_``...).
    ALFWorld's demangler inverts it to 'apple 1', 'sinkbasin 2'."""
    for char, word in (("-", "_minus_"), ("|", "_bar_"), ("+", "_plus_"), (".", "_dot_"),
                       (",", "_comma_")):
        thor_id = thor_id.replace(char, word)
    return thor_id


def _new_id(otype: str, rng: random.Random, taken: set[str]) -> str:
    while True:
        xyz = (rng.uniform(-3, 3), rng.uniform(0, 2), rng.uniform(-3, 3))
        oid = f"{otype}|" + "|".join(f"{v:+06.2f}" for v in xyz)
        if oid not in taken:
            taken.add(oid)
            return oid


def place_objects(scene: Scene, spec: TaskSpec, rng: random.Random) -> Placement:
    """Sample the initial state. Targets (1-3 of them, 2-3 for pick_two) never start in a
    receptacle of the goal's type, so no goal condition holds at the start; up to
    MAX_DISTRACTOR_TYPES other object types of the scene get one instance where they fit."""
    placement = Placement()
    for i, (rid, _) in enumerate(scene.receptacles):
        placement.locations[rid] = f"loc|{i + 1}"
    taken: set[str] = set()
    low = 2 if spec.task_type == "pick_two_obj_and_place" else 1
    for _ in range(rng.randint(low, 3)):
        homes = [r for r in scene.homes(spec.obj) if dict(scene.receptacles)[r] != spec.recep]
        placement.objects[_new_id(spec.obj, rng, taken)] = (spec.obj, rng.choice(homes))
    others = [t for t in scene.object_types if t != spec.obj]
    for otype in sorted(rng.sample(others, min(len(others), MAX_DISTRACTOR_TYPES))):
        placement.objects[_new_id(otype, rng, taken)] = (otype, rng.choice(scene.homes(otype)))
    stands = [rid for rid, rtype in scene.receptacles if rtype in LAMP_STANDS]
    for lamp in scene.lamp_types:
        placement.objects[_new_id(lamp, rng, taken)] = (lamp, rng.choice(stands))
    return placement


def can_contain_facts(scene: Scene, otypes: set[str]) -> list[str]:
    """``(canContain RType OType)`` for every pair of the scene that ALFRED allows."""
    return [f"(canContain {rt}Type {ot}Type)" for rt in sorted(scene.receptacle_types())
            for ot in sorted(otypes) if can_contain(rt, ot)]


def _object_facts(name: str, otype: str, recep: str, loc: str) -> list[str]:
    facts = [f"(objectType {name} {otype}Type)", f"(inReceptacle {name} {recep})",
             f"(objectAtLocation {name} {loc})"]
    if otype in LAMP_TYPES:
        return [*facts, f"(toggleable {name})"]
    facts.append(f"(pickupable {name})")
    if otype in constants.MOVABLE_RECEPTACLES_SET:
        facts.append(f"(isReceptacleObject {name})")
    facts += [f"({pred} {name})" for pred, key in _OBJECT_PROPERTIES
              if otype in constants.VAL_ACTION_OBJECTS[key]]
    return facts


def problem_pddl(scene: Scene, spec: TaskSpec, placement: Placement, name: str) -> str:
    """The PDDL problem in ALFRED's layout: objects, init facts, then the library's goal."""
    objects = ["agent1 - agent"] + [f"{t}Type - otype" for t in _ALL_OTYPES]
    objects += [f"{t}Type - rtype" for t in _ALL_RTYPES]
    objects += [f"{mangle(o)} - object" for o in placement.objects]
    objects += [f"{mangle(r)} - receptacle" for r, _ in scene.receptacles]
    objects += [f"{mangle(loc)} - location"
                for loc in [placement.start, *placement.locations.values()]]
    init = [f"(atLocation agent1 {mangle(placement.start)})"]
    for rid, rtype in scene.receptacles:
        loc = mangle(placement.locations[rid])
        init += [f"(receptacleType {mangle(rid)} {rtype}Type)",
                 f"(receptacleAtLocation {mangle(rid)} {loc})"]
        if rtype in constants.OPENABLE_CLASS_SET:
            init.append(f"(openable {mangle(rid)})")
    for oid, (otype, rid) in placement.objects.items():
        init += _object_facts(mangle(oid), otype, mangle(rid), mangle(placement.locations[rid]))
    init += can_contain_facts(scene, {otype for otype, _ in placement.objects.values()})
    lines = [f"(define (problem plan_{name})", "(:domain alfred)", "(:objects",
             *(f"    {o}" for o in objects), ")", "(:init", *(f"    {f}" for f in init), ")"]
    return "\n".join(lines) + "\n" + spec.goal_pddl().strip() + "\n"


def solve(game: dict[str, Any], engine: Engine) -> tuple[list[str] | None, str]:
    """(plan, "") if playing the planner's plan in the engine wins the game, else
    (None, why). A game won before any action counts as unsolvable: it teaches nothing."""
    try:
        engine.load(game)
        engine.reset()
        if engine.won:
            return None, "goal already satisfied at the start"
        plan = engine.plan()
        for command in plan:
            if command not in engine.admissible:
                return None, f"plan step {command!r} is not admissible"
            engine.step(command)
    except Exception as exc:  # the translator or the planner rejected the problem
        return None, f"{type(exc).__name__}: {exc}"
    if not plan:
        return None, "the planner found no plan"
    return (plan, "") if engine.won else (None, "playing the plan does not win")


def _scenes_for(split: str, task_type: str) -> list[int]:
    return [n for n in split_scenes(split) if candidate_specs(load_scene(n), task_type)]


def sample_game(split: str, seed: int, task_type: str, attempt: int) -> tuple[dict, dict]:
    """One candidate game (game.tw-pddl, traj_data.json), a pure function of its arguments."""
    rng = random.Random(f"alfworld-v{GENERATOR_VERSION}/{split}/{task_type}/{seed}/{attempt}")
    scene = load_scene(rng.choice(_scenes_for(split, task_type)))
    spec = rng.choice(candidate_specs(scene, task_type))
    placement = place_objects(scene, spec, rng)
    name = f"tripod_{split}_{seed}_{attempt}"
    task_desc = spec.describe(rng)
    game = {
        "pddl_domain": Path(alfworld.info.ALFRED_PDDL_PATH).read_text(),
        "grammar": Path(alfworld.info.ALFRED_TWL2_PATH).read_text().replace(
            "UNKNOWN GOAL", task_desc),
        "pddl_problem": problem_pddl(scene, spec, placement, name),
        "solvable": None,
        "walkthrough": None,
    }
    traj = {
        "task_id": name,
        "task_type": task_type,
        "pddl_params": spec.pddl_params(),
        "scene": {"floor_plan": f"FloorPlan{scene.number}", "scene_num": scene.number,
                  "random_seed": seed},
        "turk_annotations": {"anns": [{"task_desc": task_desc}]},
        "tripod": {"generator_version": GENERATOR_VERSION, "split": split, "seed": seed,
                   "attempt": attempt},
    }
    return game, traj


def generate(split: str, seed: int, task_type: str, engine: Engine | None = None
             ) -> GeneratedGame:
    """Draw candidates until the planner solves one (deterministic in `seed`)."""
    if task_type not in TASK_TYPES:
        raise ValueError(f"unknown task type {task_type!r}; valid: {', '.join(TASK_TYPES)}")
    own = engine is None
    engine = engine or Engine()
    try:
        why = ""
        for attempt in range(MAX_ATTEMPTS):
            game, traj = sample_game(split, seed, task_type, attempt)
            solved = call_with_timeout(partial(solve, game, engine), SOLVE_CPU_S)
            plan, why = solved or (None, f"check needed over {SOLVE_CPU_S:.0f} CPU seconds")
            if plan is not None:
                game.update(solvable=True, walkthrough=plan)
                return GeneratedGame(game, traj, rejected=attempt)
    finally:
        if own:
            engine.close()
    raise EnvError(f"no solvable {task_type} game in {MAX_ATTEMPTS} attempts for seed {seed} "
                   f"(last rejection: {why})")


def game_dir(split: str, seed: int, task_type: str) -> Path:
    """Where the game for (split, seed, task type) is cached."""
    return cache_dir("alfworld", f"generated-v{GENERATOR_VERSION}", split) / f"{task_type}-{seed}"


def write_game(game: GeneratedGame, folder: Path) -> None:
    """Write both files atomically, so parallel workers never read a half-written game."""
    folder.mkdir(parents=True, exist_ok=True)
    for filename, data in (("traj_data.json", game.traj_data), ("game.tw-pddl", game.game)):
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{filename}.")
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle)
        os.replace(tmp, folder / filename)


def cached_game(split: str, seed: int, task_type: str, engine: Engine | None = None) -> Path:
    """The path of the cached ``game.tw-pddl`` for (split, seed, task type), generating it
    first if needed. ``traj_data.json`` lies beside it.

    Processes that need the same missing game (the episodes of one GRPO group) take turns
    on a lock file: one generates it, the others then find it cached."""
    folder = game_dir(split, seed, task_type)
    path = folder / "game.tw-pddl"
    if path.exists():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes (or the process dies)
        if not path.exists():
            write_game(generate(split, seed, task_type, engine), folder)
    return path
