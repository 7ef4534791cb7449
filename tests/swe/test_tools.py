"""Tool-call parsing: forgiving where intent is clear, precise errors otherwise."""

from __future__ import annotations

import pytest

from tripod.envs.swe.tools import ToolCall, ToolCallError, edited_text, parse_tool_call


@pytest.mark.parametrize("text, expected", [
    ("view src/a.py 10-20", ToolCall("view", path="src/a.py", start=10, end=20)),
    ("cat /workspace/src/a.py 3:9", ToolCall("view", path="src/a.py", start=3, end=9)),
    ("list", ToolCall("list")),
    ("ls src/", ToolCall("list", path="src")),
    ('search "def foo" src', ToolCall("search", text="def foo", path="src")),
    ("search don't", ToolCall("search", text="don't")),
    ("run_tests", ToolCall("run_tests")),
    ("$ pytest tests/t.py::test_a[1-2]", ToolCall("run_tests", tests=("tests/t.py::test_a[1-2]",))),
    ("Action: submit", ToolCall("submit")),
])
def test_parses_single_line_calls(text: str, expected: ToolCall) -> None:
    assert parse_tool_call(text) == expected


def test_prose_think_and_fences_are_skipped() -> None:
    text = ("<think>maybe list first?</think>\nThe bug is in clamp. I'll look at it.\n"
            "```\nview calc/__init__.py 1-10\n```\nThen I will edit it.")
    assert parse_tool_call(text) == ToolCall("view", path="calc/__init__.py", start=1, end=10)


def test_search_replace_edit_block() -> None:
    text = ("edit calc.py\n<<<<<<< SEARCH\n    return x\n=======\n    return hi\n"
            ">>>>>>> REPLACE\n")
    call = parse_tool_call(text)
    assert (call.old, call.new) == ("    return x\n", "    return hi\n")
    assert parse_tool_call(call.render()) == call


def test_line_range_edit_block() -> None:
    call = parse_tool_call("edit a.py 2-3\n<<<<<<< LINES\nB\n>>>>>>> LINES")
    assert call == ToolCall("edit", path="a.py", start=2, end=3, new="B\n")
    assert edited_text("a\nb\nc\nd\n", call) == "a\nB\nd\n"
    insert = parse_tool_call("edit a.py 2-1\n<<<<<<< LINES\nnew\n>>>>>>> LINES")
    assert edited_text("a\nb\n", insert) == "a\nnew\nb\n"


@pytest.mark.parametrize("text, fragment", [
    ("I think the bug is in clamp.", "no tool call found"),
    ("view ../../etc/passwd", "leaves the repository"),
    ("run_tests -x --pdb", "options are not allowed"),
    ("edit a.py\nno block here", "needs a block"),
    ("edit a.py\n<<<<<<< SEARCH\nx\n=======\ny\n", "not closed"),
    ("edit a.py\n<<<<<<< SEARCH\nx\n>>>>>>> REPLACE", "======="),
    ("view a.py ten-twenty", "line range"),
    ("search a b c", "quote"),
])
def test_malformed_calls_explain_the_valid_form(text: str, fragment: str) -> None:
    with pytest.raises(ToolCallError) as err:
        parse_tool_call(text)
    message = err.value.observation()
    assert fragment in message
    assert "A valid call looks like:" in message


def test_edit_requires_a_unique_match() -> None:
    call = ToolCall("edit", path="a.py", old="x = 1\n", new="x = 2\n")
    assert edited_text("x = 1\ny = 2\n", call) == "x = 2\ny = 2\n"
    with pytest.raises(ToolCallError, match="2 times"):
        edited_text("x = 1\nx = 1\n", call)
    with pytest.raises(ToolCallError, match="not found"):
        edited_text("z = 3\n", call)
    assert edited_text("a\nx = 1", call) == "a\nx = 2"  # file without final newline


SOURCE = "def f(x):\n    if x > 1:\n        return x\n    return 0\n\n\ndef g():\n    return 2\n"


def test_search_not_found_shows_the_nearest_lines() -> None:
    """A SEARCH text with the wrong indentation: the feedback numbers the lines it meant."""
    call = ToolCall("edit", path="m.py", old="if x > 1:\n    return x\n", new="")
    with pytest.raises(ToolCallError) as err:
        edited_text(SOURCE, call)
    message = str(err.value)
    assert "not found" in message and "edit PATH START-END" in message
    assert "    2      if x > 1:\n    3          return x" in message
    assert "def g" not in message  # only the nearest lines
    far = ToolCall("edit", path="m.py", old="completely unrelated text\n", new="")
    with pytest.raises(ToolCallError) as err:
        edited_text(SOURCE, far)
    assert "nearest" not in str(err.value)  # nothing close: no misleading lines


def test_nearest_lines_work_is_bounded_whatever_the_file(monkeypatch) -> None:
    """Lines that pass difflib's quick checks but stay under the threshold (each full ratio
    quadratic in the line length) once made one failed edit cost minutes: the full ratio now
    runs on a few screened lines per SEARCH line, and the screen reads a bounded prefix."""
    import difflib

    from tripod.envs.swe import tools

    full = []
    real_ratio = difflib.SequenceMatcher.ratio
    monkeypatch.setattr(difflib.SequenceMatcher, "ratio",
                        lambda self: full.append(1) or real_ratio(self))
    text = ("ab" * 100 + "\n") * 300
    wanted = "".join(c * 100 + "b" * 100 + "\n" for c in "aaa")
    assert tools.nearest_lines(text, wanted) == ""     # nothing close enough to show
    assert 0 < len(full) <= 3 * tools.NEAR_FULL_RATIOS
    screened = []
    real_quick = difflib.SequenceMatcher.quick_ratio
    monkeypatch.setattr(difflib.SequenceMatcher, "quick_ratio",
                        lambda self: screened.append(1) or real_quick(self))
    tools.nearest_lines(text * 20, wanted)             # 6,000 lines of 200 characters
    assert len(screened) <= 3 * tools.NEAR_MAX_CHARS // 200
    # the window still lands on the best line of a long file
    lines = [f"value_{i} = compute({i}, 'x')" for i in range(5000)]
    found = tools.nearest_lines("\n".join(lines) + "\n", "value_700 = compute(700, 'y')\n")
    assert "value_700 = compute(700, 'x')" in found


def test_failed_edits_name_line_numbers() -> None:
    twice = ToolCall("edit", path="m.py", old="a = 1\n", new="a = 2\n")
    with pytest.raises(ToolCallError, match=r"2 times in m.py \(at lines 1, 3\)"):
        edited_text("a = 1\nb = 2\na = 1\n", twice)
    outside = ToolCall("edit", path="m.py", start=20, end=21, new="x\n")
    with pytest.raises(ToolCallError) as err:
        edited_text(SOURCE, outside)
    assert "has 8 lines" in str(err.value) and "    8      return 2" in str(err.value)


def test_lines_block_may_hold_a_separator_line() -> None:
    """A LINES block holds new lines only, so an RST underline in a docstring is text; a
    SEARCH block given a line range is still a mixed-up format."""
    text = 'edit m.py 1-1\n<<<<<<< LINES\n"""Title\n=======\n"""\n>>>>>>> LINES'
    assert parse_tool_call(text).new == '"""Title\n=======\n"""\n'
    with pytest.raises(ToolCallError, match="only the new lines"):
        parse_tool_call("edit m.py 1-1\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE")


@pytest.mark.parametrize("current, call, refused", [
    (SOURCE, ToolCall("edit", path="m.py", start=2, end=2, new="    if x > 1\n"), True),
    (SOURCE, ToolCall("edit", path="m.py", old="    return 0\n", new="    return (0\n"), True),
    (None, ToolCall("edit", path="new.py", old="", new="def (:\n"), True),  # a new file
    (SOURCE, ToolCall("edit", path="m.py", start=2, end=2, new="    if x >= 1:\n"), False),
    (SOURCE, ToolCall("edit", path="notes.txt", start=2, end=2, new="(\n"), False),
    ("def (:\n", ToolCall("edit", path="m.py", start=1, end=1, new="def (x:\n"), False),
    # parsed as the interpreter reads the file: its coding cookie counts
    (SOURCE, ToolCall("edit", path="m.py", start=1, end=0, new="# coding: nonsense\n"), True),
    (SOURCE, ToolCall("edit", path="m.py", start=1, end=0, new="# coding: utf-7\n"), False),
])
def test_edits_that_break_a_python_file_are_refused(current, call, refused) -> None:
    """Refused only where a .py file that parsed (or a new one) would no longer parse; a
    file that was already broken may be edited on the way to a repair."""
    from tripod.envs.swe.tools import checked_edit

    if not refused:
        assert checked_edit(current, call) == edited_text(current, call)
        return
    with pytest.raises(ToolCallError) as err:
        checked_edit(current, call)
    assert "would no longer parse" in str(err.value) and "line " in str(err.value)


def test_the_lint_guard_does_not_parse_a_file_a_run_made_huge(monkeypatch) -> None:
    """A 2 MB file of a million list items (written by a test run, then edited) cost the
    trainer two parses per edit, about a gigabyte of memory each; a file over
    `LINT_MAX_CHARS` is edited without the guard (no project source file is that long)."""
    from tripod.envs.swe import tools

    parsed = []
    real = tools.ast.parse
    monkeypatch.setattr(tools.ast, "parse", lambda text, *a, **k: parsed.append(len(text))
                        or real(text, *a, **k))
    huge = "y = 1\nx = [" + "0," * (tools.LINT_MAX_CHARS // 2) + "]\n"
    call = ToolCall("edit", path="big.py", start=1, end=1, new="x = (\n")
    assert tools.checked_edit(huge, call) == edited_text(huge, call)
    assert parsed == []
    with pytest.raises(ToolCallError):  # a file of a project's size is still guarded
        tools.checked_edit("x = [0, 1]\n", call)
    assert parsed


@pytest.mark.parametrize(("text", "calls"), [
    ("<think>edit a.py</think>\nview a.py", "view a.py"),
    ("<think>unclosed\nview a.py", "view a.py"),                 # an unclosed tag stays text
    ("<think>a</think><think>b\n```\nview b.py\n```", "view b.py"),
    ("```py\nview a.py\n```\n```\nview b.py\n```", "view b.py"),   # the last fenced call
    ("```\nview a.py", "view a.py"),                                # an unclosed fence
])
def test_thinking_and_fences_read_in_one_pass(text, calls) -> None:
    assert parse_tool_call(text).render() == calls


def test_a_reply_of_many_tool_lines_tries_a_bounded_number(monkeypatch) -> None:
    """Each line that reads as a tool's name is tried as the call, and each try scans the
    lines after it: thousands of failing ones would cost the trainer quadratic time."""
    from tripod.envs.swe import tools

    tried = []
    real = tools._parse_args
    monkeypatch.setattr(tools, "_parse_args",
                        lambda name, rest, after: tried.append(name) or real(name, rest, after))
    with pytest.raises(ToolCallError, match="edit needs a block"):
        parse_tool_call("edit a.py\n" * 8000)
    assert len(tried) == tools.MAX_CANDIDATES
    with pytest.raises(ToolCallError, match="no tool call"):
        parse_tool_call("<think>" * 20000 + "```" * 20000)
