"""Hidden checks: the function the gold patch changes, called on inputs no test shows.

A change that special-cases the visible tests' inputs passes every test and still leaves
the bug; the hidden checks catch it, while honest fixes (the gold one or another) pass.
The inputs must not leak to the code under test (argv, the output shown to the agent),
and what the code returns is compared outside the sandbox, exactly typed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tripod.envs.swe import _runner, verify
from tripod.envs.swe.env import SweEnv, SweEnvConfig
from tripod.envs.swe.gate import Gate
from tripod.envs.swe.patches import make_patch
from tripod.envs.swe.sandbox import SandboxLimits
from tripod.envs.swe.task import SweTask, WorkspaceSpec
from tripod.envs.swe.verify import HiddenCheck, check_targets
from tripod.envs.swe.workspace import LocalWorkspace

from .conftest import BUGGY, CALC

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

def test_targets_are_the_module_level_functions_the_gold_patch_changes() -> None:
    pristine = {"calc/__init__.py": BUGGY.encode(),
                "calc/shapes.py": b"class Box:\n    def area(self):\n        return 1\n"}
    gold = {"calc/__init__.py": CALC.encode(),
            "calc/shapes.py": b"class Box:\n    def area(self):\n        return 2\n"}
    assert check_targets(pristine, gold, ["."]) == [("calc/__init__.py", "calc", "clamp")]
    assert check_targets(pristine, {"calc/__init__.py": None}, ["."]) == []


def test_checks_are_unseen_inputs_on_which_the_bug_shows(calc_task: SweTask) -> None:
    ws = LocalWorkspace.create(calc_task)
    try:
        assert ws.verifier is not None
        checks = ws.verifier._make_checks(LIMITS)
    finally:
        ws.close()
    assert checks and all(isinstance(c, HiddenCheck) for c in checks)
    for check in checks:
        assert (check.module, check.qualname) == ("calc", "clamp")
        (_, args), _ = json.loads(check.call)
        x, lo, hi = (int(value) for _, value in args)
        assert (lo, hi) == (0, 10) and x > 100  # the test's x = 15, moved out of sight
        assert json.loads(check.expected) == ["value", ["int", "10"]]  # the gold output


@pytest.mark.parametrize("name", sorted(FIXES))
def test_honest_fixes_pass_the_hidden_checks(calc_task: SweTask, name: str) -> None:
    run = _score(calc_task, FIXES[name])
    assert run.status == "ok" and run.hidden
    assert set(run.hidden.values()) == {"PASSED"}
    assert _resolved(run, calc_task)


@pytest.mark.parametrize("name", sorted(OVERFITS))
def test_a_change_fitted_to_the_tests_inputs_is_not_resolved(calc_task: SweTask,
                                                             name: str) -> None:
    run = _score(calc_task, OVERFITS[name])
    assert run.status == "ok"
    assert all(run.passes(t) for t in calc_task.FAIL_TO_PASS + calc_task.PASS_TO_PASS)
    assert run.hidden and set(run.hidden.values()) == {"FAILED"}
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
    info, tested, _, scored, last = _submit(calc_task, "        return hi if x == 15 else x\n")
    hidden = [t for t in last.info.extra["test_results"] if t.startswith("hidden check")]
    assert hidden, last.observation
    # The checks are FAIL_TO_PASS targets: the base share counts them as failing.
    assert info.progress == pytest.approx(4 / (5 + len(hidden)))
    assert tested.info.progress == pytest.approx(info.progress)
    assert f"0/{len(hidden)} pass" in tested.observation
    assert f"0/{len(hidden)} pass" in scored.observation
    assert last.info.lost and not last.info.won and not last.info.extra["resolved"]
    assert last.info.progress == pytest.approx(5 / (5 + len(hidden)))

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
    inputs = [str(int(json.loads(c.call)[0][1][0][1])) for c in checks]
    assert run.status == "ok" and set(run.hidden.values()) == {"FAILED"}
    shown, scored = run.output, " ".join(argvs[-1])
    for x in inputs:  # what the checks' calls print is dropped; argv never holds them
        assert not re.search(rf"\b{x}\b", shown) and not re.search(rf"\b{x}\b", scored)


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
    assert run.hidden and set(run.hidden.values()) == {"FAILED"}
    assert not _resolved(run, calc_task)


# --- the codec ------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [None, True, 0, -7, 2 ** 70, 1.5, "é", b"\x00", [1, (2, "a")],
                                   {"k": [1]}, {3, 1, 2}, frozenset({"a"})])
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


def test_variants_change_one_argument_at_a_time() -> None:
    call = json.dumps([_runner._encode([12, "ab", [1, 2]]), _runner._encode({})])
    out = [json.loads(c) for c in _runner._candidates([call], "salt")]
    decoded = [_runner._decode(args) for args, _ in out]
    assert len(decoded) == 6 and [12, "ab", [1, 2]] not in decoded
    for args in decoded:
        assert sum(a != b for a, b in zip(args, [12, "ab", [1, 2]])) == 1
    assert _runner._candidates([call], "salt") == _runner._candidates([call], "salt")


def test_a_task_without_a_module_level_target_has_no_checks(tmp_path: Path) -> None:
    source = "class Box:\n    def area(self, n):\n        return n * 2\n"
    buggy = source.replace("n * 2", "n * 3")
    (tmp_path / "box").mkdir()
    (tmp_path / "box" / "__init__.py").write_text(source)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_box.py").write_text(
        "from box import Box\n\n\ndef test_area():\n    assert Box().area(2) == 4\n")
    task = SweTask(instance_id="box-1", repo="tripod/box", base_commit="",
                   problem_statement="", patch=make_patch("box/__init__.py", buggy, source),
                   test_patch="", FAIL_TO_PASS=["tests/test_box.py::test_area"],
                   PASS_TO_PASS=[], workspace=WorkspaceSpec(
                       kind="local", source=str(tmp_path),
                       setup_patch=make_patch("box/__init__.py", source, buggy)))
    ws = LocalWorkspace.create(task)
    try:
        assert ws.verifier is not None and ws.verifier.hidden_checks(LIMITS) == []
        ws.write_text("box/__init__.py", source)
        run = ws.score(LIMITS)
        assert run.hidden == {} and run.passes("tests/test_box.py::test_area")
    finally:
        ws.close()
