"""Stage progress off a terminal: plain lines with the stage, step of total, elapsed, time
left and the last status, and a heartbeat while a step runs longer than the interval."""

from __future__ import annotations

import io
import time

from rich.console import Console

from tripod.core.progress import StageProgress, clock


def _plain_console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()   # not a terminal: what nohup, CI or a pipe give
    return Console(file=out, force_terminal=False), out


def test_plain_lines_name_stage_step_elapsed_left_and_status():
    console, out = _plain_console()
    with StageProgress("SFT", 4, "steps", console=console, min_gap_s=0.0) as bar:
        bar.advance(status="loss 1.234")
        bar.advance(status="loss 0.900")
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("SFT: 0/4 steps, elapsed ")
    assert lines[1].startswith("SFT: 1/4 steps, elapsed ") and "left ~" in lines[1]
    assert lines[1].endswith("loss 1.234")
    assert lines[-1].startswith("SFT: 2/4 steps") and lines[-1].endswith("loss 0.900")


def test_heartbeat_prints_while_a_step_runs():
    console, out = _plain_console()
    with StageProgress("RL", 3, "iterations", console=console, heartbeat_s=0.05,
                       completed=1):
        time.sleep(0.4)   # one long step: no advance, yet lines keep coming
    lines = out.getvalue().splitlines()
    assert len(lines) >= 4   # start, heartbeats, end
    assert all(line.startswith("RL: 1/3 iterations, elapsed") for line in lines)


def test_quiet_and_terminal_print_no_plain_lines():
    console, out = _plain_console()
    with StageProgress("RL", 2, console=console, quiet=True, heartbeat_s=0.01) as bar:
        bar.advance()
    assert out.getvalue() == ""
    term = Console(file=io.StringIO(), force_terminal=True)
    assert not StageProgress("RL", 2, console=term).plain


def test_clock_format():
    assert (clock(9), clock(252), clock(3780)) == ("9s", "4m12s", "1h03m")
