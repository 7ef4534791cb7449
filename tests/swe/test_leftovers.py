"""What a trainer killed mid-episode leaves behind: its sandboxed run ends with it, and the
next trainer removes its episode folders, mount points and cgroups (`owners`)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tripod.envs.swe import owners, sandbox
from tripod.envs.swe.sandbox import namespaces_available
from tripod.envs.swe.task import SweTask
from tripod.envs.swe.workspace import LocalWorkspace

pytestmark = pytest.mark.xdist_group("sandbox")

TRAINER = """
import json, os, signal, sys, threading, time
from pathlib import Path
from tripod.envs.swe.sandbox import SandboxLimits, run_sandboxed
from tripod.envs.swe.task import task_from_dict
from tripod.envs.swe.workspace import LocalWorkspace

task = task_from_dict(json.loads(sys.argv[1]))
ws = LocalWorkspace.create(task, Path(sys.argv[2]))
argv = [sys.executable, "-c", "import time; time.sleep(600)  # " + sys.argv[3]]
threading.Thread(target=run_sandboxed, args=(argv, ws.root),
                 kwargs={"limits": SandboxLimits(wall_s=600)}, daemon=True).start()
print(ws.root.parent.name, flush=True)
time.sleep(600)
"""


def _dead_tag() -> str:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    dead = owners.tag(child.pid)
    child.wait()
    return dead


def _processes_with(marker: str) -> list[int]:
    """The processes of the sandboxed command (the trainer's own command line holds the
    marker without the comment sign)."""
    marker, found = f"# {marker}", []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def _wait_for(condition, seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


def test_owner_tags() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = owners.tag(child.pid)
        assert not owners.is_dead(live)
    finally:
        child.kill()
        child.wait()
    assert owners.is_dead(live)
    assert not owners.is_dead(owners.tag())
    boot, namespace, pid, start = live.split(".")
    other_boot = "f" * 8 if boot != "f" * 8 else "0" * 8
    assert not owners.is_dead(f"{other_boot}.{namespace}.{pid}.{start}"), \
        "another boot (or host): its owner cannot be checked, so it is kept"
    assert not owners.is_dead(f"{boot}.{int(namespace) + 1}.{pid}.{start}"), \
        "another PID namespace (another container on a shared folder): kept"
    assert owners.is_dead(f"{boot}.{namespace}.{os.getpid()}.{int(start) + 12345}"), \
        "a reused pid"
    assert owners.owner_of(f"swe-{live}-calc-x", "swe-") == live
    assert owners.owner_of("swe-calc--mut-1-x", "swe-") is None


def test_only_dead_owners_entries_are_swept(tmp_path: Path) -> None:
    dead, live = _dead_tag(), owners.tag()
    names = {f"swe-{dead}-a-1": True, f"swe-{live}-a-2": False, "swe-a--untagged": False,
             "swe-ffffffff.1.1.1-a-3": False, f"other-{dead}-a-4": False}
    for name in names:
        (tmp_path / name / "deep" / "er").mkdir(parents=True)
        (tmp_path / name / "deep" / "f.py").write_text("x = 1\n")
    removed = owners.sweep(tmp_path, "swe-", shutil.rmtree)
    assert removed == 1
    assert {p.name for p in tmp_path.iterdir()} == {n for n, gone in names.items() if not gone}


@pytest.mark.skipif(not namespaces_available(), reason="unshare cannot create namespaces")
def test_a_killed_trainers_run_ends_and_its_files_are_swept(
        calc_task: SweTask, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = f"tripod-leftover-{uuid.uuid4().hex}"
    trainer = subprocess.Popen(
        [sys.executable, "-c", TRAINER, json.dumps(calc_task.to_dict()), str(tmp_path), marker],
        stdout=subprocess.PIPE, text=True)
    try:
        folder, dead = trainer.stdout.readline().strip(), owners.tag(trainer.pid)
        assert folder.startswith(f"swe-{dead}-"), folder
        assert _wait_for(lambda: _processes_with(marker)), "the sandboxed command never started"
    finally:
        trainer.send_signal(signal.SIGKILL)
        trainer.wait()
    # The run notices that the trainer is gone and ends, with everything it started.
    assert _wait_for(lambda: not _processes_with(marker)), _processes_with(marker)
    assert owners.is_dead(dead)
    # A removal the killed trainer had begun (a folder `remove_tree` had moved up).
    (tmp_path / f".rm-{dead}-0123" / "a").mkdir(parents=True)
    groups = [g for parent in sandbox._cached_cgroup_parents().values()
              for g in parent.iterdir() if g.name.startswith(f"{dead}-")]
    roots = [p for p in Path(sandbox.tempfile.gettempdir()).iterdir()
             if p.name.startswith(f"tripod-root-{dead}-")]
    assert (tmp_path / folder).is_dir()
    # (another process's first sandboxed run may sweep the mount point and cgroups first)

    monkeypatch.setattr(owners, "_swept", set())  # this process has swept these already
    ws = LocalWorkspace.create(calc_task, tmp_path)
    sandbox.run_sandboxed(["true"], ws.root)  # its first cgroups and mount point sweep
    try:
        assert sorted(p.name for p in tmp_path.iterdir()) == [ws.root.parent.name]
        assert not [g for g in groups if g.exists()], "the killed trainer's cgroups stay"
        assert not [r for r in roots if r.exists()], "the killed trainer's mount point stays"
    finally:
        ws.close()
