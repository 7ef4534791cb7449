"""Generation fails loudly and never caches an empty suite; the sandbox finds a virtualenv
whatever links lead to it; `tripod doctor` says whether the sandbox works and why not.

Most tests use small projects written here (the project's "sdist" is a folder), so they
need no network; the issue's own reproduction on `parse` is a heavy test.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tripod.envs.base import EnvError
from tripod.envs.swe import generator, sandbox, sources
from tripod.envs.swe.generator import (
    GenerationError,
    GeneratorConfig,
    generate_project,
    prepare_suite,
)
from tripod.envs.swe.sources import PROJECTS, ProjectSpec
from tripod.envs.swe.task import SweTask

needs_namespaces = pytest.mark.skipif(
    not sandbox.namespaces_available(), reason="unshare cannot create namespaces here")
in_virtualenv = pytest.mark.skipif(sys.prefix == sys.base_prefix,
                                   reason="the tests run outside a virtualenv")
ONE_TASK = GeneratorConfig(seed=0, singles=1, pairs=0, triples=0, workers=1)

LIB = '''def sign(x):
    if x > 0:
        return 1
    return 0


def unused(x):
    if x > 0:
        return x * 2
    return 0
'''
TEST = ("from lib import sign\n\n\ndef test_sign():\n    assert sign(5) == 1\n\n\n"
        "def test_zero():\n    assert sign(0) == 0\n")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Make a project from {path: text}, served as the sdist of `name` (no download)."""
    trees: dict[str, Path] = {}

    def sdist_tree(name: str, version: str) -> Path:
        return trees[name]

    monkeypatch.setattr(sources, "sdist_tree", sdist_tree)
    monkeypatch.setattr(generator, "sdist_tree", sdist_tree)

    def make(name: str, files: dict[str, str]) -> ProjectSpec:
        root = tmp_path / name
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        trees[name] = root
        return ProjectSpec(name, "0.1", ("lib.py",), ("tests",))

    return make


# --- the pristine suite ------------------------------------------------------------------

@needs_namespaces
@pytest.mark.parametrize("conftest, shown", [
    ("raise ImportError('pytest plugin xyz is missing')\n", "plugin xyz is missing"),
    ("", "test outcomes"),  # collected, but nothing passes
])
def test_pristine_suite_that_does_not_run_is_an_error_and_nothing_is_cached(
        conftest: str, shown: str, project, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    failing = TEST.replace("== 1", "== 2").replace("== 0", "== 2")
    spec = project("broken", {"lib.py": LIB, "tests/conftest.py": conftest,
                              "tests/test_lib.py": failing})
    cached = tmp_path / "suite.jsonl"
    monkeypatch.setattr(generator, "suite_path", lambda seed=0: cached)
    monkeypatch.setattr(generator, "generate_suite",
                        lambda config: generate_project(spec, config))
    with pytest.raises(GenerationError) as err:
        prepare_suite(0, ONE_TASK)
    message = str(err.value)
    assert isinstance(err.value, EnvError)
    assert "pristine test suite of broken 0.1 does not run in the sandbox" in message
    assert "exit code" in message and shown in message, message
    assert not cached.exists()


@needs_namespaces
def test_interpreter_missing_in_the_sandbox_is_an_error_and_nothing_is_cached(
        project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The interpreter is not mounted: the sandbox cannot start it (a virtualenv the
    # sandbox does not find fails the same way).
    monkeypatch.setattr(sandbox, "readonly_paths", lambda command: list(sandbox._SYSTEM_PATHS))
    spec = project("fine", {"lib.py": LIB, "tests/test_lib.py": TEST})
    cached = tmp_path / "suite.jsonl"
    monkeypatch.setattr(generator, "suite_path", lambda seed=0: cached)
    monkeypatch.setattr(generator, "generate_suite",
                        lambda config: generate_project(spec, config))
    with pytest.raises(GenerationError) as err:
        prepare_suite(0, ONE_TASK)
    message = str(err.value)
    assert "exit code 127" in message and "cannot run" in message, message
    assert not cached.exists()


# --- fewer tasks than asked, empty and unreadable caches ---------------------------------

@needs_namespaces
def test_fewer_tasks_than_asked_says_so_with_the_rejections_by_reason(
        project, caplog: pytest.LogCaptureFixture) -> None:
    # The tests exercise `sign` only: mutants of `unused` break nothing.
    spec = project("thin", {"lib.py": LIB, "tests/test_lib.py": TEST})
    config = GeneratorConfig(seed=0, singles=20, pairs=1, triples=0, workers=1)
    with caplog.at_level(logging.WARNING, logger="tripod.envs.swe.generator"):
        tasks = generate_project(spec, config)
    found = len(generator.find_mutations("lib.py", LIB))
    assert 1 <= len(tasks) < 21
    assert f"thin: {len(tasks)} of 21 tasks" in caplog.text, caplog.text
    assert f"mutations: {found} found, {found} tried" in caplog.text, caplog.text
    assert " no test fails" in caplog.text, caplog.text


@pytest.mark.parametrize("content", ["", "{not json\n"])
def test_empty_or_unreadable_cached_suite_is_generated_again(
        content: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, calc_task: SweTask) -> None:
    cached = tmp_path / "suite.jsonl"
    cached.write_text(content)
    monkeypatch.setattr(generator, "suite_path", lambda seed=0: cached)
    monkeypatch.setattr(generator, "generate_suite", lambda config: [calc_task])
    with caplog.at_level(logging.WARNING, logger="tripod.envs.swe.generator"):
        tasks = prepare_suite(0)
    assert [t.instance_id for t in tasks] == [calc_task.instance_id]
    assert "cannot be read" in caplog.text and "generating it again" in caplog.text
    monkeypatch.setattr(generator, "generate_suite", lambda config: [])
    assert [t.instance_id for t in prepare_suite(0)] == [calc_task.instance_id]  # cached


def test_a_suite_with_no_tasks_is_never_cached(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    cached = tmp_path / "suite.jsonl"
    monkeypatch.setattr(generator, "suite_path", lambda seed=0: cached)
    monkeypatch.setattr(generator, "generate_suite", lambda config: [])
    with pytest.raises(GenerationError, match="no tasks"):
        prepare_suite(0)
    assert not cached.exists()


# --- a virtualenv reached through links ---------------------------------------------------

def test_links_on_names_every_link_by_its_real_parent(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "bin").mkdir(parents=True)
    (tmp_path / "a").symlink_to(real)                  # absolute target
    (tmp_path / "b").symlink_to("a")                   # a link to a link, relative
    (real / "bin" / "py").symlink_to("../bin/../bin")  # relative, through ".."
    assert sandbox.links_on(str(tmp_path / "b" / "bin")) == [str(tmp_path / "b"),
                                                             str(tmp_path / "a")]
    assert sandbox.links_on(str(tmp_path / "b" / "bin" / "py")) == [
        str(tmp_path / "b"), str(tmp_path / "a"), str(real / "bin" / "py")]
    assert sandbox.links_on(str(real / "bin")) == []


def _layouts(tmp_path: Path) -> dict[str, Path]:
    """Interpreters of this virtualenv reached through: a link to its folder, a link to
    that link (relative), and a link to its parent folder."""
    venv = Path(os.path.realpath(sys.prefix))
    (tmp_path / "venv-link").symlink_to(venv, target_is_directory=True)
    (tmp_path / "link-to-link").symlink_to("venv-link")
    (tmp_path / "parent-link").symlink_to(venv.parent, target_is_directory=True)
    return {"venv-link": tmp_path / "venv-link" / "bin" / "python",
            "link-to-link": tmp_path / "link-to-link" / "bin" / "python",
            "parent-link": tmp_path / "parent-link" / venv.name / "bin" / "python"}


_PRISTINE_RUN = """
import sys
from tripod.envs.swe.generator import pristine_run_problem
print("PREFIX", sys.prefix)
print("PROBLEM", repr(pristine_run_problem()))
"""


@needs_namespaces
@in_virtualenv
@pytest.mark.parametrize("layout", ["venv-link", "link-to-link", "parent-link"])
def test_a_suite_runs_in_the_sandbox_through_a_linked_virtualenv(layout: str,
                                                                  tmp_path: Path) -> None:
    python = _layouts(tmp_path)[layout]
    done = subprocess.run([str(python), "-c", _PRISTINE_RUN], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"PREFIX {python.parent.parent}" in done.stdout  # the link, not the real path
    assert "PROBLEM ''" in done.stdout, done.stdout


_LINKED_GENERATION = """
from tripod.envs.swe.generator import GeneratorConfig, generate_project
from tripod.envs.swe.sources import PROJECTS
config = GeneratorConfig(seed=0, singles=1, pairs=0, triples=0, workers=1)
print(sorted(t.instance_id for t in generate_project(PROJECTS["parse"], config)))
"""


@pytest.mark.slow
@pytest.mark.heavy  # generates twice (about 40 s each on two loaded cores, and a download)
@needs_namespaces
@in_virtualenv
def test_generation_through_a_linked_virtualenv_gives_the_same_tasks(tmp_path: Path) -> None:
    """The reproduction of a suite generated empty: `parse` through a link to a link to
    the virtualenv gives the tasks its real path gives."""
    sources.sdist_tree(PROJECTS["parse"].name, PROJECTS["parse"].version)  # fetch once
    ids = []
    for python in (Path(os.path.realpath(sys.prefix)) / "bin" / "python",
                   _layouts(tmp_path)["link-to-link"]):
        done = subprocess.run([str(python), "-c", _LINKED_GENERATION], capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        ids.append(done.stdout.strip().splitlines()[-1])
    assert ids[0] == ids[1] and ids[0] != "[]"


# --- tripod doctor --------------------------------------------------------------------------

@needs_namespaces
def test_doctor_says_why_a_pristine_suite_cannot_run(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture,
                                                     tmp_path: Path) -> None:
    from tripod.cli import main

    broken = dict(generator._PROBE_FILES)
    broken["tests/conftest.py"] = "raise ImportError('pytest plugin xyz is missing')\n"
    monkeypatch.setattr(generator, "_PROBE_FILES", broken)
    cached = tmp_path / "suite.jsonl"
    cached.write_text("")
    monkeypatch.setattr(generator, "suite_path", lambda seed=0: cached)
    code = main(["doctor"])
    out = capsys.readouterr().out
    assert code == 1 and "DOES NOT WORK" in out, out
    assert "one-test suite does not pass" in out and "plugin xyz is missing" in out, out
    assert f"{cached} cannot be read" in out and "generated again" in out, out
