"""`make(env_id)`: one registry for every environment family.

A family registers an id pattern (a regular expression), a factory and a few example ids.
Families live in their own modules and are imported lazily, so a missing optional
dependency (e.g. `alfworld`) only disables that family, with the reason shown by
`tripod envs list`.
"""

from __future__ import annotations

import importlib
import inspect
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tripod.envs.base import SPLITS, Env, last_line_action

GamePreparer = Callable[[str, str, list[int], dict[str, Any]], None]
"""``prepare(env_id, split, game_indices, options)``: build games ahead of a run (e.g. generate
and cache them in parallel) so that episodes do not wait on generation."""

# Modules that call `register` on import. Order is the order of `tripod envs list`.
FAMILY_MODULES = (
    "tripod.envs.textworld",
    "tripod.envs.alfworld",
    "tripod.envs.swe",
    "tripod.envs.toy",
)


@dataclass(frozen=True)
class EnvFamily:
    """One registered family of env ids."""

    pattern: str
    """Regular expression that a full env id must match (e.g. ``textworld/w\\d+-o\\d+-q\\d+``)."""
    factory: Callable[..., Env]
    """Called as ``factory(env_id, split=..., **overrides)``."""
    examples: tuple[str, ...]
    """Concrete ids shown by `tripod envs list`."""
    description: str
    action_parser: Callable[[str], str] = last_line_action
    """How a model reply (text before its end-of-turn token) becomes the action sent to
    `Env.step`: the last command line for text games, a whole tool call for SWE."""
    instruction: str | None = None
    """The answer-format instruction shown before the objective when the recipe does not set
    `prompt.instruction`; None uses the text-game instruction. It must describe what
    `action_parser` accepts."""
    prepare: GamePreparer | None = None
    """Optional: build a run's games up front (None: nothing to prepare)."""

    def option_names(self) -> set[str] | None:
        """Keyword options the factory accepts (None if it takes arbitrary keywords)."""
        params = inspect.signature(self.factory).parameters.values()
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            return None
        return {p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY
                or (p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and p.name != "env_id")
                } - {"split"}


_FAMILIES: list[EnvFamily] = []
_IMPORT_ERRORS: dict[str, str] = {}
_loaded = False
_loading = False
_LOADING = threading.RLock()
"""Held while the family modules are imported: a thread that looks an id up meanwhile
waits for them instead of finding the list still empty. Reentrant, so that a family
module that looks the registry up while it is imported sees what is registered so far
(`_loading`) instead of deadlocking."""


def register(pattern: str, factory: Callable[..., Env], examples: tuple[str, ...],
             description: str, *, action_parser: Callable[[str], str] = last_line_action,
             instruction: str | None = None, prepare: GamePreparer | None = None) -> None:
    """Register an env family (called by family modules at import time)."""
    if any(f.pattern == pattern for f in _FAMILIES):
        return
    _FAMILIES.append(EnvFamily(pattern, factory, examples, description, action_parser,
                               instruction, prepare))


def _load_families() -> None:
    global _loaded, _loading
    if _loaded:  # set only once every family module has been imported
        return
    with _LOADING:
        if _loaded or _loading:
            return
        _loading = True
        try:
            for name in FAMILY_MODULES:
                try:
                    importlib.import_module(name)
                except ImportError as exc:  # optional dependency missing or not built yet
                    _IMPORT_ERRORS[name] = f"{type(exc).__name__}: {exc}"
        finally:
            _loading = False
            _loaded = True


def families() -> list[EnvFamily]:
    """All registered families (importing family modules on first use)."""
    _load_families()
    return list(_FAMILIES)


def unavailable_families() -> dict[str, str]:
    """Family modules that could not be imported, with the reason."""
    _load_families()
    return dict(_IMPORT_ERRORS)


def example_ids() -> list[str]:
    return [ex for fam in families() for ex in fam.examples]


class UnknownEnvError(KeyError):
    """No registered family serves this env id; the message lists the valid ids."""


def family_of(env_id: str) -> EnvFamily:
    """The family that serves `env_id`; unknown ids raise `KeyError` listing valid ones."""
    for fam in families():
        if re.fullmatch(fam.pattern, env_id):
            return fam
    raise UnknownEnvError(_unknown_id_message(env_id))


def check_options(env_id: str, options: dict[str, Any]) -> None:
    """Fail before any work if `options` names a key the env's factory does not take."""
    names = family_of(env_id).option_names()
    unknown = sorted(set(options) - names) if names is not None else []
    if unknown:
        raise ValueError(f"env.options for {env_id}: unknown key(s) {', '.join(unknown)}; "
                         f"valid: {', '.join(sorted(names)) or '(none)'}")


def make(env_id: str, split: str = "train", **overrides) -> Env:
    """Build the env `env_id` for `split` (one of ``train, sft, valid, test``).

    Unknown ids raise `KeyError` with the list of valid ids and patterns.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")
    return family_of(env_id).factory(env_id, split=split, **overrides)


def _unknown_id_message(env_id: str) -> str:
    lines = [f"  {fam.pattern:<40} e.g. {', '.join(fam.examples)}" for fam in families()]
    missing = [f"  ({mod} unavailable: {why})" for mod, why in unavailable_families().items()]
    return f"unknown env id {env_id!r}. Valid ids:\n" + "\n".join(lines + missing)
