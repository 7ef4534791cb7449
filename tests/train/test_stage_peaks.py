"""Per-stage peak memory of a run: the kernel's high-water mark, read and reset per stage."""

from __future__ import annotations

import pytest

from tripod.train.common import StagePeaks, resident_mb


def _touch(mb: int) -> None:
    buf = bytearray(mb * 1024 * 1024)   # zero-filled by the kernel: touch every page
    for i in range(0, len(buf), 4096):
        buf[i] = 1
    del buf


def test_each_stage_reports_its_own_peak():
    peaks = StagePeaks()
    if not peaks.exact:
        pytest.skip("this kernel does not let a process reset its high-water mark")
    base = resident_mb()
    _touch(300)
    first = peaks.end("big")
    second = peaks.end("small")   # nothing allocated since the reset
    assert first >= base + 250
    assert second < first - 200   # the reset worked: the big stage's peak is not carried over
    assert peaks.peaks == {"big": round(first, 1), "small": round(second, 1)}
