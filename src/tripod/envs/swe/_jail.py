"""Init process of one sandboxed command (runs inside fresh PID, mount and network namespaces).

This file is executed as a standalone script (``python -I _jail.py SPEC_JSON``) by
`tripod.envs.swe.sandbox`, as the first process of the new PID namespace created by
``unshare``. It uses only the standard library because it runs before anything else is set
up. In order it:

1. joins the per-run process-count cgroup (so a fork bomb hits ``pids.max``);
2. makes every mount read-only except the workspace, replaces ``/dev`` with a minimal one
   (a process running as root could otherwise write raw disks through ``/dev``) and gives
   ``/dev/shm`` a private tmpfs;
3. sets the resource limits (CPU seconds, address space, file size, process count, no cores);
4. drops every capability and sets ``no_new_privs`` so the command cannot undo 1-3;
5. forks a sentinel that starts the command in its own session, reaps orphans until the
   sentinel exits, and reports the outcome on a status pipe: ``exit N`` (``128 + signal``
   when the command was killed by a signal), ``parent_signalled SIG`` when the command
   killed its parent (the sentinel), or ``setup_error``.

Because this process is PID 1 of the namespace, the kernel ignores signals sent to it from
inside and kills every process of the namespace when it exits, including ones that called
``setsid`` or daemonized. Without namespaces (no ``unshare``) the same script still sets
limits and runs the sentinel, but none of those guarantees hold.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
_ST_TO_MS = {1: MS_RDONLY, 2: MS_NOSUID, 4: MS_NODEV, 8: MS_NOEXEC, 1024: MS_NOATIME,
             2048: MS_NODIRATIME, 4096: MS_RELATIME}
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 24, 38
_DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")

_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    args = [None if s is None else s.encode() for s in (source, target, fstype)]
    if _libc.mount(args[0], args[1], args[2], ctypes.c_ulong(flags),
                   None if data is None else data.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} -> {target}: {os.strerror(err)}")


def _mount_points() -> list[str]:
    points = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            raw = line.split()[4]
            points.append(raw.encode().decode("unicode_escape"))
    return sorted(set(points), key=len)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _remount_readonly(point: str) -> None:
    kept = 0
    flags = os.statvfs(point).f_flag
    for st_flag, ms_flag in _ST_TO_MS.items():
        if flags & st_flag:
            kept |= ms_flag
    _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | kept)


def _fresh_dev() -> None:
    """Replace /dev by a tmpfs holding only harmless character devices."""
    handles = {}
    for name in _DEV_NODES:
        try:
            handles[name] = os.open(f"/dev/{name}", os.O_PATH)
        except OSError:
            continue
    _mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=1m,mode=755")
    for name, fd in handles.items():
        open(f"/dev/{name}", "w").close()
        _mount(f"/proc/self/fd/{fd}", f"/dev/{name}", None, MS_BIND)
        os.close(fd)
    os.mkdir("/dev/shm", 0o1777)
    _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=1777")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"/dev/{name}")
    _mount(None, "/dev", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC, "size=1m,mode=755")


def confine(workspace: str) -> None:
    """Everything outside `workspace` becomes read-only for this mount namespace."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount(workspace, workspace, None, MS_BIND | MS_REC)
    _fresh_dev()
    for point in _mount_points():
        if _inside(point, workspace) or _inside(point, "/dev") or _inside(point, "/proc"):
            continue
        try:
            _remount_readonly(point)
        except OSError:
            if point == "/":
                raise
    for point in ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"):
        if os.path.exists(point):
            _mount(point, point, None, MS_BIND | MS_REC)
            _remount_readonly(point)


def set_limits(limits: dict[str, int]) -> None:
    table = {"memory_bytes": resource.RLIMIT_AS,
             "file_bytes": resource.RLIMIT_FSIZE, "processes": resource.RLIMIT_NPROC}
    for key, which in table.items():
        if limits.get(key):
            resource.setrlimit(which, (limits[key], limits[key]))
    if limits.get("cpu_s"):
        # soft < hard: SIGXCPU first (a clear "cpu_limit" status), SIGKILL a second later.
        resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_s"], limits["cpu_s"] + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def drop_privileges() -> None:
    """Empty the capability bounding set and the current sets; forbid regaining them."""
    with open("/proc/sys/kernel/cap_last_cap") as fh:
        last = int(fh.read())
    for cap in range(last + 1):
        _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this pid
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable x 2 words, all zero
    if _libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(no_new_privs) failed")


def join_cgroup(cgroup: str | None) -> None:
    if cgroup:
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as fh:
            fh.write("0")


def _exit_code(status: int) -> int:
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


def run_command(argv: list[str], cwd: str, env: dict[str, str], status_fd: int) -> None:
    """Sentinel process: start the command in its own session, exit with its status.

    The command's parent is this sentinel, not PID 1, so a command that signals its parent
    kills the sentinel, which the jail sees and reports (a signal to PID 1 would be
    silently dropped by the kernel and go unnoticed)."""
    pid = os.fork()
    if pid == 0:
        try:
            os.close(status_fd)
            os.setsid()
            os.chdir(cwd)
            os.execvpe(argv[0], argv, env)
        except BaseException as exc:  # noqa: BLE001 - report any exec failure, then die
            os.write(2, f"sandbox: cannot run {argv[0]!r}: {exc}\n".encode())
        os._exit(127)
    _, status = os.waitpid(pid, 0)
    os._exit(_exit_code(status))


def reap_until(sentinel: int) -> str:
    """As PID 1, reap every orphan until the sentinel ends; describe how it ended."""
    while True:
        try:
            done, status = os.wait()
        except ChildProcessError:
            return "exit 127"
        if done == sentinel:
            if os.WIFSIGNALED(status):
                return f"parent_signalled {os.WTERMSIG(status)}"
            return f"exit {_exit_code(status)}"


def main() -> None:
    spec = json.loads(sys.argv[1])
    status_fd = int(spec["status_fd"])
    try:
        join_cgroup(spec.get("cgroup"))
        if spec.get("confine"):
            confine(spec["workspace"])
        set_limits(spec["limits"])
        if spec.get("drop_privileges"):
            drop_privileges()
    except (OSError, ValueError) as exc:
        os.write(2, f"sandbox setup failed: {exc}\n".encode())
        os.write(status_fd, b"setup_error")
        os._exit(125)
    sentinel = os.fork()
    if sentinel == 0:
        run_command(spec["argv"], spec["cwd"], spec["env"], status_fd)
    outcome = reap_until(sentinel)
    os.write(status_fd, outcome.encode())
    code = int(outcome.split()[1])
    os._exit(code if outcome.startswith("exit") else 128 + code)


if __name__ == "__main__":
    main()
