"""Progress of a long stage (demonstrations, SFT, RL iterations, evaluations), one helper for
every stage: a rich bar on a terminal, plain lines anywhere else.

Rich draws its bars only on a terminal, so under nohup, CI or a pipe a stage that runs for
an hour would print nothing. There the helper prints one plain line per step (at most one
every `min_gap_s`) and, from a background thread, one at least every `heartbeat_s` while a
step is still running, so a log shows the stage is alive within a minute:

    RL: 3/10 iterations, elapsed 4m12s, left ~9m48s, last success 44%
"""

from __future__ import annotations

import threading
import time

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

HEARTBEAT_S = 30.0
"""Longest silence of a plain-text stage: half a minute, so a line comes at least once a
minute even when a line is late by a whole heartbeat."""
MIN_GAP_S = 10.0
"""Fewest seconds between two plain lines of fast steps (an SFT step takes about a second)."""


def clock(seconds: float) -> str:
    """4m12s, 1h03m, 9s."""
    s = int(seconds)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class StageProgress:
    """Progress over `total` steps of `stage` (`unit`: what a step is, for the plain line).

    Use as a context manager; `advance(status=...)` after each step, where `status` is the
    last loss or success rate. Plain lines go to the console's file (stderr by default);
    `quiet` shows nothing at all."""

    def __init__(self, stage: str, total: int, unit: str = "steps", *,
                 console: Console | None = None, quiet: bool = False, completed: int = 0,
                 heartbeat_s: float = HEARTBEAT_S,
                 min_gap_s: float = MIN_GAP_S) -> None:
        self.stage, self.total, self.unit = stage, total, unit
        self.done, self.start_done, self.status = completed, completed, ""
        self.console = console or Console(stderr=True)
        self.heartbeat_s, self.min_gap_s = heartbeat_s, min_gap_s
        self.quiet = quiet
        self.plain = not quiet and not self.console.is_terminal
        self._bar: Progress | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._beat, daemon=True)
        self._start = self._last_line = 0.0

    def __enter__(self) -> StageProgress:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> StageProgress:
        self._start = time.monotonic()
        if self.plain:
            self._line()
            self._thread.start()
        elif not self.quiet:
            self._bar = Progress(TextColumn(f"[bold]{self.stage}"), BarColumn(),
                                 MofNCompleteColumn(), TextColumn("{task.description}"),
                                 TimeElapsedColumn(), TimeRemainingColumn(),
                                 console=self.console, transient=True)
            self._task = self._bar.add_task("", total=self.total, completed=self.done)
            self._bar.start()
        return self

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
        if self.plain:
            self._stop.set()
            self._thread.join()
            self._line()

    def advance(self, steps: int = 1, status: str = "") -> None:
        self.done += steps
        self.status = status or self.status
        if self._bar is not None:
            self._bar.update(self._task, advance=steps, description=self.status)
        elif self.plain and time.monotonic() - self._last_line >= self.min_gap_s:
            self._line()

    def line(self) -> str:
        """The plain line now: stage, step of total, elapsed, time left, last status."""
        elapsed = time.monotonic() - self._start
        text = f"{self.stage}: {self.done}/{self.total} {self.unit}, elapsed {clock(elapsed)}"
        ran = self.done - self.start_done
        if ran > 0 and self.done < self.total:
            text += f", left ~{clock(elapsed / ran * (self.total - self.done))}"
        return text + (f", {self.status}" if self.status else "")

    def _line(self) -> None:
        with self._lock:
            self._last_line = time.monotonic()
            print(self.line(), file=self.console.file, flush=True)

    def _beat(self) -> None:
        while not self._stop.wait(min(1.0, self.heartbeat_s)):
            if time.monotonic() - self._last_line >= self.heartbeat_s:
                self._line()
