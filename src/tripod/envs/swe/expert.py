"""The expert for SFT demonstrations: replay the gold patch through the tools.

The expert is computed from the current files, not from a fixed script, so it also gives
the right next call after an agent's mistakes (like TextWorld's replanned walkthrough):
it views a file before its first edit, turns the first difference between the file and its
target into a SEARCH/REPLACE edit whose SEARCH text is unique in the file, reverts stray
edits to other source files, runs the tests once the files match, then submits.
"""

from __future__ import annotations

import contextlib
import difflib
from dataclasses import dataclass, field, replace

from tripod.envs.swe.patches import split_lines
from tripod.envs.swe.safefs import UnsafePathError
from tripod.envs.swe.tools import ToolCall, ToolCallError, parse_tool_call
from tripod.envs.swe.workspace import Workspace

VIEW_CONTEXT = 8
MAX_DIFF_LINES = 4000
"""Above this many differing lines the expert replaces the whole differing block."""
MAX_CONTEXT_LINES = 40
"""Most context lines a SEARCH block grows by before a line-range edit is used instead."""


@dataclass
class ExpertState:
    """What the expert needs to know about the episode so far."""

    targets: dict[str, str | None]
    """Path -> the text the file must end with (gold files; reverted stray edits)."""
    viewed: set[str] = field(default_factory=set)
    tests_current: bool = False
    """Tests have been run since the last change to any file."""


def _first_change(current: list[str], target: list[str]) -> tuple[int, int, int, int]:
    """The first changed block (line spans in `current` and `target`). The common head
    and tail are cut in linear time; the line diff runs on the middle only when it is
    small, so a huge file an agent planted cannot make every step slow."""
    head = 0
    limit = min(len(current), len(target))
    while head < limit and current[head] == target[head]:
        head += 1
    tail = 0
    while (tail < limit - head and current[len(current) - 1 - tail] ==
           target[len(target) - 1 - tail]):
        tail += 1
    mid_a, mid_b = current[head:len(current) - tail], target[head:len(target) - tail]
    if not mid_a and not mid_b:
        raise ValueError("texts are equal")
    if len(mid_a) + len(mid_b) > MAX_DIFF_LINES:
        return head, len(current) - tail, head, len(target) - tail
    matcher = difflib.SequenceMatcher(a=mid_a, b=mid_b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            return head + i1, head + i2, head + j1, head + j2
    raise ValueError("texts are equal")


def _unique_edit(current: list[str], target: list[str], path: str) -> ToolCall:
    """Grow the changed block with context until its old text occurs once in the file."""
    i1, i2, j1, j2 = _first_change(current, target)
    text = "".join(current)
    before = after = 0
    for _ in range(MAX_CONTEXT_LINES):
        old = "".join(current[i1 - before:i2 + after])
        if old.strip() and text.count(old) == 1:
            new = "".join(target[j1 - before:j2 + after])
            return ToolCall("edit", path=path, old=old, new=new)
        grown = (min(before + 1, i1, j1), min(after + 1, len(current) - i2, len(target) - j2))
        if grown == (before, after):
            break
        before, after = grown
    # No (short) context makes the old text unique: a line-range edit instead.
    return ToolCall("edit", path=path, start=i1 + 1, end=i2, new="".join(target[j1:j2]))


def _eol(text: str | None) -> str | None:
    return text if not text or text.endswith("\n") else text + "\n"


def _renderable(call: ToolCall, i1: int, i2: int, new: str) -> str:
    """The call's text if the tool parser reads it back as the same call; otherwise the
    same change as a line-range edit (e.g. when the SEARCH text holds a ======= line or a
    last line without a newline), so demonstrations only teach what the parser accepts."""
    text = call.render()
    with contextlib.suppress(ToolCallError):
        back = parse_tool_call(text)
        if back == replace(call, old=_eol(call.old), new=_eol(call.new)):
            return text
    return ToolCall("edit", path=call.path, start=i1 + 1, end=i2, new=new).render()


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
    i1, i2, j1, j2 = _first_change(lines, goal)
    if (not current.endswith("\n") or not target.endswith("\n")) and i2 > i1:
        # Edits compare text exactly; a missing final newline is fixed by a line range.
        return ToolCall("edit", path=path, start=i1 + 1, end=i2,
                        new="".join(goal[j1:j2])).render()
    return _renderable(_unique_edit(lines, goal, path), i1, i2, "".join(goal[j1:j2]))


def expert_action(ws: Workspace, state: ExpertState) -> str:
    """The next tool call of the gold-patch replay from the workspace's current files."""
    for path in sorted(state.targets):
        try:
            current = ws.read_text(path)
        except UnsafePathError:  # a link or FIFO where the file was: write it anew
            current = None
        target = state.targets[path]
        if (current or "") != (target or ""):  # the tools cannot delete: empty is gone
            return _fix_file(path, current, target, state)
    return "submit" if state.tests_current else "run_tests"
