"""The first observation of an SWE episode: what a small model needs to start on the bug.

Two modes (`SweEnvConfig.observation`):

- ``traceback``: the failing tests' short tracebacks and the function under test with line
  numbers. A traceback names the file and line where the error surfaces, and a marked fault
  location helps small repair models (RepairLLaMA); the numbered lines are what a line-range
  edit needs. The tracebacks come from the trusted scorer's run of the pristine buggy tree
  (`verify.Verifier`: the base with the task's hidden test patch, nothing of the agent's),
  run once per task in a process and then cached.
- ``issue``: the repository's file list, so the problem statement in the objective is all
  the agent knows of the bug (as the paper's agents see it).

What a traceback may show of the hidden tests is what pytest's ``--tb=short`` lines show:
per frame its ``file:line: in name`` line and at most `SOURCE_LINES` lines of the
statement, then at most `ERROR_LINES` ``E`` lines; captured output, frames outside the
repository and everything else of the test files are dropped. The function under test is
read from the agent's own files (which hold no hidden test), never from the gold patch: it
is the innermost function of the deepest repository source frame, or else the first
function the failing test line calls that a source file defines.
"""

from __future__ import annotations

import ast
import re
import threading
from dataclasses import dataclass, field

from tripod.envs.swe.patches import split_lines
from tripod.envs.swe.sandbox import SandboxLimits
from tripod.envs.swe.task import SweTask
from tripod.envs.swe.tools import ToolCall, numbered, search_hits, tool_list
from tripod.envs.swe.verify import VerifiedRun, is_source_file, task_key
from tripod.envs.swe.workspace import Workspace

MAX_TESTS = 3
"""Failing tests whose tracebacks are shown (the generator's issue texts quote three too)."""
MAX_FRAMES = 6
"""Frames kept per test (the deepest ones: where the error surfaces)."""
SOURCE_LINES = 4
"""Source lines kept per frame (a multi-line statement is cut after these)."""
ERROR_LINES = 8
"""``E`` lines kept per test (assertion introspection can print whole diffs)."""
LINE_CHARS = 200
"""Characters kept per line."""
FUNCTION_MAX_LINES = 40
"""A longer function is shown as a window of this many lines around the error line."""
DOCSTRING_LINES = 3
"""A longer docstring is left out of a function shown (its lines are named instead)."""
MAX_FUNCTIONS = 2
"""Functions shown (two for tasks whose bugs sit in different functions)."""

_SECTION = re.compile(r"^_{3,} (.+?) _{3,}$")
_FRAME = re.compile(r"^(\S[^:]*):(\d+): in (\S+)$")
_CHAIN = ("During handling of the above exception", "The above exception was the direct")
_NOT_CALLED = {"list", "tuple", "set", "dict", "len", "sorted", "str", "repr", "iter", "next",
               "isinstance", "type", "raises", "assertEqual", "assertTrue", "assertFalse",
               "assertRaises", "assertIs", "assertIn", "equal", "eq", "int", "float", "bool",
               "print", "range", "sum", "min", "max", "any", "all", "map", "filter", "zip"}


def failure_sections(output: str) -> dict[str, list[str]]:
    """pytest's failure report split by test: {section title: its lines}. A title is the
    test's name (``test_x``, ``TestA.test_x``, ``test_x[1-2]``)."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in output.splitlines():
        match = _SECTION.match(line)
        if match:
            current = sections.setdefault(match.group(1).removeprefix("ERROR at setup of "),
                                          [])
        elif line.startswith("=") and current is not None:
            current = None
        elif current is not None:
            current.append(line)
    return sections


def section_of(test_id: str, sections: dict[str, list[str]]) -> list[str] | None:
    """The lines of `test_id`'s failure report, if pytest printed one."""
    return sections.get(test_id.split("::", 1)[-1].replace("::", "."))


@dataclass
class Frame:
    """One traceback entry: ``path:line: in function``."""

    path: str
    line: int
    function: str
    source: list[str] = field(default_factory=list)
    """The statement's lines as pytest shows them (carets included)."""


@dataclass
class Traceback:
    """One failing test's trimmed traceback."""

    test_id: str
    frames: list[Frame] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    cut_frames: int = 0

    def text(self) -> str:
        out = [f"FAILED {self.test_id}"]
        if self.cut_frames:
            out.append(f"... {self.cut_frames} outer frames cut")
        for frame in self.frames:
            out.append(f"{frame.path}:{frame.line}: in {frame.function}")
            out += frame.source
        out += self.notes[:2] + self.errors
        return "\n".join(out)


def _clip(line: str) -> str:
    return line if len(line) <= LINE_CHARS else line[:LINE_CHARS] + " ..."


def trim_traceback(test_id: str, lines: list[str]) -> Traceback:
    """The parts of a ``--tb=short`` section that locate the error: frames inside the
    repository (relative paths) with a few source lines each, and the first ``E`` lines;
    captured output and everything else are dropped."""
    tb = Traceback(test_id)
    frames: list[Frame] = []
    in_frame = False  # the lines after a frame's location are its source lines
    for line in lines:
        if line.startswith("-" * 5):  # "----- Captured stdout call -----": not shown
            break
        frame = _FRAME.match(line)
        if frame:
            in_frame = not frame.group(1).startswith("/")  # outside the repository: dropped
            if in_frame:
                frames.append(Frame(frame.group(1), int(frame.group(2)), frame.group(3)))
        elif line.startswith("E ") and len(tb.errors) < ERROR_LINES:
            tb.errors.append(_clip(line))
            in_frame = False
        elif line.startswith(_CHAIN):
            tb.notes.append(line)
            in_frame = False
        elif in_frame and line.startswith(" ") and len(frames[-1].source) < SOURCE_LINES \
                and line.strip(" ^~"):  # a column marker line costs tokens, locates no line
            frames[-1].source.append(_clip(line))
    tb.cut_frames = max(len(frames) - MAX_FRAMES, 0)
    tb.frames = frames[-MAX_FRAMES:]
    return tb


def failing_tracebacks(run: VerifiedRun, task: SweTask) -> list[Traceback]:
    """Tracebacks of up to `MAX_TESTS` FAIL_TO_PASS tests that fail in `run`, first the
    ones whose failure text differs (a second test failing the same way adds nothing)."""
    sections = failure_sections(run.output)
    found: list[Traceback] = []
    seen: set[tuple[str, ...]] = set()
    for test_id in task.FAIL_TO_PASS:
        if run.passes(test_id):
            continue
        lines = section_of(test_id, sections)
        tb = trim_traceback(test_id, lines) if lines else Traceback(test_id)
        key = tuple(tb.errors) + tuple(s for f in tb.frames[-1:] for s in f.source)
        if lines and key in seen:
            continue
        seen.add(key)
        found.append(tb)
        if len(found) == MAX_TESTS:
            break
    return found


# --- the function under test ------------------------------------------------------------------


@dataclass(frozen=True)
class Function:
    """Where a function is in a file (1-based lines, inclusive)."""

    first: int
    """The first decorator's line, or the ``def`` line."""
    last: int
    name: str
    """Qualified within the module (``Compose.__init__``)."""
    doc: tuple[int, int] | None = None
    """The docstring's lines."""


@dataclass(frozen=True)
class Shown:
    """Parts of a function shown with line numbers."""

    path: str
    function: Function
    ranges: tuple[tuple[int, int], ...]
    """The line ranges shown (1-based, inclusive), in order."""


def _functions(text: str) -> list[Function]:
    """Every function of a file."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    out: list[Function] = []
    stack: list[tuple[ast.AST, str]] = [(tree, "")]
    while stack:  # an explicit stack: the qualified name is the path to each definition
        node, prefix = stack.pop()
        for child in ast.iter_child_nodes(node):
            name = getattr(child, "name", "")
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                body = child.body[0]
                doc = None
                if isinstance(body, ast.Expr) and isinstance(body.value, ast.Constant) and \
                        isinstance(body.value.value, str):
                    doc = (body.lineno, body.end_lineno or body.lineno)
                out.append(Function(first, child.end_lineno or child.lineno, prefix + name,
                                    doc))
            stack.append((child, prefix + name + "." if name else prefix))
    return out


def _window(path: str, fn: Function, focus: int | None) -> Shown:
    """The function's lines, a docstring of more than `DOCSTRING_LINES` lines left out
    (unless the error is in it); past `FUNCTION_MAX_LINES` lines, the first ones or a
    window around the error line."""
    hidden = fn.doc if fn.doc and fn.doc[1] - fn.doc[0] + 1 > DOCSTRING_LINES else None
    if hidden and focus is not None and hidden[0] <= focus <= hidden[1]:
        hidden = None
    rows = [n for n in range(fn.first, fn.last + 1)
            if not (hidden and hidden[0] <= n <= hidden[1])]
    if len(rows) > FUNCTION_MAX_LINES:
        at = rows.index(focus) if focus in rows else 0
        lo = 0 if at < FUNCTION_MAX_LINES * 3 // 4 else min(at - FUNCTION_MAX_LINES // 2,
                                                            len(rows) - FUNCTION_MAX_LINES)
        rows = rows[lo:lo + FUNCTION_MAX_LINES]
    ranges: list[tuple[int, int]] = []
    for n in rows:
        if ranges and ranges[-1][1] == n - 1:
            ranges[-1] = (ranges[-1][0], n)
        else:
            ranges.append((n, n))
    return Shown(path, fn, tuple(ranges))


def _read_source(ws: Workspace, path: str) -> str | None:
    if not is_source_file(path):
        return None
    try:
        return ws.read_text(path)
    except (OSError, ValueError):
        return None


def _enclosing(ws: Workspace, frame: Frame) -> Shown | None:
    """The innermost function of a source file holding the frame's line."""
    text = _read_source(ws, frame.path)
    holding = [f for f in _functions(text or "") if f.first <= frame.line <= f.last]
    if not holding:
        return None
    return _window(frame.path, min(holding, key=lambda f: f.last - f.first), frame.line)


def called_names(source: list[str]) -> list[str]:
    """Names of the functions a test's failing statement calls, in order (builtins and
    assertion helpers left out)."""
    code = "\n".join(line for line in source if line.strip().strip("^~ "))
    code = code.strip().removeprefix("assert ").rstrip(":")
    try:
        calls = [node.func for node in ast.walk(ast.parse(code)) if isinstance(node, ast.Call)]
        found = [f.id if isinstance(f, ast.Name) else getattr(f, "attr", "") for f in calls]
    except SyntaxError:  # a statement cut after `SOURCE_LINES` lines
        found = re.findall(r"([A-Za-z_]\w*)\(", code)
    return [n for n in found if n and n not in _NOT_CALLED and not n.startswith("_")]


def _defined(ws: Workspace, name: str) -> Shown | None:
    """Where a source file defines function `name` (a module-level one first)."""
    hits = sorted((line != line.lstrip(), path) for path, _, line in
                  search_hits(ws, f"def {name}(") if is_source_file(path))
    for path in dict.fromkeys(path for _, path in hits):
        found = [f for f in _functions(_read_source(ws, path) or "")
                 if f.name.rsplit(".", 1)[-1] == name]
        if found:
            return _window(path, min(found, key=lambda f: (f.name.count("."), f.first)),
                           None)
    return None


def functions_under_test(ws: Workspace, tracebacks: list[Traceback]) -> list[Shown]:
    """Up to `MAX_FUNCTIONS` functions: per test, the function around the deepest source
    frame, or else the first called function of its failing line that the sources define."""
    shown: list[Shown] = []
    for tb in tracebacks:
        found = next((s for f in reversed(tb.frames) if (s := _enclosing(ws, f))), None)
        if found is None and tb.frames:
            for name in called_names(tb.frames[0].source):
                if (found := _defined(ws, name)) is not None:
                    break
        if found is not None and all((found.path, found.function) != (s.path, s.function)
                                     for s in shown):
            shown.append(found)
        if len(shown) == MAX_FUNCTIONS:
            break
    return shown


def _show(ws: Workspace, shown: Shown) -> str:
    lines = split_lines(ws.read_text(shown.path) or "")
    fn = shown.function
    out = [f"{shown.path}, function {fn.name} (lines {fn.first}-{fn.last} of {len(lines)}):\n"]
    last = fn.first - 1
    for start, end in shown.ranges:
        if start > last + 1:
            what = "the docstring, " if fn.doc == (last + 1, start - 1) else ""
            out.append(f"  ...  ({what}lines {last + 1}-{start - 1}: view {shown.path} "
                       f"{last + 1}-{start - 1})\n")
        out.append(numbered(lines[start - 1:end], start))
        last = end
    if last < fn.last:
        out.append(f"  ...  (lines {last + 1}-{fn.last}: view {shown.path} "
                   f"{last + 1}-{fn.last})\n")
    return "".join(out)


# --- the observation --------------------------------------------------------------------------


@dataclass(frozen=True)
class FirstView:
    """The first observation and the source windows it shows."""

    text: str
    shown: tuple[Shown, ...] = ()


_CACHE: dict[str, FirstView] = {}
_LOCK = threading.Lock()


def first_view(task: SweTask, ws: Workspace, limits: SandboxLimits, mode: str) -> FirstView:
    """The first observation of an episode on `task` in the fresh workspace `ws`."""
    if mode == "issue":
        return FirstView(f"Repository files:\n{tool_list(ws, ToolCall('list'))}")
    key = task_key(task)
    with _LOCK:
        cached = _CACHE.get(key)
    if cached is not None:
        return cached
    run = ws.score(limits)  # the pristine buggy tree: nothing of the agent's yet
    if run.status != "ok":
        note = (f"(The tests could not be run to show their tracebacks: {run.status}"
                f"{': ' + run.reason if run.reason else ''}.)\n")
        return FirstView(note + f"Repository files:\n{tool_list(ws, ToolCall('list'))}")
    view = _traceback_view(task, ws, run)
    with _LOCK:
        _CACHE[key] = view
    return view


def _traceback_view(task: SweTask, ws: Workspace, run: VerifiedRun) -> FirstView:
    tracebacks = failing_tracebacks(run, task)
    failing = sum(not run.passes(t) for t in task.FAIL_TO_PASS)
    parts = [f"Failing tests: {failing} of the {len(task.FAIL_TO_PASS)} target tests fail "
             "on the code as it is (pytest --tb=short, trimmed"
             + (f"; {len(tracebacks)} shown" if len(tracebacks) < failing else "") + "):"]
    parts += [tb.text() for tb in tracebacks]
    shown = functions_under_test(ws, tracebacks)
    if shown:
        parts.append("The function under test:" if len(shown) == 1 else
                     "The functions under test:")
        parts += [_show(ws, s).rstrip("\n") for s in shown]
    return FirstView("\n\n".join(parts) + "\n", tuple(shown))
