"""Progress, won/lost, pristine tests, the tool budget and the expert, on the calc project."""

from __future__ import annotations

import pytest

from tripod.envs.base import Env
from tripod.envs.swe.env import SweEnv, SweEnvConfig
from tripod.envs.swe.patches import make_patch
from tripod.envs.swe.task import SweTask
from tripod.envs.swe.tools import parse_tool_call


def _edit(old: str, new: str, path: str = "calc/__init__.py") -> str:
    return f"edit {path}\n<<<<<<< SEARCH\n{old}=======\n{new}>>>>>>> REPLACE"


FIX = _edit("        return x\n", "        return hi\n")
BREAK_MEAN = _edit("    return sum(xs) / len(xs)\n", "    return sum(xs)\n")


def _play(task: SweTask, actions: list[str], **config) -> tuple[float, list]:
    env = SweEnv("swe/test", "train", [task], SweEnvConfig(**config))
    try:
        env.reset(0)
        steps = [env.step(a) for a in actions]
    finally:
        env.close()
    return steps[-1].info.progress, steps


BASE = 4 / 5  # at the base, the four PASS_TO_PASS tests pass and the target fails


def test_env_follows_the_protocol(calc_task: SweTask) -> None:
    env = SweEnv("swe/test", "train", [calc_task])
    assert isinstance(env, Env)
    obs, info = env.reset(game_index=0)
    try:
        assert "calc/__init__.py" in obs and "clamp(15, 0, 10)" in info.objective
        assert info.expert_action is not None
        assert info.progress == pytest.approx(BASE)
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


def _run_expert(env: SweEnv, max_steps: int = 40) -> tuple[float, list]:
    _, info = env.reset(0)
    steps = []
    while len(steps) < max_steps:
        step = env.step(info.expert_action)
        steps.append(step)
        info = step.info
        if step.terminated or step.truncated:
            break
    return steps[-1].info.progress, steps


def test_expert_replays_the_gold_patch(calc_task: SweTask) -> None:
    env = SweEnv("swe/test", "train", [calc_task])
    try:
        total, steps = _run_expert(env)
    finally:
        env.close()
    tools = [s.info.extra["tool"] for s in steps]
    assert tools == ["view", "edit", "run_tests", "submit"]
    assert total == 1.0 and steps[-1].info.won


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
        assert seen == ["view", "edit", "run_tests", "submit"]
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
