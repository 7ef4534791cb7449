"""Init process of one sandboxed command (runs inside fresh PID, mount and network namespaces).

This file is executed as a standalone script (``python -I _jail.py SPEC_FD``: the spec,
JSON, is read from that inherited file descriptor and the descriptor closed before the
command starts, so the command cannot read the spec in ``/proc/1/cmdline``) by
`tripod.envs.swe.sandbox`, as the first process of the new PID namespace created by
``unshare``. It uses only the standard library because it runs before anything else is set
up. In order it:

1. joins the per-run cgroups (``pids.max``: a fork bomb stops there; a CPU quota of one
   core and a memory cap for the whole run, where those controllers are writable);
2. builds a new root in a tmpfs holding only what the command needs, read-only (the
   interpreter, the system libraries), plus the workspace (writable, except the files it
   is asked to protect, by suffix: read-only, in folders that cannot be renamed or
   removed), a
   minimal ``/dev`` and this PID namespace's ``/proc`` (the host's key names in
   ``/proc/keys`` hidden), and chroots into it: the trainer's files, caches, home folders
   and other episodes' workspaces are not there to be read;
3. sets the resource limits (CPU seconds, address space, file size, process count, no cores);
4. drops every capability and sets ``no_new_privs`` so the command cannot undo 1-3, and
   makes itself non-dumpable (its memory, environment and file descriptors cannot be read
   through ``/proc/1``);
4b. installs a seccomp filter (`deny_filter`) that refuses the kernel keyring calls (the
   keyrings are not namespaced: the trainer's user keyring would be readable and
   writable), the creation of user namespaces (a nested one would hand the command a
   fresh set of capabilities over new namespaces) and ``fallocate`` (disk blocks reserved
   past the file size cap and past a file's end);
5. forks a sentinel that starts the command in its own session, reaps orphans until the
   sentinel exits, and reports the outcome on a status pipe that only PID 1 holds:
   ``exit N`` (``128 + signal`` when the command was killed by a signal),
   ``parent_signalled SIG`` when the command signalled its parent (the sentinel) or PID 1,
   or ``setup_error``;
6. watches that status pipe: once the trainer's end is closed (the trainer was killed),
   it exits, which ends the run.

Because this process is PID 1 of the namespace, the kernel drops signals sent to it from
inside unless it handles them; it handles SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1/2 only to
report them as violations. The kernel kills every process of the namespace when it exits, including ones that called
``setsid`` or daemonized. Without namespaces (no ``unshare``) the same script still sets
limits and runs the sentinel, but none of those guarantees hold.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import select
import signal
import sys
import threading

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 32, 4096, 8192, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
_ST_TO_MS = {1: MS_RDONLY, 2: MS_NOSUID, 4: MS_NODEV, 8: MS_NOEXEC, 1024: MS_NOATIME,
             2048: MS_NODIRATIME, 4096: MS_RELATIME}
PR_SET_DUMPABLE, PR_SET_SECCOMP, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 4, 22, 24, 38
SECCOMP_MODE_FILTER, SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 2, 0x7FFF0000, 0x00050000
CLONE_NEWUSER, EPERM, ENOSYS, EOPNOTSUPP = 0x10000000, 1, 38, 95
_SYSCALLS = {
    # machine: (audit arch, {name: number}); numbers from the kernel's syscall tables.
    "x86_64": (0xC000003E, {"add_key": 248, "request_key": 249, "keyctl": 250,
                            "unshare": 272, "clone": 56, "clone3": 435, "fallocate": 285}),
    "aarch64": (0xC00000B7, {"add_key": 217, "request_key": 218, "keyctl": 219,
                             "unshare": 97, "clone": 220, "clone3": 435, "fallocate": 47}),
}
_DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")

_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    args = [None if s is None else s.encode() for s in (source, target, fstype)]
    if _libc.mount(args[0], args[1], args[2], ctypes.c_ulong(flags),
                   None if data is None else data.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} -> {target}: {os.strerror(err)}")


def _remount_readonly(point: str, extra: int = 0) -> None:
    kept = extra
    flags = os.statvfs(point).f_flag
    for st_flag, ms_flag in _ST_TO_MS.items():
        if flags & st_flag:
            kept |= ms_flag
    _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | kept)


def _makedirs_for(target: str, is_dir: bool) -> None:
    os.makedirs(target if is_dir else os.path.dirname(target), exist_ok=True)
    if not is_dir and not os.path.exists(target):
        open(target, "w").close()


def _bind(host: str, root: str, writable: bool = False) -> None:
    """Make host path `host` visible at the same path under `root` (read-only unless
    `writable`); a symlink is recreated as a symlink (its target must be bound too)."""
    target = root + host
    if os.path.islink(host):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.lexists(target):
            os.symlink(os.readlink(host), target)
        return
    if not os.path.exists(host):
        return
    _makedirs_for(target, os.path.isdir(host))
    _mount(host, target, None, MS_BIND | MS_REC)
    if writable:
        _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV)
    else:
        _remount_readonly(target, MS_NOSUID | MS_NODEV)


def _fresh_dev(root: str) -> None:
    """A /dev under `root` holding only harmless character devices (a process running as
    root could otherwise write raw disks through /dev)."""
    dev = root + "/dev"
    os.makedirs(dev, exist_ok=True)
    _mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "size=1m,mode=755")
    for name in _DEV_NODES:
        if os.path.exists(f"/dev/{name}"):
            open(f"{dev}/{name}", "w").close()
            _mount(f"/dev/{name}", f"{dev}/{name}", None, MS_BIND)
    os.mkdir(f"{dev}/shm", 0o1777)
    _mount("tmpfs", f"{dev}/shm", "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=1777")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{dev}/{name}")
    _mount(None, dev, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC, "size=1m,mode=755")


_HIDDEN_PROC = ("keys", "key-users")
"""Files of /proc that are not namespaced: the kernel keyrings' names and owners (the
host's included). An empty file is bound over each."""


def _fresh_proc(root: str) -> None:
    """The /proc of this PID namespace (only the sandbox's own processes), with the
    kernel's writable knobs made read-only and `_HIDDEN_PROC` emptied."""
    proc = root + "/proc"
    os.makedirs(proc, exist_ok=True)
    _mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for sub in ("sys", "sysrq-trigger", "irq", "bus"):
        point = f"{proc}/{sub}"
        if os.path.exists(point):
            _mount(point, point, None, MS_BIND | MS_REC)
            _remount_readonly(point)
    for name in _HIDDEN_PROC:
        if os.path.exists(f"{proc}/{name}"):
            _mount(f"{root}/dev/null", f"{proc}/{name}", None, MS_BIND)


def protect(base: str, suffixes: list[str]) -> None:
    """Make each file of `base` whose name ends with one of `suffixes` a read-only bind
    mount, and each folder on the way to one a mount point of its own: a mount point
    cannot be written through, renamed, removed or replaced, and no capability is left to
    unmount it. So the files a scored run must not change (its tests, conftest files,
    sources) stay as the trainer wrote them, whatever the run's code does; the
    ``__pycache__`` folder beside them is read-only too (created empty where missing).
    Hidden folders
    (``.tripod``: HOME and TMPDIR) and links are left alone; nothing is followed out of
    `base` (the tree is the trainer's own copy: nothing has run in it yet)."""
    if not suffixes:
        return
    files: list[str] = []
    folders: set[str] = set()
    for here, dirs, names in os.walk(base):  # does not follow links to folders
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in names:
            path = os.path.join(here, name)
            if name.endswith(tuple(suffixes)) and not os.path.islink(path) and \
                    os.path.isfile(path):
                files.append(path)
                folder = here
                while folder != base and folder not in folders:  # and those on the way
                    folders.add(folder)
                    folder = os.path.dirname(folder)
    for folder in sorted(folders):  # parents before their subfolders
        _mount(folder, folder, None, MS_BIND)
        _mount(None, folder, None, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV)
    for folder in {os.path.dirname(path) for path in files}:
        # Bytecode beside a source is loaded in its place (by imports and by pytest's
        # assertion rewriter) when its header matches the source's size and time: a
        # read-only __pycache__ is one where none can be planted.
        cache = os.path.join(folder, "__pycache__")
        if not os.path.lexists(cache):
            os.mkdir(cache)
        if os.path.isdir(cache) and not os.path.islink(cache):
            files.append(cache)
    for path in files:
        _mount(path, path, None, MS_BIND)
        _remount_readonly(path, MS_NOSUID | MS_NODEV)


def confine(workspace: str, root: str, readonly: list[str],
            protected: list[str] = ()) -> None:
    """Build a new root holding only `readonly` (interpreter, libraries) and the
    workspace (its files ending with a `protected` suffix read-only), then chroot into
    it: the rest of the host (home folders, caches, other workspaces, the trainer's files)
    is not there to be read."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=4m,mode=755")
    for host in readonly:
        _bind(host, root)
    _bind(workspace, root, writable=True)
    protect(root + workspace, list(protected))
    _fresh_dev(root)
    _fresh_proc(root)
    for empty in ("/tmp", "/etc"):
        os.makedirs(root + empty, exist_ok=True)
    _mount(None, root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4m,mode=755")
    os.chdir(root)
    _mount(root, "/", None, MS_MOVE)
    os.chroot(".")
    os.chdir("/")


def set_limits(limits: dict[str, int]) -> None:
    table = {"memory_bytes": resource.RLIMIT_AS, "file_bytes": resource.RLIMIT_FSIZE,
             "processes": resource.RLIMIT_NPROC, "open_files": resource.RLIMIT_NOFILE}
    for key, which in table.items():
        if limits.get(key):
            resource.setrlimit(which, (limits[key], limits[key]))
    if limits.get("cpu_s"):
        # soft < hard: SIGXCPU first (a clear "cpu_limit" status), SIGKILL a second later.
        resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_s"], limits["cpu_s"] + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def give_workspace(workspace: str, ids: list[int], max_entries: int) -> None:
    """Make the workspace's entries (not what links point to) owned by the run's own `ids`
    (uid, gid), so the command can write them once it runs under those ids. The walk keeps
    to `MAX_OWN_DEPTH` levels and `max_entries` + 1 entries: anything past either (a tree a
    run left over the workspace caps) stays as it is, writable by no one but root."""
    uid, gid = ids
    stack, seen = [(workspace, 0)], 0
    os.chown(workspace, uid, gid, follow_symlinks=False)
    while stack and seen <= max_entries:
        folder, depth = stack.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                seen += 1
                if seen > max_entries:
                    break
                os.chown(entry.path, uid, gid, follow_symlinks=False)
                if depth < MAX_OWN_DEPTH and entry.is_dir(follow_symlinks=False):
                    stack.append((entry.path, depth + 1))


MAX_OWN_DEPTH = 64
"""Deepest folder level `give_workspace` hands to the run (the trainer's own walks stop at
the same depth: `safefs.MAX_DEPTH`)."""


def switch_ids(ids: list[int]) -> None:
    """Become the run's own user and group (no supplementary groups): per-user kernel
    limits (inotify, RLIMIT_NPROC) then count this run, not the trainer's root."""
    uid, gid = ids
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)


def drop_privileges(last_cap: int, ids: list[int] | None = None) -> None:
    """Empty the capability bounding set and the current sets (switching to `ids` first,
    when given); forbid regaining them."""
    for cap in range(last_cap + 1):
        _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    if ids:  # after the bounding set (dropping from it needs CAP_SETPCAP), before capset
        switch_ids(ids)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this pid
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable x 2 words, all zero
    if _libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(no_new_privs) failed")


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF opcodes


def deny_filter(machine: str) -> list[tuple[int, int, int, int]] | None:
    """A classic-BPF seccomp program (code, jt, jf, k) for `machine` (None if unknown).

    It reads `struct seccomp_data` (nr at 0, arch at 4, args from 16, little-endian low
    word first) and refuses: any other ABI (32-bit or x32 entry points would bypass the
    numbers below); add_key, request_key, keyctl (EPERM); clone3 (ENOSYS, so the C
    library falls back to clone, whose flags a filter can read: clone3 passes them in
    memory); unshare and clone with CLONE_NEWUSER (EPERM); fallocate (EOPNOTSUPP, so the C
    library's posix_fallocate writes the bytes instead: on ext4, fallocate can reserve
    blocks past the file size cap and past a file's end, where its length does not show
    them). Everything else is allowed."""
    if machine not in _SYSCALLS:
        return None
    arch, nr = _SYSCALLS[machine]
    deny, nosys = SECCOMP_RET_ERRNO | EPERM, SECCOMP_RET_ERRNO | ENOSYS
    prog = [(_LD_ABS, 0, 0, 4), (_JEQ, 1, 0, arch), (_RET, 0, 0, deny), (_LD_ABS, 0, 0, 0)]
    if machine == "x86_64":  # x32 calls carry bit 30 in the number
        prog += [(_JGE, 0, 1, 0x40000000), (_RET, 0, 0, deny)]
    for name in ("add_key", "request_key", "keyctl"):
        prog += [(_JEQ, 0, 1, nr[name]), (_RET, 0, 0, deny)]
    prog += [(_JEQ, 0, 1, nr["clone3"]), (_RET, 0, 0, nosys)]
    prog += [(_JEQ, 0, 1, nr["fallocate"]), (_RET, 0, 0, SECCOMP_RET_ERRNO | EOPNOTSUPP)]
    prog += [(_JEQ, 1, 0, nr["unshare"]), (_JEQ, 0, 3, nr["clone"]),
             (_LD_ABS, 0, 0, 16), (_JSET, 0, 1, CLONE_NEWUSER), (_RET, 0, 0, deny),
             (_RET, 0, 0, SECCOMP_RET_ALLOW)]
    return prog


def install_filter() -> bool:
    """Install `deny_filter` for this machine (needs ``no_new_privs``); False if the
    architecture is not one the filter knows."""
    prog = deny_filter(os.uname().machine)
    if prog is None:
        return False
    insns = (_SockFilter * len(prog))(*[_SockFilter(*i) for i in prog])
    fprog = _SockFprog(len(prog), insns)
    if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(seccomp) failed")
    return True


def join_cgroups(cgroups: list[str]) -> None:
    for group in cgroups:
        with open(os.path.join(group, "cgroup.procs"), "w") as fh:
            fh.write("0")


_SIGNALLED: list[int] = []
_WATCHED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
            signal.SIGUSR2, signal.SIGALRM)


def _note_signal(signum: int, _frame: object) -> None:
    _SIGNALLED.append(signum)


def _watch_signals() -> None:
    """Signals from inside reach PID 1 only if it handles them; Python's default SIGINT
    handler would turn one into a KeyboardInterrupt that kills the jail. Record them
    instead, as violations."""
    for signum in _WATCHED:
        signal.signal(signum, _note_signal)


def _exit_code(status: int) -> int:
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


def run_command(argv: list[str], cwd: str, env: dict[str, str], status_fd: int) -> None:
    """Sentinel process: start the command in its own session, exit with its status.

    The command's parent is this sentinel, not PID 1, so a command that signals its parent
    kills the sentinel, which the jail sees and reports (a signal to PID 1 would be
    silently dropped by the kernel and go unnoticed)."""
    os.close(status_fd)  # only PID 1 reports; nothing below it can write the status
    for signum in _WATCHED:
        signal.signal(signum, signal.SIG_DFL)
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            os.chdir(cwd)
            os.execvpe(argv[0], argv, env)
        except BaseException as exc:  # noqa: BLE001 - report any exec failure, then die
            os.write(2, f"sandbox: cannot run {argv[0]!r}: {exc}\n".encode())
        os._exit(127)
    _, status = os.waitpid(pid, 0)
    os._exit(_exit_code(status))


def watch_trainer(status_fd: int) -> None:
    """End the run (PID 1 exits, and the kernel kills every process of the namespace) once
    the trainer's end of the status pipe is closed: a trainer killed mid-run can no longer
    stop the run at its wall limit, and a command that never ends would run on for good."""
    def watch() -> None:
        poller = select.poll()
        poller.register(status_fd, 0)  # a write end reports POLLERR once no reader is left
        while True:
            if any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll()):
                os._exit(137)

    try:
        threading.stack_size(1 << 16)  # within the run's address-space and process limits
        threading.Thread(target=watch, daemon=True).start()
    except (RuntimeError, OSError, ValueError):
        pass  # the run keeps its wall limit from a live trainer


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


def _setup(spec: dict) -> None:
    join_cgroups(spec.get("cgroups") or [])
    with open("/proc/sys/kernel/cap_last_cap") as fh:
        last_cap = int(fh.read())
    if spec.get("confine"):
        # The name is set only in a UTS namespace of its own: run any other way (by hand,
        # or by a launcher that lost --uts) it would rename the host, and tools that look
        # the host up by name (torchrun's rendezvous) would then fail.
        if os.stat("/proc/self/ns/uts").st_ino == spec.get("host_uts"):
            raise OSError("not in a UTS namespace of its own; the host name is left as is")
        if spec.get("run_as"):  # before the protected files become read-only mounts
            give_workspace(spec["workspace"], spec["run_as"], int(spec["max_entries"]))
        confine(spec["workspace"], spec["root"], spec["readonly"], spec.get("protect", []))
        name = b"sandbox"  # the host's name is not shown
        if _libc.sethostname(name, len(name)) != 0:
            raise OSError(ctypes.get_errno(), "sethostname failed")
    set_limits(spec["limits"])
    if spec.get("drop_privileges"):
        drop_privileges(last_cap, spec.get("run_as"))
        install_filter()
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def main() -> None:
    with os.fdopen(int(sys.argv[1]), "rb") as spec_file:
        spec = json.loads(spec_file.read())
    status_fd = int(spec["status_fd"])
    _watch_signals()
    try:
        _setup(spec)
    except (OSError, ValueError) as exc:
        os.write(2, f"sandbox setup failed: {exc}\n".encode())
        os.write(status_fd, b"setup_error")
        os._exit(125)
    sentinel = os.fork()
    if sentinel == 0:
        run_command(spec["argv"], spec["cwd"], spec["env"], status_fd)
    watch_trainer(status_fd)
    outcome = reap_until(sentinel)
    if _SIGNALLED and outcome.startswith("exit"):
        outcome = f"parent_signalled {_SIGNALLED[0]}"
    os.write(status_fd, outcome.encode())
    code = int(outcome.split()[1])
    os._exit(code if outcome.startswith("exit") else 128 + code)


if __name__ == "__main__":
    main()
