"""Task generation: mutation operators, and real generated tasks checked end to end.

The generated-task tests download small sdists from PyPI once (then cached under
``$TRIPOD_CACHE/swe/sources``); the full default suite is checked in a slow test.
"""

from __future__ import annotations

import ast

import pytest

from tripod.envs.swe.env import SweEnv
from tripod.envs.swe.generator import GeneratorConfig, generate_project, prepare_suite
from tripod.envs.swe.mutations import apply_mutations, find_mutations
from tripod.envs.swe.sources import PROJECTS
from tripod.envs.swe.task import SweTask

SOURCE = '''def f(xs, lo, flag=True):
    """Docstring with 1 < 2 is never mutated."""
    if not xs:
        return None
    out = [x for x in xs[1:] if x < lo and x != 0]
    return g(out, lo), range(len(xs) - 1), flag
'''


def _mutants(op: str) -> set[str]:
    found = [m for m in find_mutations("m.py", SOURCE) if m.operator == op]
    return {apply_mutations(SOURCE, [m]) for m in found}


@pytest.mark.parametrize("op, before, after", [
    ("flip_compare", "x < lo", "x <= lo"),
    ("flip_compare", "x != 0", "x == 0"),
    ("off_by_one", "xs[1:]", "xs[2:]"),
    ("off_by_one", "len(xs) - 1", "len(xs) - 0"),
    ("swap_args", "g(out, lo)", "g(lo, out)"),
    ("wrong_constant", "flag=True", "flag=False"),
    ("flip_boolop", "x < lo and x != 0", "x < lo or x != 0"),
])
def test_operator_changes_only_its_node(op: str, before: str, after: str) -> None:
    expected = SOURCE.replace(before, after, 1)
    assert expected in _mutants(op)


def test_dropped_branch_removes_the_guard() -> None:
    [dropped] = _mutants("drop_branch")
    assert "if not xs" not in dropped
    ast.parse(dropped)


def test_docstrings_are_left_alone() -> None:
    assert all("1 < 2" in text for op in ("flip_compare", "off_by_one", "wrong_constant")
               for text in _mutants(op))


@pytest.fixture(scope="module")
def small_tasks() -> list[SweTask]:
    config = GeneratorConfig(seed=3, singles=2, pairs=0, triples=1)
    return generate_project(PROJECTS["inflection"], config)


def _expert_episode(task: SweTask) -> tuple[list, float]:
    env = SweEnv("swe/test", task.split or "train", [task])
    try:
        _, info = env.reset(0)
        steps = []
        while not steps or not (steps[-1].terminated or steps[-1].truncated):
            steps.append(env.step(info.expert_action))
            info = steps[-1].info
        return steps, sum(s.reward for s in steps)
    finally:
        env.close()


def test_generated_tasks_are_well_formed(small_tasks: list[SweTask]) -> None:
    assert len(small_tasks) == 3
    for task in small_tasks:
        assert task.FAIL_TO_PASS and task.PASS_TO_PASS
        assert not set(task.FAIL_TO_PASS) & set(task.PASS_TO_PASS)
        assert "fails with:" in task.problem_statement
        assert task.difficulty in ("easy", "medium", "hard")
    assert len(small_tasks[-1].metadata["bugs"]) == 3


def test_failing_before_gold_and_passing_after(small_tasks: list[SweTask]) -> None:
    for task in small_tasks:
        env = SweEnv("swe/test", task.split or "train", [task])
        try:
            env.reset(0)
            step = env.step("run_tests")
            assert step.info.progress == 0.0  # every FAIL_TO_PASS test fails
            results = step.info.extra["test_results"]
            assert all(results.get(t) != "PASSED" for t in task.FAIL_TO_PASS)
            assert all(results.get(t) == "PASSED" for t in task.PASS_TO_PASS)
        finally:
            env.close()


def test_expert_solves_generated_tasks(small_tasks: list[SweTask]) -> None:
    for task in small_tasks:
        steps, total = _expert_episode(task)
        assert steps[-1].info.won and total == pytest.approx(1.0), task.instance_id


@pytest.mark.slow
@pytest.mark.heavy  # generates the whole 54-task suite (10+ min cold): not in `make test`
def test_default_suite_size_and_expert() -> None:
    tasks = prepare_suite(0)
    assert len(tasks) >= 50
    assert len({t.metadata["project"] for t in tasks}) >= 3
    assert {t.difficulty for t in tasks} == {"easy", "medium", "hard"}
    for task in tasks:
        steps, total = _expert_episode(task)
        assert steps[-1].info.won and total == pytest.approx(1.0), task.instance_id
