"""One object in a child process of its own, called by method name over a pipe.

Why the text-game families need it: the libraries under them are not safe to run in the
process that trains. Jericho, the Z-machine interpreter under TextWorld, is a C library that
can hang or crash the whole process on odd input (a NUL byte makes it spin forever), and
textworld's PDDL layer used by ALFWorld keeps module-level state (one shared parser, global
translator options, a swapped ``sys.stdout``), so two games in threads of one process corrupt
each other. A game in a child process, waited for with a time-out, turns a crash, a hang or
an exception into `EnvError` in the parent, never a hang; and the next call starts a fresh
child. A family module says only what runs in the child (a class with one method per
request); this module owns the process, the pipes, the time-outs and the clean-up.

Protocol: the parent starts ``python -c 'serve(r, w)'`` with two pipes. The first request
builds the object (``("__init__", (target, kwargs))``, ``target`` written
``"module:Class"``); each later request is ``(method name, argument)`` and runs
``obj.method(argument)``; ``("close", None)`` ends the loop (the object's ``close()`` is
called if it has one). Every reply is ``("ok", value)`` or ``("error", traceback text)``.
Arguments and values are pickled, so they must be plain records. Nothing is imported from the
target's module in the parent.

How a child starts: forked from a fork server (`multiprocessing`'s ``forkserver``, one per
parent process, started on the first child) that has already imported `PRELOAD`, where the
platform has one; otherwise a fresh interpreter (``python -c``). Importing textworld costs
over a second of CPU (its grammar and logic files are parsed at import); a fork from the
server costs milliseconds, and every env of every pool starts at least one child. The child
gets the parent's environment as it is when the child starts (plus `ChildProcess.environ`),
its own session, and stdin / stdout / stderr as in the ``python -c`` start; the parent's
main script is not run again in it (`multiprocessing` would by default). Modules the
server imported saw the server's environment, not the child's: a module whose import reads
an environment variable that a family sets per child stays out of `PRELOAD` (ALFWorld's
``ALFWORLD_DATA`` is read when a game is built, in the child, so its module is in).
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import multiprocessing.context
import os
import subprocess
import sys
import tempfile
import threading
import traceback
from multiprocessing import popen_forkserver, reduction, spawn
from multiprocessing.connection import Connection
from pathlib import Path
from typing import IO, Any

from tripod.envs.base import EnvError

CLOSE_WAIT_S = 2.0
"""How long `ChildProcess.close` waits for the child to stop by itself before killing it."""

PRELOAD = ("tripod.envs.textworld.warm", "tripod.envs.alfworld.game")
"""What the fork server imports once, before it forks any child (a module that is not
installed is skipped)."""

FORK_SERVER = "forkserver" in multiprocessing.get_all_start_methods()
"""Whether children start from the fork server (`ChildProcess.fork_server` per object)."""


def serve(read_fd: int, write_fd: int) -> None:
    """Child main loop: build the target, then answer method calls until told to stop."""
    inbox, outbox = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    obj: Any = None
    while True:
        try:
            method, arg = inbox.recv()
        except EOFError:  # the parent is gone
            break
        if method == "close":
            break
        try:
            if method == "__init__":
                obj, result = _build(*arg), None
            else:
                result = getattr(obj, method)(arg)
            outbox.send(("ok", result))
        except Exception:
            outbox.send(("error", traceback.format_exc()))
    if obj is not None and hasattr(obj, "close"):
        with contextlib.suppress(Exception):
            obj.close()


def _build(target: str, kwargs: dict[str, Any]) -> Any:
    """``module:Class`` built with `kwargs` (the module is imported here, in the child)."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)(**kwargs)


class _PassFd:
    """A file descriptor handed to a child started by the fork server (pickled as a
    duplicate of the descriptor, as `multiprocessing` hands over a `Connection`)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple[Any, tuple[Any]]:
        return _received_fd, (reduction.DupFd(self.fd),)


def _received_fd(dup: Any) -> int:
    return dup.detach()


def _serve_forked(read_fd: int, write_fd: int, out_fd: int, err_fd: int,
                  environ: dict[str, str]) -> None:
    """Child main of a fork-server start: become what the ``python -c`` start would have
    been (own session, the parent's environment, stdio on the log), then `serve`."""
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd, target in ((0, devnull), (1, out_fd), (2, err_fd)):
        os.dup2(target, fd)
    for fd in {devnull, out_fd, err_fd}:
        os.close(fd)
    os.environ.clear()
    os.environ.update(environ)
    # PYTHONPATH entries the parent set for this child (e.g. a test's own module folder)
    for entry in reversed(environ.get("PYTHONPATH", "").split(os.pathsep)):
        if entry and entry not in sys.path:
            sys.path.insert(0, entry)
    serve(read_fd, write_fd)


_SERVER_LOCK = threading.Lock()
_SERVER_BROKEN = False
"""Set once a forked start failed in this process: later children start fresh."""
_NO_MAIN = threading.local()


def _preparation_data(name: str) -> dict[str, Any]:
    """`multiprocessing.spawn.get_preparation_data`, without the parent's main module for our
    own starts: a child forked for a game must not run the parent's script again (a script
    without an ``if __name__ == "__main__"`` guard would start its training in every game
    process; a Ray worker's main imports ray in each)."""
    data = _ORIGINAL_PREPARATION_DATA(name)
    if getattr(_NO_MAIN, "active", False):
        data.pop("init_main_from_name", None)
        data.pop("init_main_from_path", None)
    return data


_ORIGINAL_PREPARATION_DATA = spawn.get_preparation_data


class _ForkedPopen(popen_forkserver.Popen):
    def _launch(self, process_obj: Any) -> None:
        _NO_MAIN.active = True
        try:
            super()._launch(process_obj)
        finally:
            _NO_MAIN.active = False


class _ForkedProcess(multiprocessing.context.ForkServerProcess):
    @staticmethod
    def _Popen(process_obj: Any) -> Any:  # noqa: N802 (multiprocessing's name)
        return _ForkedPopen(process_obj)


def _ensure_fork_server() -> None:
    """Start the fork server with `PRELOAD` (once per process), importing this checkout of
    tripod: the server is a fresh interpreter, and `PYTHONPATH` is all it has of our path."""
    from multiprocessing import forkserver

    with _SERVER_LOCK:
        if spawn.get_preparation_data is not _preparation_data:
            spawn.get_preparation_data = _preparation_data
        if getattr(forkserver._forkserver, "_forkserver_pid", None) is not None:
            return  # running (ours, or started by other code with its own preloads)
        multiprocessing.get_context("forkserver").set_forkserver_preload(list(PRELOAD))
        saved = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = _child_environment({})["PYTHONPATH"]
        try:
            forkserver.ensure_running()
        finally:
            if saved is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved


def _child_environment(environ: dict[str, str]) -> dict[str, str]:
    """Ours plus `environ`, with this checkout of tripod first on the path (the child runs
    ``python -c`` and must import the same `tripod` as the parent). A ``PYTHONPATH`` in
    `environ` is put in front of ours rather than replacing it."""
    import tripod

    src = str(Path(tripod.__file__).resolve().parent.parent)
    parts = (src, environ.get("PYTHONPATH"), os.environ.get("PYTHONPATH"))
    return {**os.environ, **environ, "PYTHONPATH": os.pathsep.join(p for p in parts if p)}


class ChildProcess:
    """Parent side of one object in a child process; started on the first call, and again
    on the next call after a failure (with a fresh object: the old state is lost).

    Not for concurrent use: one call at a time, as an env is stepped.
    """

    def __init__(self, target: str, kwargs: dict[str, Any] | None = None, *, label: str,
                 environ: dict[str, str] | None = None, keep_stdout: bool = False) -> None:
        self.target = target
        """The object to build in the child, ``"module:Class"``."""
        self.kwargs = dict(kwargs or {})
        """Keyword arguments of its constructor (pickled to the child)."""
        self.label = label
        """Names the child in errors (e.g. 'TextWorld game process')."""
        self.environ = dict(environ or {})
        """Added to the child's environment only (nothing is set in this process)."""
        self.keep_stdout = keep_stdout
        """Keep the child's stdout in its log next to stderr (the log's end is shown in
        errors); off where a library prints much that nobody reads (ALFWorld's planner)."""
        self.fork_server = FORK_SERVER
        """Start the child from the fork server (default where the platform has one), not
        from a fresh interpreter."""
        self._proc: subprocess.Popen | multiprocessing.process.BaseProcess | None = None
        self._exit_code: int | None = None
        """The last child's exit code once it has ended (shown in errors)."""
        self._to_child: Connection | None = None
        self._from_child: Connection | None = None
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The child's process id (None until the first call, and after a failure)."""
        return self._proc.pid if self._proc is not None else None

    def call(self, method: str, arg: Any, timeout_s: float) -> Any:
        """``obj.method(arg)`` in the child. A crash, a hang past `timeout_s` or an
        exception there becomes `EnvError` (and the child is stopped; the next call starts a
        new one). Starting the child counts against the same `timeout_s`."""
        if self._proc is None:
            self._start()
            self._request("__init__", (self.target, self.kwargs), timeout_s)
        return self._request(method, arg, timeout_s)

    def _start(self) -> None:
        global _SERVER_BROKEN
        r_in, w_in = os.pipe()
        r_out, w_out = os.pipe()
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (lives as long as the child)
        try:
            # a daemonic `multiprocessing` process may not have children of its own
            if (self.fork_server and not _SERVER_BROKEN
                    and not multiprocessing.current_process().daemon):
                try:
                    self._start_forked(r_in, w_out)
                except Exception as exc:  # the server failed: start fresh from now on
                    _SERVER_BROKEN = True
                    print(f"tripod: game processes start without the fork server from now on "
                          f"(it failed: {type(exc).__name__}: {exc})", file=sys.stderr)
                    self._start_fresh(r_in, w_out)
            else:
                self._start_fresh(r_in, w_out)
        except BaseException:
            for fd in (w_in, r_out):
                os.close(fd)
            self._log.close()
            self._log = None
            raise
        finally:
            os.close(r_in)
            os.close(w_out)
        self._to_child = Connection(w_in, readable=False)
        self._from_child = Connection(r_out, writable=False)

    def _start_fresh(self, r_in: int, w_out: int) -> None:
        code = f"from {__name__} import serve; serve({r_in}, {w_out})"
        stdout = self._log if self.keep_stdout else subprocess.DEVNULL
        # Own session: a Ctrl-C in the terminal reaches the parent only, which then closes us.
        self._proc = subprocess.Popen(
            [sys.executable, "-c", code], pass_fds=(r_in, w_out), stdin=subprocess.DEVNULL,
            stdout=stdout, stderr=self._log, env=_child_environment(self.environ),
            start_new_session=True)

    def _start_forked(self, r_in: int, w_out: int) -> None:
        assert self._log is not None
        _ensure_fork_server()
        err = self._log.fileno()
        with open(os.devnull, "wb") as devnull:
            out = err if self.keep_stdout else devnull.fileno()
            # The descriptors are duplicated into the child while `start` runs.
            proc = _ForkedProcess(
                target=_serve_forked, name=self.label, daemon=True,
                args=(_PassFd(r_in), _PassFd(w_out), _PassFd(out), _PassFd(err),
                      _child_environment(self.environ)))
            proc.start()
        # Out of `multiprocessing`'s list of children: every `start()` in any thread polls
        # that list, and two threads reading one child's exit code at once garble it. Only
        # this object waits for its child (`_wait`); at exit the child sees its pipes close.
        multiprocessing.process._children.discard(proc)
        self._proc = proc

    def _request(self, method: str, arg: Any, timeout_s: float) -> Any:
        assert self._to_child is not None and self._from_child is not None
        try:
            self._to_child.send((method, arg))
            if not self._from_child.poll(timeout_s):
                raise self._fail(f"did not answer {method!r} within {timeout_s:g} s (hung, killed)",
                                 hung=True)
            status, payload = self._from_child.recv()
        except (EOFError, OSError) as exc:
            raise self._fail(f"crashed during {method!r} ({type(exc).__name__})") from exc
        if status == "error":
            raise self._fail(f"raised during {method!r}:\n{payload}")
        return payload

    def _fail(self, what: str, hung: bool = False) -> EnvError:
        """Stop the child (a hung one at once) and describe the failure, with the end of its
        output."""
        tail = self._log_tail()
        if hung and self._proc is not None and _running(self._proc):
            self._proc.kill()
        self.close()  # waits for (or kills) the child, so its exit code is known
        code = self._exit_code
        return EnvError(f"{self.label} {what}; exit code {code}."
                        + (f"\nIts last output:\n{tail}" if tail else ""))

    def _log_tail(self, chars: int = 2000) -> str:
        """The last `chars` characters of the child's log (read from the end: a long-lived
        child may have written a lot)."""
        if self._log is None:
            return ""
        self._log.flush()  # what this process wrote into it (tests simulate a dying child)
        end = self._log.seek(0, os.SEEK_END)
        self._log.seek(max(0, end - 4 * chars))  # at most 4 bytes a character in UTF-8
        return self._log.read().decode(errors="replace")[-chars:].strip()

    def close(self) -> None:
        """Ask the child to stop (it closes its object); kill it if it has not stopped after
        `CLOSE_WAIT_S`. Releases the pipes and the log; safe to call twice."""
        if self._proc is not None:
            try:
                if self._to_child is not None:
                    self._to_child.send(("close", None))
                self._exit_code = _wait(self._proc, CLOSE_WAIT_S)
            except (OSError, subprocess.TimeoutExpired):
                if _running(self._proc):  # not a pid that may already be reused
                    self._proc.kill()
                self._exit_code = _wait(self._proc, None)
        for handle in (self._to_child, self._from_child, self._log):
            if handle is not None:
                handle.close()
        self._proc = self._to_child = self._from_child = self._log = None

    def __enter__(self) -> ChildProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: nothing sensible to do
            self.close()


def _wait(proc: subprocess.Popen | multiprocessing.process.BaseProcess,
          timeout_s: float | None) -> int:
    """Wait for either kind of child to end and release it; its exit code (negative: the
    signal that ended it). `subprocess.TimeoutExpired` if it runs past `timeout_s`."""
    if isinstance(proc, subprocess.Popen):
        return proc.wait(timeout=timeout_s)
    proc.join(timeout_s)
    code = proc.exitcode
    if code is None:
        raise subprocess.TimeoutExpired(proc.name, timeout_s or 0.0)
    proc.close()  # its sentinel descriptor
    return code


def _running(proc: subprocess.Popen | multiprocessing.process.BaseProcess) -> bool:
    """Not known to have ended (so its pid is still its own)."""
    if isinstance(proc, subprocess.Popen):
        return proc.poll() is None
    return proc.exitcode is None
