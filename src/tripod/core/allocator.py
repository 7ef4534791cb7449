"""Choosing the process's memory allocator: `TRIPOD_ALLOCATOR=jemalloc tripod ...`.

glibc's malloc keeps most of what a training process frees (the update's activations, the
rollout's KV caches) resident; jemalloc hands freed pages back after a short decay, which
lowers the process's resident memory between phases and its peak (docs/performance.md has
the measurements). An allocator has to be loaded before the interpreter starts, so the
`tripod` command re-executes itself once with the library in `LD_PRELOAD` (and `MALLOC_CONF`
set to `MALLOC_CONF` below unless already set). Where no jemalloc library is found the
command says so and runs on glibc.
"""

from __future__ import annotations

import ctypes.util
import os
import sys
from pathlib import Path

ENV = "TRIPOD_ALLOCATOR"
_MARK = "TRIPOD_ALLOCATOR_REEXEC"   # set on the re-executed process only
CHOICES = ("jemalloc", "glibc")
MALLOC_CONF = "background_thread:true"
"""jemalloc's settings unless `MALLOC_CONF` is set: pages are purged by a background thread
instead of inside the allocating calls (one RL iteration, interleaved runs: +6-13% wall time
over glibc without it, +1-5% with it; docs/performance.md)."""

# Debian's libjemalloc2, then the copy Ray ships in its wheel (an extra of tripod).
_KNOWN = ("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2",
          "/usr/lib64/libjemalloc.so.2", "/usr/local/lib/libjemalloc.so.2")


def find_jemalloc() -> str | None:
    """A jemalloc shared library on this machine, or None."""
    for path in _KNOWN:
        if Path(path).is_file():
            return path
    found = ctypes.util.find_library("jemalloc")
    if found and Path(found).is_absolute() and Path(found).is_file():
        return found
    try:
        import importlib.util

        spec = importlib.util.find_spec("ray")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        bundled = Path(spec.origin).parent / "core" / "libjemalloc.so"
        if bundled.is_file():
            return str(bundled)
    return None


def preloaded() -> bool:
    return "jemalloc" in os.environ.get("LD_PRELOAD", "")


def mapped() -> bool | None:
    """Whether jemalloc is mapped into this process (None where /proc is missing)."""
    try:
        with open("/proc/self/maps") as f:
            return "jemalloc" in f.read()
    except OSError:
        return None


def reexec_if_asked(argv: list[str]) -> None:
    """Re-execute `python -m tripod.cli ARGV` with jemalloc preloaded if `TRIPOD_ALLOCATOR`
    asks for it and it is not loaded yet; return (and run as is) otherwise. Exits with a
    clear message on an unknown choice."""
    choice = os.environ.get(ENV, "").strip().lower()
    if choice in ("", "glibc"):
        return
    if choice not in CHOICES:
        sys.exit(f"error: {ENV}={choice!r}: choose one of {', '.join(CHOICES)}")
    if preloaded():
        if os.environ.pop(_MARK, None) is not None:   # say once, in the re-executed process
            state = {True: "loaded", False: "NOT loaded", None: "unverified"}[mapped()]
            print(f"tripod: allocator jemalloc ({state}: {os.environ['LD_PRELOAD']})",
                  file=sys.stderr)
        return
    lib = find_jemalloc()
    if lib is None:
        print(f"warning: {ENV}=jemalloc but no jemalloc library was found (Debian: "
              "apt-get install libjemalloc2); running on glibc's malloc", file=sys.stderr)
        return
    env = dict(os.environ)
    env["LD_PRELOAD"] = ":".join(p for p in (lib, env.get("LD_PRELOAD", "")) if p)
    env.setdefault("MALLOC_CONF", MALLOC_CONF)
    env[_MARK] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "tripod.cli", *argv], env)
