"""Docker workspaces: scoring over a stand-in Docker CLI everywhere, a real container where a
Docker daemon answers.

The stand-in (`FAKE_DOCKER`, put first on PATH) keeps each container as a folder, a copy of
its image's folder: `docker exec` runs the command on the host inside the container's
workdir, so the workspace's own file commands (cat, sh, rm, test, find) and its test command
(a real pytest run) act on that folder. Scoring then runs exactly as it would in a container:
the pristine test files (the image's, with the task's test patch) are written over whatever
the agent left, and the target tests run on the agent's source changes.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tripod.envs.swe import workspace
from tripod.envs.swe.patches import make_patch
from tripod.envs.swe.sandbox import SandboxLimits
from tripod.envs.swe.task import SweTask, WorkspaceSpec
from tripod.envs.swe.workspace import DockerWorkspace, docker_available

from .conftest import BUGGY, CALC, F2P, P2P, TESTS

_why = docker_available()
IMAGE = os.environ.get("TRIPOD_SWE_DOCKER_IMAGE", "python:3.11-slim")
LIMITS = SandboxLimits(wall_s=120)

FAKE_DOCKER = '''#!{python}
"""A stand-in Docker CLI: a container is a folder copied from its image's folder."""
import os, shutil, subprocess, sys
from pathlib import Path

root = Path(os.environ["FAKE_DOCKER_ROOT"])
args = sys.argv[1:]
with open(root / "calls.log", "a") as log:
    log.write(" ".join(args[:3]) + "\\n")
if args[0] == "run":  # run -d --name NAME ... -w WORKDIR IMAGE sleep infinity
    shutil.copytree(args[-3], root / args[args.index("--name") + 1])
elif args[0] == "exec":  # exec [-i] -w WORKDIR CONTAINER ARGV...
    rest = args[2:] if args[1] == "-i" else args[1:]
    workdir, container, argv = rest[1], rest[2], rest[3:]
    sys.exit(subprocess.run(argv, cwd=root / container / workdir.lstrip("/")).returncode)
elif args[0] == "rm":
    shutil.rmtree(root / args[-1])
elif args[0] != "restart":
    sys.exit("fake docker: unsupported command " + " ".join(args))
'''
TESTS_BEFORE_PATCH = TESTS.replace(
    "def test_clamp_high():\n    assert clamp(15, 0, 10) == 10\n\n\n", "")
"""The image's test file: the task's test patch adds the target test."""


@pytest.fixture
def fake_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PATH starts with the stand-in CLI; returns the folder its containers live in."""
    bin_dir, containers = tmp_path / "bin", tmp_path / "containers"
    bin_dir.mkdir()
    containers.mkdir()
    cli = bin_dir / "docker"
    cli.write_text(FAKE_DOCKER.replace("{python}", sys.executable))
    cli.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DOCKER_ROOT", str(containers))
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # a quick bare pytest
    monkeypatch.setattr(workspace, "docker_available", lambda: None)
    return containers


@pytest.fixture
def docker_task(tmp_path: Path) -> SweTask:
    """The calc project's clamp bug in an image whose test file lacks the target test."""
    image = tmp_path / "image"
    (image / "testbed" / "calc").mkdir(parents=True)
    (image / "testbed" / "tests").mkdir()
    (image / "testbed" / "calc" / "__init__.py").write_text(BUGGY)
    (image / "testbed" / "tests" / "test_calc.py").write_text(TESTS_BEFORE_PATCH)
    return SweTask(
        instance_id="calc__clamp-docker", repo="tripod/calc", base_commit="",
        problem_statement="clamp(15, 0, 10) returns 15; it should return 10.",
        patch=make_patch("calc/__init__.py", BUGGY, CALC),
        test_patch=make_patch("tests/test_calc.py", TESTS_BEFORE_PATCH, TESTS),
        FAIL_TO_PASS=list(F2P), PASS_TO_PASS=list(P2P),
        workspace=WorkspaceSpec(kind="docker", image=str(image), workdir="/testbed",
                                test_cmd=[sys.executable, "-m", "pytest", "-rA", "-q",
                                          "-p", "no:cacheprovider", "-o", "addopts=",
                                          "{tests}"]))


def _share(ws: DockerWorkspace, tests: list[str]) -> float:
    run = ws.score(LIMITS)
    assert run.status == "ok", run.output
    return run.share(tests)


def test_an_agent_edit_of_a_test_file_earns_nothing(fake_docker, docker_task) -> None:
    ws = DockerWorkspace.create(docker_task, LIMITS)
    try:
        assert "def test_clamp_high" not in ws.read_text("tests/test_calc.py")
        # the agent makes every test trivially pass instead of fixing clamp
        ws.write_text("tests/test_calc.py", "\n\n".join(
            f"def {t.split('::')[1]}():\n    pass\n" for t in F2P + P2P))
        assert _share(ws, F2P) == 0.0 and _share(ws, P2P) == 1.0
        assert ws.read_text("tests/test_calc.py") == TESTS  # the pristine file is back
        ws.write_text("tests/test_calc.py", None)  # a deleted test file is restored too
        assert _share(ws, F2P) == 0.0 and _share(ws, P2P) == 1.0
    finally:
        ws.close()
    assert not (fake_docker / ws.container).exists()


def test_a_source_fix_earns_the_reward(fake_docker, docker_task) -> None:
    """The control: the same scoring pays the gold fix, with the patched-in target test."""
    ws = DockerWorkspace.create(docker_task, LIMITS)
    try:
        workspace.apply_patch(ws, docker_task.patch)
        assert _share(ws, F2P + P2P) == 1.0
    finally:
        ws.close()


@pytest.mark.skipif(_why is not None, reason=f"docker workspace: {_why}")
def test_container_file_api_and_test_run() -> None:
    task = SweTask(
        instance_id="docker__smoke", repo="", base_commit="", problem_statement="smoke",
        patch="", test_patch="", FAIL_TO_PASS=[], PASS_TO_PASS=[],
        workspace=WorkspaceSpec(kind="docker", image=IMAGE, workdir="/tmp",
                                test_cmd=["python", "-c",
                                          "print('PASSED t.py::test_a'); import urllib.request"
                                          " as u; u.urlopen('http://example.com', timeout=3)"]))
    ws = DockerWorkspace.create(task, SandboxLimits(wall_s=60))
    try:
        ws.write_text("pkg/a.py", "x = 1\n")
        assert ws.read_text("pkg/a.py") == "x = 1\n"
        assert "pkg/a.py" in ws.list_files("pkg")
        result = ws.run_tests([], SandboxLimits(wall_s=60))
        assert "PASSED t.py::test_a" in result.output
        assert result.status == "failed"  # --network none: the download fails
    finally:
        ws.close()
