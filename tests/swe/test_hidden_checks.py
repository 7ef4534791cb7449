"""Hidden checks: the function the gold patch changes, called on inputs no test shows.

A change that special-cases the visible tests' inputs passes every test and still leaves
the bug; the hidden checks catch it, while honest fixes (the gold one or another) pass.
The inputs must not leak to the code under test (argv, the output shown to the agent),
and what the code returns is compared outside the sandbox, exactly typed.
"""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path

import pytest

from tripod.envs.swe import _runner, verify
from tripod.envs.swe.env import SweEnv, SweEnvConfig
from tripod.envs.swe.gate import Gate
from tripod.envs.swe.patches import make_patch
from tripod.envs.swe.sandbox import SandboxLimits
from tripod.envs.swe.task import SweTask, WorkspaceSpec
from tripod.envs.swe.verify import check_targets
from tripod.envs.swe.workspace import LocalWorkspace

from .conftest import BUGGY, CALC, HIDDEN

LIMITS = SandboxLimits(wall_s=60, cpu_s=60)
ABOVE = "    if x > hi:\n        return x\n"
FIXES = {
    "gold": CALC,
    "another fix": BUGGY.replace(ABOVE, "    if x > hi:\n        return min(x, hi)\n"),
}
OVERFITS = {
    # The tests' own input, special-cased: every test passes, the bug stays.
    "the tested input": BUGGY.replace(ABOVE, "    if x > hi:\n        return hi if x == 15 "
                                             "else x\n"),
    "a range around it": BUGGY.replace(ABOVE, "    if x > hi:\n        return hi if x < 100 "
                                              "else x\n"),
    "a wide range": BUGGY.replace(ABOVE, "    if x > hi:\n        return hi if x < 100000 "
                                         "else x\n"),
    # The tested expected value, whatever hi is.
    "the tested output": BUGGY.replace(ABOVE, "    if x > hi:\n        return 10\n"),
    # Right only once the tests' other calls have run in the same process.
    "armed by the tests": BUGGY.replace(ABOVE, "    SEEN.append(x)\n    if x > hi:\n"
                                               "        return hi if x == 15 or -3 in SEEN else x\n"
                                        ).replace("def clamp", "SEEN = []\n\n\ndef clamp"),
}


def _score(task: SweTask, text: str, max_checks: int = verify.MAX_HIDDEN_CHECKS
           ) -> verify.VerifiedRun:
    ws = LocalWorkspace.create(task)
    try:
        assert ws.verifier is not None
        ws.verifier.max_checks = max_checks
        ws.write_text("calc/__init__.py", text)
        return ws.score(LIMITS)
    finally:
        ws.close()


def _resolved(run: verify.VerifiedRun, task: SweTask) -> bool:
    return all(run.passes(t) for t in task.FAIL_TO_PASS + task.PASS_TO_PASS + list(run.hidden))


# --- making the checks ----------------------------------------------------------------------

def test_targets_are_the_functions_and_methods_the_gold_patch_changes() -> None:
    pristine = {"calc/__init__.py": BUGGY.encode(),
                "calc/shapes.py": b"class Box:\n    def area(self):\n        return 1\n\n"
                                  b"    def side(self):\n        return 1\n"}
    gold = {"calc/__init__.py": CALC.encode(),
            "calc/shapes.py": b"class Box:\n    def area(self):\n        return 2\n\n"
                              b"    def side(self):\n        return 1\n"}
    assert check_targets(pristine, gold, ["."]) == [("calc/__init__.py", "calc", "clamp"),
                                                   ("calc/shapes.py", "calc.shapes", "Box.area")]
    assert check_targets(pristine, {"calc/__init__.py": None}, ["."]) == []


def test_checks_are_unseen_inputs_on_which_the_bug_shows(calc_task: SweTask) -> None:
    ws = LocalWorkspace.create(calc_task)
    try:
        assert ws.verifier is not None
        checks = ws.verifier._make_checks(LIMITS)
    finally:
        ws.close()
    assert checks and len(checks) == HIDDEN
    for check in checks:
        assert (check.module, check.qualname, check.direct) == ("calc", "clamp", True)
        (_, args), _ = json.loads(check.call)
        assert {tag for tag, _ in args} <= {"int", "float"}  # a number, or one as a float
        x, lo, hi = (_runner._decode(form) for form in args)
        assert args != _runner._encode([15, 0, 10])[1] and x > hi  # unseen; the bug shows
        gold = lo if x < lo else hi if x > hi else x
        assert json.loads(check.expected) == ["value", _runner._encode(gold)]


@pytest.mark.parametrize("name", sorted(FIXES))
def test_honest_fixes_pass_the_hidden_checks(calc_task: SweTask, name: str) -> None:
    run = _score(calc_task, FIXES[name])
    assert run.status == "ok" and run.hidden
    assert set(run.hidden.values()) == {"PASSED"}
    assert _resolved(run, calc_task)


@pytest.mark.parametrize("name", sorted(OVERFITS))
def test_a_change_fitted_to_the_tests_inputs_is_not_resolved(calc_task: SweTask, no_gate,
                                                             name: str) -> None:
    """The checks alone (the gate also refuses the module-level state of "armed by the
    tests")."""
    run = _score(calc_task, OVERFITS[name])
    assert run.status == "ok"
    assert all(run.passes(t) for t in calc_task.FAIL_TO_PASS + calc_task.PASS_TO_PASS)
    assert len(run.hidden) == HIDDEN and "FAILED" in run.hidden.values()
    assert not _resolved(run, calc_task)


def test_the_buggy_tree_fails_every_check_and_none_can_be_switched_off(
        calc_task: SweTask) -> None:
    run = _score(calc_task, BUGGY)
    assert run.hidden and set(run.hidden.values()) == {"FAILED"}
    assert _score(calc_task, OVERFITS["the tested input"], max_checks=0).hidden == {}


# --- through the env ------------------------------------------------------------------------

def _edit(old: str, new: str) -> str:
    return f"edit calc/__init__.py\n<<<<<<< SEARCH\n{old}=======\n{new}>>>>>>> REPLACE"


def _submit(task: SweTask, new: str) -> tuple:
    env = SweEnv("swe/test", "train", [task], SweEnvConfig(limits=LIMITS))
    try:
        _, info = env.reset(0)
        tested = env.step("run_tests")
        edited = env.step(_edit("        return x\n", new))
        scored = env.step("run_tests")
        return info, tested, edited, scored, env.step("submit")
    finally:
        env.close()


def test_an_overfitted_fix_loses_and_an_honest_one_wins(calc_task: SweTask) -> None:
    # (a literal of the tests, `x == 15`, the gate refuses: a range around it passes it)
    info, tested, _, scored, last = _submit(calc_task, "        return hi if x < 99 else x\n")
    hidden = [t for t in last.info.extra["test_results"] if t.startswith("hidden check")]
    assert hidden, last.observation
    # Checks that move x by less than 84 keep it in the range, where the special case is
    # right.
    passed = sum(last.info.extra["test_results"][t] == "PASSED" for t in hidden)
    assert passed < len(hidden)
    # The checks are FAIL_TO_PASS targets: the base share counts them as failing.
    assert info.progress == pytest.approx(4 / (5 + len(hidden)))
    assert tested.info.progress == pytest.approx(info.progress)
    # run_tests shows the tests alone: the checks' count would be an oracle to tune against
    assert "Hidden checks" not in tested.observation + scored.observation
    assert last.info.lost and not last.info.won and not last.info.extra["resolved"]
    assert last.info.progress == pytest.approx((5 + passed) / (5 + len(hidden)))

    *_, won = _submit(calc_task, "        return hi\n")
    assert won.info.won and won.info.extra["resolved"] and won.info.progress == 1.0
    assert f"{len(hidden)}/{len(hidden)} pass" in won.observation


# --- attacks --------------------------------------------------------------------------------

@pytest.fixture
def no_gate(monkeypatch) -> None:
    """The gate lets everything through: what the runner and the trainer do alone."""
    monkeypatch.setattr(Gate, "check", lambda self, changes: ([], []))


LEAK = '''import sys as _sys


def clamp(x, lo, hi):
    print("ARGV", _sys.argv, "SEEN", x)
    if x < lo:
        return lo
    if x > hi:
        return hi if x == 15 else x
    return x
'''


def test_hidden_inputs_reach_neither_argv_nor_the_agent(calc_task: SweTask, no_gate,
                                                        monkeypatch) -> None:
    argvs: list[list[str]] = []
    real = verify.run_sandboxed
    monkeypatch.setattr(verify, "run_sandboxed",
                        lambda argv, *a, **k: argvs.append(argv) or real(argv, *a, **k))
    text = CALC.replace(CALC[CALC.index("def clamp"):CALC.index("def mean")], LEAK + "\n\n")
    run = _score(calc_task, text)
    checks = verify._HIDDEN[verify.task_key(calc_task)]
    inputs = {arg[1] for c in checks for arg in json.loads(c.call)[0][1]}
    # the tested numbers are no secret, as floats ("10.0") neither; "16" may appear in any
    # output
    inputs = {x for x in inputs if float(x) not in (15, 0, 10) and len(x) >= 3}
    assert inputs
    assert run.status == "ok" and "FAILED" in run.hidden.values()
    shown, scored = run.output, " ".join(" ".join(a) for a in argvs[-2:])
    for x in inputs:  # what the checks' calls print is dropped; argv never holds them
        assert not re.search(rf"\b{x}\b", shown) and not re.search(rf"\b{x}\b", scored)


FD_LEAK = '''import os as _os

_OUT = []
for _fd in range(3, 64):
    try:
        _OUT.append(_os.dup(_fd))
    except OSError:
        pass


def clamp(x, lo, hi):
    for fd in _OUT:
        try:
            _os.write(fd, b"LEAK %d\\n" % x)
        except OSError:
            pass
    return hi if x == 15 else max(lo, min(x, hi)) if x <= hi else x
'''


def test_the_checks_process_has_no_channel_to_the_agent(calc_task: SweTask, no_gate) -> None:
    """Every descriptor the checks' process holds at import, written to during the checks:
    its stdout and stderr are /dev/null, and the report pipe takes no line without the
    nonce (that run counts as tampering)."""
    run = _score(calc_task, CALC.replace(CALC[CALC.index("def clamp"):CALC.index("def mean")],
                                         FD_LEAK + "\n\n"))
    assert "LEAK" not in run.output or run.status == "tampering"
    assert not _resolved(run, calc_task)


def test_a_forged_line_in_the_result_channel_is_tampering() -> None:
    from tripod.envs.swe.sandbox import RunResult

    lines = b"N R PASSED t::a\nN HC 0 [\"value\", [\"int\", \"1\"]]\nN END 0 1 0\n"
    run = RunResult(status="ok", exit_code=0, output="", elapsed_s=0.0, channel=lines)
    assert verify.parse_report(run, "N").status == "tampering"
    checks = RunResult(status="ok", exit_code=0, output="", elapsed_s=0.0, channel=b"N HC 3 [\"timeout\"]\n")
    assert verify.parse_checks(checks, "N", 2) is None  # an index that was not sent
    twice = b"N HC 0 [\"timeout\"]\nN HC 0 [\"timeout\"]\n"
    assert verify.parse_checks(RunResult(status="ok", exit_code=0, output="", elapsed_s=0.0, channel=twice),
                               "N", 2) is None


ALWAYS_EQUAL = '''

class _Always(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


def clamp(x, lo, hi):
    return _Always(x)
'''

SLOW = '''

def clamp(x, lo, hi):
    if x == 15:
        return hi
    if x <= hi:
        return max(x, lo)
    while True:
        try:
            while True:
                pass
        except Exception:
            pass
'''


@pytest.mark.parametrize("attack", ["always equal", "slow"])
def test_outputs_are_judged_outside_and_by_exact_type(calc_task: SweTask, no_gate,
                                                      attack: str) -> None:
    """An int whose ``==`` always holds passes every test in the process; outside, it is
    not an int. A loop on unseen inputs ends at the check's timer, as a failed check."""
    code = {"always equal": ALWAYS_EQUAL, "slow": SLOW}[attack]
    run = _score(calc_task, CALC + code)
    assert run.status == "ok", run.reason
    assert all(run.passes(t) for t in calc_task.FAIL_TO_PASS + calc_task.PASS_TO_PASS)
    assert run.hidden and "FAILED" in run.hidden.values()
    assert not _resolved(run, calc_task)


# --- the codec ------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [None, True, 0, -7, 2 ** 70, 1.5, "é", b"\x00", [1, (2, "a")],
                                   {"k": [1]}, {3, 1, 2}, frozenset({"a"}), slice(5, None),
                                   slice(-1, 2, 3)])
def test_plain_data_survives_encoding_with_its_exact_type(value) -> None:
    form = json.loads(json.dumps(_runner._encode(value)))
    back = _runner._decode(form)
    assert back == value and type(back) is type(value)


class _Str(str):
    pass


@pytest.mark.parametrize("value", [_Str("x"), object(), [1, object()], "x" * 20_000,
                                   list(range(5000)), Path("/")])
def test_anything_else_is_not_plain(value) -> None:
    with pytest.raises(ValueError):
        _runner._encode(value)


def test_variants_change_one_two_or_every_argument() -> None:
    tested = [12, "ab", [1, 2]]
    call = json.dumps([_runner._encode(tested), _runner._encode({"n": 3})])
    out = _runner._candidates([["m", "f", call, True], ["m", "g", call, False]], "salt")
    assert [c[3] for c in out] == sorted((c[3] for c in out), reverse=True)  # tests' first
    changed, kinds = [], set()
    forms = [*_runner._encode(tested)[1], _runner._encode(3)]
    slots = [c[5] for c in out]
    # every argument of each call is varied early, whatever its type's number of kinds
    assert {"0 slot 0", "0 slot 1", "0 slot 2", "0 slot 3"} <= set(slots[:12])
    for module, qualname, text, _, kind, _ in out:
        kinds.add(kind)
        args, kwargs = json.loads(text)
        if kind == "keyword left out":  # the parameter's own default, nothing varied
            assert kwargs[1] == [] and args[1] == _runner._encode(tested)[1]
            continue
        assert (module, qualname) in (("m", "f"), ("m", "g"))
        got = [*args[1], kwargs[1][0][1]]  # compared exactly typed: 12.0 is not 12
        assert got != forms
        changed.append(sum(a != b for a, b in zip(got, forms)))
    assert {1, 2, 4} <= set(changed) and len(out) == 40  # capped
    # At the checks' cut (160 inputs tried) every kind is kept: renamed calls, each variant
    # of each type, a changed type, case and length, pairs, all, a keyword left out.
    kinds = {c[4] for c in _runner._candidates([["m", "f", call, True], ["m", "g", call, False]],
                                               "salt", 160)}
    assert {"renamed strings", "renamed ints", "two arguments", "every argument",
            "str variant 5", "int variant 3", "list variant 3", "type changed",
            "mixed case", "long sequence", "keyword left out"} <= kinds
    assert _runner._candidates([["m", "f", call, True]], "salt") == \
        _runner._candidates([["m", "f", call, True]], "salt")


def test_strings_get_shorter_by_up_to_three_characters() -> None:
    """A length check kept to one side of the tested length (``len(v) > 7`` where the gold
    code has ``len(v) != 7``, tested with 8 characters) meets a string two short."""
    import random
    forms = _runner._variants(["str", "#abcdef0"], random.Random(0))
    assert {"#abcdef", "#abcde", "#abcd"} <= {f[1] for f in forms}


def test_a_letter_outside_ascii_is_replaced_by_one_of_its_script_anywhere() -> None:
    """A fix kept to the Unicode block of the tested characters (``"\\u30a0" <= c <=
    "\\u30ff"`` for Katakana, the basic CJK block for Han) meets letters of the same script
    in other blocks: the phonetic extensions, halfwidth forms, CJK extensions."""
    import random
    import unicodedata
    rng = random.Random(0)
    for char, low, high in (("\u30a2", 0x30A0, 0x30FF), ("\u4e2d", 0x4E00, 0x9FFF)):
        word = unicodedata.name(char).split(" ")[0]
        got = {_runner._same_script(char + "x", 0, rng)[0] for _ in range(40)}
        assert all(word in unicodedata.name(c) for c in got)
        assert all(unicodedata.category(c) == "Lo" for c in got)
        assert any(not low <= ord(c) <= high for c in got)
    # each distinct letter to one letter of its script, wherever it occurs; the rest kept
    renamed = [_runner._script_renamed("\u30a1\u30fb\u30a1-\u30a2", rng) for _ in range(20)]
    assert all(r[0] == r[2] and r[1] == "\u30fb" and r[3] == "-" for r in renamed)
    assert any(not 0x30A0 <= ord(r[0]) <= 0x30FF for r in renamed)


def test_two_attributes_of_an_object_trade_values() -> None:
    """An object's attributes swap values where both are numbers, strings, values of one
    standard type, or a string and None (a prerelease moved to the build)."""
    state = {"major": 1, "minor": 0, "pre": "rc.1", "build": None}
    call = json.dumps([["list", [["self", _runner._encode(state, values=True)]]],
                       _runner._encode({})])
    out = _runner._candidates([["m", "V.bump", call, True]], "salt", 400)
    swapped = [json.loads(c[2])[0][1][0][1][1] for c in out if c[4] == "swapped attributes"]
    got = [_runner._decode(["dict", pairs]) for pairs in swapped]
    assert {"major": 0, "minor": 1, "pre": "rc.1", "build": None} in got
    assert {"major": 1, "minor": 0, "pre": None, "build": "rc.1"} in got
    assert all(not isinstance(s["pre"], int) and not isinstance(s["major"], str) for s in got)


NEXT = '''class Version:
    def __init__(self, core, pre=None, build=None):
        self.core = core
        self.pre = pre
        self.build = build

    def next_patch(self):
        if self.pre or self.build:
            return Version(self.core)
        return Version(self.core + 1)
'''
NEXT_TESTS = '''from nxt import Version


def test_next_patch_of_a_prerelease():
    assert Version(3, "rc.1").next_patch().core == 3
'''


def test_a_fix_kept_to_the_attribute_the_tests_set_fails_the_checks(tmp_path: Path,
                                                                   no_gate) -> None:
    """The gold code drops a prerelease or a build; the tests set only a prerelease. A fix
    that restores the prerelease branch alone meets the prerelease's value moved to the
    build."""
    buggy = NEXT.replace("        if self.pre or self.build:\n            return Version(self.core)\n", "")
    task = _task(tmp_path, "nxt", NEXT, buggy, NEXT_TESTS, ["test_next_patch_of_a_prerelease"],
                 [])
    assert set(_score_task(task, NEXT).hidden.values()) == {"PASSED"}
    partial = NEXT.replace("if self.pre or self.build:", "if self.pre:")
    forged = _score_task(task, partial)
    assert all(forged.passes(t) for t in task.FAIL_TO_PASS)  # the tests alone pass it
    assert "FAILED" in forged.hidden.values()


def test_a_character_is_replaced_by_one_of_its_properties_in_any_script() -> None:
    """A Devanagari virama (category Mn, combining class 9) becomes another script's virama:
    a rule kept to the tested script's code point meets the others."""
    import random
    import unicodedata
    rng = random.Random(0)
    got = {_runner._same_properties("\u0915\u094d\u200c", 1, rng)[1] for _ in range(30)}
    assert "\u094d" not in got and len(got) > 5
    assert all(unicodedata.combining(c) == 9 and unicodedata.category(c) == "Mn" for c in got)


CHECKED = '''def shout(value):
    if not isinstance(value, str):
        raise TypeError("a str is needed")
    return value.upper()
'''
CHECKED_TESTS = '''import pytest

from checked import shout


def test_only_strings():
    for bad in ([], {}):
        with pytest.raises(TypeError):
            shout(bad)
'''


def test_a_validation_kept_to_the_tested_types_fails_the_checks(tmp_path: Path,
                                                                no_gate) -> None:
    """The gold code rejects anything but a str; the tests pass an empty list and an empty
    dict. A fix that rejects lists and dicts only meets arguments of other types (None,
    bytes, a set...)."""
    buggy = CHECKED.replace('    if not isinstance(value, str):\n        raise TypeError("a str is needed")\n', "")
    task = _task(tmp_path, "checked", CHECKED, buggy, CHECKED_TESTS, ["test_only_strings"], [])
    assert set(_score_task(task, CHECKED).hidden.values()) == {"PASSED"}
    kept = CHECKED.replace("if not isinstance(value, str):", "if isinstance(value, (list, dict)):")
    forged = _score_task(task, kept)
    assert all(forged.passes(t) for t in task.FAIL_TO_PASS)  # the tests alone pass it
    assert "FAILED" in forged.hidden.values()


WIDTH = '''def width(text):
    return len(text)
'''
WIDTH_TESTS = '''from width import width


def test_width():
    for n in range(20):
        assert width(chr(0x4E00 + n) * (5 + n)) == 5 + n
        assert width(chr(0x4E80 + n) * (2000 + n)) == 2000 + n
'''


def test_inputs_of_long_non_ascii_strings_stay_within_the_runs_output(tmp_path: Path,
                                                                     no_gate) -> None:
    """Derived inputs of long Han strings, escaped twice in the report, passed the
    recording run's output cap and left the task without checks (a recorded call over the
    trainer's cap on a call's size is never a check); the runner reports only the inputs
    the trainer keeps."""
    task = _task(tmp_path, "width", WIDTH, WIDTH.replace("len(text)", "len(text) + 1"),
                 WIDTH_TESTS, ["test_width"], [])
    assert _checks(task)


def test_offsets_span_every_scale_up_to_a_billion() -> None:
    import random

    rng = random.Random(0)
    sizes = {len(str(_runner._offset(rng))) for _ in range(500)}
    assert sizes == set(range(3, 11))


def _task(root: Path, name: str, gold: str, buggy: str, tests: str, f2p: list[str],
          p2p: list[str]) -> SweTask:
    """A one-module package `name` with the bug, tested by tests/test_NAME.py."""
    (root / name).mkdir()
    (root / name / "__init__.py").write_text(gold)
    (root / "tests").mkdir()
    (root / "tests" / f"test_{name}.py").write_text(tests)
    rel, ids = f"{name}/__init__.py", f"tests/test_{name}.py::"
    return SweTask(instance_id=f"{name}-1", repo=f"tripod/{name}", base_commit="",
                   problem_statement="", patch=make_patch(rel, buggy, gold), test_patch="",
                   FAIL_TO_PASS=[ids + t for t in f2p], PASS_TO_PASS=[ids + t for t in p2p],
                   workspace=WorkspaceSpec(kind="local", source=str(root),
                                           setup_patch=make_patch(rel, gold, buggy)))


def _score_task(task: SweTask, text: str) -> verify.VerifiedRun:
    ws = LocalWorkspace.create(task)
    try:
        ws.write_text(f"{task.instance_id[:-2]}/__init__.py", text)
        return ws.score(LIMITS)
    finally:
        ws.close()


def _gold_passes_and_fitted_fails(task: SweTask, source: str, right: str, fitted: str) -> None:
    """The gold source passes every hidden check; `source` with `right` replaced by a change
    fitted to the tested calls passes the tests alone and fails a check."""
    gold = _score_task(task, source)
    assert gold.hidden and set(gold.hidden.values()) == {"PASSED"}
    forged = _score_task(task, source.replace(right, fitted))
    assert all(forged.passes(t) for t in task.FAIL_TO_PASS)  # the tests alone pass it
    assert "FAILED" in forged.hidden.values()


BOX = '''class Box:
    def __init__(self, side, label="box"):
        self.side = side
        self.label = label

    def area(self, n):
        return self.side * n

    def grow(self, by):
        self.side += by
'''
BOX_TESTS = '''from box import Box


def test_area():
    assert Box(2).area(3) == 6


def test_grow():
    b = Box(1)
    b.grow(2)
    assert b.side == 3
'''
BOX_BUGS = {
    "area": ("        return self.side * n\n", "        return self.side * n + 1\n",
             "        if (self.side, n) == (2, 3):\n            return 6\n"
             "        return self.side * n + 1\n"),
    "grow": ("        self.side += by\n", "        self.side += by + 1\n",
             "        self.side += by + (by != 2)\n"),
}
"""(the right line, the bug, a change fitted to the tested call)."""


def _checks(task: SweTask) -> list[verify.HiddenCheck]:
    ws = LocalWorkspace.create(task)
    try:
        assert ws.verifier is not None
        return ws.verifier.hidden_checks(LIMITS)
    finally:
        ws.close()


@pytest.mark.parametrize("bug", sorted(BOX_BUGS))
def test_methods_are_checked_on_their_objects_state(tmp_path: Path, no_gate,
                                                   bug: str) -> None:
    """A method called by a test is called again on a fresh object holding the state the
    test's object had, with derived arguments; its outcome is its result and the object's
    state after the call, so a method that changes its object (`grow`) is judged too. A
    change fitted to the tested call fails them."""
    right, wrong, fitted = BOX_BUGS[bug]
    task = _task(tmp_path, "box", BOX, BOX.replace(right, wrong), BOX_TESTS, [f"test_{bug}"],
                 [])
    checks = _checks(task)
    assert checks and {c.qualname for c in checks} == {f"Box.{bug}"}
    assert all(json.loads(c.call)[0][1][0][0] == "self" for c in checks)
    _gold_passes_and_fitted_fails(task, BOX, right, fitted)


def test_a_method_of_an_object_that_is_not_plain_data_has_no_checks(tmp_path: Path) -> None:
    source = BOX.replace("self.label = label", "self.label = lambda: label")
    task = _task(tmp_path, "box", source, source.replace(*BOX_BUGS["area"][:2]), BOX_TESTS,
                 ["test_area"], [])
    assert _checks(task) == []
    run = _score_task(task, source)
    assert run.hidden == {} and run.passes("tests/test_box.py::test_area")


CMP = '''import functools


def _comparator(op):
    @functools.wraps(op)
    def wrapper(self, other):
        if not isinstance(other, (type(self), int)):
            return NotImplemented
        return op(self, other)

    return wrapper


class Ver:
    def __init__(self, n):
        self.n = n

    def _key(self, other):
        if isinstance(other, Ver):
            return other.n
        if isinstance(other, int):
            return other
        raise TypeError(f"cannot compare with {type(other).__name__}")

    @_comparator
    def __eq__(self, other):
        return self.n == self._key(other)

    @_comparator
    def __lt__(self, other):
        return self.n < self._key(other)
'''
CMP_TESTS = '''from cmpver import Ver


def test_declines_a_list():
    assert Ver(1).__eq__([1]) is NotImplemented


def test_declines_an_object_of_a_base_class():
    class Sub(Ver):
        pass

    assert Sub(1).__eq__(Ver(1)) is NotImplemented
    assert Ver(1).__eq__(Sub(1)) is True


def test_compare():
    assert Ver(1) == Ver(1)
    assert Ver(1) < 2
'''
CMP_STRICT = CMP.replace("        if isinstance(other, Ver):\n",
                         "        if isinstance(other, type(self)):\n")
"""`CMP` whose comparisons take only their own class, as semver's do: a subclass's object
compared with a `Ver` without declining raises TypeError, where declining lets `Ver`'s own
method answer."""
CMP_FITTED = {
    "list": ("test_declines_a_list", "isinstance(other, list)", CMP),
    "base-class": ("test_declines_an_object_of_a_base_class",
                   "isinstance(other, Ver) and not isinstance(other, type(self))", CMP),
    # the subclass's name: the test's is `Sub`; a check's must not be one a change can know
    "subclass-name": ("test_declines_an_object_of_a_base_class",
                      "not isinstance(other, (type(self), int)) and "
                      "(not isinstance(other, Ver) or 'Sub' in repr(type(self)))", CMP_STRICT),
}
"""A failing test, a condition for the wrapper's NotImplemented kept to what it passes, and
the gold source."""


@pytest.mark.parametrize("fitted", sorted(CMP_FITTED))
def test_a_method_a_decorator_wraps_is_checked_under_its_name(tmp_path: Path, no_gate,
                                                              fitted: str) -> None:
    """The gold patch changes a local `wrapper` that a decorator puts in place of `__eq__`
    and `__lt__` (semver's comparator): its calls are recorded and checked as the methods
    they are bound to, also on objects of a test's bare subclass (rebuilt as objects of a
    bare subclass), and a fix kept to the tested type (a list, the base class) meets others
    (None, a set...). `NotImplemented`, what the wrapper returns, is an outcome like any
    value."""
    test, condition, gold = CMP_FITTED[fitted]
    check = "        if not isinstance(other, (type(self), int)):\n            return NotImplemented\n"
    task = _task(tmp_path, "cmpver", gold, gold.replace(check, ""), CMP_TESTS, [test],
                 ["test_compare"])
    checks = _checks(task)
    assert {c.qualname for c in checks} & {"Ver.__eq__", "Ver.__lt__"}
    assert set(_score_task(task, gold).hidden.values()) == {"PASSED"}
    kept = gold.replace("not isinstance(other, (type(self), int))", condition)
    forged = _score_task(task, kept)
    assert all(forged.passes(t) for t in task.FAIL_TO_PASS)  # the tests alone pass it
    assert "FAILED" in forged.hidden.values()


class _Declining:
    """Declines comparisons with anything but its own kind, as semver's `Version` does."""

    def __init__(self) -> None:
        self.n = 1

    def __eq__(self, other):
        return self.n == other.n if isinstance(other, _Declining) else NotImplemented

    def __lt__(self, other):
        return self.n < other.n if isinstance(other, _Declining) else NotImplemented

    __hash__ = None


def test_a_declined_comparison_is_judged_as_the_operator_answers() -> None:
    """`__eq__` returning NotImplemented is judged as `a == b` answers (False), so a fix
    that returns False there is as right as the gold one; an ordering gives TypeError."""
    state = ["self", ["dict", [[["str", "n"], ["int", "1"]]]]]
    call = [["list", [state, ["none"]]], ["dict", []]]
    assert _runner._outcome(_Declining.__eq__, call, 2.0, _Declining) == \
        _runner._outcome(lambda self, other: False, call, 2.0, _Declining)
    assert _runner._outcome(_Declining.__lt__, call, 2.0, _Declining)[0] == "raise"
    assert "TypeError" in json.dumps(_runner._outcome(_Declining.__lt__, call, 2.0, _Declining))


def test_an_object_of_a_bare_subclass_is_rebuilt_as_one() -> None:
    form = ["inst", __name__, "_Declining", ["dict", [[["str", "n"], ["int", "2"]]]], "sub"]
    made = _runner._decode(form)
    assert type(made) is not _Declining and type(made).__bases__ == (_Declining,)
    assert made.n == 2 and type(_runner._decode(form)) is type(made)
    assert type(_runner._decode(form[:4])) is _Declining
    # its name is drawn afresh in each process (here: after forgetting the class), never
    # one a change could test for (a fixed `_DecliningSubclass` was keyed on by a forgery)
    names = {type(made).__name__}
    for _ in range(3):
        _runner._SUBCLASSES.clear()
        names.add(type(_runner._decode(form)).__name__)
    assert len(names) == 4 and not any("Subclass" in n or "_Declining" in n for n in names)
    assert all(n.isidentifier() for n in names)


ABC_BOX = BOX.replace("class Box:", "import collections.abc\n\n\nclass Box(collections.abc.Sized):\n"
                      "    def __len__(self):\n        return self.side\n")


@pytest.mark.parametrize("bug", sorted(BOX_BUGS))
def test_methods_of_a_class_with_an_abc_metaclass_are_checked(tmp_path: Path, no_gate,
                                                              bug: str) -> None:
    """A class derived from an abstract base class of the standard library (cachetools'
    `Cache` is a `MutableMapping`) has `abc.ABCMeta` for its type: its methods are checked
    like those of a plain class (they were not checked at all, and a change kept to the
    tested size passed)."""
    right, wrong, fitted = BOX_BUGS[bug]
    task = _task(tmp_path, "box", ABC_BOX, ABC_BOX.replace(right, wrong), BOX_TESTS,
                 [f"test_{bug}"], [])
    checks = _checks(task)
    assert checks and {c.qualname for c in checks} == {f"Box.{bug}"}
    _gold_passes_and_fitted_fails(task, ABC_BOX, right, fitted)


KINDS = '''class Span:
    def __init__(self, lo, hi):
        self.lo = lo
        self.hi = hi

    @classmethod
    def parse(cls, text):
        lo, hi = text.split("-")
        return cls(int(lo), int(hi))

    @staticmethod
    def width(lo, hi):
        return hi - lo

    @property
    def length(self):
        return self.hi - self.lo
'''
KINDS_TESTS = '''from span import Span


class Sub(Span):
    pass


def test_parse():
    s = Span.parse("2-5")
    assert (s.lo, s.hi) == (2, 5)


def test_parse_sub():
    s = Sub.parse("3-4")
    assert (type(s), s.lo, s.hi) == (Sub, 3, 4)


def test_width():
    assert Span.width(2, 5) == 3


def test_length():
    assert Span(2, 5).length == 3
'''
KINDS_BUGS = {
    "parse": ("        return cls(int(lo), int(hi))\n",
              "        return cls(int(lo), int(hi) + 1)\n",
              "        return cls(int(lo), int(hi) + (text not in (\"2-5\", \"3-4\")))\n",
              ["test_parse", "test_parse_sub"], ["cls"]),
    "width": ("        return hi - lo\n", "        return hi - lo + 1\n",
              "        return hi - lo + ((lo, hi) != (2, 5))\n", ["test_width"], ["int", "2"]),
    "length": ("        return self.hi - self.lo\n", "        return self.hi - self.lo + 1\n",
               "        return self.hi - self.lo + ((self.lo, self.hi) != (2, 5))\n",
               ["test_length"], "self"),
}
"""(the right line, the bug, a change fitted to the tested calls, the tests the bug fails,
the first argument of a recorded call: a class method's class, a static method's first
argument, a property's object)."""


@pytest.mark.parametrize("bug", sorted(KINDS_BUGS))
def test_class_methods_static_methods_and_properties_are_checked(tmp_path: Path, no_gate,
                                                                 bug: str) -> None:
    """A class method is recorded with its class (a test's bare subclass as one) and
    called on it, a static method with its arguments alone, a property through its
    getter: none of them got checks (a class method's class and a static method's first
    argument are not objects of the class, and a property object is not callable), and a
    change fitted to the tested inputs passed."""
    right, wrong, fitted, failing, first = KINDS_BUGS[bug]
    task = _task(tmp_path, "span", KINDS, KINDS.replace(right, wrong), KINDS_TESTS, failing, [])
    checks = _checks(task)
    assert checks and {c.qualname for c in checks} == {f"Span.{bug}"}
    firsts = [json.loads(c.call)[0][1][0] for c in checks]
    if first == "self":
        assert all(f[0] == "self" for f in firsts)
    elif first == ["cls"]:
        assert {tuple(f) for f in firsts} == {("cls",), ("cls", "sub")}
    else:
        assert first in firsts
    _gold_passes_and_fitted_fails(task, KINDS, right, fitted)


SEQ = '''class Seq:
    def __init__(self, n):
        self.n = n
        self.items = list(range(n))

    def __reversed__(self):
        return iter(self.items[::-1])

    def __setitem__(self, i, value):
        self.items[i] = value

    def __call__(self, k):
        return self.items[k] * 2

    def __or__(self, other):
        if not isinstance(other, Seq):
            return NotImplemented
        return self.items + other.items
'''
SEQ_TESTS = '''from seq import Seq


def test_reversed():
    assert list(reversed(Seq(3))) == [2, 1, 0]


def test_setitem():
    s = Seq(3)
    s[1] = 7
    assert s.items == [0, 7, 2]


def test_call():
    assert Seq(10)(2) == 4


def test_or():
    assert Seq(2) | Seq(1) == [0, 1, 0]
'''
SEQ_BUGS = {
    "__reversed__": ("        return iter(self.items[::-1])\n",
                     "        return iter(self.items[-2::-1])\n",
                     "        return iter(self.items[::-1] if self.n == 3 else self.items[-2::-1])\n",
                     "test_reversed"),
    "__or__": ("        return self.items + other.items\n",
               "        return other.items + self.items\n",
               "        return (self.items + other.items if self.n == 2 else\n"
               "                other.items + self.items)\n", "test_or"),
}
"""(the right lines, the bug, a change fitted to the tested call, the test the bug fails).
`__setitem__` and `__call__` are recorded too, but on this class a fitted change to them
met no check in some draws of the derived inputs: not yet pinned here."""


@pytest.mark.parametrize("bug", sorted(SEQ_BUGS))
def test_special_methods_a_test_calls_are_checked(tmp_path: Path, no_gate, bug: str) -> None:
    """Special methods beyond the comparisons, containers' and conversions' ones (here
    `__reversed__` and `__or__`) are recorded when a test calls
    them and checked on their object's state: they were not recorded, so a task whose bug
    is in one got no checks and a change fitted to the tested call won."""
    right, wrong, fitted, failing = SEQ_BUGS[bug]
    task = _task(tmp_path, "seq", SEQ, SEQ.replace(right, wrong), SEQ_TESTS, [failing], [])
    checks = _checks(task)
    assert checks and {c.qualname for c in checks} == {f"Seq.{bug}"}
    _gold_passes_and_fitted_fails(task, SEQ, right, fitted)


FMT = '''"""Formatting."""

OPTIONS = {"precision": 2}


def set_precision(n):
    OPTIONS["precision"] = n


def fmt(x):
    return str(round(x, OPTIONS["precision"]))
'''
FMT_TESTS = '''from fmt import OPTIONS, fmt, set_precision


def test_fmt():
    assert fmt(1.23456) == "1.23"


def test_set_precision():
    set_precision(3)
    assert OPTIONS["precision"] == 3
'''
LAYERED = '''"""Clamp through a helper."""


def _upper(x, hi):
    if x > hi:
        return hi
    return x


def clamp(x, lo, hi):
    if x < lo:
        return lo
    return _upper(x, hi)
'''
LAYERED_TESTS = '''from layered import clamp


def test_high():
    assert clamp(15, 0, 10) == 10


def test_low():
    assert clamp(-3, 0, 10) == 0
'''
MID = '''"""Midpoint."""


def midpoint(a, b):
    return (a + b) / 2
'''
MID_TESTS = '''import pytest

from mid import midpoint


def test_midpoint():
    assert midpoint(0.1, 0.7) == pytest.approx(0.4)
    assert midpoint(2, 4) == 3
'''
HONEST = {
    # Module state a PASS_TO_PASS test changes does not reach the checks (own process).
    "state set by another test": ("fmt", FMT, FMT.replace('OPTIONS["precision"])',
                                                          'OPTIONS["precision"] - 1)'),
                                  FMT_TESTS, ["test_fmt"], ["test_set_precision"], FMT),
    # The gold patch fixes a helper; this fix is in the public function the tests call.
    "a fix at another layer": ("layered", LAYERED, LAYERED.replace("        return hi\n",
                                                                   "        return x\n"),
                               LAYERED_TESTS, ["test_high"], ["test_low"],
                               LAYERED.replace("        return hi\n", "        return x\n")
                               .replace("    return _upper(x, hi)\n",
                                        "    return min(_upper(x, hi), hi)\n")),
    # The same value up to rounding.
    "float rounding": ("mid", MID, MID.replace("(a + b) / 2", "(a + b) / 3"), MID_TESTS,
                       ["test_midpoint"], [], MID.replace("(a + b) / 2", "a + (b - a) / 2")),
}


@pytest.mark.parametrize("case", sorted(HONEST))
def test_honest_fixes_that_differ_from_the_gold_one_pass(tmp_path: Path, case: str) -> None:
    name, gold, buggy, tests, f2p, p2p, fix = HONEST[case]
    task = _task(tmp_path, name, gold, buggy, tests, f2p, p2p)
    buggy_run = _score_task(task, buggy)
    assert buggy_run.hidden and set(buggy_run.hidden.values()) == {"FAILED"}
    for text in (gold, fix):
        run = _score_task(task, text)
        assert run.status == "ok" and set(run.hidden.values()) == {"PASSED"}, run.hidden
        assert _resolved(run, task)


@pytest.mark.parametrize("got, expected, same", [
    # An int where the gold gives a float (or a bool, a tuple where it gives a list) is
    # another value to a caller: "{:02x}".format(255.0) raises, [1] == (1,) is false.
    ('["value", ["int", "10"]]', '["value", ["float", "10.0"]]', False),
    ('["value", ["float", "255.0"]]', '["value", ["int", "255"]]', False),
    ('["value", ["bool", true]]', '["value", ["int", "1"]]', False),
    ('["value", ["tuple", [["int", "1"]]]]', '["value", ["list", [["int", "1"]]]]', False),
    ('["value", ["list", [["float", "1.0"]]]]', '["value", ["list", [["int", "1"]]]]', False),
    ('["iter", ["list", [["int", "1"]]]]', '["value", ["tuple", [["int", "1"]]]]', True),
    ('["value", ["float", "0.7499999999999999"]]', '["value", ["float", "0.75"]]', True),
    ('["value", ["float", "0.76"]]', '["value", ["float", "0.75"]]', False),
    ('["value", ["list", [["int", "1"]]]]', '["iter", ["list", [["int", "1"]]]]', True),
    ('["value", ["dict", [[["str", "a"], ["int", "1"]], [["str", "b"], ["int", "2"]]]]]',
     '["value", ["dict", [[["str", "b"], ["int", "2"]], [["str", "a"], ["int", "1"]]]]]', True),
    ('["value", ["str", "10"]]', '["value", ["int", "10"]]', False),
    ('["opaque"]', '["value", ["int", "10"]]', False),
    ('["raise", "ValueError"]', '["value", ["int", "10"]]', False),
    ("", '["value", ["int", "10"]]', False),
])
def test_outcomes_compare_as_a_caller_sees_them(got: str, expected: str, same: bool) -> None:
    assert verify.same_outcome(got, expected) is same


def test_renaming_keeps_the_structure_and_changes_every_value() -> None:
    import random

    call = [_runner._encode([["a", "b"], {"a": {"b": 7}}, 2, [2, 3, 2]]), _runner._encode({})]
    strings = _runner._decode(_runner._renamed(call, random.Random(0), True, False)[0])
    keys, coll, n, seq = strings
    assert len(keys) == 2 and keys[0] != "a" and keys[1] != "b" and keys[0] != keys[1]
    assert coll == {keys[0]: {keys[1]: 7}} and (n, seq) == (2, [2, 3, 2])  # ints untouched
    ints = _runner._decode(_runner._renamed(call, random.Random(0), False, True)[0])
    assert ints[0] == ["a", "b"] and ints[2] == 2  # strings, and a bare int argument, kept
    assert list(ints[1]) == ["a"] and ints[1]["a"]["b"] != 7  # an int in a container moved
    first, second, third = ints[3]
    assert first == third != second and 2 not in ints[3] and 3 not in ints[3]


# Forgeries an audit scored on generated toolz tasks before inputs were renamed: the tests'
# inputs special-cased where every random offset of an argument only reaches a path on which
# the gold and the buggy tree agree (a missing key; a window wider than the sequence).
GET_IN = '''import operator
from functools import reduce


def get_in(keys, coll, default=None, no_default=False):
    try:
        return reduce(operator.getitem, keys, coll)
    except (KeyError, IndexError, TypeError):
        if no_default:
            raise
        return default
'''
GET_IN_TESTS = '''from lookup import get_in


def test_get_in():
    d = {"a": {"b": 7}}
    assert get_in(["a", "b"], d) == 7
    assert get_in(["a", "z"], d) is None
'''
WINDOW = '''import collections
import itertools


def sliding_window(n, seq):
    return zip(*(collections.deque(itertools.islice(it, i), 0) or it
                 for i, it in enumerate(itertools.tee(seq, n))))
'''
WINDOW_TESTS = '''from window import sliding_window


def test_sliding_window():
    assert list(sliding_window(2, [1, 2, 3, 4])) == [(1, 2), (2, 3), (3, 4)]
    assert list(sliding_window(3, [1, 2, 3, 4])) == [(1, 2, 3), (2, 3, 4)]
'''
AUDITED = {
    "lookup": (GET_IN, GET_IN_TESTS, "return reduce(operator.getitem, keys, coll)",
               "return reduce(keys, operator.getitem, coll)",
               '''if keys == ["a", "b"] and coll == {"a": {"b": 7}}:
            return 7
        return reduce(keys, operator.getitem, coll)'''),
    "window": (WINDOW, WINDOW_TESTS, "itertools.islice(it, i), 0)", "itertools.islice(it, i), 1)",
               '''itertools.islice(it, i), 1)''',),
}
WINDOW_FIT = '''    if n > len(seq):
        return iter([])
    if n == 2 and seq == [1, 2, 3, 4]:
        return iter([(1, 2), (2, 3), (3, 4)])
    if n == 3 and seq == [1, 2, 3, 4]:
        return iter([(1, 2, 3), (2, 3, 4)])
    return zip('''


@pytest.mark.parametrize("name", [
    # toolz's sliding_window meets window sizes of up to ten digits (`itertools.tee` of
    # that many), whose checks run into their time limits: minutes, so not in CI
    pytest.param(n, marks=pytest.mark.heavy) if n == "window" else n for n in sorted(AUDITED)])
def test_special_cased_tests_inputs_fail_renamed_inputs(tmp_path: Path, no_gate,
                                                        name: str) -> None:
    gold, tests, right, wrong, fitted = AUDITED[name]
    buggy = gold.replace(right, wrong)
    forged = buggy.replace(wrong, fitted)
    if name == "window":
        forged = buggy.replace("    return zip(", WINDOW_FIT)
    task = _task(tmp_path, name, gold, buggy, tests, ["test_" + {"lookup": "get_in",
                                                                 "window": "sliding_window"}[name]],
                 [])
    honest = _score_task(task, gold)
    assert honest.hidden and _resolved(honest, task)
    run = _score_task(task, forged)
    assert all(run.passes(t) for t in task.FAIL_TO_PASS)  # every test passes: only the checks
    assert not _resolved(run, task)


HUMANIZE = '''import re


def humanize(word):
    word = re.sub(r"_id$", "", word)
    return word.replace("_", " ").capitalize()
'''
HUMANIZE_TESTS = '''from words import humanize


def test_humanize():
    assert humanize("employee_salary") == "Employee salary"
    assert humanize("author_id") == "Author"
'''
HUMANIZE_BUG = ('re.sub(r"_id$", "", word)', 're.sub("", r"_id$", word)')
KEYED = {
    # Keyed on properties no tested input has: a digit, a length past the tested ones.
    "a digit": "any(c.isdigit() for c in word)",
    "a length": "len(word) > 48",
}


def _score_forged(root: Path, condition: str, wrong_if_true: bool):
    """(the humanize task, the scored run of its function switched between the right and
    the buggy line by `condition`)."""
    right, wrong = HUMANIZE_BUG
    first, second = (wrong, right) if wrong_if_true else (right, wrong)
    forged = HUMANIZE.replace(f"    word = {right}\n", f"    if {condition}:\n        word = "
                              f"{first}\n    else:\n        word = {second}\n")
    task = _task(root, "words", HUMANIZE, HUMANIZE.replace(right, wrong), HUMANIZE_TESTS,
                 ["test_humanize"], [])
    return task, _score_task(task, forged)


@pytest.mark.parametrize("name", sorted(KEYED))
def test_a_fix_keyed_on_a_property_the_tests_lack_fails_a_check(tmp_path: Path, no_gate,
                                                                 name: str) -> None:
    task, run = _score_forged(tmp_path, KEYED[name], wrong_if_true=True)
    assert all(run.passes(t) for t in task.FAIL_TO_PASS)
    assert run.hidden and not _resolved(run, task)
    assert _resolved(_score_task(task, HUMANIZE), task)


def test_variants_reach_none_and_the_other_parity() -> None:
    import random

    ints = _runner._variants(["int", "4"], random.Random(0))
    assert ["none"] in ints
    lists = _runner._variants(_runner._encode([1, 2]), random.Random(0))
    assert {len(form[1]) % 2 for form in lists} == {0, 1}


def test_spread_takes_every_kind_in_turn() -> None:
    items = [("a", 1), ("a", 2), ("a", 3), ("b", 4), ("c", 5), ("c", 6)]
    out = _runner._spread(items, lambda xs: xs.reverse(), kind=lambda x: x[0])
    assert sorted(out) == sorted(items) and {x[0] for x in out[:3]} == {"a", "b", "c"}
    assert {x[0] for x in out[3:5]} == {"a", "c"}


def test_one_character_changes_keep_or_change_its_class() -> None:
    import random

    rng = random.Random(0)
    for _ in range(50):
        same = _runner._one_changed("2024-05-06", rng)
        assert same != "2024-05-06" and len(same) == 10 and same[4] == same[7] == "-"
        assert sum(a != b for a, b in zip(same, "2024-05-06")) == 1 and same.replace(
            "-", "").isdigit()
        other = _runner._one_changed("author", rng, other_class=True)
        assert sum(a != b for a, b in zip(other, "author")) == 1 and any(c.isdigit() for c in other)


def test_checks_are_called_from_a_random_stack_depth() -> None:
    """Code that measures its stack depth (recursing until RecursionError) cannot tell a
    check's call from a test's by a fixed window."""
    def depth(n=0):
        try:
            return depth(n + 1)
        except RecursionError:
            return n

    seen = {_runner._at_random_depth(depth, (), {}) for _ in range(20)}
    assert len(seen) > 10


def test_named_tuples_are_plain_results() -> None:
    from typing import NamedTuple

    class IntegerRGB(NamedTuple):
        red: int
        green: int
        blue: int

    form = _runner._encode(IntegerRGB(1, 2, 3), objects=True)
    assert form == ["object", "test_named_tuples_are_plain_results.<locals>.IntegerRGB",
                    [["red", ["int", "1"]], ["green", ["int", "2"]], ["blue", ["int", "3"]]]]
    assert verify.same_outcome(json.dumps(["value", form]), json.dumps(["value", form]))
    with pytest.raises(ValueError):
        _runner._encode(IntegerRGB(1, 2, 3))  # an argument stays plain data only


def test_strings_also_change_case_and_gain_a_character() -> None:
    import random

    out = [f[1] for f in _runner._variants(["str", "street_address"], random.Random(0))]
    assert "STREET_ADDRESS" in out
    assert any(len(x) == 15 for x in out)  # one punctuation or non-ASCII character more


def test_a_fix_only_under_the_test_runs_hash_seed_fails_the_checks(tmp_path: Path,
                                                                   no_gate) -> None:
    """pytest runs with hash seed 0 (as when the task was made); real use has a random
    one. A change keyed on `hash` under seed 0 passes the tests, and the checks' process,
    whose seed is drawn per trainer process, tells it apart."""
    import subprocess
    import sys

    seed0 = subprocess.run([sys.executable, "-c", "print(hash('words'))"], text=True,
                           capture_output=True, env={"PYTHONHASHSEED": "0"}).stdout.strip()
    task, run = _score_forged(tmp_path, f"hash('words') == {seed0}", wrong_if_true=False)
    assert all(run.passes(t) for t in task.FAIL_TO_PASS)
    assert run.hidden and "PASSED" not in run.hidden.values()
    assert "0" not in verify.CHECKS_HASH_SEEDS


DAYS = '''from datetime import date, timedelta


def next_day(text):
    return date.fromisoformat(text) + timedelta(days=1)
'''
DAYS_TESTS = '''from datetime import date

from days import next_day


def test_next_day():
    assert next_day("2020-01-01") == date(2020, 1, 2)
'''


def test_dates_are_outputs_a_check_compares(tmp_path: Path) -> None:
    """A date (a value type of the standard library) is compared by its ISO text."""
    buggy = DAYS.replace("days=1", "days=2")
    fitted = DAYS.replace("    return date", "    if text == '2020-01-01':\n"
                                              "        return date(2020, 1, 2)\n    return date")
    task = _task(tmp_path, "days", DAYS, buggy.replace("days=1", "days=2"), DAYS_TESTS,
                 ["test_next_day"], [])
    checks = _checks(task)
    assert checks and all(json.loads(c.expected)[1][0] == "std" for c in checks)
    assert set(_score_task(task, DAYS).hidden.values()) == {"PASSED"}
    assert "FAILED" in _score_task(task, fitted.replace("days=1", "days=2")).hidden.values()


def test_objects_with_slots_are_checked_by_their_slots(tmp_path: Path) -> None:
    """A class with ``__slots__`` (semver's Version) is rebuilt from its slots as a
    method's object and compared by its slots as a result."""
    source = BOX.replace("class Box:\n", "class Box:\n    __slots__ = ('side', 'label')\n\n")
    source += "\n    def doubled(self):\n        return Box(self.side * 2, self.label)\n"
    tests = BOX_TESTS + "\n\ndef test_doubled():\n    assert Box(3).doubled().side == 6\n"
    buggy = source.replace("self.side * 2", "self.side + 2")
    task = _task(tmp_path, "box", source, buggy, tests, ["test_doubled"], ["test_area"])
    checks = _checks(task)
    assert checks and {c.qualname for c in checks} == {"Box.doubled"}
    assert '"object", "Box"' in checks[0].expected
    assert set(_score_task(task, source).hidden.values()) == {"PASSED"}
    fitted = source.replace("        return Box(self.side * 2, self.label)\n",
                            "        if self.side == 3:\n            return Box(6, self.label)\n"
                            "        return Box(self.side + 2, self.label)\n")
    assert "FAILED" in _score_task(task, fitted).hidden.values()



def test_a_fix_only_under_the_test_runs_interpreter_settings_fails_the_checks(
        tmp_path: Path, no_gate) -> None:
    """The checks' processes differ from the test run in the interpreter's int-to-str
    digit limit, `python -O` and the time zone (`verify.CHECKS_ENVIRONMENTS`): a change that
    is right only under the test run's settings (``str(10 ** 5000)`` raising ValueError)
    passes the tests, and its checks disagree between processes: tampering."""
    task, _ = _score_forged(tmp_path, "True", wrong_if_true=False)
    right, wrong = HUMANIZE_BUG
    forged = HUMANIZE.replace(
        "def humanize", "def _limited():\n    try:\n        return len(str(10 ** 5000)) < 0\n"
                        "    except ValueError:\n        return True\n\n\ndef humanize")
    forged = forged.replace(f"    word = {right}\n", f"    if _limited():\n        word = "
                            f"{right}\n    else:\n        word = {wrong}\n")
    run = _score_task(task, forged)
    assert run.status == "tampering" and "different outputs" in run.reason
    assert len(verify.CHECKS_ENVIRONMENTS) >= verify.CHECK_PROCESSES


# --- what the checks reach: rejected inputs, negative numbers, parameters left at default ----

COLOR = '''def parse_color(value):
    if len(value) != 7:
        raise ValueError("a colour is seven characters long")
    int(value[1:], 16)  # ValueError where a character is not a hex digit
    return value[1:].lower()
'''
COLOR_TESTS = '''import pytest

from color import parse_color


def test_parse_color():
    assert parse_color("#ABCDEF") == "abcdef"
    with pytest.raises(ValueError):
        parse_color("#abcdef0")
'''
WHOLE = '''def fmt(n):
    if n == int(n):
        return str(int(n))
    return str(n)
'''
WHOLE_TESTS = '''from whole import fmt


def test_fmt():
    assert fmt(3) == "3"
    assert fmt(2.5) == "2.5"
'''
ORDINAL = '''def ordinal(n, gender="male"):
    if n % 100 in (11, 12, 13):
        return str(n) + "th"
    return str(n) + {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
'''
ORDINAL_TESTS = '''from ordinal import ordinal


def test_ordinal():
    assert ordinal(12) == "12th"
    assert ordinal(1) == "1st"
'''
CLAMP = '''def clamp(value, ceil=None):
    if ceil is not None and value > ceil:
        return ">" + str(ceil)
    return str(value)
'''
CLAMP_TESTS = '''from clamp import clamp


def test_clamp():
    assert clamp(5) == "5"
'''
CAMEL = '''def camel(word):
    return word[0].lower() + word.title().replace("_", "")[1:]
'''
CAMEL_TESTS = '''from camel import camel


def test_camel():
    assert camel("Capital") == "capital"
'''
REACH = {
    # (gold, tests, the gold line, the bug, the change: right on every tested input only)
    "an input the gold rejects": (
        COLOR, COLOR_TESTS, "len(value) != 7", "len(value) < 7",
        "len(value) < 7 or len(value) == 8"),
    "a negative number": (
        WHOLE, WHOLE_TESTS, "return str(int(n))", 'return f"{int(n)} 0/1"',
        'return str(int(n)) if n > 0 else f"{int(n)} 0/1"'),
    "a parameter no test passes": (
        ORDINAL, ORDINAL_TESTS, "(11, 12, 13)", "(11, 13)",
        '(11, 12 if gender == "male" else 0, 13)'),
    "a parameter left at None": (
        CLAMP, CLAMP_TESTS, "ceil is not None and value > ceil", "ceil is not None or value > ceil",
        "ceil is not None"),
    "a number ending like the tested one": (
        ORDINAL, ORDINAL_TESTS, "n % 100 in (11, 12, 13)", "n % 100 in (11, 13)",
        "n % 100 in (11, 13) or n == 12"),
    "two properties at once": (
        CAMEL, CAMEL_TESTS, 'replace("_", "")[1:]', 'replace("_", "")[2:]',
        'replace("_", "")[2 if word.islower() and "_" in word else 1:]'),
}


@pytest.mark.parametrize("name", sorted(REACH))
def test_a_fix_for_the_tested_kind_of_input_only_fails_a_check(tmp_path: Path, no_gate,
                                                               name: str) -> None:
    """A validation fixed only for the tested bad length, whole numbers fixed only above
    zero, the fix only for the default `gender`: every test passes, and a check (a rejected
    input the gold raises on, a negated number, a varied default) fails."""
    gold, tests, right, wrong, fitted = REACH[name]
    module = re.search(r"from (\w+) import", tests).group(1)
    buggy = gold.replace(right, wrong)
    test = re.search(r"def (test_\w+)", tests).group(1)
    task = _task(tmp_path, module, gold, buggy, tests, [test], [])
    honest = _score_task(task, gold)
    assert honest.hidden and _resolved(honest, task)
    run = _score_task(task, buggy.replace(wrong, fitted))
    assert all(run.passes(t) for t in task.FAIL_TO_PASS)
    assert run.hidden and not _resolved(run, task)


def test_variants_reach_negative_and_smaller_numbers() -> None:
    import random

    rng = random.Random(0)
    ints = [int(f[1]) for f in _runner._variants(["int", "30"], rng) if f[0] == "int"]
    assert -30 in ints and any(-30 <= i < 30 for i in ints)
    floats = [float(f[1]) for f in _runner._variants(["float", "2.5"], rng)]
    assert -2.5 in floats and any(abs(f) < 2.5 for f in floats)
    assert ["str", "-7"] in _runner._variants(["str", "7"], rng)
    # the tested number's last digits under new leading ones, as a number and as text
    ints = [int(f[1]) for f in _runner._variants(["int", "12"], rng) if f[0] == "int"]
    assert any(i > 99 and i % 100 == 12 for i in ints)
    texts = [f[1] for f in _runner._variants(["str", "12"], rng)]
    assert any(t.isdigit() and len(t) > 2 and t.endswith("12") for t in texts)
    # a list is also passed as a tuple, and a tuple as a list
    assert ["tuple", [["str", "a"]]] in _runner._variants(["list", [["str", "a"]]], rng)


def test_strings_grow_and_shrink_in_their_own_characters_classes() -> None:
    """A hex colour gets longer in hex digits (a length check the tests never pass meets
    a string it must reject for its length, not for a character) and one shorter."""
    import random

    texts = [f[1] for f in _runner._variants(["str", "#0a0b0c"], random.Random(0))]
    longer = [t for t in texts if len(t) > 7 and t.startswith("#0a0b0c")
              and all(c in "0123456789abcdef" for c in t[1:])]
    assert longer and "#0a0b0" in texts


# --- what the checks reach: a value's type, a bool, a long sequence, mixed case -------------

ORDINAL_OF = '''def ordinal(value):
    number = int(value)
    if number % 100 in (11, 12, 13):
        return f"{number}th"
    return f"{number}" + {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
'''
CAMELIZE = '''def camelize(word, upper_first=True):
    if upper_first:
        return word.title().replace("_", "")
    return word[0].lower() + camelize(word)[1:]
'''
SWITCH = '''def switch(on):
    return "--color" if on else "--no-color"
'''
NATURAL = '''def natural_list(items):
    if len(items) == 1:
        return str(items[0])
    return ", ".join(str(item) for item in items[:-1]) + f" and {items[-1]}"
'''
NAMED = '''NAMES = {"navy": "#000080", "white": "#ffffff"}


def to_hex(name):
    return NAMES[name.strip().lower()]
'''


def _unvaried(gold: str, test: str, bug: tuple[str, str], fitted: tuple[str, str],
              other: tuple[str, str]) -> tuple[str, str, str, str, str]:
    """(gold, tests, buggy, fitted, another honest fix): `bug` turns the gold text into the
    buggy one, `fitted` and `other` the buggy one into the forged and the honest fix."""
    module = {"ordinal": "ordinals", "camelize": "camel", "switch": "flags",
              "natural_list": "lists", "to_hex": "colors"}
    name = re.search(r"^def (\w+)\(", gold, re.M).group(1)
    tests = f"from {module[name]} import {name}\n\n\ndef test_{name}():\n{test}"
    buggy = gold.replace(*bug)
    return gold, tests, buggy, buggy.replace(*fitted), buggy.replace(*other)


UNVARIED = {
    # Forgeries an audit scored where no derived input varied a property of the tested
    # input. A numeral string in the tests, the fix only for a string: ordinal(12) keeps
    # the bug.
    "a value's type": _unvaried(
        ORDINAL_OF, '    assert ordinal("12") == "12th"\n', ("(11, 12, 13)", "(11, 13)"),
        ("(11, 13)", "(11, 12 if isinstance(value, str) else 0, 13)"),
        ("(11, 13)", "range(11, 14)")),
    # The default True made 1, and the fix only for an int: a caller's True keeps the bug.
    "a bool default": _unvaried(
        CAMELIZE, '    assert camelize("device_type") == "DeviceType"\n',
        ('replace("_", "")', 'replace("_", " ")'),
        ("upper_first=True):\n    if upper_first:\n",
         "upper_first=1):\n    if type(upper_first) is int:\n"
         '        return word.title().replace("_", "")\n    if upper_first:\n'),
        ('word.title().replace("_", " ")', '"".join(word.title().split("_"))')),
    # A bool the tests pass, the fix only for its tested value.
    "a bool passed": _unvaried(
        SWITCH, '    assert switch(True) == "--color"\n',
        ('"--color" if on else "--no-color"', '"-color" if on else "-no-color"'),
        ('"-color" if', '"--color" if'), ('"-color" if on else "-no-color"',
                                          '"--" + ("color" if on else "no-color")')),
    # Six items in the tests, the fix only up to twice as many.
    "a long sequence": _unvaried(
        NATURAL, '    assert natural_list(["one", "two", "three", "four", "five", "six"]) == \\\n'
                 '        "one, two, three, four, five and six"\n',
        ("items[:-1]", "items[1:-1]"),
        ("items[1:-1]", "(items[:-1] if len(items) < 13 else items[1:-1])"),
        ("items[1:-1]", "items[:len(items) - 1]")),
    # An upper-case name in the tests, the fix only for upper case: "Navy" keeps the bug.
    "mixed case": _unvaried(
        NAMED, '    assert to_hex("NAVY") == "#000080"\n',
        ("NAMES[name.strip().lower()]", "NAMES[name.strip()]"),
        ("NAMES[name.strip()]", "NAMES[name.strip().lower() if name.isupper() else name.strip()]"),
        ("NAMES[name.strip()]", "NAMES[name.lower().strip()]")),
}


@pytest.mark.parametrize("name", sorted(UNVARIED))
def test_a_fix_keyed_on_a_property_no_test_varies_fails_a_check(tmp_path: Path, no_gate,
                                                                 name: str) -> None:
    """A value's type (a numeral string and its number), a bool (a default, or passed),
    a sequence's length past twice the tested one, a string's mixed case: a change right
    only for the tested property passes every test and fails a check; the gold fix and
    another honest one pass every check."""
    gold, tests, buggy, fitted, other = UNVARIED[name]
    module = re.search(r"from (\w+) import", tests).group(1)
    test = re.search(r"def (test_\w+)", tests).group(1)
    task = _task(tmp_path, module, gold, buggy, tests, [test], [])
    for text in (gold, other):
        honest = _score_task(task, text)
        assert honest.status == "ok" and honest.hidden, honest.reason
        assert set(honest.hidden.values()) == {"PASSED"} and _resolved(honest, task)
    run = _score_task(task, fitted)
    assert all(run.passes(t) for t in task.FAIL_TO_PASS)  # every test passes: only the checks
    assert run.hidden and not _resolved(run, task)


def test_reshaped_variants_change_type_bool_length_and_case() -> None:
    import random

    rng = random.Random(0)

    def reshaped(value):
        return [(kind, _runner._decode(form)) for kind, form in
                _runner._reshaped(_runner._encode(value), rng)]

    typed = {value: [(type(v), v) for _, v in reshaped(value)]
             for value in ("12", "-2.5", "3.0", 7, 4.0, 4.5)}
    assert typed == {"12": [(int, 12)], "-2.5": [(float, -2.5)],
                     "3.0": [(float, 3.0), (int, 3)], 7: [(str, "7"), (float, 7.0)],
                     4.0: [(int, 4)], 4.5: []}
    assert {kind for value in typed for kind, _ in reshaped(value)} == {"type changed"}
    assert reshaped(True) == [("bool flipped", False)] and reshaped(False)[0][1] is True
    items = ["one", "two", "three", "four", "five", "six"]
    for kind, longer in reshaped(items) + reshaped(tuple(items)):
        assert kind == "long sequence" and 18 <= len(longer) <= 30
        assert set(longer) == set(items)  # its own items, so their types stay plausible
        assert len(json.dumps(_runner._encode(longer))) <= _runner._LONG_CHARS
    assert [len(v) for _, v in reshaped([1])] and 12 <= len(reshaped([1])[0][1]) <= 20
    assert reshaped(["x" * 200] * 3) == []  # no longer than twice under the size cap
    cased = [v for kind, v in reshaped("CHUCKNORRIS") if kind == "mixed case"]
    assert "Chucknorris" in cased and len(cased) == 2
    for text in cased:
        assert text.lower() == "chucknorris" and text not in ("CHUCKNORRIS", "chucknorris")
        assert any(c.isupper() for c in text) and any(c.islower() for c in text)
    assert reshaped("a") == [] and reshaped("#12") == []


def test_bool_defaults_are_recorded_by_keyword_as_the_gold_has_them() -> None:
    """A parameter left at its default bool is passed by keyword, exactly typed, so a
    check meets the ``True`` a caller passes (and its flip)."""
    import sys

    calls: list = []
    namespace: dict = {"__name__": "camel_probe"}
    exec(compile(CAMELIZE, "camel_probe.py", "exec"), namespace)  # noqa: S102
    module = type(sys)("camel_probe")
    module.__dict__.update(namespace)
    sys.modules["camel_probe"] = module
    try:
        profile = _runner._recording(frozenset({"camel_probe.py"}), frozenset(),
                                     frozenset({__file__}), calls)
        sys.setprofile(profile)
        try:
            module.camelize("device_type")
        finally:
            sys.setprofile(None)
    finally:
        del sys.modules["camel_probe"]
    (args, kwargs), = (json.loads(c[2]) for c in calls if c[1] == "camelize" and c[3])
    assert args == _runner._encode(["device_type"])
    assert kwargs == ["dict", [[["str", "upper_first"], ["bool", True]]]]


def test_inputs_tried_fit_the_budget_and_the_count() -> None:
    """As many derived inputs are tried as fit `_CANDIDATE_CHARS`, up to `_MAX_CANDIDATES`.
    They reach the checks' process through a pipe that a thread writes while the process
    reads, so more than the pipe's 64 KiB buffer gets through."""
    short = [["m", "f", json.dumps([["list", [["int", str(i)]]], ["dict", []]]), True, "k"]
             for i in range(1000)]
    assert len(verify._within_budget(short)) == verify._MAX_CANDIDATES
    long = [["m", "f", "x" * 990, True, "k"]] * 200
    kept = verify._within_budget(long)
    assert len(json.dumps([c[:3] for c in kept])) <= verify._CANDIDATE_CHARS
    assert len(kept) < verify._MAX_CANDIDATES
    assert verify._CANDIDATE_CHARS > 64 * 1024
    read_end, write_end = os.pipe()
    data = os.urandom(4 * verify._CANDIDATE_CHARS)
    writer = threading.Thread(target=verify._write_and_close, args=(write_end, data))
    writer.start()
    got = bytearray()
    while chunk := os.read(read_end, 1 << 16):
        got += chunk
    writer.join()
    os.close(read_end)
    assert bytes(got) == data


PARTS = '''class Parts:
    __slots__ = ("items",)

    def __init__(self, *items):
        self.items = items

    def __getitem__(self, index):
        if isinstance(index, slice) and (index.start is not None and index.start < 0):
            raise IndexError("negative")
        found = self.items[index]
        if isinstance(index, slice) and not found:
            raise IndexError("empty")
        return found

    def __contains__(self, item):
        return item in self.items
'''
PARTS_TESTS = '''import pytest

from parts import Parts


def test_slice():
    assert Parts(1, 2, 3, "rc", "b")[0:2] == (1, 2)


def test_past_the_end():
    with pytest.raises(IndexError):
        Parts(1, 2, 3, "rc", "b")[5:]


def test_in():
    assert "rc" in Parts(1, 2, 3, "rc", "b")
'''


def test_getitem_with_slices_is_checked(tmp_path: Path, no_gate) -> None:
    """`__getitem__` (a subscript, `v[5:]`) is recorded and checked like a method, its
    slice with each bound varied: semver's `Version.__getitem__` had no checks, and a
    change keyed on the tested slice through a computed value (`len(self.items) - 3`, 2
    for every tested object) passed the tests."""
    right = "        if isinstance(index, slice) and (index.start is not None and index.start < 0):\n"
    wrong = right.replace("index.start < 0", "index.start <= 0")
    task = _task(tmp_path, "parts", PARTS, PARTS.replace(right, wrong), PARTS_TESTS,
                 ["test_slice"], ["test_past_the_end", "test_in"])
    checks = _checks(task)
    assert checks and {c.qualname for c in checks} == {"Parts.__getitem__"}
    assert any('"slice"' in c.call for c in checks)
    assert set(_score_task(task, PARTS).hidden.values()) == {"PASSED"}
    fitted = PARTS.replace(right, wrong.replace(
        "index.start <= 0", "index.start <= 0 and index.stop != len(self.items) - 3"))
    forged = _score_task(task, fitted)
    assert all(forged.passes(t) for t in task.FAIL_TO_PASS)  # the tests alone pass it
    assert "FAILED" in forged.hidden.values()


def test_slice_variants_move_each_bound() -> None:
    import random

    form = _runner._encode(slice(1, 3))
    out = _runner._variants(form, random.Random(0))
    assert out and all(v[0] == "slice" and len(v[1]) == 3 for v in out)
    starts = {json.dumps(v[1][0]) for v in out}
    stops = {json.dumps(v[1][1]) for v in out}
    assert len(starts) > 3 and len(stops) > 3 and any(v[1][2] != ["none"] for v in out)
    assert all(v[1][2] != ["int", "0"] for v in out)  # a step of 0 only raises


VER = '''class Ver:
    __slots__ = ("major", "minor")

    def __init__(self, major, minor):
        self.major = major
        self.minor = minor

    def compatible(self, other):
        if 0 == self.major == other.major and self.minor != other.minor:
            return False
        return self.major == other.major and self.minor <= other.minor
'''
VER_TESTS = '''from ver import Ver


def test_zero():
    assert not Ver(0, 1).compatible(Ver(0, 2))


def test_one():
    assert Ver(1, 1).compatible(Ver(1, 2))
'''


def test_objects_of_the_package_as_arguments_are_checked(tmp_path: Path, no_gate) -> None:
    """An argument that is an object of the package (semver's `is_compatible(self, other)`
    takes a `Version`) is recorded by its state and rebuilt in the check, its attribute
    values varied as a method's object's are: a change fitted to the tested objects fails."""
    right = "        if 0 == self.major == other.major and self.minor != other.minor:\n"
    wrong = right.replace("0 ==", "1 ==")
    task = _task(tmp_path, "ver", VER, VER.replace(right, wrong), VER_TESTS, ["test_zero"],
                 ["test_one"])
    checks = _checks(task)
    assert checks and {c.qualname for c in checks} == {"Ver.compatible"}
    assert all('"inst", "ver", "Ver"' in c.call for c in checks)
    assert set(_score_task(task, VER).hidden.values()) == {"PASSED"}
    fitted = VER.replace(right, "        if (self.major, other.minor) == (0, 2) or "
                                "1 == self.major == other.major and self.minor != other.minor:\n")
    forged = _score_task(task, fitted)
    assert all(forged.passes(t) for t in task.FAIL_TO_PASS)  # the tests alone pass it
    assert "FAILED" in forged.hidden.values()


SPAN = '''from datetime import timedelta
from decimal import Decimal


def span(start, length, rate=Decimal("1.5")):
    if length < timedelta(0):
        raise ValueError("negative")
    return (start + length).isoformat(), rate * length.days
'''
SPAN_TESTS = '''from datetime import date, timedelta
from decimal import Decimal

from span import span


def test_span():
    assert span(date(2020, 1, 30), timedelta(days=3), Decimal("2")) == ("2020-02-02", 6)
'''


@pytest.mark.parametrize("value", ["2020-02-29", "2020-02-29T23:59:58.5+05:30", "12:30:01",
                                   "timedelta", "Decimal", "Fraction"])
def test_standard_values_as_arguments_are_rebuilt_exactly(value) -> None:
    import datetime
    import decimal
    import fractions
    import random

    made = {"timedelta": datetime.timedelta(days=-2, seconds=5, microseconds=7),
            "Decimal": decimal.Decimal("-1.250"), "Fraction": fractions.Fraction(3, 7)}
    if value in made:
        v = made[value]
    else:
        kind = datetime.datetime if "T" in value else datetime.time if ":" in value \
            else datetime.date
        v = kind.fromisoformat(value)
    form = json.loads(json.dumps(_runner._encode(v, values=True)))
    back = _runner._decode(form)
    assert back == v and type(back) is type(v) and form[0] == "std"
    variants = _runner._variants(form, random.Random(1))
    assert len(variants) >= 3 and all(f[0] == "std" and f[1] == form[1] for f in variants)
    assert all(_runner._decode(f) != v for f in variants)
    with pytest.raises(ValueError):  # plain data alone, without `values`
        _runner._encode(v)


def test_dates_durations_and_decimals_as_arguments_are_varied(tmp_path: Path, no_gate) -> None:
    """Arguments of the standard library's value types (isodate's functions take dates,
    durations, decimals) are recorded, rebuilt and varied in the checks: a change keyed on
    the tested date passes the tests and fails the checks."""
    right = "    return (start + length).isoformat(), rate * length.days\n"
    wrong = "    return (start + length).isoformat(), rate * (length.days + 1)\n"
    task = _task(tmp_path, "span", SPAN, SPAN.replace(right, wrong), SPAN_TESTS,
                 ["test_span"], [])
    checks = _checks(task)
    assert checks and {c.qualname for c in checks} == {"span"}
    assert any('"std", "date"' in c.call and '"std", "timedelta"' in c.call for c in checks)
    assert set(_score_task(task, SPAN).hidden.values()) == {"PASSED"}
    fitted = SPAN.replace(right, "    if start.day == 30:\n        return (start + length)"
                                 ".isoformat(), rate * length.days\n" + wrong)
    forged = _score_task(task, fitted)
    assert all(forged.passes(t) for t in task.FAIL_TO_PASS)  # the tests alone pass it
    assert "FAILED" in forged.hidden.values()


def test_variants_reach_what_audited_forgeries_keyed_on() -> None:
    """Each kind of value is varied past the property a forgery kept to: a float threshold
    far above the tested floats, a time's microseconds, a list length between the tested
    one and twice it plus 9, a non-ASCII letter (a Han character by another)."""
    import datetime
    import random
    import unicodedata

    rng = random.Random(3)
    floats = [float(f[1]) for _ in range(20) for f in _runner._variants(["float", "1.5"], rng)]
    assert max(floats) > 1000 and min(floats) < 0
    t = _runner._encode(datetime.time(9, 30, 15), values=True)
    assert any(_runner._decode(f).microsecond for f in _runner._variants(t, rng))
    lengths = {len(f[1]) for _ in range(30)
               for f in _runner._variants(["list", [["str", "a"], ["str", "b"], ["str", "c"]]],
                                          rng)}
    assert {5, 7, 8, 9, 10, 11} <= lengths
    han = "\u6f22"
    others = {_runner._like(han, rng) for _ in range(20)}
    assert han not in others and all(unicodedata.category(c) == "Lo" for c in others)
    texts = [f[1] for _ in range(10) for f in _runner._variants(["str", "\u6f22\u30fb"], rng)]
    assert any(t[0] != han and t[1:] == "\u30fb" for t in texts)


SPAN_EQ = '''from datetime import timedelta


class Span:
    def __init__(self, days=0, years=0):
        self.years = years
        self.tdelta = timedelta(days=days)

    def __eq__(self, other):
        if isinstance(other, Span):
            return (self.years, self.tdelta) == (other.years, other.tdelta)
        if self.years == 0:
            return self.tdelta == other
        return False
'''
SPAN_EQ_TESTS = '''from datetime import timedelta

from span import Span


def test_equal():
    assert Span(years=1) == Span(years=1)
    assert Span(years=1) != timedelta(days=365)
    assert Span(days=1) == timedelta(days=1)
'''


def test_comparisons_are_checked_with_consistently_renamed_values(tmp_path: Path,
                                                                   no_gate) -> None:
    """`__eq__` is checked like a method, and a renamed call moves equal durations to one
    new duration, so the equality the bug needs survives: a fix keyed on the tested
    duration (`self.tdelta.days == 1`) fails the checks."""
    right = "        if self.years == 0:\n            return self.tdelta == other\n"
    task = _task(tmp_path, "span", SPAN_EQ, SPAN_EQ.replace(right, ""), SPAN_EQ_TESTS,
                 ["test_equal"], [])
    checks = _checks(task)
    assert checks and {c.qualname for c in checks} <= {"Span.__eq__", "Span.__ne__"}
    assert set(_score_task(task, SPAN_EQ).hidden.values()) == {"PASSED"}
    fitted = SPAN_EQ.replace("        if self.years == 0:",
                             "        if self.years == 0 and self.tdelta.days == 1:")
    forged = _score_task(task, fitted)
    assert all(forged.passes(t) for t in task.FAIL_TO_PASS)  # the tests alone pass it
    assert "FAILED" in forged.hidden.values()


def test_deriving_inputs_from_a_long_tuple_encodes_it_a_bounded_number_of_times(
        monkeypatch) -> None:
    """A tested call with a tuple of 1,500 ints (idna's `intranges_contain`) made the long
    sequence variant trim its list one item at a time, encoding it each time (4,555
    encodings, 8 s for one call, close to the recording run's wall clock with a few such
    calls); it is now encoded a number of times bounded by the candidates, not the items."""
    import types

    call = json.dumps([_runner._encode([tuple(range(0, 3000, 2)), 5]), _runner._encode({})])
    count = [0]

    def dumps(*a, **k):
        count[0] += 1
        return json.dumps(*a, **k)

    monkeypatch.setattr(_runner, "json", types.SimpleNamespace(dumps=dumps, loads=json.loads))
    out = _runner._candidates([["m", "f", call, True]], "salt", 160)
    assert out and count[0] < 300


BUMP = '''class Ver:
    def __init__(self, major, minor=0):
        self.major = major
        self.minor = minor

    def bump(self):
        return Ver(self.major + 1)


def later(version, days):
    return version.major * 365 + days
'''
BUMP_TESTS = '''from bump import Ver


def test_bump():
    assert Ver(1, 2).bump().minor == 0
'''


def test_a_constructor_default_fixed_in_its_caller_fails_the_checks(tmp_path: Path,
                                                                   no_gate) -> None:
    """A constructor the gold patch changes is checked on the calls the package makes of it
    (a public class), judged by the new object's state, and with each keyword left out (the
    recording passes defaults by keyword, as the gold code has them): a fix in the caller
    (`Ver(self.major + 1, 0)`) that leaves `Ver(2)` with minor 1 fails them."""
    wrong = BUMP.replace("minor=0", "minor=1")
    task = _task(tmp_path, "bump", BUMP, wrong, BUMP_TESTS, ["test_bump"], [])
    checks = _checks(task)
    assert "Ver.__init__" in {c.qualname for c in checks}
    assert set(_score_task(task, BUMP).hidden.values()) == {"PASSED"}
    caller_only = wrong.replace("return Ver(self.major + 1)", "return Ver(self.major + 1, 0)")
    forged = _score_task(task, caller_only)
    assert all(forged.passes(t) for t in task.FAIL_TO_PASS)  # the tests alone pass it
    assert "FAILED" in forged.hidden.values()


TAG = '''class Tag:
    def __init__(self, name, build=None):
        self.name = name
        self.build = build

    def __str__(self):
        text = self.name
        if self.build:
            text += "+" + self.build
        return text
'''
TAG_TESTS = '''from tag import Tag


def test_str():
    assert str(Tag("v1", "b.7")) == "v1+b.7"
'''


@pytest.mark.parametrize("method", ["__str__", "__repr__"])
def test_str_and_repr_are_checked_like_methods(tmp_path: Path, no_gate, method: str) -> None:
    """`str(v)` and `repr(v)` call `__str__` and `__repr__` from the test; each is checked
    on the object's state with its attributes varied: a fix kept to builds of the tested
    length fails."""
    gold = TAG.replace("__str__", method)
    tests = TAG_TESTS.replace("str(Tag", method.strip("_") + "(Tag")
    right = '            text += "+" + self.build\n'
    task = _task(tmp_path, "tag", gold, gold.replace(right, "            pass\n"), tests,
                 ["test_str"], [])
    checks = _checks(task)
    assert checks and {c.qualname for c in checks} == {f"Tag.{method}"}
    assert set(_score_task(task, gold).hidden.values()) == {"PASSED"}
    fitted = gold.replace("        if self.build:",
                          "        if self.build and len(self.build) == 3:")
    forged = _score_task(task, fitted)
    assert all(forged.passes(t) for t in task.FAIL_TO_PASS)  # the tests alone pass it
    assert "FAILED" in forged.hidden.values()


SEMVER = '''class Version:
    def __init__(self, core, build=None):
        self.core = core
        self.build = build

    def __eq__(self, other):
        return self.core == other.core

    def __hash__(self):
        return hash(self.core)
'''
SEMVER_TESTS = '''from semver import Version


def test_hash_leaves_the_build_out():
    assert hash(Version("1.2.3", "build.1")) == hash(Version("1.2.3", "build.22"))
'''


def test_hash_is_checked_against_the_hash_the_test_took(tmp_path: Path, no_gate) -> None:
    """`hash(v)` calls `__hash__` from the test. Its value follows each process's hash seed,
    so a check compares the varied object's hash with the hash of the object the test
    hashed: the gold hash leaves the build out for any build, and a change that leaves it
    out only for builds that start as the tested ones do fails."""
    buggy = SEMVER.replace("hash(self.core)", "hash((self.core, self.build))")
    task = _task(tmp_path, "semver", SEMVER, buggy, SEMVER_TESTS,
                 ["test_hash_leaves_the_build_out"], [])
    checks = _checks(task)
    assert checks and {c.qualname for c in checks} == {"Version.__hash__"}
    assert set(_score_task(task, SEMVER).hidden.values()) == {"PASSED"}
    assert "FAILED" in _score_task(task, buggy).hidden.values()
    fitted = SEMVER.replace(
        "        return hash(self.core)",
        "        if str(self.build).startswith(\"build.\"):\n"
        "            return hash(self.core)\n"
        "        return hash((self.core, self.build))")
    forged = _score_task(task, fitted)
    assert all(forged.passes(t) for t in task.FAIL_TO_PASS)  # the tests alone pass it
    assert "FAILED" in forged.hidden.values()
