"""`tripod.envs.process.ChildProcess` on its own, with a trivial object in the child (no game).

The TextWorld and ALFWorld suites check the same machinery through real games; these tests
pin each failure mode of the shared module directly and quickly: an exception, a crash, a
hang, the restart after each, and that closing leaves no process and no file handle behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tripod.envs import process
from tripod.envs.base import EnvError
from tripod.envs.process import ChildProcess

# The child imports this module by the name pytest gave it, from the folder pytest put on
# sys.path for it (for tests/envs/test_process.py with tests/envs/__init__.py: tests/).
TEST_ROOT = str(Path(__file__).resolve().parents[len(__name__.split(".")) - 1])
TARGET = f"{__name__}:Counter"


class Counter:
    """What the tests run in the child: a counter, plus ways to fail on request."""

    def __init__(self, start: int = 0, closed_marker: str | None = None) -> None:
        if start < 0:
            raise ValueError("start must be >= 0")
        self.count = start
        self.closed_marker = closed_marker

    def add(self, n: int) -> int:
        self.count += n
        return self.count

    def pid(self, _: None) -> int:
        return os.getpid()

    def getenv(self, name: str) -> str | None:
        return os.environ.get(name)

    def fail(self, message: str) -> None:
        raise ValueError(message)

    def crash(self, code: int) -> None:
        print("about to die", file=sys.stderr, flush=True)
        os._exit(code)

    def hang(self, seconds: float) -> None:
        time.sleep(seconds)

    def close(self) -> None:
        if self.closed_marker:
            Path(self.closed_marker).write_text("closed")


def _child(**kwargs) -> ChildProcess:
    return ChildProcess(TARGET, kwargs, label="test child",
                        environ={"PYTHONPATH": TEST_ROOT, "TRIPOD_TEST_MARK": "child-only"})


def _children() -> set[int]:
    """Ids of this process's live descendants (its children and theirs: a child started by
    the fork server is the server's), without the fork server and `multiprocessing`'s
    resource tracker, which live as long as this process."""
    from multiprocessing import forkserver, resource_tracker

    if not Path("/proc/self/status").exists():
        pytest.skip("counting child processes needs /proc")
    parent: dict[int, int] = {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines()
                          if ":\t" in line)
        except OSError:  # the process ended while we looked
            continue
        parent[int(status.parent.name)] = int(fields.get("PPid", "0"))
    found, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier} - found
        found |= frontier
    service = {getattr(forkserver._forkserver, "_forkserver_pid", None),
               getattr(resource_tracker._resource_tracker, "_pid", None)}
    return found - service


@pytest.fixture(autouse=True, params=["fork server", "fresh interpreter"])
def start_mode(request, monkeypatch) -> str:
    """Every test runs with both ways of starting a child (`ChildProcess.fork_server`)."""
    if request.param == "fork server" and not process.FORK_SERVER:
        pytest.skip("no fork server on this platform")
    monkeypatch.setattr(process, "FORK_SERVER", request.param == "fork server")
    return request.param


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd")) if Path("/proc/self/fd").exists() else set()


def test_calls_reach_one_object_in_a_child_with_its_own_environment() -> None:
    with _child(start=10) as child:
        assert child.pid is None  # the constructor starts nothing
        assert child.call("add", 1, timeout_s=60) == 11
        assert child.call("add", 5, timeout_s=60) == 16  # the same object, kept between calls
        assert child.call("pid", None, timeout_s=60) == child.pid != os.getpid()
        assert child.call("getenv", "TRIPOD_TEST_MARK", timeout_s=60) == "child-only"
        assert "TRIPOD_TEST_MARK" not in os.environ
    assert child.pid is None


def test_an_exception_in_the_child_is_an_env_error_and_the_next_call_restarts() -> None:
    with _child(start=10) as child:
        child.call("add", 1, timeout_s=60)
        first = child.pid
        with pytest.raises(EnvError, match=r"(?s)test child raised during 'fail'.*"
                                           r"ValueError: no such door"):
            child.call("fail", "no such door", timeout_s=60)
        assert child.pid is None
        assert child.call("add", 1, timeout_s=60) == 11  # a fresh object: the count restarted
        assert child.pid != first


def test_a_failing_constructor_is_an_env_error() -> None:
    with _child(start=-1) as child, pytest.raises(EnvError, match="raised during '__init__'"):
        child.call("add", 1, timeout_s=60)


def test_a_crash_is_an_env_error_with_exit_code_and_last_output() -> None:
    with _child() as child:
        child.call("add", 1, timeout_s=60)
        pid = child.pid
        with pytest.raises(EnvError, match=r"(?s)crashed during 'crash'.*exit code 3\..*"
                                           r"about to die"):
            child.call("crash", 3, timeout_s=60)
        assert pid not in _children()  # reaped, not a zombie
        assert child.call("add", 2, timeout_s=60) == 2


def test_a_hang_past_the_time_out_is_an_env_error_and_the_child_is_killed() -> None:
    with _child() as child:
        child.call("add", 1, timeout_s=60)
        pid = child.pid
        with pytest.raises(EnvError, match=r"did not answer 'hang' within 0.5 s \(hung"):
            child.call("hang", 3600.0, timeout_s=0.5)
        assert child.pid is None
        with pytest.raises(ProcessLookupError):  # killed, not left sleeping
            os.kill(pid, 0)
        assert child.call("add", 1, timeout_s=60) == 1


def test_close_leaves_no_process_and_no_file_handle(tmp_path: Path) -> None:
    marker = tmp_path / "closed"
    children, fds = _children(), _open_fds()
    child = _child(closed_marker=str(marker))
    child.call("add", 1, timeout_s=60)
    assert child.pid in _children() and _open_fds() != fds
    child.close()
    child.close()  # twice is harmless
    assert _children() - children == set()
    assert _open_fds() == fds
    assert marker.read_text() == "closed"  # the child closed its object before exiting


def test_failures_leave_no_process_and_no_file_handle() -> None:
    children, fds = _children(), _open_fds()
    child = _child()
    for method, arg, timeout_s in (("fail", "x", 60), ("crash", 1, 60), ("hang", 3600.0, 0.5)):
        with pytest.raises(EnvError):
            child.call(method, arg, timeout_s=timeout_s)
        assert _children() - children == set()
        assert _open_fds() == fds


def _run_script(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    """`body` as a script of its own (a fresh process: its own fork server)."""
    script = tmp_path / "script.py"
    script.write_text(body)
    import tripod

    src = str(Path(tripod.__file__).resolve().parents[1])  # this checkout's tripod
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([src, TEST_ROOT, str(tmp_path)])}
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=environ, timeout=300, cwd=tmp_path)


def test_a_forked_child_does_not_run_the_parents_script_again(tmp_path: Path,
                                                               start_mode: str) -> None:
    """A script without a main guard: the child must not execute it (it would start the
    script's own work in every game process)."""
    done = _run_script(tmp_path, f"""
import sys
from tripod.envs import process
process.FORK_SERVER = {start_mode == "fork server"}
print("script body ran", flush=True)
child = process.ChildProcess("{TARGET}", {{}}, label="test child")
print("count", child.call("add", 2, timeout_s=60), flush=True)
child.close()
""")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("script body ran") == 1 and "count 2" in done.stdout


def test_a_fork_server_that_fails_falls_back_to_fresh_starts(tmp_path: Path,
                                                           start_mode: str) -> None:
    if start_mode != "fork server":
        pytest.skip("the fork server's own failure")
    (tmp_path / "bad_preload.py").write_text("raise RuntimeError('preload broke')\n")
    done = _run_script(tmp_path, f"""
from tripod.envs import process
process.PRELOAD = ("bad_preload",)
for _ in range(2):
    with process.ChildProcess("{TARGET}", {{}}, label="test child") as child:
        print("count", child.call("add", 3, timeout_s=60), flush=True)
""")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("count 3") == 2
    assert done.stderr.count("start without the fork server from now on") == 1


def test_children_ending_at_once_in_threads_report_their_own_exit_codes(start_mode: str) -> None:
    """Envs of a pool run in threads: each child's exit code reaches its own object intact
    (`multiprocessing` polls every child it lists on each start, from any thread)."""
    if start_mode != "fork server":
        pytest.skip("the race is the fork server's")
    from concurrent.futures import ThreadPoolExecutor

    def crash_repeatedly(code: int) -> list[str]:
        messages = []
        with _child() as child:
            for _ in range(8):
                child.call("add", 1, timeout_s=60)
                with pytest.raises(EnvError) as err:
                    child.call("crash", code, timeout_s=60)
                messages.append(str(err.value))
        return messages

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(crash_repeatedly, range(3, 9)))
    for code, messages in zip(range(3, 9), results, strict=True):
        assert all(f"exit code {code}." in m for m in messages), messages
