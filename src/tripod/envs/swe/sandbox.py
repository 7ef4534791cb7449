"""Run one untrusted command (an agent's code under test) so that it cannot hurt the trainer.

What is enforced, and how (see docs/swe.md for the honest list of what is not):

- **Own session**: the command starts with ``start_new_session``; the trainer kills the whole
  process group on time-out, so no signal aimed at the group reaches the trainer.
- **Namespaces** (``unshare``, when the kernel allows it): a fresh network namespace (no
  interfaces up: every connection fails), a PID namespace whose init is `_jail.py` (signals
  to the parent are reported; everything dies with it) and a mount namespace whose root
  holds only the workspace (writable), the interpreter and system libraries (read-only), a
  minimal ``/dev`` and the namespace's own ``/proc``.
- **Nothing of the trainer's**: the sandbox's processes start with a two-variable
  environment, no inherited descriptors but the ones passed on purpose, and the jail is
  non-dumpable.
- **Resource limits** (``setrlimit``): CPU seconds, file size, core dumps, and the address
  space where no memory cgroup caps the run; and per run, through cgroups where they can
  be created: a process cap (``pids``), one core of CPU and a memory cap for all processes
  together (``RLIMIT_NPROC`` as well, which the kernel enforces for non-root users only).
  Under a memory cgroup the address space is left as the host leaves it: the cgroup counts
  the memory a run uses, and an address-space cap would let code tell a scored run from
  real use (an allocation the host grants lazily, ``bytes(5 * 2**30)``, fails under it).
- **Wall clock and output**: the trainer reads the merged stdout/stderr with a deadline and a
  byte cap; past either it kills the group (and the cgroup's members).

Capabilities are probed once per process (`sandbox_report`), never assumed.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import secrets
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tripod.envs.swe import owners, safefs

_JAIL = Path(__file__).with_name("_jail.py")

STATUS_OK = "ok"
STATUS_FAILED = "failed"
STATUS_TIMEOUT = "timeout"
STATUS_OUTPUT_LIMIT = "output_limit"
STATUS_CPU_LIMIT = "cpu_limit"
STATUS_KILLED = "killed"
STATUS_SETUP_ERROR = "sandbox_error"
STATUS_VIOLATION = "sandbox_violation"
STATUS_WORKSPACE_LIMIT = "workspace_limit"
ABNORMAL_STATUSES = (STATUS_TIMEOUT, STATUS_OUTPUT_LIMIT, STATUS_CPU_LIMIT, STATUS_KILLED,
                     STATUS_SETUP_ERROR, STATUS_VIOLATION, STATUS_WORKSPACE_LIMIT)
"""Run statuses that mean the command was stopped by the sandbox rather than finishing."""


@dataclass(frozen=True)
class SandboxLimits:
    """Per-command limits. Defaults fit the test suites of small Python projects."""

    wall_s: float = 120.0
    """Wall-clock seconds before the whole process tree is killed."""
    cpu_s: int = 120
    """CPU seconds per process (RLIMIT_CPU: SIGXCPU, then SIGKILL)."""
    memory_mb: int = 4096
    """Address space per process (RLIMIT_AS), in MiB, where no memory cgroup caps the run
    (`run_memory_mb`)."""
    processes: int = 128
    """Most processes alive at once (pids cgroup; RLIMIT_NPROC, which binds every user but
    root: a run under ids of its own, `run_ids`, or a non-root trainer's)."""
    output_bytes: int = 2_000_000
    """Bytes of merged stdout/stderr kept; past this the command is killed."""
    file_mb: int = 256
    """Largest file the command may write (RLIMIT_FSIZE), in MiB."""
    open_files: int = 1024
    """Descriptors per process (RLIMIT_NOFILE; the usual soft limit, which test suites are
    written to live within). With `processes` it bounds what the trainer's watch of held
    files (`held_unlinked_bytes`) has to look at."""
    cpus: float = 1.0
    """CPU share of the whole run, in cores (cgroup CPU quota), so a run cannot starve
    the trainer and other episodes on the host."""
    run_memory_mb: int = 4096
    """Memory of the whole run, all processes together (memory cgroup), in MiB."""
    workspace_files: int = 20_000
    """Most entries (files, folders, links) a workspace may hold during and after a run;
    past this the run ends as `workspace_limit` (the projects hold a few hundred)."""
    workspace_mb: int = 512
    """Most bytes of regular files a workspace may hold during and after a run, in MiB
    (the larger of a file's size and the disk blocks it holds: space reserved past a
    file's end counts). During a run the workspace is measured every `WATCH_S` seconds."""


@dataclass
class RunResult:
    """What one sandboxed command did."""

    status: str
    """One of ok, failed, timeout, output_limit, cpu_limit, killed, sandbox_violation
    (the command signalled its parent), sandbox_error (the sandbox could not be set up)."""
    exit_code: int
    output: str
    elapsed_s: float
    truncated: bool = False
    """The output reached `SandboxLimits.output_bytes` (the command was then killed)."""
    channel: bytes = b""
    """What the command wrote to the `drain` pipe of `run_sandboxed` (if one was given)."""


@dataclass(frozen=True)
class SandboxReport:
    """Which protections actually work on this machine (probed by running commands)."""

    namespaces: bool
    network_isolated: bool
    writes_confined: bool
    pid_namespace: bool
    reads_confined: bool
    """A file of the host outside the workspace is not visible."""
    init_unreadable: bool
    """/proc/1 (the jail: environment, memory, descriptors) cannot be read."""
    process_limit: str
    """"cgroup", "rlimit" or "none"."""
    run_caps: tuple[str, ...] = ()
    """Per-run cgroup caps in force besides pids: "cpu" (one core), "memory"."""
    packages: bool = False
    """The trainer's interpreter starts in the sandbox and imports pytest there."""
    notes: tuple[str, ...] = field(default_factory=tuple)

    def problems(self) -> list[str]:
        """Why SWE tasks cannot be run safely here ([] when the sandbox works)."""
        found = [] if self.packages else [
            "the interpreter or its packages (pytest) cannot be loaded in the sandbox"]
        if not self.namespaces:
            found.append("unshare cannot create namespaces: no isolation")
        checks = {"network_isolated": "the network is reachable",
                  "writes_confined": "writes outside the workspace succeed",
                  "pid_namespace": "no PID namespace",
                  "reads_confined": "host files are readable",
                  "init_unreadable": "the jail's /proc/1 is readable"}
        found += [why for name, why in checks.items()
                  if self.namespaces and not getattr(self, name)]
        return found + list(self.notes)


def _unshare_prefix(as_root: bool) -> list[str]:
    # IPC: SysV shared memory and message queues die with the run (in the host's
    # namespace they outlive it and pass data to later episodes). UTS: its own host name.
    base = ["unshare", "--net", "--mount", "--pid", "--ipc", "--uts", "--fork", "--mount-proc",
            "--kill-child"]
    return base if as_root else [base[0], "--user", "--map-root-user", *base[1:]]


@functools.cache
def namespaces_available() -> bool:
    """Can this process create network+mount+PID namespaces (as root or via a user ns)?"""
    if shutil.which("unshare") is None:
        return False
    try:
        done = subprocess.run([*_unshare_prefix(os.geteuid() == 0), "true"], timeout=20,
                              capture_output=True)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


_CONTROLLERS = ("pids", "cpu", "memory")


def _own_cgroups() -> dict[str, str]:
    """{controller: this process's cgroup path} from /proc/self/cgroup ("" = v2)."""
    found: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, names, path = line.split(":", 2)
            for name in names.split(",") if names else [""]:
                found[name] = path
    return found


def _writable_parent(base: Path, enable: str = "") -> Path | None:
    parent = base / "tripod-swe"
    try:
        parent.mkdir(exist_ok=True)
        if enable and (parent / "cgroup.subtree_control").exists():
            (parent / "cgroup.subtree_control").write_text(enable)
    except OSError:
        return None
    return parent if os.access(parent, os.W_OK) else None


def _cgroup_parents() -> dict[str, Path]:
    """{controller: a writable folder for per-run child groups}. cgroup v1 has one
    hierarchy per controller; the groups are made under this process's own group (so a
    run stays inside whatever limits the trainer already has). Under v2 one group holds
    every controller."""
    own = _own_cgroups()
    parents: dict[str, Path] = {}
    for name in _CONTROLLERS:
        if name in own:
            base = Path("/sys/fs/cgroup") / name / own[name].lstrip("/")
            if (base / "cgroup.procs").exists() and (parent := _writable_parent(base)):
                parents[name] = parent
    if not parents and "" in own:
        base = Path("/sys/fs/cgroup") / own[""].lstrip("/")
        if (base / "cgroup.controllers").exists():
            parent = _writable_parent(base, "+pids +cpu +memory")
            if parent is not None:
                parents = {name: parent for name in _CONTROLLERS
                           if name in (parent / "cgroup.subtree_control").read_text()}
    return parents


@functools.cache
def _cached_cgroup_parents() -> dict[str, Path]:
    return _cgroup_parents()


def _limit_files(name: str, limits: SandboxLimits, v2: bool) -> dict[str, str]:
    """What to write in a fresh group of `name` to apply `limits`."""
    memory = str(limits.run_memory_mb * 1024 * 1024)
    quota = str(int(100_000 * limits.cpus))
    if name == "pids":
        return {"pids.max": str(limits.processes)}
    if name == "cpu":
        return {"cpu.max": f"{quota} 100000"} if v2 else {
            "cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": quota}
    return {"memory.max": memory, "memory.swap.max": "0"} if v2 else {
        "memory.limit_in_bytes": memory, "memory.memsw.limit_in_bytes": memory}


def _kill_cgroup(group: Path) -> None:
    """Kill every member of a per-run group, then remove it (retrying while they die)."""
    for _ in range(50):
        with contextlib.suppress(OSError):
            pids = [int(p) for p in (group / "cgroup.procs").read_text().split()]
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            group.rmdir()
            return
        time.sleep(0.02)


def _make_cgroups(limits: SandboxLimits) -> list[Path]:
    """One fresh group per available controller, with the run's limits written; a
    controller whose limit cannot be written is left out (and reported by the probe)."""
    groups: dict[Path, Path] = {}
    name_id = f"{owners.tag()}-{uuid.uuid4().hex[:12]}"
    for name, parent in _cached_cgroup_parents().items():
        owners.sweep_once(parent, "", _kill_cgroup)  # groups a killed trainer left
        group = parent / name_id
        v2 = (parent / "cgroup.subtree_control").exists()
        try:
            group.mkdir(exist_ok=True)
            for fname, value in _limit_files(name, limits, v2).items():
                if not (group / fname).exists():
                    continue
                try:
                    (group / fname).write_text(value)
                except OSError:
                    if "swap" not in fname and "memsw" not in fname:
                        raise  # swap accounting is often off; the memory cap still holds
        except OSError:
            _kill_cgroup(group)
            continue
        groups[group] = group
    return list(groups)


def _memory_capped(groups: list[Path], limits: SandboxLimits) -> bool:
    """Whether one of the run's cgroups holds its memory cap."""
    cap = str(limits.run_memory_mb * 1024 * 1024)
    for group in groups:
        for name in ("memory.max", "memory.limit_in_bytes"):
            with contextlib.suppress(OSError):
                if (group / name).read_text().strip() == cap:
                    return True
    return False


RUN_IDS_FROM = 100_000
"""A run's own user and group id is drawn from the ids at or past this one (ordinary
accounts and `nobody`, 65534, lie below), among those this process's user namespace maps."""


def _mapped(map_file: str) -> list[tuple[int, int]]:
    """[first, past_last) id ranges of this user namespace (``/proc/self/uid_map``)."""
    ranges = []
    with contextlib.suppress(OSError, ValueError), open(map_file) as fh:
        for line in fh:
            inside, _outside, count = (int(x) for x in line.split())
            ranges.append((inside, inside + count))
    return ranges


def run_ids() -> tuple[int, int] | None:
    """A fresh (uid, gid) for one run, or None where runs keep the trainer's uid (it is not
    root, or its user namespace maps no id from `RUN_IDS_FROM` on).

    Per-user kernel limits (inotify instances and watches, RLIMIT_NPROC, which the kernel
    does not apply to root) are counted per uid. A run under the trainer's uid 0 would
    spend root's, so a run holding them all would stop the host's other root processes
    from using inotify until it ends; under an id of its own it spends only its own."""
    if os.geteuid() != 0:
        return None
    usable = []
    for ranges in (_mapped("/proc/self/uid_map"), _mapped("/proc/self/gid_map")):
        usable.append([(max(lo, RUN_IDS_FROM), hi - 1) for lo, hi in ranges
                       if hi - 1 > max(lo, RUN_IDS_FROM)])  # hi - 1: never the id -1
    common = [(max(a, c), min(b, d)) for a, b in usable[0] for c, d in usable[1]
              if min(b, d) > max(a, c)]
    if not common:
        return None
    lo, hi = max(common, key=lambda r: r[1] - r[0])
    n = lo + secrets.randbelow(hi - lo)
    return n, n


def _jail_spec(argv: list[str], workspace: Path, cwd: Path, env: dict[str, str],
               limits: SandboxLimits, cgroups: list[Path], root: Path | None,
               status_fd: int, readonly_suffixes: tuple[str, ...] = ()) -> str:
    """The jail's spec. The address-space cap (``memory_bytes``) is 0, i.e. not set, where a
    memory cgroup caps the run (see the module's docstring). A confined run gets ids of its
    own (`run_ids`) where the host allows them."""
    mib = 1024 * 1024
    address = 0 if _memory_capped(cgroups, limits) else limits.memory_mb * mib
    return json.dumps({
        "argv": argv, "cwd": str(cwd), "env": env, "workspace": str(workspace),
        "cgroups": [str(g) for g in cgroups], "status_fd": status_fd,
        "confine": root is not None, "drop_privileges": root is not None,
        "run_as": run_ids() if root is not None else None,
        "max_entries": limits.workspace_files,
        "host_uts": os.stat("/proc/self/ns/uts").st_ino,
        "root": str(root) if root else "", "readonly": readonly_paths(argv[0]),
        "protect": list(readonly_suffixes),
        "limits": {"cpu_s": limits.cpu_s, "memory_bytes": address,
                   "file_bytes": limits.file_mb * mib, "processes": limits.processes,
                   "open_files": limits.open_files},
    })


def spec_descriptor(spec: str) -> int:
    """A descriptor of an unlinked file holding `spec`, read from its start: how the jail
    gets its spec. On the command line it would stay readable to the command for the whole
    run (``/proc/1/cmdline``: host paths, cgroup names, the command's environment)."""
    with tempfile.TemporaryFile() as held:
        held.write(spec.encode())
        held.flush()
        fd = os.dup(held.fileno())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


_SYSTEM_PATHS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/usr/bin",
                 "/usr/sbin", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libexec",
                 "/usr/share/zoneinfo", "/etc/alternatives", "/etc/ld.so.cache",
                 "/etc/localtime")
"""What a command sees of the host besides its workspace (read-only): system binaries and
shared libraries. Not /usr/local, /etc (beyond the loader cache), /home, /root, /tmp."""


def _prefix_of(executable: Path) -> Path | None:
    """The installation folder of an interpreter (``PREFIX/bin/python``, a virtualenv or
    an installation with its ``lib/python*``), unless it is a system folder already covered
    by `_SYSTEM_PATHS` (or the whole /usr). An interpreter elsewhere (a link in some
    other folder) has none: binding its folder's parent could expose /tmp or /home."""
    prefix = executable.parent.parent
    if str(prefix) in ("/", "/usr") or executable.parent.name != "bin":
        return None
    installed = (prefix / "pyvenv.cfg").exists() or any(prefix.glob("lib/python*"))
    return prefix if installed else None


def _plain(executable: str) -> str:
    """`executable` with its `..` components resolved (the path up to the last one through
    its links, as the kernel would) and every other link kept: an interpreter started as
    ``../.venv/bin/python`` names the working folder, which is not in the sandbox, so the
    path as given would not resolve there; a linked virtualenv stays at its link."""
    parts = executable.split("/")
    if ".." not in parts:
        return executable
    last = len(parts) - 1 - parts[::-1].index("..")
    head = os.path.realpath("/".join(parts[:last + 1]) or "/")
    return os.path.join(head, *(p for p in parts[last + 1:] if p not in ("", ".")))


def readonly_paths(command: str) -> list[str]:
    """Host paths bound read-only into the sandbox: system libraries, the trainer's
    interpreter (its venv and base installation) and the command's interpreter.

    An interpreter folder reached through symlinks (a virtualenv folder that is a link, a
    link to a link, a linked parent folder, an interpreter that links elsewhere) is bound
    at its real location, and every link on the way is recreated as a link, so the path
    as the trainer names it leads to the same files inside the sandbox."""
    paths = list(_SYSTEM_PATHS)
    interpreters = [_plain(sys.executable)]
    if os.path.isabs(command):
        interpreters.append(_plain(command))
    wanted = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
              *_site_packages(), *interpreters}
    for exe in interpreters:
        for candidate in (Path(exe), Path(os.path.realpath(exe))):
            if (prefix := _prefix_of(candidate)) is not None:
                wanted.add(str(prefix))
    bound: set[str] = set()
    for path in wanted:
        bound.update(links_on(path))
        bound.add(os.path.realpath(path))
    bound -= {"/", "/usr"}
    # A path inside a folder bound anyway (a link in the virtualenv's bin/, an interpreter
    # under its prefix) is there already; binding it again would only stack mounts.
    folders = [p for p in (*paths, *bound) if os.path.isdir(p) and not os.path.islink(p)]
    return paths + sorted(p for p in bound
                          if not any(p.startswith(folder + "/") for folder in folders))


def links_on(path: str) -> list[str]:
    """Every symbolic link met while resolving `path`, in order, each named by its real
    parent folder (so that recreating them at those places, plus the real location,
    makes `path` resolve inside the sandbox as it does on the host)."""
    links: list[str] = []
    current, pending = "/", list(Path(os.path.abspath(path)).parts[1:])
    while pending and len(links) < 40:  # 40: the kernel's own limit on links followed
        name = pending.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            current = os.path.dirname(current)
            continue
        step = os.path.join(current, name)
        if not os.path.islink(step):
            current = step
            continue
        links.append(step)
        target = Path(os.readlink(step))
        if target.is_absolute():
            current = "/"
        pending[:0] = [part for part in target.parts if part != "/"]
    return links


def _site_packages() -> list[str]:
    """The trainer's package folders (inside its prefix, unless linked elsewhere)."""
    return sorted({sysconfig.get_paths()[key] for key in ("purelib", "platlib")})


WATCH_S = 0.5
"""How often a sandboxed run's workspace is measured while it runs (`SandboxLimits`)."""
WATCH_SPACING = 20.0
"""After a measurement that took t seconds, the next waits this many times t (within
`WATCH_MAX_GAP_S`): the measurement runs in the trainer, outside the run's CPU quota, so a
run that makes it slow does not make the trainer spend its CPU for it."""
WATCH_MAX_GAP_S = 3.0
"""The longest a run goes unmeasured: a run that made the last measurement slow cannot
buy itself a long stretch to write unseen. What a measurement looks at is bounded (the
workspace's entry cap, `HELD_SCAN_MAX`), so it stays well under this."""


class _Spaced:
    """A run's `watch`, called when `due`: every `WATCH_S` seconds, spaced out after slow
    calls (`WATCH_SPACING`), never more than `WATCH_MAX_GAP_S` apart."""

    def __init__(self, watch: Callable[[], bool]) -> None:
        self._watch = watch
        self._next = time.monotonic() + WATCH_S

    def due(self) -> bool:
        return time.monotonic() >= self._next

    def __call__(self) -> bool:
        start = time.monotonic()
        try:
            return self._watch()
        finally:
            spent = time.monotonic() - start
            self._next = time.monotonic() + max(WATCH_S, min(WATCH_SPACING * spent,
                                                             WATCH_MAX_GAP_S))


def _read_capped(proc: subprocess.Popen, limits: SandboxLimits, deadline: float,
                 drain: int | None = None,
                 watch: _Spaced | None = None) -> tuple[bytes, bytes, str | None]:
    """Read merged output (and the `drain` pipe, if any) until EOF, the deadline, the
    byte cap or `watch` saying the workspace is over its caps, whichever comes first.
    Returns (output, drained bytes, stop reason)."""
    assert proc.stdout is not None
    out, side = bytearray(), bytearray()
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        if drain is not None:
            sel.register(drain, selectors.EVENT_READ, side)
        while sel.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return bytes(out), bytes(side), STATUS_TIMEOUT
            if watch is not None and watch.due() and watch():
                return bytes(out), bytes(side), STATUS_WORKSPACE_LIMIT
            for key, _ in sel.select(timeout=min(remaining, WATCH_S)):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                key.data.extend(chunk)
                if len(out) > limits.output_bytes or len(side) > limits.output_bytes:
                    return (bytes(out[:limits.output_bytes]), bytes(side),
                            STATUS_OUTPUT_LIMIT)
    return bytes(out), bytes(side), None


def _wait_until(proc: subprocess.Popen, deadline: float,
                watch: _Spaced | None = None) -> str | None:
    """Wait for a normal exit (so its real exit code is kept); the time-out status, or
    the workspace limit where `watch` says so, otherwise."""
    while True:
        try:
            proc.wait(timeout=max(0.05, min(deadline - time.monotonic(), WATCH_S)))
            return None
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                return STATUS_TIMEOUT
            if watch is not None and watch.due() and watch():
                return STATUS_WORKSPACE_LIMIT


def _status_of(code: int, killed_by: str | None, outcome: str) -> str:
    if killed_by is not None:
        return killed_by
    if outcome.startswith("parent_signalled"):
        return STATUS_VIOLATION
    if outcome == "setup_error":
        return STATUS_SETUP_ERROR
    if code in (128 + signal.SIGXCPU, -signal.SIGXCPU):
        return STATUS_CPU_LIMIT
    if code in (128 + signal.SIGKILL, -signal.SIGKILL):
        return STATUS_KILLED
    return STATUS_OK if code == 0 else STATUS_FAILED


_JAIL_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
"""The whole environment of the sandbox's own processes: nothing of the trainer's (tokens a
user exported would otherwise be readable from inside, e.g. in /proc/1/environ)."""


def run_capped(argv: list[str], cwd: Path, limits: SandboxLimits,
               pass_fds: tuple[int, ...] = (), cgroups: tuple[Path, ...] = (),
               env: dict[str, str] | None = None, drain: int | None = None,
               watch: Callable[[], bool] | None = None) -> RunResult:
    """Run `argv` in its own session, reading merged output (and the `drain` pipe) under
    the wall-clock and byte caps and `watch` (True: stop); on any, kill its process group
    (and the members of `cgroups`). Never raises for anything the command does."""
    start = time.monotonic()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd,
                                pass_fds=pass_fds, env=env)
    finally:
        for fd in pass_fds:  # the child holds them now; EOF on `drain` needs ours closed
            os.close(fd)
    deadline = start + limits.wall_s
    spaced = _Spaced(watch) if watch is not None else None
    try:
        raw, side, killed_by = _read_capped(proc, limits, deadline, drain, spaced)
        if killed_by is None:
            killed_by = _wait_until(proc, deadline, spaced)
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        for group in cgroups:
            _kill_cgroup(group)
        code = proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    return RunResult(status=killed_by or "", exit_code=code,
                     output=raw.decode("utf-8", errors="replace"),
                     elapsed_s=time.monotonic() - start,
                     truncated=killed_by == STATUS_OUTPUT_LIMIT, channel=side)


def run_sandboxed(argv: list[str], workspace: Path, *, cwd: Path | None = None,
                  env: dict[str, str] | None = None,
                  limits: SandboxLimits = SandboxLimits(),
                  pass_fds: tuple[int, ...] = (), drain: int | None = None,
                  readonly_suffixes: tuple[str, ...] = ()) -> RunResult:
    """Run `argv` confined to `workspace`; never raises for anything the command does.

    `pass_fds` are handed to the command (and closed here); `drain` is the read end of a
    pipe whose other end the command holds: it is read concurrently with the output and
    returned in `RunResult.channel` (the trusted test runner reports through it). Files of
    the workspace whose names end with one of `readonly_suffixes` are read-only for the
    command, in folders it cannot rename or remove (with namespaces only)."""
    if os.path.isabs(argv[0]):
        argv = [_plain(argv[0]), *argv[1:]]
    try:
        workspace = workspace.resolve()
        isolated = namespaces_available()
        cgroups = _make_cgroups(limits)
        root = None
        if isolated:
            owners.sweep_once(Path(tempfile.gettempdir()), "tripod-root-", Path.rmdir)
            root = Path(tempfile.mkdtemp(prefix=f"tripod-root-{owners.tag()}-"))
    except BaseException:
        for fd in pass_fds:  # ours to close, as run_capped would have
            os.close(fd)
        raise
    status_r, status_w = os.pipe()
    try:
        spec = _jail_spec(argv, workspace, cwd or workspace, env or {}, limits, cgroups,
                          root, status_w, readonly_suffixes)
        prefix = _unshare_prefix(os.geteuid() == 0) if isolated else []
        spec_fd = spec_descriptor(spec)
        fds, status_w = (status_w, spec_fd, *pass_fds), -1  # run_capped closes them
        result = run_capped([*prefix, sys.executable, "-I", str(_JAIL), str(spec_fd)],
                            workspace, limits, pass_fds=fds, cgroups=tuple(cgroups),
                            env=dict(_JAIL_ENV), drain=drain,
                            watch=lambda: over_workspace_caps(workspace, limits, cgroups))
        outcome = os.read(status_r, 4096).decode(errors="replace").strip()
    finally:
        os.close(status_r)
        if status_w >= 0:
            os.close(status_w)
        if root is not None:
            with contextlib.suppress(OSError):
                root.rmdir()
    result.status = _status_of(result.exit_code, result.status or None, outcome)
    if result.status == STATUS_WORKSPACE_LIMIT:
        result.output += workspace_limit_message(limits)
    if result.status == STATUS_VIOLATION:
        result.output += f"\n[sandbox] the command signalled its parent or init ({outcome})\n"
    return result


def over_workspace_caps(workspace: Path, limits: SandboxLimits,
                        cgroups: list[Path] | tuple[Path, ...] = ()) -> bool:
    """Whether `workspace` holds more entries or bytes than `limits` allow (counting stops
    just past a cap, so it costs little). During a run (`cgroups`: the run's), the bytes
    of files its processes hold open or mapped after removing them count too: they are in
    no folder, yet hold the workspace's disk until the run ends."""
    max_bytes = limits.workspace_mb * 1024 * 1024
    held = held_unlinked_bytes(cgroups, os.stat(workspace).st_dev) if cgroups else 0
    if held is None or held > max_bytes:
        return True
    entries, size = safefs.usage(workspace, limits.workspace_files, max_bytes - held)
    return entries > limits.workspace_files or size > max_bytes - held


HELD_SCAN_MAX = 20_000
"""Most descriptors and mappings `held_unlinked_bytes` looks at in one measurement. A run
with more (a test suite's processes hold a few hundred to a few thousand; 128 processes at
the 1,024-descriptor cap could hold about 131,000) is stopped at the workspace limit rather
than measured, so one measurement costs the trainer a fraction of a second at most."""


def held_unlinked_bytes(cgroups: list[Path] | tuple[Path, ...], device: int) -> int | None:
    """Disk bytes of the files on `device` that the processes of `cgroups` hold through a
    descriptor or a mapping although no folder names them any more (removed after opening,
    or made with ``O_TMPFILE``): each counted once, by the blocks it holds. None where the
    processes hold more than `HELD_SCAN_MAX` descriptors and mappings.

    Only what the kernel marks deleted is looked at closely: a descriptor's link reads
    ``... (deleted)``, and a mapping's line in ``/proc/PID/maps`` ends so (one read per
    process for all its mappings); those are then measured through their ``fd`` or
    ``map_files`` entry (a name that merely ends so is measured and found linked)."""
    pids: set[str] = set()
    for group in cgroups:
        with contextlib.suppress(OSError):
            pids.update((group / "cgroup.procs").read_text().split())
    seen: set[int] = set()
    total, looked = 0, 0
    for pid in pids:
        deleted: list[str] = []
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            fds = []
        looked += len(fds)
        if looked > HELD_SCAN_MAX:
            return None
        for fd in fds:
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}").endswith(" (deleted)"):
                    deleted.append(f"/proc/{pid}/fd/{fd}")
        try:
            with open(f"/proc/{pid}/maps", "rb") as maps:
                for line in maps:
                    looked += 1
                    if looked > HELD_SCAN_MAX:
                        return None
                    fields = line.split(maxsplit=5)
                    if len(fields) == 6 and fields[4] != b"0" and \
                            fields[5].rstrip(b"\n").endswith(b" (deleted)"):
                        deleted.append(f"/proc/{pid}/map_files/{fields[0].decode()}")
        except OSError:
            pass
        for entry in deleted:
            try:
                st = os.stat(entry)
            except OSError:
                continue
            if st.st_nlink == 0 and st.st_dev == device and stat.S_ISREG(st.st_mode) \
                    and st.st_ino not in seen:
                seen.add(st.st_ino)
                total += max(st.st_size, st.st_blocks * 512)
    return total


def workspace_limit_message(limits: SandboxLimits) -> str:
    return (f"\n[sandbox] the run put more than {limits.workspace_files} entries or "
            f"{limits.workspace_mb} MiB in the workspace\n")


_VIOLATION_PATTERNS = {
    "network": re.compile(r"\[Errno (101|-2|-3|-5)\] (Network is unreachable|Name or service "
                          r"not known|Temporary failure in name resolution|No address)"),
    "write_outside": re.compile(r"\[Errno 30\] Read-only file system"),
}


def detect_violations(output: str) -> list[str]:
    """Attempts the sandbox blocked that left their error in the output: "network" (a
    connection or name lookup failed for want of a network) and "write_outside" (a write
    hit a read-only mount). Attempts whose errors the code swallowed are blocked all the
    same, but cannot be seen here."""
    return [name for name, pattern in _VIOLATION_PATTERNS.items() if pattern.search(output)]


_PROBE = r"""
import os, socket, sys
out = {}
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.connect(("192.0.2.1", 53)); out["net"] = False
except OSError:
    out["net"] = True
try:
    open(sys.argv[1], "w").close(); out["write"] = False; os.unlink(sys.argv[1])
except OSError:
    out["write"] = True
try:
    out["pid1"] = b"_jail.py" in open("/proc/1/cmdline", "rb").read()
except OSError:
    out["pid1"] = False
out["reads"] = not os.path.exists(sys.argv[2])
try:
    import pytest; out["packages"] = True
except ImportError:
    out["packages"] = False
try:
    open("/proc/1/environ", "rb").read(); out["env"] = False
except OSError:
    out["env"] = True
print("PROBE", out["net"], out["write"], out["pid1"], out["reads"], out["env"],
      out["packages"])
"""


@functools.cache
def sandbox_report() -> SandboxReport:
    """Probe the protections once per process by running a small script in the sandbox."""
    with tempfile.TemporaryDirectory(prefix="tripod-probe-") as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        outside = Path(tmp) / "outside-write-probe"
        marker = Path(tmp) / "outside-read-probe"
        marker.write_text("host file")
        result = run_sandboxed([sys.executable, "-I", "-c", _PROBE, str(outside),
                                str(marker)], ws, limits=SandboxLimits(wall_s=30))
    fields = result.output.split("PROBE", 1)[-1].split()
    ok = [f == "True" for f in fields[:6]] if len(fields) >= 6 else [False] * 6
    groups = _cached_cgroup_parents()
    # RLIMIT_NPROC binds every uid but root: a run under ids of its own is bound by it
    process_limit = "cgroup" if "pids" in groups else (
        "rlimit" if os.geteuid() != 0 or run_ids() is not None else "none")
    tail = " | ".join(result.output.strip().splitlines()[-3:])
    notes = () if result.status == STATUS_OK else (
        f"probe: {result.status}, exit code {result.exit_code}: {tail}",)
    return SandboxReport(namespaces=namespaces_available(), network_isolated=ok[0],
                         writes_confined=ok[1], pid_namespace=ok[2], reads_confined=ok[3],
                         init_unreadable=ok[4], packages=ok[5],
                         process_limit=process_limit,
                         run_caps=tuple(sorted(n for n in groups if n != "pids")),
                         notes=notes)
