"""Run one untrusted command (an agent's code under test) so that it cannot hurt the trainer.

What is enforced, and how (see docs/swe.md for the honest list of what is not):

- **Own session**: the command starts with ``start_new_session``; the trainer kills the whole
  process group on time-out, so no signal aimed at the group reaches the trainer.
- **Namespaces** (``unshare``, when the kernel allows it): a fresh network namespace (no
  interfaces up: every connection fails), a PID namespace whose init is `_jail.py` (signals
  to the parent are ignored; everything dies with it) and a mount namespace in which every
  mount except the workspace is read-only and ``/dev`` holds only null/zero/random devices.
- **Resource limits** (``setrlimit``): CPU seconds, address space, file size, core dumps, and
  a process cap through a ``pids`` cgroup when one can be created (``RLIMIT_NPROC`` as well,
  which the kernel enforces for non-root users only).
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
import selectors
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

_JAIL = Path(__file__).with_name("_jail.py")

STATUS_OK = "ok"
STATUS_FAILED = "failed"
STATUS_TIMEOUT = "timeout"
STATUS_OUTPUT_LIMIT = "output_limit"
STATUS_CPU_LIMIT = "cpu_limit"
STATUS_KILLED = "killed"
STATUS_SETUP_ERROR = "sandbox_error"
STATUS_VIOLATION = "sandbox_violation"
ABNORMAL_STATUSES = (STATUS_TIMEOUT, STATUS_OUTPUT_LIMIT, STATUS_CPU_LIMIT, STATUS_KILLED,
                     STATUS_SETUP_ERROR, STATUS_VIOLATION)
"""Run statuses that mean the command was stopped by the sandbox rather than finishing."""


@dataclass(frozen=True)
class SandboxLimits:
    """Per-command limits. Defaults fit the test suites of small Python projects."""

    wall_s: float = 120.0
    """Wall-clock seconds before the whole process tree is killed."""
    cpu_s: int = 120
    """CPU seconds per process (RLIMIT_CPU: SIGXCPU, then SIGKILL)."""
    memory_mb: int = 4096
    """Address space per process (RLIMIT_AS), in MiB."""
    processes: int = 128
    """Most processes alive at once (pids cgroup; RLIMIT_NPROC for non-root users)."""
    output_bytes: int = 2_000_000
    """Bytes of merged stdout/stderr kept; past this the command is killed."""
    file_mb: int = 256
    """Largest file the command may write (RLIMIT_FSIZE), in MiB."""


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


@dataclass(frozen=True)
class SandboxReport:
    """Which protections actually work on this machine (probed by running commands)."""

    namespaces: bool
    network_isolated: bool
    writes_confined: bool
    pid_namespace: bool
    process_limit: str
    """"cgroup", "rlimit" or "none"."""
    notes: tuple[str, ...] = field(default_factory=tuple)


def _unshare_prefix(as_root: bool) -> list[str]:
    base = ["unshare", "--net", "--mount", "--pid", "--fork", "--mount-proc", "--kill-child"]
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


def _cgroup_parent() -> Path | None:
    """A writable pids-cgroup folder under which one child group per run can be made."""
    candidates = [Path("/sys/fs/cgroup/pids")]
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                candidates.append(Path("/sys/fs/cgroup") / line[3:].lstrip("/"))
    for base in candidates:
        if (base / "pids.max").exists() or (base / "cgroup.procs").exists():
            parent = base / "tripod-swe"
            try:
                parent.mkdir(exist_ok=True)
                if (parent / "cgroup.subtree_control").exists():
                    (parent / "cgroup.subtree_control").write_text("+pids")
                return parent if os.access(parent, os.W_OK) else None
            except OSError:
                continue
    return None


@functools.cache
def _cached_cgroup_parent() -> Path | None:
    return _cgroup_parent()


def _make_cgroup(processes: int) -> Path | None:
    parent = _cached_cgroup_parent()
    if parent is None:
        return None
    group = parent / uuid.uuid4().hex[:12]
    try:
        group.mkdir()
        (group / "pids.max").write_text(str(processes))
    except OSError:
        with contextlib.suppress(OSError):
            group.rmdir()
        return None
    return group


def _kill_cgroup(group: Path | None) -> None:
    if group is None:
        return
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


def _jail_spec(argv: list[str], workspace: Path, cwd: Path, env: dict[str, str],
               limits: SandboxLimits, cgroup: Path | None, isolated: bool,
               status_fd: int) -> str:
    mib = 1024 * 1024
    return json.dumps({
        "argv": argv, "cwd": str(cwd), "env": env, "workspace": str(workspace),
        "cgroup": None if cgroup is None else str(cgroup), "status_fd": status_fd,
        "confine": isolated, "drop_privileges": isolated,
        "limits": {"cpu_s": limits.cpu_s, "memory_bytes": limits.memory_mb * mib,
                   "file_bytes": limits.file_mb * mib, "processes": limits.processes},
    })


def _read_capped(proc: subprocess.Popen, limits: SandboxLimits,
                 deadline: float) -> tuple[bytes, str | None]:
    """Read merged output until EOF, the deadline or the byte cap (whichever comes first)."""
    assert proc.stdout is not None
    chunks: list[bytes] = []
    size = 0
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return b"".join(chunks), STATUS_TIMEOUT
            if not sel.select(timeout=min(remaining, 1.0)):
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                return b"".join(chunks), None
            chunks.append(chunk)
            size += len(chunk)
            if size > limits.output_bytes:
                return b"".join(chunks)[: limits.output_bytes], STATUS_OUTPUT_LIMIT


def _wait_until(proc: subprocess.Popen, deadline: float) -> str | None:
    """Wait for a normal exit (so its real exit code is kept); time-out status otherwise."""
    try:
        proc.wait(timeout=max(0.05, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return STATUS_TIMEOUT
    return None


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


def run_capped(argv: list[str], cwd: Path, limits: SandboxLimits,
               pass_fds: tuple[int, ...] = (), cgroup: Path | None = None) -> RunResult:
    """Run `argv` in its own session, reading merged output under the wall-clock and byte
    caps; on either, kill its process group (and `cgroup`'s members). Never raises for
    anything the command does."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd,
                            pass_fds=pass_fds)
    deadline = start + limits.wall_s
    try:
        raw, killed_by = _read_capped(proc, limits, deadline)
        if killed_by is None:
            killed_by = _wait_until(proc, deadline)
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        _kill_cgroup(cgroup)
        code = proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    return RunResult(status=killed_by or "", exit_code=code,
                     output=raw.decode("utf-8", errors="replace"),
                     elapsed_s=time.monotonic() - start,
                     truncated=killed_by == STATUS_OUTPUT_LIMIT)


def run_sandboxed(argv: list[str], workspace: Path, *, cwd: Path | None = None,
                  env: dict[str, str] | None = None,
                  limits: SandboxLimits = SandboxLimits()) -> RunResult:
    """Run `argv` confined to `workspace`; never raises for anything the command does."""
    workspace = workspace.resolve()
    isolated = namespaces_available()
    cgroup = _make_cgroup(limits.processes)
    status_r, status_w = os.pipe()
    try:
        spec = _jail_spec(argv, workspace, cwd or workspace, env or {}, limits, cgroup,
                          isolated, status_w)
        prefix = _unshare_prefix(os.geteuid() == 0) if isolated else []
        result = run_capped([*prefix, sys.executable, "-I", str(_JAIL), spec], workspace,
                            limits, pass_fds=(status_w,), cgroup=cgroup)
        os.close(status_w)
        status_w = -1
        outcome = os.read(status_r, 4096).decode(errors="replace").strip()
    finally:
        os.close(status_r)
        if status_w >= 0:
            os.close(status_w)
    result.status = _status_of(result.exit_code, result.status or None, outcome)
    if result.status == STATUS_VIOLATION:
        result.output += f"\n[sandbox] the command sent a signal to its parent ({outcome})\n"
    return result


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
print("PROBE", out["net"], out["write"], out["pid1"])
"""


@functools.cache
def sandbox_report() -> SandboxReport:
    """Probe the protections once per process by running a small script in the sandbox."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tripod-probe-") as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        outside = Path(tmp) / "outside-write-probe"
        result = run_sandboxed([sys.executable, "-I", "-c", _PROBE, str(outside)], ws,
                               limits=SandboxLimits(wall_s=30))
    fields = result.output.split("PROBE", 1)[-1].split()
    ok = [f == "True" for f in fields[:3]] if len(fields) >= 3 else [False] * 3
    cgroup = _cached_cgroup_parent() is not None
    process_limit = "cgroup" if cgroup else ("rlimit" if os.geteuid() != 0 else "none")
    notes = () if result.status == STATUS_OK else (f"probe: {result.status}",)
    return SandboxReport(namespaces=namespaces_available(), network_isolated=ok[0],
                         writes_confined=ok[1], pid_namespace=ok[2],
                         process_limit=process_limit, notes=notes)
