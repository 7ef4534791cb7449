"""A tiny in-repo project with one injected bug, so sandbox and reward tests need no network."""

from __future__ import annotations

from pathlib import Path

import pytest

from tripod.envs.swe.patches import make_patch
from tripod.envs.swe.task import SweTask, WorkspaceSpec

CALC = '''"""A tiny calculator library."""


def clamp(x, lo, hi):
    """Limit x to the interval [lo, hi]."""
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


def mean(xs):
    return sum(xs) / len(xs)


def total(xs):
    return sum(xs)
'''

TESTS = '''from calc import clamp, mean, total


def test_clamp_high():
    assert clamp(15, 0, 10) == 10


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5


def test_clamp_low():
    assert clamp(-3, 0, 10) == 0


def test_mean():
    assert mean([1, 2, 3]) == 2


def test_total():
    assert total([1, 2, 3]) == 6
'''

BUGGY = CALC.replace("    if x > hi:\n        return hi\n", "    if x > hi:\n        return x\n")
F2P = ["tests/test_calc.py::test_clamp_high"]
P2P = ["tests/test_calc.py::test_clamp_inside", "tests/test_calc.py::test_clamp_low",
       "tests/test_calc.py::test_mean", "tests/test_calc.py::test_total"]
HIDDEN = 18
"""Hidden checks of the calc task (`verify.HiddenCheck`) with the tests' fixed salt: the
target test's call clamp(15, 0, 10) with its arguments renamed, moved by random offsets or
given as floats or of other types, where the bug shows (x above hi): the 18 such inputs
among those tried."""
BASE = 4 / (5 + HIDDEN)
"""Progress at the base: the four PASS_TO_PASS tests pass; the target and the checks fail."""


@pytest.fixture(autouse=True)
def _fixed_salt(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hidden checks derive their inputs from a salt drawn per process; a fixed one makes
    their number on a task the same in every test run."""
    from tripod.envs.swe import verify

    monkeypatch.setattr(verify, "new_salt", lambda: "tests")


@pytest.fixture(scope="session")
def calc_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("calc-project")
    (root / "calc").mkdir()
    (root / "calc" / "__init__.py").write_text(CALC)
    (root / "tests").mkdir()
    (root / "tests" / "test_calc.py").write_text(TESTS)
    return root


@pytest.fixture
def calc_task(calc_source: Path) -> SweTask:
    """The calc project with `clamp` returning x instead of hi above the interval."""
    return SweTask(
        instance_id="calc__clamp-1", repo="tripod/calc", base_commit="",
        problem_statement="clamp(15, 0, 10) returns 15; it should return 10.",
        patch=make_patch("calc/__init__.py", BUGGY, CALC), test_patch="",
        FAIL_TO_PASS=list(F2P), PASS_TO_PASS=list(P2P), difficulty="easy",
        workspace=WorkspaceSpec(kind="local", source=str(calc_source),
                                setup_patch=make_patch("calc/__init__.py", CALC, BUGGY)))


def gate_rules(text: str, source: str) -> list[str]:
    """The rules the gate's refusals of `text`, a changed version of the module `source`,
    name (the project being that one module)."""
    import ast

    from tripod.envs.swe.gate import Vocabulary, check_file

    pristine = ast.parse(source)
    vocab = Vocabulary()
    vocab.learn(pristine)
    return [r.rule for r in check_file("m.py", pristine, text.encode(), vocab)]
