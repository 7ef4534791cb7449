"""The text-level tool interface: parse one tool call from model output, run file tools.

One tool call per turn, written as a command line (optionally inside a ``` fence)::

    list [PATH]
    view PATH [START-END]
    search TEXT [PATH]            (TEXT may be quoted: search "def foo" src/)
    edit PATH START-END           replace lines START..END (inclusive):
    <<<<<<< LINES
    new lines
    >>>>>>> LINES
    edit PATH                     replace one exact occurrence:
    <<<<<<< SEARCH
    old lines
    =======
    new lines
    >>>>>>> REPLACE
    run_tests [TEST ...]
    submit

Parsing is forgiving where intent is clear (a ``<think>`` block, prose around the call, a
fence, ``$ `` or ``Action:`` prefixes, aliases such as ``cat`` or ``pytest``, a range written
``10:20`` or ``10 20``) and precise where it is not: anything else is an error whose message
shows the valid form, so the agent can correct itself on the next turn. An edit that does
not apply shows the file's nearest lines with their numbers; one after which a ``.py`` file
would no longer parse is refused with the syntax error (`checked_edit`).
"""

from __future__ import annotations

import ast
import difflib
import heapq
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass

from tripod.envs.swe.patches import split_lines
from tripod.envs.swe.workspace import Workspace, clean_relpath

TOOLS = ("list", "view", "search", "edit", "run_tests", "submit")
_ALIASES = {"ls": "list", "cat": "view", "grep": "search", "str_replace": "edit",
            "pytest": "run_tests", "finish": "submit"}
USAGE = {
    "list": "list [PATH]                 list the files under PATH (default: the repository)",
    "view": "view PATH [START-END]       show a file with line numbers (or a line range)",
    "search": 'search TEXT [PATH]          find a literal TEXT (quote it if it has spaces)',
    "edit": ("edit PATH START-END         replace lines START..END (inclusive) by new lines:\n"
             "<<<<<<< LINES\nnew lines\n>>>>>>> LINES\n"
             "edit PATH                   or replace one exact occurrence of the SEARCH lines:\n"
             "<<<<<<< SEARCH\nold lines, copied exactly\n=======\nnew lines\n>>>>>>> REPLACE"),
    "run_tests": "run_tests [TEST ...]        run the task's tests, or given files / test ids",
    "submit": "submit                      finish; your changes are scored by the tests",
}
TOOL_HELP = "\n".join(USAGE[t] for t in TOOLS)
"""The reference card shown in the objective and after a malformed call."""
BRIEF_HELP = "\n".join([USAGE["view"], USAGE["edit"].split("\nedit PATH ")[0],
                        "run_tests                   run the task's tests", USAGE["submit"]])
"""The card of the brief objective: the calls a one-bug fix needs (every tool still works)."""

VIEW_MAX_LINES = 150
LIST_MAX_ENTRIES = 300
SEARCH_MAX_HITS = 50


class ToolCallError(ValueError):
    """A tool call that cannot be parsed or executed; the message is shown to the agent."""

    def __init__(self, message: str, tool: str | None = None) -> None:
        super().__init__(message)
        self.tool = tool

    def observation(self) -> str:
        usage = USAGE.get(self.tool or "", TOOL_HELP)
        return f"Invalid tool call: {self}\nA valid call looks like:\n{usage}"


@dataclass(frozen=True)
class ToolCall:
    """One parsed tool call."""

    name: str
    path: str = ""
    start: int | None = None
    end: int | None = None
    text: str = ""
    """search: the literal to find."""
    old: str | None = None
    """edit: the SEARCH text (None for a line-range edit)."""
    new: str = ""
    """edit: the replacement text."""
    tests: tuple[str, ...] = ()

    def render(self) -> str:
        """The canonical text of this call (what the expert emits)."""
        span = f" {self.start}-{self.end}" if self.start is not None else ""
        if self.name == "edit":
            # A block line always ends with a newline; a text without one (a file's last
            # line) is written with it, which the edit treats the same (`edited_text`).
            new = _eol(self.new)
            if self.old is None:
                return f"edit {self.path}{span}\n<<<<<<< LINES\n{new}>>>>>>> LINES"
            return (f"edit {self.path}\n<<<<<<< SEARCH\n{_eol(self.old)}=======\n{new}"
                    ">>>>>>> REPLACE")
        if self.name == "search":
            return f"search {shlex.quote(self.text)}" + (f" {self.path}" if self.path else "")
        if self.name == "run_tests":
            return " ".join(["run_tests", *self.tests])
        return " ".join(p for p in (self.name, self.path) if p) + span


def _eol(text: str) -> str:
    return text if not text or text.endswith("\n") else text + "\n"


_PREFIX = re.compile(r"^\s*(?:\$\s+|>\s+|[Aa]ction\s*:\s*|[Tt]ool\s*:\s*|`)*")
_RANGE = re.compile(r"^(\d+)\s*(?:-|:|,|\s)\s*(\d+)$")
_START, _SEP, _END = re.compile(r"^\s*<{5,}"), re.compile(r"^\s*={5,}\s*$"), re.compile(r"^\s*>{5,}")


def _tool_of(line: str) -> tuple[str, str] | None:
    stripped = _PREFIX.sub("", line).rstrip("`").rstrip()
    head, _, rest = stripped.partition(" ")
    name = _ALIASES.get(head.lower(), head.lower())
    return (name, rest.strip()) if name in TOOLS and head == head.strip() else None


MAX_CANDIDATES = 16
"""Lines that read as a tool's name tried as the call; a reply with more that all fail to
parse is an error (each try scans the lines after it, so this keeps reading linear)."""


def _without_thinking(text: str) -> str:
    """`text` without its closed ``<think>...</think>`` blocks, in one pass (a regex with a
    lazy body rescans the rest of the text from every unclosed opener)."""
    kept, pos = [], 0
    while (start := text.find("<think>", pos)) >= 0:
        end = text.find("</think>", start + 7)
        if end < 0:
            break
        kept.append(text[pos:start])
        pos = end + 8
    kept.append(text[pos:])
    return "".join(kept)


def _fenced_blocks(text: str) -> list[str]:
    """The bodies of the ```-fenced blocks of `text` (the rest of the opening line is the
    block's language), in one pass."""
    blocks, pos = [], 0
    while (start := text.find("```", pos)) >= 0:
        newline = text.find("\n", start + 3)
        end = text.find("```", newline + 1) if newline >= 0 else -1
        if end < 0:
            break
        blocks.append(text[newline + 1:end])
        pos = end + 3
    return blocks


def _call_lines(text: str) -> list[str]:
    """The lines holding the call: the last fenced block with a tool line, else all text."""
    text = _without_thinking(text)
    blocks = [b for b in _fenced_blocks(text) if any(_tool_of(ln) for ln in b.splitlines())]
    return (blocks[-1] if blocks else text).splitlines()


def parse_tool_call(text: str) -> ToolCall:
    """The first tool call in `text` (a whole model reply: prose before or after the call
    is ignored). A prose line that merely starts with a tool's name but does not read as
    a valid call is skipped; if no line reads as one, the first line's error is raised.
    Raises `ToolCallError` with a correction hint."""
    lines = _call_lines(text if isinstance(text, str) else str(text))
    first_error: ToolCallError | None = None
    tried = 0
    for i, line in enumerate(lines):
        found = _tool_of(line)
        if found:
            if tried == MAX_CANDIDATES:
                break
            tried += 1
            name, rest = found
            try:
                return _parse_args(name, rest, lines[i + 1:])
            except ToolCallError as exc:
                first_error = first_error or exc
    if first_error is not None:
        raise first_error
    raise ToolCallError("no tool call found; write exactly one call on its own line, "
                        "starting with one of: " + ", ".join(TOOLS))


def _split_args(rest: str, tool: str) -> list[str]:
    try:
        return shlex.split(rest)
    except ValueError as exc:
        raise ToolCallError(f"cannot read the arguments ({exc})", tool) from exc


def _path(raw: str, tool: str) -> str:
    try:
        return clean_relpath(raw)
    except ValueError as exc:
        raise ToolCallError(str(exc), tool) from exc


def _test_id(raw: str) -> str:
    file_part, sep, rest = raw.partition("::")
    return _path(file_part, "run_tests") + sep + rest


def _range(args: list[str], tool: str) -> tuple[int, int] | None:
    if not args:
        return None
    match = _RANGE.match(" ".join(args).strip())
    if not match:
        raise ToolCallError(f"cannot read the line range {' '.join(args)!r}; write START-END",
                            tool)
    start, end = int(match.group(1)), int(match.group(2))
    if start < 1 or end < start - 1:
        raise ToolCallError(f"bad line range {start}-{end}: lines count from 1 and END must "
                            "not be before START (END = START-1 inserts before START)", tool)
    return start, end


def _parse_args(name: str, rest: str, after: list[str]) -> ToolCall:
    if name == "search":
        return _parse_search(rest)
    args = _split_args(rest, name)
    if name == "submit":
        if args:
            raise ToolCallError("submit takes no arguments", name)
        return ToolCall("submit")
    if name == "list":
        if len(args) > 1:
            raise ToolCallError("list takes at most one path", name)
        return ToolCall("list", path=_path(args[0], name) if args else "")
    if name == "run_tests":
        # "-x" is an option; pytest also reads options from "@file" arguments.
        bad = [a for a in args if a.startswith(("-", "@"))]
        if bad:
            raise ToolCallError(f"options are not allowed ({' '.join(bad)}); name test files "
                                "or ids such as tests/test_x.py::test_y", name)
        return ToolCall("run_tests", tests=tuple(_test_id(a) for a in args))
    if not args:
        raise ToolCallError(f"{name} needs a file path", name)
    path = _path(args[0], name)
    span = _range(args[1:], name)
    if name == "view":
        return ToolCall("view", path=path, start=span[0] if span else None,
                        end=span[1] if span else None)
    return _parse_edit(path, span, after)


def _parse_search(rest: str) -> ToolCall:
    try:
        args = shlex.split(rest)
    except ValueError:  # e.g. an apostrophe in unquoted text: take the text as written
        args = [rest]
    if not args or not args[0]:
        raise ToolCallError("search needs the text to find", "search")
    if len(args) > 2:
        raise ToolCallError("quote a search text that has spaces", "search")
    return ToolCall("search", text=args[0], path=_path(args[1], "search") if len(args) > 1 else "")


def _parse_edit(path: str, span: tuple[int, int] | None, after: list[str]) -> ToolCall:
    start = next((i for i, ln in enumerate(after) if _START.match(ln)), None)
    if start is None:
        raise ToolCallError("edit needs a block after the command line", "edit")
    end = next((i for i in range(start + 1, len(after)) if _END.match(after[i])), None)
    if end is None:
        raise ToolCallError("the edit block is not closed (end it with >>>>>>> REPLACE or "
                            ">>>>>>> LINES)", "edit")
    body = after[start + 1:end]
    sep = next((i for i, ln in enumerate(body) if _SEP.match(ln)), None)
    if span is not None:
        # A LINES block holds new lines only, so a ======= line in it is text (an RST
        # underline in a docstring); in a block opened otherwise it is a mixed-up format.
        if sep is not None and "LINES" not in after[start].upper():
            raise ToolCallError("a line-range edit takes only the new lines (no =======)", "edit")
        return ToolCall("edit", path=path, start=span[0], end=span[1], new=_join(body))
    if sep is None:
        raise ToolCallError("a SEARCH/REPLACE edit needs a ======= line between the old and "
                            "the new lines (or give a line range)", "edit")
    return ToolCall("edit", path=path, old=_join(body[:sep]), new=_join(body[sep + 1:]))


def _join(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


# --- file tools ------------------------------------------------------------------------


def tool_list(ws: Workspace, call: ToolCall) -> str:
    files = ws.list_files(call.path)
    if not files:
        raise ToolCallError(f"no files under {call.path or '.'!r}", "list")
    shown = files[:LIST_MAX_ENTRIES]
    more = f"\n... and {len(files) - len(shown)} more" if len(files) > len(shown) else ""
    return f"{len(files)} files under {call.path or '.'}:\n" + "\n".join(shown) + more


def numbered(lines: list[str], first: int) -> str:
    """`lines` prefixed with their numbers from `first` on, as `view` shows them."""
    return "".join(f"{first + i:>5}  {line if line.endswith(chr(10)) else line + chr(10)}"
                   for i, line in enumerate(lines))


def tool_view(ws: Workspace, call: ToolCall) -> str:
    text = ws.read_text(call.path)
    if text is None:
        if ws.is_dir(call.path):
            return tool_list(ws, call)
        raise ToolCallError(f"no file {call.path!r} (use list to see the files)", "view")
    lines = split_lines(text)
    start = call.start or 1
    end = min(call.end or start + VIEW_MAX_LINES - 1, len(lines), start + VIEW_MAX_LINES - 1)
    if lines and start > len(lines):
        raise ToolCallError(f"{call.path} has only {len(lines)} lines", "view")
    header = f"{call.path} (lines {start}-{end} of {len(lines)})\n"
    hint = (f"... use view {call.path} {end + 1}-{min(end + VIEW_MAX_LINES, len(lines))} "
            "to see more\n" if end < len(lines) else "")
    return header + numbered(lines[start - 1:end], start) + hint


SEARCH_MAX_BYTES = 32_000_000
"""Most bytes of file text one search reads; past this it stops and says so."""


@dataclass
class _Search:
    """What a search found: the first `SEARCH_MAX_HITS` hits and a count of the rest."""

    hits: list[tuple[str, int, str]]
    total: int = 0
    stopped: bool = False
    """The byte budget ran out before every file was read."""

    def add(self, rel: str, number: int, line: str) -> None:
        self.total += 1
        if len(self.hits) < SEARCH_MAX_HITS:  # the rest are counted, never held
            self.hits.append((rel, number, line))


def _lines_with(text: str, needle: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of each line holding `needle`, found without splitting the
    whole text into lines."""
    pos, counted_to, number = 0, 0, 1
    while (i := text.find(needle, pos)) != -1:
        number += text.count("\n", counted_to, i)
        counted_to = i
        start = text.rfind("\n", 0, i) + 1
        end = text.find("\n", i)
        end = len(text) if end == -1 else end
        yield number, text[start:end]
        pos = end + 1


def _matches(ws: Workspace, call: ToolCall) -> _Search:
    grep = getattr(ws, "grep", None)  # workspaces that can search natively (docker)
    found = _Search([])
    if grep is not None:
        for hit in grep(call.text, call.path):
            found.add(*hit)
        return found
    files = ws.list_files(call.path) if call.path == "" or ws.is_dir(call.path) else [call.path]
    budget = SEARCH_MAX_BYTES
    for rel in files:
        try:
            text = ws.read_text(rel)
        except ValueError:  # a link, FIFO or huge file planted in the tree: not searched
            if len(files) == 1:
                raise
            continue
        if text is None:
            continue
        budget -= len(text)
        if budget < 0:
            found.stopped = True
            break
        for number, line in _lines_with(text, call.text):
            found.add(rel, number, line)
    return found


def search_hits(ws: Workspace, text: str, path: str = "") -> list[tuple[str, int, str]]:
    """(path, line number, line) of the first `SEARCH_MAX_HITS` lines holding `text`."""
    return _matches(ws, ToolCall("search", text=text, path=path)).hits


def tool_search(ws: Workspace, call: ToolCall) -> str:
    found = _matches(ws, call)
    hits = [f"{rel}:{n}: {line.rstrip()[:200]}" for rel, n, line in found.hits]
    stop = (f"\n(search stopped after reading {SEARCH_MAX_BYTES // 1_000_000} MB; "
            "give a PATH to search less)" if found.stopped else "")
    if not hits:
        return (f"no matches for {call.text!r}" + (f" under {call.path}" if call.path else "")
                + stop)
    more = f"\n... {found.total - len(hits)} more matches" if found.total > len(hits) else ""
    return f"{found.total} matches for {call.text!r}:\n" + "\n".join(hits) + more + stop


def edited_text(current: str | None, call: ToolCall) -> str:
    """The file text after an edit call; raises `ToolCallError` if it does not apply (its
    message shows the file's nearest lines with their numbers)."""
    if call.old is None:
        return _replace_lines(current, call)
    if current is None:
        if call.old.strip():
            raise ToolCallError(f"no file {call.path!r}; to create it, leave SEARCH empty",
                                "edit")
        return call.new
    if not call.old.strip():
        raise ToolCallError("SEARCH is empty; copy the lines to replace exactly", "edit")
    old, new = call.old, call.new
    count = current.count(old)
    if count == 0 and old.endswith("\n") and current.endswith(old[:-1]):
        old, new = old[:-1], new[:-1] if new.endswith("\n") else new
        count = current.count(old)
    if count == 0:
        near = nearest_lines(current, old)
        raise ToolCallError(
            f"the SEARCH lines were not found in {call.path}; copy them exactly, indentation "
            "included, or edit by line numbers (edit PATH START-END)"
            + (f". The nearest lines are:\n{near}" if near else ""), "edit")
    if count > 1:
        at = _line_numbers(current, old)
        raise ToolCallError(f"the SEARCH lines occur {count} times in {call.path} (at lines "
                            f"{', '.join(map(str, at))}); include more surrounding lines so "
                            "they match once, or edit by line numbers", "edit")
    return current.replace(old, new, 1)


def _replace_lines(current: str | None, call: ToolCall) -> str:
    if current is None:
        raise ToolCallError(f"no file {call.path!r}", "edit")
    lines = split_lines(current)
    assert call.start is not None and call.end is not None
    if call.end > len(lines) or call.start > len(lines) + 1:
        last = numbered(lines[-NEAR_LINES:], max(len(lines) - NEAR_LINES, 0) + 1)
        raise ToolCallError(f"{call.path} has {len(lines)} lines; range {call.start}-"
                            f"{call.end} is outside it" +
                            (f". Its last lines are:\n{last}" if lines else ""), "edit")
    if call.end >= call.start and lines and not lines[call.end - 1].endswith("\n"):
        new = call.new[:-1] if call.new.endswith("\n") else call.new  # keep a missing EOL
    else:
        new = call.new
    return "".join(lines[:call.start - 1]) + new + "".join(lines[call.end:])


NEAR_LINES = 8
"""Most lines a failed edit's feedback shows."""
NEAR_MAX_FILE_LINES = 20_000
"""Lines of a file compared with a SEARCH text that was not found (bounds the cost)."""
NEAR_LINE_CHARS = 200
"""Characters of each line compared."""
NEAR_MAX_CHARS = 200_000
"""Characters of the file screened per SEARCH line (difflib's linear `quick_ratio`)."""
NEAR_FULL_RATIOS = 3
"""Lines per SEARCH line that get difflib's full (quadratic) ratio: those whose quick ratio,
an upper bound of the full one, is highest. Without this bound a file of lines that pass the
quick checks but not the threshold (each full ratio of two 200-character lines can take
0.1 s) made one failed edit's feedback cost minutes of the trainer's time."""


def _line_numbers(text: str, needle: str, most: int = 5) -> list[int]:
    """1-based line numbers where `needle` starts in `text` (the first `most`)."""
    out, pos = [], text.find(needle)
    while pos != -1 and len(out) < most:
        out.append(text.count("\n", 0, pos) + 1)
        pos = text.find(needle, pos + 1)
    return out


def nearest_lines(text: str, wanted: str) -> str:
    """The lines of `text` most like the SEARCH text `wanted`, numbered ("" if none is
    close). The best line match (indentation ignored, difflib's ratio) of one of its first
    three lines places the window; an agent then sees what to copy or which lines to edit.
    The work is bounded whatever the file: a linear screen of at most `NEAR_MAX_CHARS`
    characters, then at most `NEAR_FULL_RATIOS` full ratios, per SEARCH line."""
    lines = split_lines(text)
    keys = [line.strip()[:NEAR_LINE_CHARS] for line in lines[:NEAR_MAX_FILE_LINES]]
    wanted_lines = split_lines(wanted)
    best, start = 0.6, None  # below this ratio a "nearest" line misleads more than it helps
    matcher = difflib.SequenceMatcher(autojunk=False)
    for offset, want in [(k, w.strip()[:NEAR_LINE_CHARS]) for k, w in enumerate(wanted_lines)
                         if w.strip()][:3]:
        matcher.set_seq2(want)
        screened, chars = [], 0
        for i, key in enumerate(keys):
            chars += len(key)
            if chars > NEAR_MAX_CHARS:
                break
            if not key:
                continue
            matcher.set_seq1(key)
            if matcher.real_quick_ratio() > best:
                quick = matcher.quick_ratio()
                if quick > best:
                    screened.append((quick, -i))
        for _, minus_i in heapq.nlargest(NEAR_FULL_RATIOS, screened):
            matcher.set_seq1(keys[-minus_i])
            ratio = matcher.ratio()
            if ratio > best:
                best, start = ratio, -minus_i - offset
    if start is None:
        return ""
    lo = max(start - 1, 0)
    hi = min(max(start + len(wanted_lines) + 1, lo + 3), len(lines), lo + NEAR_LINES)
    return numbered(lines[lo:hi], lo + 1).rstrip("\n")


LINT_MAX_CHARS = 256_000
"""Longest file the lint guard parses. Python's syntax tree takes hundreds of times a
file's size in memory, and a run can write a 2 MB file of list items for the agent to
edit: parsing it would cost the trainer far more than a bug fix's source file does."""


def syntax_problem(text: str) -> tuple[int, str] | None:
    """(line, message) if `text` is not valid Python, else None (also for a text over
    `LINT_MAX_CHARS`, which is not parsed). The file's bytes are parsed, so a coding cookie
    is read as the interpreter reads it (the gate judges what such a file does)."""
    if len(text) > LINT_MAX_CHARS:
        return None
    try:
        ast.parse(text.encode("utf-8", errors="surrogateescape"))
    except SyntaxError as exc:
        return exc.lineno or 1, exc.msg
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes, deep nesting
        return 1, str(exc) or type(exc).__name__
    return None


def checked_edit(current: str | None, call: ToolCall) -> str:
    """`edited_text`, refused (`ToolCallError`, the file left as it was) when a ``.py`` file
    that parses, or a new one, would no longer parse after the edit: a typo is reported with
    the lines around it at once, instead of as a test run where every test fails (SWE-agent's
    lint guard). A file that did not parse before may be edited freely (to repair it)."""
    after = edited_text(current, call)
    if not call.path.endswith(".py") or (current is not None and syntax_problem(current)):
        return after
    problem = syntax_problem(after)
    if problem is None:
        return after
    line, message = problem
    lines = split_lines(after)
    lo = max(min(line, len(lines)) - 1 - NEAR_LINES // 2, 0)
    shown = numbered(lines[lo:lo + NEAR_LINES], lo + 1).rstrip("\n")
    raise ToolCallError(f"the edit was not applied: {call.path} would no longer parse "
                        f"(line {line}: {message}). After the edit, lines {lo + 1}-"
                        f"{min(lo + NEAR_LINES, len(lines))} would read:\n{shown}", "edit")


def edit_summary(path: str, before: str | None, after: str) -> str:
    """What the agent sees after an edit: the changed region with line numbers."""
    old_lines, new_lines = split_lines(before or ""), split_lines(after)
    first = next((i for i, (a, b) in enumerate(zip(old_lines, new_lines)) if a != b),
                 min(len(old_lines), len(new_lines)))
    tail = 0
    while (tail < min(len(old_lines), len(new_lines)) - first
           and old_lines[-1 - tail] == new_lines[-1 - tail]):
        tail += 1
    lo, hi = max(first - 3, 0), min(len(new_lines) - tail + 3, len(new_lines))
    return (f"Edited {path}; lines {lo + 1}-{hi} now read:\n"
            + numbered(new_lines[lo:hi][:60], lo + 1))
