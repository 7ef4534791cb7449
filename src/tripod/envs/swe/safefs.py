"""File access in a workspace that an agent's code has been able to change.

Everything the trainer reads or writes in a local workspace goes through here, because the
agent's code (run by `run_tests`) can leave anything at any path: a symlink to a host file, a
FIFO that blocks whoever opens it, a directory where a file was, a file of gigabytes. So:

- paths are walked one component at a time from the workspace root with ``O_NOFOLLOW`` (a
  symlink anywhere on the way is refused, not followed);
- files are opened ``O_NONBLOCK`` and must be regular files (a FIFO or device is refused
  before any read or write could block);
- reads are capped at `MAX_FILE_BYTES`.

Refusals raise `UnsafePathError` (a `ValueError`), which the env turns into an invalid
action. The sandbox's processes are all dead when the trainer touches the files (the PID
namespace dies with each run), so nothing changes a path between these checks and the use.
"""

from __future__ import annotations

import contextlib
import os
import stat
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from tripod.envs.swe import owners

MAX_FILE_BYTES = 2_000_000
"""Largest file the trainer reads from a workspace (source files are far smaller)."""
REMOVING = ".rm-"
"""The prefix of a folder `remove_tree` has moved up and not yet removed."""
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class UnsafePathError(ValueError):
    """A workspace path that is a link, not a regular file, or too large."""


def _parts(rel: str) -> list[str]:
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafePathError(f"path {rel!r} leaves the repository")
    return parts


def _open_dir(root: Path, parts: list[str], create: bool = False) -> int:
    """A descriptor of the folder `root/parts...`, never following a link."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in parts:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if _is_link(fd, part):
                    raise UnsafePathError(f"{part!r} is a symbolic link") from exc
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def _entry_mode(root: Path, rel: str) -> int | None:
    """The lstat mode of `rel` (None if absent); folders on the way must be real folders."""
    parts = _parts(rel)
    if not parts:
        return stat.S_IFDIR
    try:
        fd = _open_dir(root, parts[:-1])
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None
    try:
        return os.lstat(parts[-1], dir_fd=fd).st_mode
    except FileNotFoundError:
        return None
    finally:
        os.close(fd)


def _check_regular(fd: int, rel: str, max_bytes: int) -> int:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise UnsafePathError(f"{rel!r} is not a regular file")
    if info.st_size > max_bytes:
        raise UnsafePathError(f"{rel!r} is larger than {max_bytes} bytes")
    return info.st_size


def read_bytes(root: Path, rel: str, max_bytes: int = MAX_FILE_BYTES) -> bytes | None:
    """The content of a regular file (None if there is nothing at `rel`)."""
    parts = _parts(rel)
    if not parts:
        return None
    mode = _entry_mode(root, rel)
    if mode is None or stat.S_ISDIR(mode):
        return None
    if stat.S_ISLNK(mode):
        raise UnsafePathError(f"{rel!r} is a symbolic link (not followed)")
    if not stat.S_ISREG(mode):
        raise UnsafePathError(f"{rel!r} is not a regular file")
    dir_fd = _open_dir(root, parts[:-1])
    try:
        fd = os.open(parts[-1], os.O_RDONLY | _FILE_FLAGS, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    with os.fdopen(fd, "rb") as fh:
        _check_regular(fd, rel, max_bytes)
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise UnsafePathError(f"{rel!r} is larger than {max_bytes} bytes")
    return data


def write_bytes(root: Path, rel: str, data: bytes | None) -> None:
    """Create or overwrite the file at `rel` (a link or special file there is replaced by
    a regular file, never written through), or delete it (None)."""
    parts = _parts(rel)
    if not parts:
        raise UnsafePathError("cannot write the repository root")
    dir_fd = _open_dir(root, parts[:-1], create=data is not None)
    try:
        if data is None:
            mode = _entry_mode(root, rel)
            if mode is not None and not stat.S_ISDIR(mode):
                os.unlink(parts[-1], dir_fd=dir_fd)  # removes a link, never its target
            return
        mode = _entry_mode(root, rel)
        if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            os.unlink(parts[-1], dir_fd=dir_fd)  # a link or FIFO is replaced, never used
        fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | _FILE_FLAGS, 0o644, dir_fd=dir_fd)
    except IsADirectoryError as exc:
        raise UnsafePathError(f"{rel!r} is a folder") from exc
    except OSError as exc:
        if _is_link(dir_fd, parts[-1]):
            raise UnsafePathError(f"{rel!r} is a symbolic link") from exc
        raise
    finally:
        os.close(dir_fd)
    with os.fdopen(fd, "wb") as fh:
        _check_regular(fd, rel, max_bytes=1 << 62)
        os.ftruncate(fd, 0)
        fh.write(data)


def is_dir(root: Path, rel: str) -> bool:
    """`rel` is a real folder (not a link to one)."""
    mode = _entry_mode(root, rel)
    return mode is not None and stat.S_ISDIR(mode)


MAX_DEPTH = 64
"""Folders deeper than this are not walked (a project's tree is about ten deep; a run can
leave a chain of thousands)."""
MAX_ENTRIES = 200_000
"""Most entries one walk looks at, whatever the tree holds."""


def walk_files(root: Path, rel: str = "") -> Iterator[str]:
    """Regular files under the folder `rel` (relative paths, sorted per folder), links and
    special files left out; an unreadable folder is skipped. The walk (`_tree`) opens each
    folder through its parent's descriptor without following links and stops at
    `MAX_DEPTH` and `MAX_ENTRIES`."""
    seen = [0]
    for parts, entries in _tree(root, _parts(rel), lambda: MAX_ENTRIES - seen[0]):
        seen[0] += len(entries)
        for name, mode, _ in entries:
            if stat.S_ISREG(mode):
                yield "/".join([*parts, name])


def _tree(root: Path, start: list[str], room: Callable[[], int], allocated: bool = False,
          deeper: Callable[[], None] | None = None) -> Iterator[tuple[list[str], list]]:
    """(parts, `_listing`) of the folder `root/start` and of every folder under it, depth
    first in name order, while `room()` (the entries the caller still takes) is positive;
    folders deeper than `MAX_DEPTH` are not listed (`deeper` is called instead). Without
    recursion, and each folder is opened through its parent's descriptor without following
    links: a walk costs one open per folder whatever the depth (opened from the root, a
    chain of folders costs its depth squared), and holds at most `MAX_DEPTH` + 1
    descriptors."""
    try:
        fd = _open_dir(root, start)
    except (OSError, UnsafePathError):
        return
    frames: list[tuple[int, list[str], list[str]]] = []
    try:
        while True:
            entries = _listing(fd, room(), allocated)
            yield start, entries
            subfolders = [name for name, mode, _ in entries if stat.S_ISDIR(mode)]
            frames.append((fd, start, subfolders))
            fd = -1
            while frames and fd < 0:
                parent, parts, pending = frames[-1]
                if not pending or room() <= 0:
                    os.close(parent)
                    frames.pop()
                    continue
                name = pending.pop()
                if len(parts) >= MAX_DEPTH:
                    if deeper is not None:
                        deeper()
                    continue
                with contextlib.suppress(OSError):
                    fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
                    start = [*parts, name]
            if fd < 0:
                return
    finally:
        if fd >= 0:
            os.close(fd)
        for parent, _, _ in frames:
            os.close(parent)


def _listing(fd: int, most: int, allocated: bool = False) -> list[tuple[str, int, int]]:
    """(name, lstat mode, size) of at most `most` entries of the open folder `fd`, sorted
    in reverse (so a stack walk takes them in order); [] if it cannot be read. With
    `allocated`, a size is the larger of the file's length and the disk blocks it holds
    (``fallocate`` can reserve blocks past a file's end, which its length does not show)."""
    found: list[tuple[str, int, int]] = []
    if most <= 0:
        return found
    try:
        with os.scandir(fd) as it:
            for entry in it:
                with contextlib.suppress(OSError):
                    info = entry.stat(follow_symlinks=False)
                    size = max(info.st_size, info.st_blocks * 512) if allocated \
                        else info.st_size
                    found.append((entry.name, info.st_mode, size))
                if len(found) >= most:
                    break
    except OSError:
        pass
    return sorted(found, reverse=True)


def usage(root: Path, max_entries: int, max_bytes: int) -> tuple[int, int]:
    """(entries, bytes of regular files) under `root`, counted without recursion (`_tree`);
    the count stops once either cap is passed (so its cost is bounded whatever the tree
    holds). A file's bytes are the larger of its length and the disk blocks it holds. A
    folder deeper than `MAX_DEPTH` counts as past the entry cap."""
    entries = size = 0
    too_deep = False

    def room() -> int:
        return 0 if too_deep or size > max_bytes else max_entries + 1 - entries

    def deeper() -> None:
        nonlocal too_deep
        too_deep = True

    for _, listing in _tree(root, [], room, allocated=True, deeper=deeper):
        entries += len(listing)
        size += sum(nbytes for _, mode, nbytes in listing if stat.S_ISREG(mode))
    return (max_entries + 1 if too_deep else entries), size


def remove_tree(path: Path) -> None:
    """Delete a folder and everything in it, without recursion and without a path length
    limit: each subfolder is first moved up to the top folder, so no folder handled is
    more than one level deep. Errors are ignored (best effort, like ``rmtree``)."""
    if not path.is_dir() or path.is_symlink():
        with contextlib.suppress(OSError):
            path.unlink()
        return
    pending = [path.name]
    top = os.open(path.parent, _DIR_FLAGS)
    try:
        while pending:
            name = pending.pop()
            _empty_folder(top, name, pending)
            with contextlib.suppress(OSError):
                os.rmdir(name, dir_fd=top)
    finally:
        os.close(top)


def _empty_folder(top: int, name: str, pending: list[str]) -> None:
    """Unlink the files of `top/name` and move its folders up next to it (into `pending`)."""
    with contextlib.suppress(OSError):
        os.chmod(name, 0o700, dir_fd=top, follow_symlinks=False)
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=top)
    except OSError:
        return
    try:
        with os.scandir(fd) as it:
            names = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
        for child, is_folder in names:
            with contextlib.suppress(OSError):
                if is_folder:
                    moved = f"{REMOVING}{owners.tag()}-{uuid.uuid4().hex}"
                    os.rename(child, moved, src_dir_fd=fd, dst_dir_fd=top)
                    pending.append(moved)
                else:
                    os.unlink(child, dir_fd=fd)
    except OSError:
        pass
    finally:
        os.close(fd)
