"""The expert for SFT demonstrations: replay the gold patch through the tools.

The expert is computed from the current files, not from a fixed script, so it also gives
the right next call after an agent's mistakes (like TextWorld's replanned walkthrough):
it views a file before its first edit (unless the first observation already showed the
lines it is about to edit), turns the first difference between the file and its target
into an edit by line numbers, reverts stray edits to other source files, runs the tests
once the files match, then submits.

Edits are written by line numbers, never as SEARCH/REPLACE: a SEARCH text has to be copied
exactly, which small models fail at (Diff-XYZ), while line-range edits work at 220M
parameters (Coeditor). A change inside a short function rewrites the whole function below
its docstring (aider finds whole-function rewrites the easiest format); elsewhere the edit
replaces just the changed lines, an insertion together with the line before it.
"""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass, field

from tripod.envs.swe.patches import split_lines
from tripod.envs.swe.safefs import UnsafePathError
from tripod.envs.swe.tools import ToolCall, ToolCallError, parse_tool_call
from tripod.envs.swe.workspace import Workspace

VIEW_CONTEXT = 5
"""Lines shown around the lines the expert is about to edit."""
MAX_DIFF_LINES = 4000
"""Above this many differing lines the expert replaces the whole differing block."""
EXACT_DIFF_CELLS = 250_000
"""Above this product of the differing middles' lengths the line diff uses difflib's junk
heuristic."""
WHOLE_FUNCTION_MAX_LINES = 15
"""A change inside a function whose code (below its docstring) is at most this long
rewrites all of that code."""
MAX_PARSED_CHARS = 256_000
"""Files longer than this are not parsed to find functions (a planted file stays cheap)."""

_Opcode = tuple[str, int, int, int, int]


@dataclass
class ExpertState:
    """What the expert needs to know about the episode so far."""

    targets: dict[str, str | None]
    """Path -> the text the file must end with (gold files; reverted stray edits)."""
    viewed: set[str] = field(default_factory=set)
    shown: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    """Path -> the line windows (first, last) the first observation showed of it, while
    its line numbers hold (the env forgets a path once an edit changes its line count)."""
    tests_current: bool = False
    """Tests have been run since the last change to any file."""


def _opcodes(current: list[str], target: list[str]) -> list[_Opcode]:
    """difflib's opcodes turning `current` into `target`. The common head and tail are cut
    in linear time; the line diff runs on the middle only when it is small, so a huge file
    an agent planted cannot make every step slow."""
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
    out: list[_Opcode] = [("equal", 0, head, 0, head)] if head else []
    if len(mid_a) + len(mid_b) > MAX_DIFF_LINES:
        out.append(("replace", head, len(current) - tail, head, len(target) - tail))
    else:
        # Exact (no junk heuristic) where the middle is small; past EXACT_DIFF_CELLS, lines
        # that fill over 1% of the target are junk, so a file of thousands of repeated lines
        # (blank ones) cannot make each step's diff cost seconds of the trainer's CPU.
        matcher = difflib.SequenceMatcher(
            a=mid_a, b=mid_b, autojunk=len(mid_a) * len(mid_b) > EXACT_DIFF_CELLS)
        out += [(tag, head + i1, head + i2, head + j1, head + j2)
                for tag, i1, i2, j1, j2 in matcher.get_opcodes()]
    if tail:
        out.append(("equal", len(current) - tail, len(current),
                    len(target) - tail, len(target)))
    return out


def _first_change(opcodes: list[_Opcode]) -> _Opcode:
    return next(op for op in opcodes if op[0] != "equal")


def _target_line(pos: int, opcodes: list[_Opcode]) -> int | None:
    """Where the boundary before line index `pos` of `current` falls in `target` (None if
    it falls inside a changed block)."""
    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "equal" and i1 <= pos <= i2:
            return j1 + pos - i1
        if pos == i1:
            return j1
        if pos == i2:
            return j2
        if i1 < pos < i2:
            return None
    return None


def _functions(text: str) -> list[tuple[int, int, int]]:
    """(first index, code index, end index) of every function's lines: the first is the
    first decorator's or the ``def``, the code index the first line after the docstring
    (the first index when there is none)."""
    if len(text) > MAX_PARSED_CHARS:
        return []
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
        end = node.end_lineno or node.lineno
        code = first
        if ast.get_docstring(node, clean=False) is not None:
            code = node.body[1].lineno - 1 if len(node.body) > 1 else end
        out.append((first, code, end))
    return out


def _whole_function(path: str, current: str, lines: list[str], goal: list[str],
                    opcodes: list[_Opcode]) -> ToolCall | None:
    """A rewrite of the code of the innermost short function holding the first change
    (every change inside it applied), or None. The code is the whole function, or the
    lines after its docstring when it has one: a docstring is long, and copying it out
    again is work the fix does not need."""
    _, i1, i2, _, _ = _first_change(opcodes)
    if not path.endswith(".py"):
        return None
    holding = [f for f in _functions(current) if f[0] <= i1 and i2 <= f[2]]
    if not holding:
        return None
    first, code, end = min(holding, key=lambda f: f[2] - f[0])
    inside = (code < i1 < end or (i1 == code and code > first) if i1 == i2
              else code <= i1 and i2 <= end)
    new_code, new_end = _target_line(code, opcodes), _target_line(end, opcodes)
    if (not inside or end - code > WHOLE_FUNCTION_MAX_LINES or new_code is None
            or new_end is None):
        return None
    return ToolCall("edit", path=path, start=code + 1, end=end,
                    new="".join(goal[new_code:new_end]))


def _line_edit(path: str, lines: list[str], goal: list[str],
               opcodes: list[_Opcode]) -> ToolCall:
    """The first changed block as a line-range edit; an insertion also rewrites the line
    before it (or after it, at the top of the file), so every range names real lines."""
    _, i1, i2, j1, j2 = _first_change(opcodes)
    new = "".join(goal[j1:j2])
    if i1 == i2 and i1 > 0:
        return ToolCall("edit", path=path, start=i1, end=i1, new=lines[i1 - 1] + new)
    if i1 == i2 and lines:
        return ToolCall("edit", path=path, start=1, end=1, new=new + lines[0])
    return ToolCall("edit", path=path, start=i1 + 1, end=i2, new=new)


def _reads_back(call: ToolCall) -> bool:
    """The parser reads the call's text back as the same call (a line of the new text
    that looks like a block marker would end the block early)."""
    try:
        back = parse_tool_call(call.render())
    except ToolCallError:
        return False
    return back.new.rstrip("\n") == call.new.rstrip("\n") and \
        (back.start, back.end) == (call.start, call.end)


def _fix_file(path: str, current: str | None, target: str | None, state: ExpertState) -> str:
    if target is None:  # the file should not exist: empty it (the tools cannot delete)
        return ToolCall("edit", path=path, start=1, end=len(split_lines(current or "")),
                        new="").render()
    if current is None:  # a new file (or one the agent replaced by a link or FIFO)
        return ToolCall("edit", path=path, old="", new=target).render()
    lines, goal = split_lines(current), split_lines(target)
    opcodes = _opcodes(lines, goal)
    if not current.endswith("\n") or not target.endswith("\n"):
        # Edits compare whole lines; the changed block alone fixes a missing final newline.
        call = _line_edit(path, lines, goal, opcodes)
    else:
        whole = _whole_function(path, current, lines, goal, opcodes)
        call = whole if whole and _reads_back(whole) else _line_edit(path, lines, goal, opcodes)
    assert call.start is not None and call.end is not None
    seen = any(a <= call.start and call.end <= b for a, b in state.shown.get(path, []))
    if path not in state.viewed and not seen:
        start = max(call.start - VIEW_CONTEXT, 1)
        end = min(max(call.end, call.start) + VIEW_CONTEXT, max(len(lines), 1))
        return ToolCall("view", path=path, start=start, end=end).render()
    return call.render()


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
