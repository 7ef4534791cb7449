"""Docker workspaces: exercised only where a Docker daemon answers."""

from __future__ import annotations

import os

import pytest

from tripod.envs.swe.sandbox import SandboxLimits
from tripod.envs.swe.task import SweTask, WorkspaceSpec
from tripod.envs.swe.workspace import DockerWorkspace, docker_available

_why = docker_available()
pytestmark = pytest.mark.skipif(_why is not None, reason=f"docker workspace: {_why}")
IMAGE = os.environ.get("TRIPOD_SWE_DOCKER_IMAGE", "python:3.11-slim")


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
