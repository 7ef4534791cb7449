"""Progress, won/lost, pristine tests, the tool budget and the expert, on the calc project."""

from __future__ import annotations

import pytest

from tripod.envs.base import Env
from tripod.envs.swe.env import SweEnv, SweEnvConfig
from tripod.envs.swe.patches import make_patch
from tripod.envs.swe.task import SweTask
from tripod.envs.swe.tools import parse_tool_call

from .conftest import BASE as DEFAULT_BASE
from .conftest import BUGGY, CALC


def _edit(old: str, new: str, path: str = "calc/__init__.py") -> str:
    return f"edit {path}\n<<<<<<< SEARCH\n{old}=======\n{new}>>>>>>> REPLACE"


FIX = _edit("        return x\n", "        return hi\n")
BREAK_MEAN = _edit("    return sum(xs) / len(xs)\n", "    return sum(xs)\n")
BUGGY_TWO = BUGGY.replace("    return sum(xs) / len(xs)\n", "    return sum(xs)\n")
"""Two bugs: clamp above the interval, and mean (test_clamp_high and test_mean fail)."""


def _play(task: SweTask, actions: list[str], **config) -> tuple[float, list]:
    """Play `actions`; the progress arithmetic here is the tests' alone (no hidden checks:
    tests/swe/test_hidden_checks.py)."""
    env = SweEnv("swe/test", "train", [task], SweEnvConfig(**{"hidden_checks": 0, **config}))
    try:
        env.reset(0)
        steps = [env.step(a) for a in actions]
    finally:
        env.close()
    return steps[-1].info.progress, steps


BASE = 4 / 5  # at the base, the four PASS_TO_PASS tests pass and the target fails
# (with the default hidden checks: conftest.BASE)


def test_env_follows_the_protocol(calc_task: SweTask) -> None:
    env = SweEnv("swe/test", "train", [calc_task])
    assert isinstance(env, Env)
    obs, info = env.reset(game_index=0)
    try:
        assert "calc/__init__.py" in obs and "clamp(15, 0, 10)" in info.objective
        assert info.expert_action is not None
        assert info.progress == pytest.approx(DEFAULT_BASE)
    finally:
        env.close()


def test_gold_patch_wins_with_every_test_passing(calc_task: SweTask) -> None:
    progress, steps = _play(calc_task, [FIX, "submit"])
    assert progress == 1.0 and steps[-1].terminated and steps[-1].info.won
    assert not steps[-1].info.lost
    assert steps[-1].reward == pytest.approx(1.0 - BASE)  # the raw progress change


def test_empty_patch_is_lost_at_the_base_share(calc_task: SweTask) -> None:
    progress, steps = _play(calc_task, ["submit"])
    assert progress == pytest.approx(BASE)
    assert steps[-1].terminated and steps[-1].info.lost and not steps[-1].info.won


def test_three_of_five_passing_is_progress_point_six(calc_task: SweTask) -> None:
    """The ratio reward is the share of tests passing: with 3 of the 5 passing the final score
    is 0.6 (and the submitted episode is lost)."""
    progress, steps = _play(calc_task, [BREAK_MEAN, "submit"])
    assert progress == pytest.approx(0.6)
    assert steps[-1].info.lost and not steps[-1].info.won
    assert steps[-1].info.extra["status"] == "submitted"


def test_fix_that_breaks_another_test_is_not_won(calc_task: SweTask) -> None:
    progress, steps = _play(calc_task, [FIX, BREAK_MEAN, "submit"])
    assert progress == pytest.approx(4 / 5)
    assert steps[-1].info.lost and not steps[-1].info.won


def test_editing_tests_earns_nothing(calc_task: SweTask) -> None:
    cheat = _edit("    assert clamp(15, 0, 10) == 10\n", "    assert True\n",
                  path="tests/test_calc.py")
    progress, steps = _play(calc_task, [cheat, "run_tests", "submit"])
    assert progress == pytest.approx(BASE) and not steps[-1].info.won
    assert steps[1].info.progress == pytest.approx(BASE)  # measured on the pristine tests
    assert steps[1].reward == 0.0


def test_progress_follows_each_scored_run(calc_task: SweTask) -> None:
    _, steps = _play(calc_task, [BREAK_MEAN, "run_tests", FIX, "run_tests",
                                 _edit("def mean(xs):\n    return sum(xs)\n",
                                       "def mean(xs):\n    return sum(xs) / len(xs)\n"),
                                 "run_tests", "submit"])
    progress = [s.info.progress for s in steps]
    assert progress == pytest.approx([BASE, 0.6, 0.6, 0.8, 0.8, 1.0, 1.0])
    assert sum(s.reward for s in steps) == pytest.approx(1.0 - BASE)
    assert steps[-1].info.won


def test_run_tests_with_arguments_is_feedback_only(calc_task: SweTask) -> None:
    _, steps = _play(calc_task, [FIX, "run_tests tests/test_calc.py"])
    assert steps[-1].info.progress == pytest.approx(BASE)
    assert "Not scored" in steps[-1].observation and "5 passed" in steps[-1].observation


def test_budget_truncates_and_scores(calc_task: SweTask) -> None:
    progress, steps = _play(calc_task, [FIX, "list", "list"], max_tool_calls=3)
    assert steps[-1].truncated and not steps[-1].terminated
    assert steps[-1].info.extra["status"] == "budget_exhausted"
    assert progress == 1.0
    assert not steps[-1].info.won and not steps[-1].info.lost


def test_malformed_call_gets_help_and_costs_a_turn(calc_task: SweTask) -> None:
    _, steps = _play(calc_task, ["I should look at clamp", "view nope.py"])
    assert steps[0].info.invalid_action and "A valid call looks like" in steps[0].observation
    assert steps[1].info.invalid_action and "no file" in steps[1].observation
    assert steps[1].info.extra["tool_calls"] == 2


@pytest.mark.parametrize("observation, tools", [
    ("traceback", ["edit", "run_tests", "submit"]),  # the observation showed the lines
    ("issue", ["view", "edit", "run_tests", "submit"]),
])
def test_expert_replays_the_gold_patch(calc_task: SweTask, observation: str,
                                       tools: list[str]) -> None:
    env = SweEnv("swe/test", "train", [calc_task], SweEnvConfig(observation=observation))
    try:
        _, info = env.reset(0)
        steps, actions = [], []
        while info.expert_action is not None:
            actions.append(info.expert_action)
            steps.append(env.step(info.expert_action))
            info = steps[-1].info
    finally:
        env.close()
    assert [s.info.extra["tool"] for s in steps] == tools
    assert steps[-1].info.progress == 1.0 and steps[-1].info.won
    # a rewrite of the short `clamp`'s code below its docstring (lines 6-10), by numbers
    edit = parse_tool_call(actions[tools.index("edit")])
    assert (edit.old, edit.start, edit.end) == (None, 6, 10)
    assert edit.new == "    if x < lo:\n        return lo\n    if x > hi:\n        return hi\n" \
        "    return x\n"


def test_expert_recovers_after_agent_mistakes(calc_task: SweTask) -> None:
    env = SweEnv("swe/test", "train", [calc_task])
    try:
        env.reset(0)
        env.step(BREAK_MEAN)
        env.step(_edit("    if x < lo:\n", "    if x <= lo:\n"))
        steps = []
        info = env.step("list").info
        while not (steps and (steps[-1].terminated or steps[-1].truncated)):
            steps.append(env.step(info.expert_action))
            info = steps[-1].info
        assert steps[-1].info.won and len(steps) < 10
    finally:
        env.close()


def test_test_patch_is_applied_before_scoring(calc_task: SweTask) -> None:
    """SWE-bench style: the target test arrives with the hidden test patch."""
    from .conftest import TESTS

    extra = TESTS + "\n\ndef test_clamp_far():\n    assert clamp(99, 0, 10) == 10\n"
    calc_task.test_patch = make_patch("tests/test_calc.py", TESTS, extra)
    calc_task.FAIL_TO_PASS = ["tests/test_calc.py::test_clamp_far"]
    progress, steps = _play(calc_task, ["submit"])
    assert progress == pytest.approx(4 / 5) and steps[-1].info.lost
    progress, steps = _play(calc_task, [FIX, "submit"])
    assert progress == 1.0 and steps[-1].info.won


def test_file_tools(calc_task: SweTask) -> None:
    _, steps = _play(calc_task, ['search "return x"', "search nothing_like_this",
                                 "view calc/__init__.py 4-6", "view calc", "list tests",
                                 "view /workspace/calc/__init__.py 99-100"])
    found, missing, view, listing, tests, beyond = (s.observation for s in steps)
    assert "2 matches" in found and "calc/__init__.py:9:" in found
    assert missing.startswith("no matches")
    assert "    4  def clamp(x, lo, hi):" in view and "    7" not in view
    assert "calc/__init__.py" in listing and tests.endswith("tests/test_calc.py")
    assert steps[-1].info.invalid_action and "only 18 lines" in beyond


def test_expert_actions_are_what_the_parser_reads_back(calc_task: SweTask) -> None:
    """SFT demonstrations teach the expert's texts: each must parse, as a whole reply
    and after some prose, into the call it stands for (multi-line edit blocks included)."""
    env = SweEnv("swe/test", "train", [calc_task])
    try:
        _, info = env.reset(0)
        seen = []
        while info.expert_action is not None:
            action = info.expert_action
            call = parse_tool_call(action)
            assert parse_tool_call(f"The clamp bug is above hi.\nI will do this:\n{action}") \
                == call
            seen.append(call.name)
            info = env.step(action).info
        assert seen == ["edit", "run_tests", "submit"]
    finally:
        env.close()


@pytest.mark.parametrize("current, target", [
    ("x\n=======\nx\n", "x\n=======\ny\n"),  # the unique SEARCH text holds a ======= line
    ("x = 1\ny = 2", "x = 1\ny = 3"),  # no final newline
    ("q\n" * 5 + "r\n", "q\n" * 5 + "s\n"),
])
def test_expert_edits_round_trip_through_the_parser(current: str, target: str) -> None:
    from tripod.envs.swe.expert import ExpertState, expert_action
    from tripod.envs.swe.tools import edited_text

    class _Files:
        def __init__(self) -> None:
            self.text = current

        def read_text(self, path: str) -> str:
            return self.text

    files = _Files()
    state = ExpertState(targets={"m.py": target}, viewed={"m.py"})
    for _ in range(5):
        action = expert_action(files, state)
        if action == "run_tests":
            break
        files.text = edited_text(files.text, parse_tool_call(action))
    assert files.text == target


def test_factories_name_every_option() -> None:
    """The registry can check option names before a run: no **kwargs, and the removed
    reward options are errors."""
    import inspect

    from tripod.envs.swe import make_from_file, make_generated

    for factory in (make_generated, make_from_file):
        kinds = {p.kind for p in inspect.signature(factory).parameters.values()}
        assert inspect.Parameter.VAR_KEYWORD not in kinds
    with pytest.raises(TypeError, match="dense"):
        make_from_file("swe/file:/nonexistent.jsonl", dense=True)


def test_tampering_is_counted_in_evaluations_and_reports() -> None:
    from tripod.core.types import EpisodeJob, Trajectory
    from tripod.eval.evaluate import summarise
    from tripod.report.html import eval_rows

    job = EpisodeJob("swe/test", "test", 0, 0, 0, 0)
    trajs = [Trajectory(job, "", "", env_status=s) for s in ("tampering", "submitted",
                                                              "tampering")]
    result = summarise(trajs, "swe/test", "test", 1.0)
    assert result.tampered == 2
    [row] = eval_rows({"eval": {"final": {"swe/test": result.to_json()}}})
    assert row.tampered == 2


# --- progress measures and shaping ---------------------------------------------------------


@pytest.mark.parametrize("measure, base, fixed_but_broke", [
    ("all_tests", BASE, 4 / 5),
    ("fail_to_pass", 0.0, 0.0),  # a broken PASS_TO_PASS test cancels the fix
    ("binary", 0.0, 0.0),
])
def test_progress_measures(calc_task: SweTask, measure: str, base: float,
                           fixed_but_broke: float) -> None:
    _, steps = _play(calc_task, ["run_tests", FIX, BREAK_MEAN, "run_tests", "submit"],
                     progress=measure)
    assert steps[0].info.progress == pytest.approx(base)
    assert steps[-1].info.progress == pytest.approx(fixed_but_broke)
    assert not steps[-1].info.won and not steps[-1].info.extra["resolved"]
    progress, steps = _play(calc_task, [FIX, "submit"], progress=measure)
    assert progress == 1.0 and steps[-1].info.won and steps[-1].info.extra["resolved"]


def _two_bugs(task: SweTask) -> SweTask:
    """The calc task with mean broken too: two FAIL_TO_PASS tests."""
    task.FAIL_TO_PASS = ["tests/test_calc.py::test_clamp_high", "tests/test_calc.py::test_mean"]
    task.PASS_TO_PASS = [t for t in task.PASS_TO_PASS if not t.endswith("mean")]
    task.workspace.setup_patch = make_patch("calc/__init__.py", CALC, BUGGY_TWO)
    task.patch = make_patch("calc/__init__.py", BUGGY_TWO, CALC)
    return task


def test_fail_to_pass_ratio_counts_target_tests(calc_task: SweTask) -> None:
    """Two targets, one fixed: 0.5 under fail_to_pass, 0 under binary."""
    task = _two_bugs(calc_task)
    for measure, expected in (("fail_to_pass", 0.5), ("binary", 0.0), ("all_tests", 0.8)):
        progress, _ = _play(task, [FIX, "run_tests"], progress=measure)
        assert progress == pytest.approx(expected), measure


def _line(number: int, text: str) -> str:
    return f"edit calc/__init__.py {number}-{number}\n<<<<<<< LINES\n{text}>>>>>>> LINES"


def test_similarity_shaping_only_until_a_target_passes(calc_task: SweTask) -> None:
    task = _two_bugs(calc_task)
    near = _line(9, "        return lo\n")  # clamp's line, still wrong
    far = _line(1, '"""Calculator."""\n')  # the docstring: far from what the gold changes
    fix = _line(9, "        return hi\n")  # fixes clamp; mean still fails
    _, steps = _play(task, ["run_tests", near, "run_tests", far, "run_tests", fix,
                            "run_tests"], progress="fail_to_pass", similarity_weight=0.1)
    nothing, close, close_and_far, one_fixed = (steps[i].info for i in (0, 2, 4, 6))
    assert nothing.progress == 0.0 and nothing.extra["similarity"] == 0.0
    assert close.progress == pytest.approx(0.1 * close.extra["similarity"])
    assert 0.0 < close.progress < 0.1
    assert 0.0 < close_and_far.extra["similarity"] < close.extra["similarity"]
    assert one_fixed.extra["similarity"] > 0 and one_fixed.progress == 0.5  # not shaped
    # shaping off: no similarity is computed or reported
    _, steps = _play(task, [near, "run_tests"], progress="fail_to_pass")
    assert steps[-1].info.progress == 0.0 and "similarity" not in steps[-1].info.extra


def test_bad_options_fail_at_once() -> None:
    for bad in ({"observation": "files"}, {"progress": "ratio"},
                {"similarity_weight": 2.0}):
        with pytest.raises(ValueError):
            SweEnvConfig(**bad)


# --- edits ----------------------------------------------------------------------------------


def test_edit_that_breaks_the_syntax_is_refused(calc_task: SweTask) -> None:
    env = SweEnv("swe/test", "train", [calc_task])
    try:
        env.reset(0)
        before = env._episode.ws.read_text("calc/__init__.py")  # noqa: SLF001
        step = env.step("edit calc/__init__.py 8-8\n<<<<<<< LINES\n    if x > hi\n"
                        ">>>>>>> LINES")
        assert step.info.invalid_action and "would no longer parse" in step.observation
        assert "line 8" in step.observation and "    8      if x > hi\n" in step.observation
        assert env._episode.ws.read_text("calc/__init__.py") == before  # noqa: SLF001
        # a line edit that parses is applied; so is an edit of a file that is not Python
        step = env.step("edit calc/__init__.py 9-9\n<<<<<<< LINES\n        return hi\n"
                        ">>>>>>> LINES")
        assert not step.info.invalid_action and "    9          return hi" in step.observation
        assert not env.step("edit notes.txt\n<<<<<<< SEARCH\n=======\n(\n>>>>>>> REPLACE"
                            ).info.invalid_action
    finally:
        env.close()
