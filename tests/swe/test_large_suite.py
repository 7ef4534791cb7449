"""The large SWE suite: skipping mutants no test reaches, and splits by project and by
function (no function of a test task appears in a training task)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tripod.envs.swe import generator, sources
from tripod.envs.swe.generator import (
    GeneratorConfig,
    _large_splits,
    executed_lines,
    generate_project,
    reached,
)
from tripod.envs.swe.mutations import Mutation, enclosing_functions, find_mutations
from tripod.envs.swe.sources import LARGE_PROJECTS, ProjectSpec
from tripod.envs.swe.task import SweTask

TINY = '''def used(x):
    if x < -100:
        return -1
    if x > 1:
        return 2
    return x


def unused(x):
    return x + 1
'''

TINY_TESTS = '''from tiny import used


def test_small():
    assert used(0) == 0


def test_large():
    assert used(5) == 2
'''

SPEC = ProjectSpec("tiny", "1.0", ("tiny/__init__.py",), ("tests",))


@pytest.fixture
def tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A two-function project served as if it were the sdist of ``tiny==1.0``."""
    root = tmp_path / "tiny-1.0"
    (root / "tiny").mkdir(parents=True)
    (root / "tiny" / "__init__.py").write_text(TINY)
    (root / "tests").mkdir()
    (root / "tests" / "test_tiny.py").write_text(TINY_TESTS)
    monkeypatch.setattr(sources, "sdist_tree", lambda name, version: root)
    monkeypatch.setattr(generator, "sdist_tree", lambda name, version: root)
    return root


def test_the_traced_run_sees_the_lines_the_tests_run_and_no_others(tiny: Path) -> None:
    lines = executed_lines(SPEC, GeneratorConfig().limits)
    assert lines is not None
    hit = lines["tiny/__init__.py"]
    assert {2, 4, 5, 6} <= hit  # both conditions, the taken branch, the fall-through
    assert 3 not in hit and 10 not in hit  # a branch never taken, a function never called
    assert {1, 9} <= hit  # the `def` lines run at import
    by_line = {}
    for m in find_mutations("tiny/__init__.py", TINY):
        by_line.setdefault((m.operator, m.first), reached(m, lines))
    assert by_line[("drop_branch", 2)] is False  # its body never runs: nothing changes
    assert by_line[("drop_branch", 4)] is True
    assert by_line[("flip_compare", 2)] is True  # the condition itself is evaluated
    assert by_line[("off_by_one", 10)] is False


def test_reached_checks_the_body_of_a_dropped_branch_not_its_condition() -> None:
    lines = {"m.py": {4, 5}}
    drop = Mutation("m.py", 4, 6, (), "drop_branch", "")
    assert reached(drop, lines)  # line 5 of the body ran
    assert not reached(Mutation("m.py", 4, 4, (), "drop_branch", ""), {"m.py": {3}})
    assert not reached(Mutation("m.py", 4, 6, (), "drop_branch", ""), {"m.py": {4}})
    assert not reached(Mutation("other.py", 5, 5, ("x",), "off_by_one", ""), lines)


def test_skipping_unreached_mutants_gives_the_same_tasks(tiny: Path) -> None:
    """A mutant no test runs cannot fail a test, so skipping it changes no task."""
    config = GeneratorConfig(seed=1, singles=3, pairs=0, triples=0, workers=1)
    plain = generate_project(SPEC, config)
    skipping = generate_project(SPEC, dataclasses.replace(config, skip_unreached=True))
    assert plain and [t.instance_id for t in plain] == [t.instance_id for t in skipping]


def test_enclosing_functions_name_methods_inside_classes() -> None:
    source = "x = 1\nclass A:\n    def f(self):\n        return 1\n    y = 2\ndef g():\n    pass\n"
    assert enclosing_functions(source) == {2: "A", 3: "A.f", 4: "A.f", 5: "A", 6: "g", 7: "g"}


def _task(i: int, lines: list[tuple[str, int]]) -> SweTask:
    return SweTask(instance_id=f"tiny__{i}", repo="", base_commit="", problem_statement="",
                   patch="", test_patch="", FAIL_TO_PASS=[], PASS_TO_PASS=[],
                   metadata={"lines": [list(x) for x in lines]})


def test_a_held_out_project_gives_only_test_tasks(tiny: Path) -> None:
    tasks = _large_splits(dataclasses.replace(SPEC, held_out=True),
                          [_task(0, [("tiny/__init__.py", 2)])])
    assert tasks[0].split == "test" and tasks[0].metadata["held_out"] == "project"
    assert tasks[0].metadata["functions"] == ["tiny/__init__.py::used"]


def test_no_function_of_a_test_task_is_in_a_training_task(tiny: Path) -> None:
    """Many functions, bugs in one or two each: each function has one split, and a task
    whose functions' splits differ is left out."""
    source = "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(60))
    (tiny / "tiny" / "__init__.py").write_text(source)
    tasks = [_task(i, [("tiny/__init__.py", 2 + 4 * (i % 60))]) for i in range(60)]
    tasks += [_task(100 + i, [("tiny/__init__.py", 2 + 4 * i),
                              ("tiny/__init__.py", 2 + 4 * (59 - i))]) for i in range(30)]
    kept = _large_splits(SPEC, tasks)
    assert 60 <= len(kept) < 90  # every single-bug task, and the pairs within one split
    by_split: dict[str, set[str]] = {}
    for task in kept:
        by_split.setdefault(task.split, set()).update(task.metadata["functions"])
        assert (task.metadata.get("held_out") == "function") == (task.split == "test")
    assert set(by_split) == {"train", "valid", "test"}
    assert not by_split["train"] & (by_split["test"] | by_split["valid"])
    assert not by_split["valid"] & by_split["test"]


def test_the_large_suite_has_eight_training_projects_and_held_out_ones() -> None:
    train = [s for s in LARGE_PROJECTS.values() if not s.held_out]
    held = [s for s in LARGE_PROJECTS.values() if s.held_out]
    assert len(train) >= 8 and len(held) >= 3
    assert all(s.version for s in LARGE_PROJECTS.values())
    assert not {s.name for s in train} & {s.name for s in held}


def test_the_env_plays_the_chosen_test_set(monkeypatch: pytest.MonkeyPatch) -> None:
    import tripod.envs.swe as swe
    from tripod.envs import make

    tasks = [_task(i, []) for i in range(5)]
    for task, split, held in zip(tasks, ("train", "valid", "test", "test", "train"),
                                 (None, None, "project", "function", None)):
        task.split, task.difficulty = split, "easy"
        if held:
            task.metadata["held_out"] = held
    monkeypatch.setattr(swe, "prepare_large_suite", lambda seed, projects: list(tasks))
    ids = {held: [t.instance_id for t in make("swe/large", "test", held_out=held).tasks]
           for held in ("project", "function")}
    assert ids == {"project": ["tiny__2"], "function": ["tiny__3"]}
    assert [t.instance_id for t in make("swe/large-easy", "train").tasks] == ["tiny__0",
                                                                             "tiny__4"]
    with pytest.raises(ValueError, match="held_out"):
        make("swe/large", "test", held_out="functions")


def test_train_projects_keeps_the_held_out_projects(monkeypatch: pytest.MonkeyPatch) -> None:
    import tripod.envs.swe as swe
    from tripod.envs import make

    asked = []
    monkeypatch.setattr(swe, "prepare_large_suite",
                        lambda seed, projects: asked.append(projects) or [_task(0, [])])
    make("swe/large", "train", train_projects=["toolz", "semver"])
    held = [n for n, spec in LARGE_PROJECTS.items() if spec.held_out]
    assert set(asked[0]) == {"toolz", "semver", *held}
    assert list(asked[0]) == [n for n in LARGE_PROJECTS if n in asked[0]]
    make("swe/large", "train")
    assert asked[1] == tuple(LARGE_PROJECTS)
    for wrong in (["webcolors"], ["toolzz"], []):
        with pytest.raises(ValueError, match="train_projects"):
            make("swe/large", "train", train_projects=wrong)
