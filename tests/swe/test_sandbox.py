"""Whatever an agent's code does in a test run, the trainer (this test process) survives."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tripod.envs.swe.env import SweEnv, SweEnvConfig
from tripod.envs.swe.gate import Gate
from tripod.envs.swe.sandbox import (
    SandboxLimits,
    detect_violations,
    namespaces_available,
    run_sandboxed,
    sandbox_report,
)
from tripod.envs.swe.task import SweTask

# Their checks look at every process on the machine (forks left behind): under
# pytest-xdist they share one worker.
pytestmark = pytest.mark.xdist_group("sandbox")

needs_namespaces = pytest.mark.skipif(
    not namespaces_available(), reason="unshare cannot create namespaces on this machine")
FAST = SandboxLimits(wall_s=8, cpu_s=5, processes=64, output_bytes=200_000)


def _run(code: str, ws: Path, limits: SandboxLimits = FAST):
    return run_sandboxed([sys.executable, "-c", code], ws, limits=limits)


def test_plain_command_runs(tmp_path: Path) -> None:
    result = _run("print('hello')", tmp_path)
    assert (result.status, result.exit_code, result.output.strip()) == ("ok", 0, "hello")


def test_infinite_loop_is_stopped(tmp_path: Path) -> None:
    start = time.monotonic()
    result = _run("while True: pass", tmp_path, SandboxLimits(wall_s=3, cpu_s=1))
    assert result.status in ("cpu_limit", "timeout")
    assert time.monotonic() - start < 10


def test_sleeping_command_hits_the_wall_clock(tmp_path: Path) -> None:
    result = _run("import time; time.sleep(60)", tmp_path, SandboxLimits(wall_s=1))
    assert result.status == "timeout"
    assert result.elapsed_s < 5


def test_gigabytes_of_output_are_cut(tmp_path: Path) -> None:
    result = _run("import sys\nwhile True: sys.stdout.write('x' * 65536)", tmp_path)
    assert result.status == "output_limit" and result.truncated
    assert len(result.output) <= FAST.output_bytes


def test_memory_is_capped(tmp_path: Path) -> None:
    """Memory used is capped: by the run's memory cgroup where there is one (the run is
    killed), else by the address-space cap (MemoryError)."""
    code = "b = bytearray(3 * 1024**3)\nb[::4096] = b'x' * len(b[::4096])\nprint('allocated')"
    result = _run(code, tmp_path, SandboxLimits(memory_mb=512, run_memory_mb=512))
    assert "allocated" not in result.output
    if "memory" not in sandbox_report().run_caps:
        assert "MemoryError" in result.output


def test_the_address_space_is_the_hosts_under_a_memory_cgroup(tmp_path: Path) -> None:
    """An allocation the host grants lazily is granted in a run too, so a failing one
    cannot tell a scored run from real use; the cgroup counts only memory used."""
    if "memory" not in sandbox_report().run_caps:
        pytest.skip("no memory cgroup here: the address-space cap is in force")
    result = _run("b = bytes(2**30)\nprint('granted', len(b))", tmp_path,
                  SandboxLimits(memory_mb=512, run_memory_mb=256))
    assert "granted 1073741824" in result.output, result.output


@needs_namespaces
def test_fork_bomb_is_contained(tmp_path: Path) -> None:
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    result = _run(bomb, tmp_path, SandboxLimits(wall_s=3, processes=32))
    assert result.status == "timeout"
    time.sleep(0.5)
    stray = [p for p in Path("/proc").iterdir() if p.name.isdigit()
             and b"os.fork()" in _cmdline(p)]
    assert stray == []


def test_process_count_is_capped(tmp_path: Path) -> None:
    if sandbox_report().process_limit == "none":
        pytest.skip("no pids cgroup and running as root: RLIMIT_NPROC does not bind root")
    code = ("import os, time\nn = 0\nfor _ in range(200):\n    try:\n        pid = os.fork()\n"
            "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(5)\n"
            "        os._exit(0)\n    n += 1\nprint('forked', n)")
    result = _run(code, tmp_path, SandboxLimits(wall_s=10, processes=32))
    forked = int(result.output.split("forked")[1])
    assert 0 < forked < 32


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


@needs_namespaces
def test_signals_to_the_parent_are_contained_and_reported(tmp_path: Path) -> None:
    for code in ("import os, signal; os.kill(os.getppid(), signal.SIGKILL)",
                 "import os, signal; os.kill(-1, signal.SIGKILL)"):
        result = _run(code + "\nimport time; time.sleep(2)", tmp_path)
        assert result.status == "sandbox_violation", result.output
    result = _run("import os, signal; os.killpg(0, signal.SIGKILL)", tmp_path)
    assert result.status == "killed"


@needs_namespaces
def test_network_is_unreachable(tmp_path: Path) -> None:
    code = ("import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=3)\n"
            "print('connected')")
    result = _run(code, tmp_path)
    assert "connected" not in result.output
    assert detect_violations(result.output) == ["network"]


@needs_namespaces
def test_writes_outside_the_workspace_fail(tmp_path: Path) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside.txt"
    ws.mkdir()
    result = _run(f"open({str(outside)!r}, 'w').write('x')", ws)
    assert not outside.exists()
    assert detect_violations(result.output) == ["write_outside"]
    inside = _run("open('inside.txt', 'w').write('x'); print('ok')", ws)
    assert inside.status == "ok" and (ws / "inside.txt").exists()


def test_report_matches_this_machine() -> None:
    report = sandbox_report()
    if namespaces_available():
        assert report.network_isolated and report.writes_confined and report.pid_namespace
        assert report.reads_confined and report.init_unreadable


# --- the same attacks through an episode: edit the library, run the tests ----------------

ATTACKS = {
    "network": ("import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=3)\n",
                "sandbox_violation"),
    "write_outside": ("open('/etc/tripod-pwned', 'w').write('x')\n", "sandbox_violation"),
    "fork_bomb": ("import os\nwhile True:\n    try:\n        os.fork()\n"
                  "    except OSError:\n        pass\n", "timeout"),
    "loop": ("while True:\n    pass\n", "cpu_limit"),
    "output": ("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n", "output_limit"),
    "kill_parent": ("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n",
                    "sandbox_violation"),
}


def _limits_for(expected: str) -> SandboxLimits:
    """Only the limit under test is tight; every other one is far away, so the outcome does
    not depend on how loaded the machine is (with a tight CPU limit, a busy machine can
    turn an output flood into `cpu_limit`)."""
    loose = {"wall_s": 60, "cpu_s": 60, "processes": 64, "output_bytes": 50_000_000}
    tight = {"timeout": {"wall_s": 5}, "cpu_limit": {"cpu_s": 3},
             "output_limit": {"output_bytes": 500_000}}
    return SandboxLimits(**{**loose, **tight.get(expected, {})})


@needs_namespaces
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_episode_ends_with_clear_status(attack: str, calc_task: SweTask,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The sandbox layer on its own: the static gate (which refuses most of these changes
    before anything runs, `tests/swe/test_forgery.py`) is switched off, so the attack runs."""
    monkeypatch.setattr(Gate, "check", lambda self, changes: ([], []))
    code, expected = ATTACKS[attack]
    env = SweEnv("swe/test", "train", [calc_task], SweEnvConfig(limits=_limits_for(expected)))
    try:
        env.reset(0)
        edit = ("edit calc/__init__.py\n<<<<<<< SEARCH\n\"\"\"A tiny calculator library.\"\"\"\n"
                f"=======\n{code}>>>>>>> REPLACE")
        assert not env.step(edit).info.invalid_action
        step = env.step("run_tests")
        assert step.terminated and step.info.lost and not step.info.won
        assert step.info.extra["status"] == expected
        assert "Episode ended" in step.observation
        assert step.info.progress == 0.0
    finally:
        env.close()
    assert not Path("/etc/tripod-pwned").exists()


# --- a virtualenv reached through a link ---------------------------------------------------

_THROUGH_LINK = """
import sys
from pathlib import Path
from tripod.envs.swe.sandbox import SandboxLimits, run_sandboxed
ws = Path(sys.argv[1])
code = "import pytest, sys; print('RAN', sys.prefix)"
result = run_sandboxed([sys.executable, "-c", code], ws, limits=SandboxLimits(wall_s=30))
print(result.status, result.output)
"""


@needs_namespaces
def test_interpreter_reached_through_a_linked_virtualenv(tmp_path: Path) -> None:
    """The trainer started as LINK/bin/python (LINK a symlink to the virtualenv): the
    sandbox still finds the interpreter and its packages."""
    link = tmp_path / "venv-link"
    link.symlink_to(Path(sys.prefix).resolve(), target_is_directory=True)
    ws = tmp_path / "ws"
    ws.mkdir()
    done = subprocess.run([str(link / "bin" / "python"), "-c", _THROUGH_LINK, str(ws)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok") and f"RAN {link}" in done.stdout, done.stdout


def test_doctor_reports_a_working_sandbox(capsys: pytest.CaptureFixture) -> None:
    from tripod.cli import main

    code = main(["doctor"])
    out = capsys.readouterr().out
    if namespaces_available():
        assert code == 0 and out.startswith("swe sandbox: works"), out


@needs_namespaces
def test_doctor_says_why_the_sandbox_does_not_work(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture) -> None:
    from tripod.cli import main
    from tripod.envs.swe import sandbox

    monkeypatch.setattr(sandbox, "readonly_paths", lambda command: list(sandbox._SYSTEM_PATHS))
    sandbox.sandbox_report.cache_clear()
    try:
        code = main(["doctor"])
    finally:
        sandbox.sandbox_report.cache_clear()
    out = capsys.readouterr().out
    assert code == 1 and "DOES NOT WORK" in out
    assert "packages (pytest) cannot be loaded" in out and "cannot run" in out, out


def test_jail_outside_its_own_namespaces_refuses_and_leaves_the_host_name(tmp_path: Path) -> None:
    """The jail names its host "sandbox" only inside a UTS namespace of its own: started
    without `unshare` it refuses to set up (exit 125, status "setup_error") before any mount
    or rename, so the machine keeps its name (torchrun's rendezvous looks the host up by it)."""
    import json
    import os
    import socket

    from tripod.envs.swe import sandbox as sandbox_mod

    before = socket.gethostname()
    status_r, status_w = os.pipe()
    spec = {"argv": ["true"], "cwd": str(tmp_path), "env": {}, "workspace": str(tmp_path),
            "cgroups": [], "status_fd": status_w, "confine": True, "drop_privileges": True,
            "host_uts": os.stat("/proc/self/ns/uts").st_ino, "root": str(tmp_path / "root"),
            "readonly": [], "limits": {"cpu_s": 5, "memory_bytes": 1 << 30,
                                       "file_bytes": 1 << 20, "processes": 16}}
    spec_fd = sandbox_mod.spec_descriptor(json.dumps(spec))
    try:
        done = subprocess.run([sys.executable, "-I", str(sandbox_mod._JAIL), str(spec_fd)],
                              pass_fds=(status_w, spec_fd), capture_output=True, text=True,
                              timeout=30)
        os.close(status_w)
        os.close(spec_fd)
        status = os.read(status_r, 100)
    finally:
        os.close(status_r)
    assert (done.returncode, status) == (125, b"setup_error"), done.stderr
    assert "UTS namespace of its own" in done.stderr
    assert socket.gethostname() == before
    assert not (tmp_path / "root").exists()


def test_an_interpreter_named_through_dotdot_runs(tmp_path: Path) -> None:
    """A trainer started as ``../.venv/bin/python`` (from a folder beside the virtualenv)
    has that path as `sys.executable`, and it names the working folder, which the sandbox
    does not hold: the path is resolved before the run."""
    import os

    import tripod
    if not namespaces_available():
        pytest.skip("unshare cannot create namespaces on this machine")
    here = tmp_path / "here"
    here.mkdir()
    dotted = os.path.relpath(sys.executable, here)  # ../../..: Python keeps it unresolved
    code = ("import sys, tempfile\nfrom pathlib import Path\n"
            "from tripod.envs.swe.sandbox import SandboxLimits, run_sandboxed\n"
            "ws = Path(tempfile.mkdtemp())\n"
            "r = run_sandboxed([sys.executable, '-c', 'print(6 * 7)'], ws, "
            "limits=SandboxLimits(wall_s=60))\nprint(sys.executable, r.status, r.output)\n")
    src = str(Path(tripod.__file__).parents[1])
    done = subprocess.run([dotted, "-c", code], cwd=here, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": src})
    assert "/.." in done.stdout and " ok 42" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize("uid_map, gid_map, expected", [
    ("0 0 4294967295", "0 0 4294967295", (100_000, 4294967294)),
    ("0 100000 65536", "0 100000 65536", None),          # a container's 65,536 ids: none past 100,000
    ("0 0 1\n1 100000 300000", "0 0 1\n1 100000 300000", (100_000, 300_000)),
    ("0 0 4294967295", "0 0 200001", (100_000, 200_000)),
])
def test_run_ids_come_from_ids_the_user_namespace_maps(tmp_path: Path, monkeypatch,
                                                       uid_map, gid_map, expected) -> None:
    """A run's own ids are drawn past `RUN_IDS_FROM` from the ranges both maps hold (never
    the id -1); where none is mapped the run keeps the trainer's uid."""
    import os

    from tripod.envs.swe import sandbox
    (tmp_path / "uid_map").write_text(uid_map + "\n")
    (tmp_path / "gid_map").write_text(gid_map + "\n")
    real = sandbox._mapped
    monkeypatch.setattr(sandbox, "_mapped", lambda f: real(str(tmp_path / Path(f).name)))
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    drawn = [sandbox.run_ids() for _ in range(50)]
    if expected is None:
        assert drawn == [None] * 50
    else:
        lo, hi = expected
        assert all(ids is not None and ids[0] == ids[1] and lo <= ids[0] < hi for ids in drawn)
        assert len(set(drawn)) > 1
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert sandbox.run_ids() is None  # a non-root trainer's runs keep its uid
