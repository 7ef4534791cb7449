"""Owner tags on scratch folders, so what a dead process left behind can be removed.

A trainer killed mid-episode (out of memory, SIGKILL, a lost node) never runs `close()`:
its episode folders, its sandbox mount points and its per-run cgroups stay. Each such
name carries the tag of the process that made it: the host's boot id, its PID namespace,
the pid and the pid's start time (so a reused pid is not mistaken for the owner). The
first workspace, mount point or cgroup a process makes in a folder sweeps that folder
once: entries whose owner runs under this kernel, in this PID namespace, and has ended
are removed. Entries of another boot id (another host on a shared folder, or an earlier
boot), of another PID namespace (another container on a shared folder), of a process
/proc does not show, and untagged entries are left alone, since nothing here can tell
whether their owner still runs. Cgroups are swept by a later trainer in the same cgroup
(they are made under the trainer's own).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path

_TAG = r"[0-9a-z]{8}\.\d+\.\d+\.\d+"
_swept: set[tuple[int, str, str]] = set()
_lock = threading.Lock()


def _boot_id() -> str:
    with contextlib.suppress(OSError):
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")[:8]
    return "unknown0"


def _pid_namespace() -> str:
    with contextlib.suppress(OSError):
        return str(os.stat("/proc/self/ns/pid").st_ino)
    return "0"


_UNKNOWN = "?"


def _start_time(pid: int) -> str | None:
    """The start time of `pid` in clock ticks since boot; None if it is not running;
    `_UNKNOWN` where /proc does not say (no /proc, or it hides other users' processes)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    except OSError:
        return _UNKNOWN
    fields = stat.rsplit(")", 1)[-1].split()
    if len(fields) <= 19:
        return _UNKNOWN
    return None if fields[0] in ("Z", "X") else fields[19]


def tag(pid: int | None = None) -> str:
    """The owner tag of `pid` (this process by default): ``BOOT.PIDNS.PID.START`` (the
    boot id, this process's PID namespace, the pid and its start time)."""
    if pid is None:
        return _tag_of(os.getpid())
    start = _start_time(pid)
    return f"{_boot_id()}.{_pid_namespace()}.{pid}.{start if start not in (None, _UNKNOWN) else 0}"


@functools.cache
def _tag_of(pid: int) -> str:
    return tag(pid)


def is_dead(owner: str) -> bool:
    """Whether the process `owner` names is known to have ended: same boot and PID
    namespace, and its pid is not running or was started at another time."""
    boot, namespace, pid, start = owner.split(".")
    if boot != _boot_id() or boot == "unknown0" or namespace != _pid_namespace() or \
            namespace == "0":
        return False
    now = _start_time(int(pid))
    return now != _UNKNOWN and now != start


def owner_of(name: str, prefix: str) -> str | None:
    """The owner tag in a name made as ``PREFIX + TAG + "-" + ...``, or None."""
    found = re.match(re.escape(prefix) + f"({_TAG})-", name)
    return found.group(1) if found else None


def sweep(folder: Path, prefix: str, remove: Callable[[Path], None]) -> int:
    """Remove (with `remove`) the entries of `folder` named ``PREFIX + TAG + "-..."`` whose
    owner is dead; the number of such entries. Errors are ignored: a sweep is best effort."""
    dead = []
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            owner = owner_of(entry.name, prefix)
            if owner is not None and is_dead(owner):
                dead.append(Path(entry.path))
    for path in dead:
        with contextlib.suppress(OSError):
            remove(path)
    return len(dead)


def sweep_once(folder: Path, prefix: str, remove: Callable[[Path], None]) -> int:
    """`sweep`, the first time this process asks for `folder` and `prefix` (a forked child
    is a new owner and sweeps again)."""
    key = (os.getpid(), str(folder), prefix)
    with _lock:
        if key in _swept:
            return 0
        _swept.add(key)
    return sweep(folder, prefix, remove)
