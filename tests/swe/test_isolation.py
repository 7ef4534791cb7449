"""Host-harm attacks through the env's own tool calls: a test file the agent creates runs
in the sandbox (`run_tests FILE`), then the trainer's tools and the next episode must be
unharmed."""

from __future__ import annotations

import ctypes
import os
import tracemalloc
from pathlib import Path

import pytest

from tripod.envs.swe import safefs
from tripod.envs.swe._jail import _SYSCALLS
from tripod.envs.swe.env import SweEnv, SweEnvConfig
from tripod.envs.swe.sandbox import SandboxLimits, namespaces_available, over_workspace_caps
from tripod.envs.swe.task import SweTask

pytestmark = [pytest.mark.xdist_group("sandbox"), pytest.mark.skipif(
    not namespaces_available(), reason="unshare cannot create namespaces on this machine")]
_libc = ctypes.CDLL(None, use_errno=True)
SHM_KEY, MSG_KEY = 0x7E1A0001, 0x7E1A0002
_NR = _SYSCALLS.get(__import__("os").uname().machine, (0, {}))[1]


def _env(task: SweTask, **limits: int) -> SweEnv:
    env = SweEnv("swe/test", "train", [task],
                 SweEnvConfig(limits=SandboxLimits(wall_s=60, **limits)))
    env.reset(0)
    return env


def _plant(env: SweEnv, code: str, name: str = "test_plant"):
    body = code + "\n\ndef test_plant():\n    pass\n"
    create = f"edit tests/{name}.py\n<<<<<<< SEARCH\n=======\n{body}>>>>>>> REPLACE"
    assert not env.step(create).info.invalid_action
    return env.step(f"run_tests tests/{name}.py")


def _ipc_keys(kind: str) -> set[int]:
    rows = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]
    return {int(r.split()[0]) for r in rows}


def test_sysv_ipc_does_not_outlive_the_run(calc_task: SweTask) -> None:
    env = _env(calc_task)
    try:
        _plant(env, "import ctypes\nlibc = ctypes.CDLL(None)\n"
                    f"libc.shmget({SHM_KEY}, 1 << 20, 0o1600)\nq = libc.msgget({MSG_KEY}, 0o1600)\n"
                    "msg = ctypes.create_string_buffer(b'\\x01\\0\\0\\0\\0\\0\\0\\0SECRET')\n"
                    "libc.msgsnd(q, msg, 6, 0)\n")
        leaked = {SHM_KEY} & _ipc_keys("shm") | {MSG_KEY} & _ipc_keys("msg")
        later = _plant(env, f"import ctypes\nprint('QUEUE', ctypes.CDLL(None).msgget({MSG_KEY}, 0))\n",
                       "test_later")
    finally:
        env.close()
        _libc.shmctl(_libc.shmget(SHM_KEY, 0, 0), 0, None)  # IPC_RMID, should a test fail
        _libc.msgctl(_libc.msgget(MSG_KEY, 0), 0, None)
    assert leaked == set()
    assert "QUEUE -1" in later.observation or "QUEUE" not in later.observation


def test_keyrings_are_out_of_reach(calc_task: SweTask) -> None:
    user_keyring = -4
    if not _NR:
        pytest.skip("no syscall numbers for this machine")
    add_key, keyctl = _NR["add_key"], _NR["keyctl"]
    key = _libc.syscall(add_key, b"user", b"tripod-host-secret", b"HOSTSECRET", 10,
                        user_keyring)
    if key < 0:
        pytest.skip("this process cannot use the kernel keyring")
    env = _env(calc_task)
    try:
        step = _plant(env, "import ctypes\nsc = ctypes.CDLL(None).syscall\n"
                           f"k = sc({keyctl}, 10, -4, b'user', b'tripod-host-secret', 0)\n"
                           "buf = ctypes.create_string_buffer(64)\n"
                           f"print('READ', sc({keyctl}, 11, k, buf, 64), buf.value)\n"
                           f"sc({add_key}, b'user', b'tripod-planted', b'x', 1, -4)\n"
                           "assert False, 'show the output'\n")
        planted = _libc.syscall(keyctl, 10, user_keyring, b"user", b"tripod-planted", 0)
    finally:
        env.close()
        _libc.syscall(keyctl, 9, key, user_keyring)  # KEYCTL_UNLINK
    if planted >= 0:
        _libc.syscall(keyctl, 9, planted, user_keyring)
    assert "HOSTSECRET" not in step.observation and planted < 0


def test_no_nested_user_namespace(calc_task: SweTask) -> None:
    env = _env(calc_task)
    try:
        step = _plant(env, "import ctypes, subprocess\n"
                           "print('UNSHARE', ctypes.CDLL(None).unshare(0x10000000))\n"
                           "print('CLI', subprocess.run(['unshare', '--user', 'true']).returncode)\n"
                           "assert False, 'show the output'\n")
    finally:
        env.close()
    assert "UNSHARE -1" in step.observation and "CLI 0" not in step.observation


def _host_inotify_fails_while(work) -> bool:
    """Whether the host (this process) fails to get an inotify instance at any moment
    while `work` runs in a thread."""
    import threading
    failed, done = [], threading.Event()

    def run() -> None:
        try:
            work()
        finally:
            done.set()

    thread = threading.Thread(target=run)
    thread.start()
    while not done.wait(0.05):
        fd = _libc.inotify_init1(0)
        if fd < 0:
            failed.append(ctypes.get_errno())
        else:
            os.close(fd)
    thread.join()
    return bool(failed)


@pytest.mark.skipif(os.geteuid() != 0, reason="a non-root trainer's runs have its uid anyway")
def test_a_run_holding_every_inotify_instance_leaves_the_hosts(calc_task: SweTask) -> None:
    """Per-user kernel limits count per uid: a run under the trainer's root would take
    root's inotify instances from every other root process of the host while it runs."""
    env = _env(calc_task)
    held = {}
    try:
        code = ("import ctypes, time\nlibc = ctypes.CDLL(None)\n"
                "fds = [libc.inotify_init1(0) for _ in range(4096)]\n"
                "print('HELD', sum(f >= 0 for f in fds))\ntime.sleep(3)\n"
                "assert False, 'show the output'\n")
        failed = _host_inotify_fails_while(lambda: held.update(step=_plant(env, code)))
    finally:
        env.close()
    assert "HELD" in held["step"].observation  # the run did take what it could
    assert not failed


@pytest.mark.skipif(os.geteuid() != 0, reason="a non-root trainer's runs have its uid anyway")
def test_each_run_has_a_user_of_its_own(calc_task: SweTask) -> None:
    env = _env(calc_task)
    try:
        code = ("import os\nprint('IDS', os.getuid(), os.getgid(), os.getgroups())\n"
                "open('made_by_run.txt', 'w').write('x')\nassert False, 'show the output'\n")
        first = _plant(env, code).observation
        second = _plant(env, code, "test_again").observation
    finally:
        env.close()
    ids = [line.split("IDS ", 1)[1] for out in (first, second) for line in out.splitlines()
           if "IDS " in line]
    assert len(ids) == 2 and ids[0] != ids[1]  # a fresh id per run
    for shown in ids:
        uid, gid, groups = shown.split(" ", 2)
        assert int(uid) >= 100_000 and uid == gid and groups.startswith("[]")


@pytest.mark.slow  # tracemalloc slows the search: about 15 s
def test_search_holds_only_what_it_shows(calc_task: SweTask) -> None:
    env = _env(calc_task)
    try:
        _plant(env, "for i in range(2):\n    open(f'big{i}.txt', 'w').write('needle\\n' * 280_000)\n")
        tracemalloc.start()
        step = env.step("search needle")
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    finally:
        env.close()
    assert "560001 matches" in step.observation  # the planting file holds one more
    assert peak < 40_000_000  # a 2 MB text at a time in flight, not a million hits


def test_deep_folder_chain(calc_task: SweTask) -> None:
    """A chain past `safefs.MAX_DEPTH` ends the run (measuring it from the workspace's
    root would cost its depth squared on every look); the env stays usable."""
    env = _env(calc_task)
    try:
        step = _plant(env, "import os\nfor _ in range(1200):\n    os.mkdir('deep')\n"
                           "    os.chdir('deep')\nopen('x.py', 'w').write('needle')\n")
        assert step.terminated and step.info.extra["status"] == "workspace_limit", \
            step.observation
        root = env._episode.ws.root.parent
        env.reset(0)  # the pooled env's next episode closes this one
        assert not root.exists()
        assert "calc/__init__.py" in env.step("list").observation
    finally:
        env.close()


def test_a_chain_within_the_depth_cap_is_listed_and_searched(calc_task: SweTask) -> None:
    env = _env(calc_task)
    try:
        step = _plant(env, "import os\nfor _ in range(40):\n    os.mkdir('deep')\n"
                           "    os.chdir('deep')\nopen('x.py', 'w').write('needle')\n")
        assert not step.terminated, step.observation
        assert "calc/__init__.py" in env.step("list").observation
        assert "matches" in env.step("search needle").observation
    finally:
        env.close()


def test_measuring_a_deep_chain_stops_at_the_depth_cap(tmp_path: Path) -> None:
    folder = tmp_path
    for _ in range(safefs.MAX_DEPTH + 5):
        folder = folder / "d"
        folder.mkdir()
    opened = []
    real = safefs._open_dir
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(safefs, "_open_dir", lambda root, parts: opened.append(len(parts))
                      or real(root, parts))
        assert over_workspace_caps(tmp_path, SandboxLimits())
    assert max(opened) <= safefs.MAX_DEPTH + 1


def test_a_walk_opens_each_folder_once_whatever_its_depth(tmp_path: Path) -> None:
    """A "broom" a run leaves (a trunk 60 folders deep with side folders at each level)
    made every walk cost the sum of the folders' depths in opens, each folder opened from
    the root: seconds of the trainer's CPU per look at 19,500 folders. Each folder is
    opened once, through its parent's descriptor."""
    folder, folders = tmp_path, 0
    for _ in range(60):
        folder = folder / "t"
        folder.mkdir()
        for k in range(3):
            (folder / f"b{k}").mkdir()
        folders += 4
    (folder / "x.py").write_text("needle")
    calls = []
    real = os.open
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(safefs.os, "open", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
        entries, size = safefs.usage(tmp_path, 100_000, 10 ** 9)
        usage_opens = len(calls)
        files = list(safefs.walk_files(tmp_path))
    assert entries == folders + 1 and size >= len("needle")  # its blocks, at least
    assert files == ["t/" * 60 + "x.py"]
    assert usage_opens <= folders + 1
    assert len(calls) <= 2 * (folders + 1)


def test_many_files_end_the_run(calc_task: SweTask) -> None:
    env = _env(calc_task, workspace_files=500)
    try:
        step = _plant(env, "import os\nos.mkdir('many')\nfor i in range(1000):\n"
                           "    open(f'many/{i}', 'w').close()\n")
    finally:
        env.close()
    assert step.terminated and step.info.extra["status"] == "workspace_limit"


@pytest.mark.parametrize("how", ["unlinked", "tmpfile", "mapped"])
def test_removed_files_held_open_count_as_workspace_bytes(calc_task: SweTask, how: str) -> None:
    """A file removed after opening (or made with O_TMPFILE, or mapped and then closed) is
    in no folder, yet holds its disk blocks until the run ends: six such 255 MiB files held
    1.5 GB of the host's disk past a 512 MiB cap. The run's held files are counted while it
    runs."""
    make = {
        "unlinked": "f = open(f'held{i}', 'wb'); os.unlink(f'held{i}')",
        "tmpfile": "f = os.fdopen(os.open('.', os.O_TMPFILE | os.O_RDWR), 'wb')",
        "mapped": "f = open(f'held{i}', 'w+b'); os.unlink(f'held{i}')",
    }[how]
    code = ("import mmap, os, time\nheld = []\nfor i in range(4):\n"
            f"    {make}\n    f.write(b'x' * (3 << 20)); f.flush(); os.fsync(f.fileno())\n"
            + ("    held.append(mmap.mmap(f.fileno(), 0)); f.close()\n" if how == "mapped"
               else "    held.append(f)\n")
            + "time.sleep(4)\n")
    from tripod.envs.swe.sandbox import sandbox_report
    report = sandbox_report()
    if report.process_limit != "cgroup" and not report.run_caps:
        pytest.skip("no per-run cgroup: a run's processes are not known to the watch")
    env = _env(calc_task, workspace_mb=8)
    try:
        step = _plant(env, code)
    finally:
        env.close()
    assert step.terminated and step.info.extra["status"] == "workspace_limit"


def test_bytes_end_the_run(calc_task: SweTask) -> None:
    env = _env(calc_task, workspace_mb=1)
    try:
        step = _plant(env, "open('blob.bin', 'wb').write(b'x' * 3_000_000)\n")
    finally:
        env.close()
    assert step.terminated and step.info.extra["status"] == "workspace_limit"


RESERVE = """import ctypes, os


def test_reserve():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    fd = os.open('held.bin', os.O_CREAT | os.O_WRONLY, 0o600)
    rc = libc.fallocate(fd, 1, 0, 8 << 20)  # FALLOC_FL_KEEP_SIZE: blocks past the end
    print('RESERVED', rc, ctypes.get_errno(), os.stat('held.bin').st_blocks * 512)
    os.close(fd)
"""


def test_disk_blocks_cannot_be_reserved_past_a_file_end(calc_task: SweTask) -> None:
    """fallocate with FALLOC_FL_KEEP_SIZE holds disk blocks that a file's length does not
    show (and on ext4 ignores the file size cap): the filter refuses the call."""
    env = _env(calc_task, workspace_mb=4)
    try:
        step = _plant(env, RESERVE)
    finally:
        env.close()
    assert "RESERVED -1 95 0" in step.observation, step.observation


def test_reserved_blocks_count_as_workspace_bytes(tmp_path: Path) -> None:
    """Whatever reserves them, blocks past a file's end count towards the workspace cap."""
    (tmp_path / "held.bin").touch()
    fd = os.open(tmp_path / "held.bin", os.O_WRONLY)
    try:
        libc_fallocate = _libc.fallocate
        libc_fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
        if libc_fallocate(fd, 1, 0, 3 << 20) != 0:
            pytest.skip("this file system cannot reserve blocks past a file's end")
    finally:
        os.close(fd)
    assert (tmp_path / "held.bin").stat().st_size == 0
    assert over_workspace_caps(tmp_path, SandboxLimits(workspace_mb=2))
    assert not over_workspace_caps(tmp_path, SandboxLimits(workspace_mb=4))


def test_bytes_written_during_a_run_stop_it(calc_task: SweTask) -> None:
    """The workspace is measured while a run goes on: files that fill the disk and are
    deleted before the run ends (the check after the run would see nothing) stop it."""
    env = _env(calc_task, workspace_mb=2)
    try:
        step = _plant(env, "import os, time\nfor i in range(40):\n"
                           "    open(f'blob{i}.bin', 'wb').write(b'x' * 1_000_000)\n"
                           "time.sleep(3)\n"
                           "for i in range(40):\n    os.unlink(f'blob{i}.bin')\n")
    finally:
        env.close()
    assert step.terminated and step.info.extra["status"] == "workspace_limit"


def test_names_that_are_not_utf8_are_shown_escaped(calc_task: SweTask) -> None:
    env = _env(calc_task)
    try:
        _plant(env, "open(b'bad\\xff.py', 'w').write('needle')\n")
        listing = env.step("list").observation
        search = env.step("search needle").observation
    finally:
        env.close()
    assert "bad\\xff.py" in listing
    listing.encode("utf-8")
    search.encode("utf-8")


def test_control_characters_in_names_are_shown_escaped(calc_task: SweTask) -> None:
    """A name holding a newline or a terminal escape would read as an extra line of the
    listing (a fake file, or a fake message) if shown raw."""
    env = _env(calc_task)
    try:
        _plant(env, "open('evil\\nPASSED all\\x1b[2J.py', 'w').write('needle')\n")
        listing = env.step("list").observation
        search = env.step("search needle").observation
    finally:
        env.close()
    assert "evil\\x0aPASSED all\\x1b[2J.py" in listing
    for shown in (listing, search):
        assert "\x1b" not in shown and not any(
            line.startswith("PASSED all") for line in shown.splitlines())


def test_descriptors_per_process_are_capped(calc_task: SweTask) -> None:
    """Every descriptor a run's processes hold is one the trainer's watch of held files
    looks at (outside the run's CPU quota): 120 processes that each opened descriptors up
    to the trainer's own limit made the trainer examine millions of them every half second.
    A run's processes get the usual 1,024, and cannot raise it."""
    env = _env(calc_task)
    try:
        step = _plant(env, "import os, resource\n\n\ndef test_probe():\n"
                           "    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
                           "    try:\n"
                           "        resource.setrlimit(resource.RLIMIT_NOFILE, (hard + 1, hard + 1))\n"
                           "        raised = 'RAISED'\n"
                           "    except (ValueError, OSError):\n        raised = 'KEPT'\n"
                           "    n, fd = 0, os.open('/dev/null', os.O_RDONLY)\n"
                           "    try:\n        while n < 100_000:\n            os.dup(fd)\n"
                           "            n += 1\n    except OSError:\n        pass\n"
                           "    print('NOFILE', soft, hard, raised, 'DUPS', n)\n")
    finally:
        env.close()
    line = next(t for t in step.observation.splitlines() if t.startswith("NOFILE"))
    _, soft, hard, raised, _, dups = line.split()
    assert (int(soft), int(hard), raised) == (1024, 1024, "KEPT")
    assert int(dups) < 1024


def test_the_held_files_watch_stops_at_its_budget(tmp_path: Path, monkeypatch) -> None:
    """The watch counts a removed file this process holds, and gives up (None: the run is
    stopped at the workspace limit) past `HELD_SCAN_MAX` descriptors and mappings rather than
    looking at all of them."""
    from tripod.envs.swe import sandbox

    group = tmp_path / "group"
    group.mkdir()
    (group / "cgroup.procs").write_text(f"{os.getpid()}\n")
    device = os.stat(tmp_path).st_dev
    with open(tmp_path / "gone.bin", "wb") as held:
        held.write(b"x" * 70_000)
        held.flush()
        os.unlink(tmp_path / "gone.bin")
        counted = sandbox.held_unlinked_bytes([group], device)
        monkeypatch.setattr(sandbox, "HELD_SCAN_MAX", 5)
        assert sandbox.held_unlinked_bytes([group], device) is None
    assert counted is not None and counted >= 70_000


def test_a_slow_watch_is_spaced_out_within_a_bound(monkeypatch) -> None:
    """A measurement that took t seconds is not repeated before `WATCH_SPACING` x t (the
    trainer's share of a core spent watching one run stays small), nor later than
    `WATCH_MAX_GAP_S`: a run that makes the measurement slow cannot buy itself a long
    stretch in which it writes unseen."""
    from tripod.envs.swe import sandbox

    now, spent = [100.0], [0.05]
    monkeypatch.setattr(sandbox.time, "monotonic", lambda: now[0])

    def slow() -> bool:
        now[0] += spent[0]
        return False

    spaced = sandbox._Spaced(slow)
    assert not spaced.due()
    now[0] += sandbox.WATCH_S
    assert spaced.due() and not spaced()
    now[0] += sandbox.WATCH_SPACING * 0.05 - 0.01
    assert not spaced.due()
    now[0] += 0.01
    assert spaced.due()
    spent[0] = 60.0
    assert not spaced()
    now[0] += sandbox.WATCH_MAX_GAP_S - 0.01
    assert not spaced.due()
    now[0] += 0.01
    assert spaced.due()
