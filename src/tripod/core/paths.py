"""Where tripod keeps generated games, converted models and run outputs.

Everything lives under one cache root so that users can move or wipe it in one place:
``$TRIPOD_CACHE`` if set, else ``~/.cache/tripod``.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """The root folder of tripod's on-disk caches (created on demand)."""
    root = Path(os.environ.get("TRIPOD_CACHE", Path.home() / ".cache" / "tripod"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def cache_dir(*parts: str) -> Path:
    """A sub-folder of the cache root, created on demand."""
    path = cache_root().joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path
