"""The game process: TextWorld and Jericho in a child process, plain dicts over a pipe.

Jericho, the Z-machine interpreter under TextWorld, is a C library that can hang or crash the
whole process on odd input (a NUL byte makes it spin forever). So each env plays its games in
a child process of its own, and the parent waits for every answer with a time-out: a crash, a
hang or an exception inside TextWorld becomes `EnvError` in the parent, never a hang, and the
next request starts a fresh child.

Protocol: the parent sends ``(op, arg)`` tuples, ``("load", (story_file, infos_request))``,
``("step", command)`` or ``("close", None)``; the child answers ``("ok", state_dict)`` or
``("error", traceback_text)``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from multiprocessing.connection import Connection
from pathlib import Path
from typing import IO, Any

from tripod.envs.base import EnvError


def serve(read_fd: int, write_fd: int) -> None:
    """Child process main loop: load / step requests in, plain state dicts out."""
    os.dup2(2, 1)  # stray prints from the interpreter must not reach the protocol pipe
    inbox, outbox = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    import traceback

    game = None
    while True:
        try:
            op, arg = inbox.recv()
        except EOFError:  # parent gone
            break
        if op == "close":
            break
        try:
            game, state = _handle(game, op, arg)
            outbox.send(("ok", state_dict(state)))
        except Exception:
            outbox.send(("error", traceback.format_exc()))
    if game is not None:
        game.close()


def _handle(game: Any, op: str, arg: Any) -> tuple[Any, Any]:
    """Apply one request to the running game (or start one); returns (game, new state)."""
    if op == "load":
        import textworld

        if game is not None:
            game.close()
        path, request = arg
        game = textworld.start(path, textworld.EnvInfos(**request))
        return game, game.reset()
    if op == "step":
        if game is None:
            raise RuntimeError("step before load")
        return game, game.step(arg)[0]
    raise ValueError(f"unknown request {op!r}")


def state_dict(state: Any) -> dict[str, Any]:
    """The parts of a TextWorld `GameState` the env uses, as plain picklable values."""
    return {
        "feedback": state.feedback or "",
        "won": bool(state.won),
        "lost": bool(state.lost),
        "score": float(state.score or 0),
        "max_score": float(state.max_score or 0),
        "objective": state.objective or "",
        "policy_commands": list(state.policy_commands or []),
        "admissible_commands": list(state.admissible_commands or []),
        "description": state.description,
        "inventory": state.inventory,
        "walkthrough": list(state.get("extra.walkthrough") or []),
    }


def _child_environment() -> dict[str, str]:
    """The child's environment: ours, with this checkout of tripod first on its path (it
    runs ``python -c`` and must import the same `tripod` as the parent)."""
    import tripod

    src = str(Path(tripod.__file__).resolve().parent.parent)
    path = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path}


class GameProcess:
    """Parent side of one game process (started on first use, restarted after a failure)."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._to_child: Connection | None = None
        self._from_child: Connection | None = None
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The child's process id (None while no child runs)."""
        return self._proc.pid if self._proc is not None else None

    def _start(self) -> None:
        r_in, w_in = os.pipe()
        r_out, w_out = os.pipe()
        code = f"from tripod.envs.textworld.process import serve; serve({r_in}, {w_out})"
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (lives as long as the child)
        # Own session: a Ctrl-C in the terminal reaches the parent only, which then closes us.
        self._proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=(r_in, w_out),
                                      stdin=subprocess.DEVNULL, stdout=self._log,
                                      stderr=self._log, env=_child_environment(),
                                      start_new_session=True)
        os.close(r_in)
        os.close(w_out)
        self._to_child = Connection(w_in, readable=False)
        self._from_child = Connection(r_out, writable=False)

    def call(self, op: str, arg: Any, timeout_s: float) -> dict[str, Any]:
        """Send one request and wait for the reply; any failure becomes `EnvError`."""
        if self._proc is None:
            self._start()
        assert self._to_child is not None and self._from_child is not None
        try:
            self._to_child.send((op, arg))
            if not self._from_child.poll(timeout_s):
                raise self._fail(f"did not answer {op!r} within {timeout_s:g} s (hung, killed)")
            status, payload = self._from_child.recv()
        except (EOFError, OSError) as exc:
            raise self._fail(f"crashed during {op!r} ({type(exc).__name__})") from exc
        if status == "error":
            raise self._fail(f"raised during {op!r}:\n{payload}")
        return payload

    def _fail(self, what: str) -> EnvError:
        """Stop the child and describe the failure (with the end of its output)."""
        proc, tail = self._proc, self._log_tail()
        self.close()  # waits for (or kills) the child, so its exit code is known
        code = proc.returncode if proc is not None else None
        return EnvError(f"TextWorld game process {what}; exit code {code}."
                        + (f"\nIts last output:\n{tail}" if tail else ""))

    def _log_tail(self, chars: int = 2000) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-chars:].strip()

    def close(self) -> None:
        """Stop the child (politely, then by force) and release the pipes."""
        if self._proc is not None:
            try:
                if self._to_child is not None:
                    self._to_child.send(("close", None))
                self._proc.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()
        for handle in (self._to_child, self._from_child, self._log):
            if handle is not None:
                handle.close()
        self._proc = self._to_child = self._from_child = self._log = None
