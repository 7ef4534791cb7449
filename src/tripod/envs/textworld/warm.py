"""Imported by the fork server of `tripod.envs.process` (`PRELOAD`), never by the trainer:
makes what every TextWorld game process does first already done before it is forked.

A game process imports textworld (over a second: its grammar and logic files are parsed at
import) and, on its first load, parses the logic document stored in the game's file, which
takes another half second; later loads of games with the same logic hit textworld's own
cache (`GameLogic.parse` is memoised on the document). Every generated game tripod plays
with the default knowledge base (the `w*-o*-q*` sizes) stores the default logic, so parsing
it here fills that cache for every forked child.
"""

from __future__ import annotations

import contextlib

import tripod.envs.textworld.process  # noqa: F401 (what the child builds)

# Whatever fails here fails again, with a clear error, in the game process that needs it; an
# exception other than ImportError would stop the fork server itself.
with contextlib.suppress(Exception):
    import textworld  # noqa: F401 (the import is the point)
    import textworld.gym  # noqa: F401
    from textworld.generator.data import KnowledgeBase
    from textworld.logic import GameLogic

    GameLogic.parse(KnowledgeBase.default().logic.serialize())
