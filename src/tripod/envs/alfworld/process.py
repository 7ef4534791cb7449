"""An object that lives in a child process of its own, called by method name.

Why ALFWorld needs it: textworld's PDDL loader and fast-downward's translator keep
module-level state (one shared parser, global translator options, ``sys.stdout`` swapped
during translation), so two games loaded from two threads of one process corrupt each other
(measured: `IndexError: pop from empty list` and parser errors as soon as two episodes of
the rollout engine start together). One process per env makes episodes independent, lets
them use several cores, and contains a crash or a hang of the C planner.

Protocol: the parent starts ``python -c 'serve(r, w)'`` with two pipes; the first request
builds the object (``target`` is ``"module:Class"``, with keyword arguments), each later
request is ``(method name, args)``; every reply is ``("ok", value)`` or ``("error",
traceback text)``. Values are pickled, so they must be plain records (`Step`, `StepInfo`).
Nothing is imported from the target's module until the child does it.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import subprocess
import sys
import tempfile
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from typing import IO, Any

from tripod.envs.base import EnvError


def serve(read_fd: int, write_fd: int) -> None:
    """Child main loop: build the target, then answer method calls until told to stop."""
    inbox, outbox = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    obj: Any = None
    while True:
        try:
            method, args = inbox.recv()
        except EOFError:  # the parent is gone
            break
        if method == "close":
            break
        try:
            if method == "__init__":
                obj, result = _build(*args), None
            else:
                result = getattr(obj, method)(*args)
            outbox.send(("ok", result))
        except Exception:
            outbox.send(("error", traceback.format_exc()))
    if obj is not None and hasattr(obj, "close"):
        with contextlib.suppress(Exception):
            obj.close()


def _build(target: str, kwargs: dict[str, Any]) -> Any:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)(**kwargs)


class ChildProcess:
    """Parent side of one object in a child process; started on the first call, and again
    on the next call after a failure (with a fresh object: the old state is lost).

    `environ` is added to the child's environment only (nothing is set in this process).
    Not for concurrent use: one call at a time, as an env is stepped."""

    def __init__(self, target: str, kwargs: dict[str, Any], environ: dict[str, str],
                 label: str) -> None:
        self.target = target
        self.kwargs = kwargs
        self.environ = environ
        self.label = label
        """Names the child in errors (e.g. 'ALFWorld game process')."""
        self._proc: subprocess.Popen | None = None
        self._to_child: Connection | None = None
        self._from_child: Connection | None = None
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def call(self, method: str, *args: Any, timeout_s: float) -> Any:
        """``obj.method(*args)`` in the child; a crash, a hang past `timeout_s` or an
        exception there becomes `EnvError` (and the child is stopped)."""
        if self._proc is None:
            self._start(timeout_s)
        return self._request(method, args, timeout_s)

    def _start(self, timeout_s: float) -> None:
        r_in, w_in = os.pipe()
        r_out, w_out = os.pipe()
        src = str(Path(__file__).resolve().parents[3])  # the folder that holds `tripod`
        path = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)
        code = f"from {__name__} import serve; serve({r_in}, {w_out})"
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (lives as long as the child)
        # Own session: a Ctrl-C in the terminal reaches the parent only, which then closes us.
        self._proc = subprocess.Popen(
            [sys.executable, "-c", code], pass_fds=(r_in, w_out), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=self._log, start_new_session=True,
            env={**os.environ, **self.environ, "PYTHONPATH": path})
        os.close(r_in)
        os.close(w_out)
        self._to_child = Connection(w_in, readable=False)
        self._from_child = Connection(r_out, writable=False)
        self._request("__init__", (self.target, self.kwargs), timeout_s)

    def _request(self, method: str, args: tuple, timeout_s: float) -> Any:
        assert self._to_child is not None and self._from_child is not None
        try:
            self._to_child.send((method, args))
            if not self._from_child.poll(timeout_s):
                raise self._fail(f"did not answer {method!r} within {timeout_s:g} s (hung)")
            status, payload = self._from_child.recv()
        except (EOFError, OSError) as exc:
            raise self._fail(f"crashed during {method!r} ({type(exc).__name__})") from exc
        if status == "error":
            raise self._fail(f"raised during {method!r}:\n{payload}")
        return payload

    def _fail(self, what: str) -> EnvError:
        code = self._proc.poll() if self._proc is not None else None
        tail = self._log_tail()
        self.close()
        return EnvError(f"{self.label} {what}; exit code {code}."
                        + (f"\nIts last output:\n{tail}" if tail else ""))

    def _log_tail(self, chars: int = 2000) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-chars:].strip()

    def close(self) -> None:
        """Ask the child to stop (it closes its object); kill it if it does not in 2 s."""
        if self._proc is not None:
            try:
                if self._to_child is not None:
                    self._to_child.send(("close", None))
                self._proc.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()
        for conn in (self._to_child, self._from_child):
            if conn is not None:
                conn.close()
        if self._log is not None:
            self._log.close()
        self._proc = self._to_child = self._from_child = self._log = None
