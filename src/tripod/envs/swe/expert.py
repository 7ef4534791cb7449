"""The expert for SFT demonstrations: replay the gold patch through the tools.

The expert is computed from the current files, not from a fixed script, so it also gives
the right next call after an agent's mistakes (like TextWorld's replanned walkthrough):
it views a file before its first edit, turns the first difference between the file and its
target into a SEARCH/REPLACE edit whose SEARCH text is unique in the file, reverts stray
edits to other source files, runs the tests once the files match, then submits.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from tripod.envs.swe.patches import split_lines
from tripod.envs.swe.tools import ToolCall
from tripod.envs.swe.workspace import Workspace

VIEW_CONTEXT = 8


@dataclass
class ExpertState:
    """What the expert needs to know about the episode so far."""

    targets: dict[str, str | None]
    """Path -> the text the file must end with (gold files; reverted stray edits)."""
    viewed: set[str] = field(default_factory=set)
    tests_current: bool = False
    """Tests have been run since the last change to any file."""


def _first_change(current: list[str], target: list[str]) -> tuple[int, int, int, int]:
    matcher = difflib.SequenceMatcher(a=current, b=target, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            return i1, i2, j1, j2
    raise ValueError("texts are equal")


def _unique_edit(current: list[str], target: list[str], path: str) -> ToolCall:
    """Grow the changed block with context until its old text occurs once in the file."""
    i1, i2, j1, j2 = _first_change(current, target)
    text = "".join(current)
    before = after = 0
    while True:
        old = "".join(current[i1 - before:i2 + after])
        if old.strip() and text.count(old) == 1:
            new = "".join(target[j1 - before:j2 + after])
            return ToolCall("edit", path=path, old=old, new=new)
        grown = (min(before + 1, i1, j1), min(after + 1, len(current) - i2, len(target) - j2))
        if grown == (before, after):
            # No context makes the old text unique: fall back to a line-range edit.
            return ToolCall("edit", path=path, start=i1 + 1, end=i2, new="".join(target[j1:j2]))
        before, after = grown


def _fix_file(path: str, current: str | None, target: str | None, state: ExpertState) -> str:
    if target is None:  # the file should not exist: empty it (the tools cannot delete)
        return ToolCall("edit", path=path, start=1, end=len(split_lines(current or "")),
                        new="").render()
    if current is None:
        return ToolCall("edit", path=path, old="", new=target).render()
    lines, goal = split_lines(current), split_lines(target)
    if path not in state.viewed:
        i1, i2, _, _ = _first_change(lines, goal)
        start = max(i1 + 1 - VIEW_CONTEXT, 1)
        end = min(max(i2, i1 + 1) + VIEW_CONTEXT, max(len(lines), 1))
        return ToolCall("view", path=path, start=start, end=end).render()
    if not current.endswith("\n") or not target.endswith("\n"):
        # Edits compare text exactly; a missing final newline is fixed by a line range.
        i1, i2, j1, j2 = _first_change(lines, goal)
        if i2 > i1:
            return ToolCall("edit", path=path, start=i1 + 1, end=i2,
                            new="".join(goal[j1:j2])).render()
    return _unique_edit(lines, goal, path).render()


def expert_action(ws: Workspace, state: ExpertState) -> str:
    """The next tool call of the gold-patch replay from the workspace's current files."""
    for path in sorted(state.targets):
        current, target = ws.read_text(path), state.targets[path]
        if current != target and not (current is None and target == ""):
            return _fix_file(path, current, target, state)
    return "submit" if state.tests_current else "run_tests"
