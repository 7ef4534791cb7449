"""The first observation: trimmed tracebacks of the failing tests and the function under
test, from the trusted scorer's run of the buggy tree (cached per task)."""

from __future__ import annotations

import pytest

from tripod.envs.swe import observe
from tripod.envs.swe.env import SweEnv, SweEnvConfig
from tripod.envs.swe.observe import Function, _window, called_names, trim_traceback
from tripod.envs.swe.patches import make_patch
from tripod.envs.swe.task import SweTask
from tripod.envs.swe.verify import VerifiedRun
from tripod.envs.swe.workspace import LocalWorkspace

from .conftest import BASE, CALC


def _first(task: SweTask, **config) -> tuple[str, SweEnv]:
    env = SweEnv("swe/test", "train", [task], SweEnvConfig(**config))
    obs, _ = env.reset(0)
    return obs, env


def test_traceback_and_function_under_test(calc_task: SweTask) -> None:
    obs, env = _first(calc_task)
    env.close()
    assert obs.startswith("Failing tests: 1 of the 1 target tests fail")
    assert "FAILED tests/test_calc.py::test_clamp_high\ntests/test_calc.py:5: in " \
        "test_clamp_high\n    assert clamp(15, 0, 10) == 10\nE   assert 15 == 10" in obs
    # no frame of the library: the function the failing line calls, with line numbers
    assert "calc/__init__.py, function clamp (lines 4-10 of 18):\n    4  def clamp" in obs
    assert "    9          return x\n   10      return x" in obs
    assert "def mean" not in obs  # only the function under test


def test_column_markers_are_dropped() -> None:
    tb = trim_traceback("t.py::test_x", [
        "t.py:3: in test_x", "    assert f(1) == 2", "           ^^^^", "pkg/m.py:9: in f",
        "    return g(x) + h(x)", "           ~~~~~^~~~~~", "E   ValueError: bad"])
    assert [f.source for f in tb.frames] == [["    assert f(1) == 2"],
                                             ["    return g(x) + h(x)"]]


def test_the_library_frame_names_the_function(calc_task: SweTask) -> None:
    """An error raised inside the library: the frame where it surfaces, and the function
    around that frame's line."""
    broken = CALC.replace("return sum(xs) / len(xs)", "return sum(xs) / len(xs[0])")
    calc_task.workspace.setup_patch = make_patch("calc/__init__.py", CALC, broken)
    calc_task.patch = make_patch("calc/__init__.py", broken, CALC)
    calc_task.FAIL_TO_PASS = ["tests/test_calc.py::test_mean"]
    calc_task.PASS_TO_PASS = []
    obs, env = _first(calc_task)
    env.close()
    assert "calc/__init__.py:14: in mean\n    return sum(xs) / len(xs[0])" in obs
    assert "E   TypeError: object of type 'int' has no len()" in obs
    assert "calc/__init__.py, function mean (lines 13-14 of 18)" in obs


def test_issue_mode_is_the_file_list(calc_task: SweTask) -> None:
    obs, env = _first(calc_task, observation="issue")
    env.close()
    assert obs.startswith("Repository files:\n") and "tests/test_calc.py" in obs
    assert "Failing" not in obs and "def clamp" not in obs


def test_the_brief_objective_is_the_title_and_the_short_card(calc_task: SweTask) -> None:
    """The brief objective keeps the issue's title and the calls a one-bug fix needs; the
    expert's calls are all on its card, and every tool still works."""
    calc_task.problem_statement = "clamp returns x above hi\n\nLong text " + "x " * 300
    env = SweEnv("swe/test", "train", [calc_task],
                 SweEnvConfig(objective="brief", max_tool_calls=6))
    try:
        obs, info = env.reset(0)
        assert obs.startswith("Failing tests:")
        assert "clamp returns x above hi" in info.objective and "Long text" not in info.objective
        assert "6 in all" in info.objective and "<<<<<<< LINES" in info.objective
        assert "SEARCH" not in info.objective and "list [PATH]" not in info.objective
        assert len(info.objective) < len(env_full_objective(calc_task)) // 2
        assert "calc/__init__.py" in env.step("list").observation
        while not (step := env.step(info.expert_action)).terminated:
            info = step.info
            assert info.expert_action.split()[0] in {"view", "edit", "run_tests", "submit"}
        assert step.info.won
    finally:
        env.close()
    with pytest.raises(ValueError, match="traceback"):
        SweEnvConfig(objective="brief", observation="issue")
    with pytest.raises(ValueError, match="objective"):
        SweEnvConfig(objective="short")


def env_full_objective(task: SweTask) -> str:
    from tripod.envs.swe.env import objective_text

    return objective_text(task, SweEnvConfig())


def test_the_scored_run_is_made_once_per_task(calc_task: SweTask, monkeypatch) -> None:
    runs = []
    score = LocalWorkspace.score

    def counted(self, limits):
        runs.append(self.task.instance_id)
        return score(self, limits)

    monkeypatch.setattr(LocalWorkspace, "score", counted)
    monkeypatch.setattr(observe, "_CACHE", {})
    env = SweEnv("swe/test", "train", [calc_task])
    try:
        first, _ = env.reset(0)
        step = env.step("run_tests")  # reuses the reset's run: nothing changed
        second, _ = env.reset(0)
    finally:
        env.close()
    assert first == second and len(runs) == 2  # the reset's run and the cached run_tests
    assert step.info.progress == pytest.approx(BASE)


def test_a_run_that_fails_falls_back_to_the_file_list(calc_task: SweTask,
                                                      monkeypatch) -> None:
    monkeypatch.setattr(LocalWorkspace, "score",
                        lambda self, limits: VerifiedRun("timeout", reason="wall clock"))
    monkeypatch.setattr(observe, "_CACHE", {})
    obs, env = _first(calc_task)
    env.close()
    assert "could not be run" in obs and "timeout" in obs and "calc/__init__.py" in obs


SECTION = """\
tests/test_x.py:12: in test_x
    assert parse(
        "a",
        "b",
        "c",
        "d") == 3
/usr/lib/python3/site-packages/helper.py:99: in helper
    secret_site_line()
pkg/core.py:40: in parse
    return _inner(text)
E   ValueError: bad
E   line 2
E   line 3
E   line 4
E   line 5
E   line 6
E   line 7
E   line 8
E   line 9
----------------------------- Captured stdout call -----------------------------
printed secret
"""


def test_trimming_keeps_locations_and_errors_only() -> None:
    tb = trim_traceback("tests/test_x.py::test_x", SECTION.splitlines())
    text = tb.text()
    assert "pkg/core.py:40: in parse\n    return _inner(text)" in text
    assert '        "c",' in text and '"d") == 3' not in text  # at most 4 source lines
    assert "site-packages" not in text and "secret_site_line" not in text
    assert "E   line 8" in text and "E   line 9" not in text  # at most 8 error lines
    assert "printed secret" not in text and "Captured" not in text


def test_called_names_skip_builtins_and_assertion_helpers() -> None:
    # outer calls first (breadth first)
    assert called_names(["    self.assertEqual(len(obj.frob(x)), total(y))"]) == [
        "total", "frob"]
    assert called_names(["    assert mean([1, 2]) == 1", "           ^^^^^^^^^^^"]) == ["mean"]


def test_long_functions_show_a_window_and_no_long_docstring() -> None:
    fn = Function(first=10, last=110, name="big", doc=(11, 20))
    near_top = _window("m.py", fn, focus=30)
    assert near_top.ranges == ((10, 10), (21, 59))  # def, then code; the docstring named
    deep = _window("m.py", fn, focus=100)
    assert deep.ranges == ((71, 110),)  # the last 40 lines hold the error line
    in_doc = _window("m.py", fn, focus=15)  # the error is in the docstring: shown
    assert in_doc.ranges == ((10, 49),)
