"""`make(env_id)`: one registry for every environment family.

A family registers an id pattern (a regular expression), a factory and a few example ids.
Families live in their own modules and are imported lazily, so a missing optional
dependency (e.g. `alfworld`) only disables that family, with the reason shown by
`tripod envs list`.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass

from tripod.envs.base import SPLITS, Env

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


_FAMILIES: list[EnvFamily] = []
_IMPORT_ERRORS: dict[str, str] = {}
_loaded = False


def register(pattern: str, factory: Callable[..., Env], examples: tuple[str, ...],
             description: str) -> None:
    """Register an env family (called by family modules at import time)."""
    if any(f.pattern == pattern for f in _FAMILIES):
        return
    _FAMILIES.append(EnvFamily(pattern, factory, examples, description))


def _load_families() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for name in FAMILY_MODULES:
        try:
            importlib.import_module(name)
        except ImportError as exc:  # optional dependency missing or module not built yet
            _IMPORT_ERRORS[name] = f"{type(exc).__name__}: {exc}"


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


def make(env_id: str, split: str = "train", **overrides) -> Env:
    """Build the env `env_id` for `split` (one of ``train, sft, valid, test``).

    Unknown ids raise `KeyError` with the list of valid ids and patterns.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")
    for fam in families():
        if re.fullmatch(fam.pattern, env_id):
            return fam.factory(env_id, split=split, **overrides)
    lines = [f"  {fam.pattern:<40} e.g. {', '.join(fam.examples)}" for fam in families()]
    missing = [f"  ({mod} unavailable: {why})" for mod, why in unavailable_families().items()]
    raise KeyError(f"unknown env id {env_id!r}. Valid ids:\n" + "\n".join(lines + missing))
