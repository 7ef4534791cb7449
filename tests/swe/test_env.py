"""Rewards, dense progress, test restoration and the expert, on the tiny calc project."""

from __future__ import annotations

import pytest

from tripod.envs.base import Env
from tripod.envs.swe.env import SweEnv, SweEnvConfig
from tripod.envs.swe.patches import make_patch
from tripod.envs.swe.task import SweTask

from .conftest import BUGGY, CALC


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
    return sum(s.reward for s in steps), steps


def test_env_follows_the_protocol(calc_task: SweTask) -> None:
    env = SweEnv("swe/test", "train", [calc_task])
    assert isinstance(env, Env)
    obs, info = env.reset(0)
    try:
        assert "calc/__init__.py" in obs and "clamp(15, 0, 10)" in info.objective
        assert info.expert_action is not None and info.progress == 0.0
    finally:
        env.close()


@pytest.mark.parametrize("reward", ["ratio", "binary"])
def test_gold_patch_earns_one(calc_task: SweTask, reward: str) -> None:
    total, steps = _play(calc_task, [FIX, "submit"], reward=reward, dense=False)
    assert total == 1.0 and steps[-1].terminated and steps[-1].info.won


@pytest.mark.parametrize("reward", ["ratio", "binary"])
def test_empty_patch_earns_nothing(calc_task: SweTask, reward: str) -> None:
    total, steps = _play(calc_task, ["submit"], reward=reward)
    assert total == 0.0 and not steps[-1].info.won


def test_fix_that_breaks_another_test_earns_less(calc_task: SweTask) -> None:
    ratio, _ = _play(calc_task, [FIX, BREAK_MEAN, "submit"], reward="ratio")
    binary, steps = _play(calc_task, [FIX, BREAK_MEAN, "submit"], reward="binary")
    assert 0.0 < ratio < 1.0
    assert ratio == pytest.approx(1.0 - 1 / 4)  # one of four PASS_TO_PASS tests broken
    assert binary == 0.0 and not steps[-1].info.won


def test_breaking_without_fixing_earns_nothing(calc_task: SweTask) -> None:
    total, _ = _play(calc_task, [BREAK_MEAN, "submit"], reward="ratio")
    assert total == 0.0


def test_editing_tests_earns_nothing(calc_task: SweTask) -> None:
    cheat = _edit("    assert clamp(15, 0, 10) == 10\n", "    assert True\n",
                  path="tests/test_calc.py")
    total, steps = _play(calc_task, [cheat, "run_tests", "submit"], reward="ratio")
    assert total == 0.0
    assert steps[1].info.progress == 0.0  # progress is measured on the pristine tests
    assert steps[1].reward == 0.0


def test_dense_rewards_follow_the_pass_ratio_and_sum_to_the_score(calc_task: SweTask) -> None:
    total, steps = _play(calc_task, [BREAK_MEAN, "run_tests", FIX, "run_tests",
                                     _edit("def mean(xs):\n    return sum(xs)\n",
                                           "def mean(xs):\n    return sum(xs) / len(xs)\n"),
                                     "run_tests", "submit"], reward="ratio", dense=True)
    rewards = [s.reward for s in steps]
    assert rewards[1] == 0.0  # nothing fixed yet: ratio floored at 0
    assert rewards[3] == pytest.approx(0.75)  # target fixed, one test broken
    assert rewards[5] == pytest.approx(0.25)  # the broken test repaired
    assert rewards[6] == 0.0 and total == pytest.approx(1.0)
    assert [s.info.progress for s in steps][-1] == 1.0


def test_budget_truncates_and_scores(calc_task: SweTask) -> None:
    total, steps = _play(calc_task, [FIX, "list", "list"], max_tool_calls=3)
    assert steps[-1].truncated and not steps[-1].terminated
    assert steps[-1].info.extra["status"] == "budget_exhausted"
    assert total == 1.0 and steps[-1].info.won


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
    return sum(s.reward for s in steps), steps


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
        total, steps = 0.0, []
        info = env.step("list").info
        while not (steps and (steps[-1].terminated or steps[-1].truncated)):
            steps.append(env.step(info.expert_action))
            info = steps[-1].info
            total += steps[-1].reward
        assert steps[-1].info.won and len(steps) < 10
    finally:
        env.close()


def test_test_patch_is_applied_before_scoring(calc_task: SweTask) -> None:
    """SWE-bench style: the target test arrives with the hidden test patch."""
    from .conftest import TESTS

    extra = TESTS + "\n\ndef test_clamp_far():\n    assert clamp(99, 0, 10) == 10\n"
    calc_task.test_patch = make_patch("tests/test_calc.py", TESTS, extra)
    calc_task.FAIL_TO_PASS = ["tests/test_calc.py::test_clamp_far"]
    total, steps = _play(calc_task, [FIX, "submit"], reward="binary")
    assert total == 1.0
    assert BUGGY != CALC


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
