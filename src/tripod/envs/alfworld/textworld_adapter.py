"""The one place that reads textworld's private PDDL internals; valid for textworld 1.7.0 only.

tripod plays ALFWorld on textworld's `PddlEnv`, held by composition (`engine.Engine`). Four
things it needs are outside textworld's public API, each a small function here:

- ALFWorld's object names ('apple 1', 'sinkbasin 2'): ALFWorld's `Demangler` renames the
  env's entity infos after `load` (what ALFWorld's own ``AlfredDemangler`` wrapper does);
- the state's facts, for `progress` (`facts`);
- fast-downward's planner from the current state, for the expert action (`replan`);
- a first `reset` that reuses the state `load` just built (`first_reset`): `PddlEnv.reset`
  always rebuilds it, translating the PDDL problem twice more (0.5-2 s a game).

These names and layouts are only known for the pinned version (``textworld==1.7.0`` in
pyproject.toml), so `new_pddl_env`, the only way to get an env for the other functions,
refuses any other version with a message that says what to check, instead of failing later
with an AttributeError deep in a game. tests/envs/test_alfworld_adapter.py pins the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import textworld
from alfworld.agents.utils.misc import Demangler
from textworld.core import GameState
from textworld.envs import PddlEnv

from tripod.envs.alfworld.tasks import Facts

PINNED_TEXTWORLD = "1.7.0"
"""The textworld version whose private PddlEnv layout this module was written against."""


class TextWorldVersionError(RuntimeError):
    """The installed textworld is not the version this adapter was written for."""


def check_textworld_version(found: str | None = None) -> None:
    """Raise `TextWorldVersionError` unless `found` (default: the installed textworld) is
    `PINNED_TEXTWORLD`."""
    found = textworld.__version__ if found is None else found
    if found != PINNED_TEXTWORLD:
        raise TextWorldVersionError(
            f"tripod's ALFWorld envs read private parts of textworld {PINNED_TEXTWORLD}'s "
            f"PddlEnv (_entity_infos, _pddl_state, _logic, _gather_infos, state['_facts']), "
            f"but textworld {found} is installed. Install textworld=={PINNED_TEXTWORLD} (the "
            "version pyproject.toml pins), or check each of them against the new version in "
            "src/tripod/envs/alfworld/textworld_adapter.py and update PINNED_TEXTWORLD.")


def new_pddl_env() -> PddlEnv:
    """A PddlEnv reporting admissible commands and `won` (after the version check)."""
    check_textworld_version()
    return PddlEnv(textworld.EnvInfos(admissible_commands=True, won=True))


def load(env: PddlEnv, game: str | Mapping[str, Any]) -> None:
    """Load a ``game.tw-pddl`` (path or parsed JSON) and give its objects ALFWorld's names."""
    env.load(game)
    infos = env._entity_infos
    demangler = Demangler(game_infos=infos, shuffle=False)
    for info in infos.values():
        info.name = demangler.demangle_alfred_name(info.id)


def first_reset(env: PddlEnv) -> GameState:
    """The first reset after `load`: `PddlEnv.reset` of textworld 1.7.0 without rebuilding the
    state that `load` just built (the rest is the same, line for line)."""
    env.prev_state = None
    env.state = GameState()
    env._last_action = None
    env._moves = 0
    state = env._pddl_state
    context = {"state": state, "facts": list(state.facts), "variables": {}, "mapping": {},
               "entity_infos": env._entity_infos}
    env.state.feedback = env._logic.grammar.derive("#intro#", context)
    env.state.raw = env.state.feedback
    env._gather_infos()
    return env.state


def facts(state: GameState) -> Facts:
    """The state's facts as (predicate, arg, ...) tuples, lower case (PDDL names)."""
    return frozenset((p.name, *(v.name for v in p.arguments)) for p in state["_facts"])


def readable_facts(env: PddlEnv, state: GameState) -> list:
    """The state's facts (textworld `Proposition`s) with ALFWorld's object names, as
    ``EnvInfos(facts=True)`` would report them (ALFWorld's handcoded agent reads these)."""
    return [env._get_human_readable_fact(fact) for fact in state["_facts"]]


def replan(env: PddlEnv) -> list[str]:
    """An optimal plan (ALFWorld commands) from the current state; [] if there is none. The
    call ALFWorld's ``AlfredExpert(expert_type="planner")`` makes."""
    return list(env._pddl_state.replan(env._entity_infos))
