"""A hidden check compares types as a caller sees them, not only values under ``==``.

The tests' ``assert clamp(15, 0, 10) == 10`` passes for ``10.0``; a caller that formats the
result (``"{:02x}"``), hashes it into a tuple key or compares a tuple with it does not get
the gold behaviour, so the change is not resolved.
"""

from __future__ import annotations

import pytest
from tests.swe.test_attacks import FIX, needs_namespaces
from tests.swe.test_forgery import _play

from tripod.envs.swe.task import SweTask

AS_FLOAT = FIX.replace("        return hi\n    return x\n>>>>>>> REPLACE",
                       "        return hi * 1.0\n    return x\n>>>>>>> REPLACE")
AS_BOOL_SUM = FIX.replace("        return hi\n    return x\n>>>>>>> REPLACE",
                          "        return hi + (x > hi) - True\n    return x\n>>>>>>> REPLACE")


@needs_namespaces
@pytest.mark.parametrize("action", [AS_FLOAT], ids=["float for int"])
def test_a_value_of_another_type_fails_the_checks(calc_task: SweTask, action: str) -> None:
    step = _play(calc_task, action, "submit")
    assert not step.info.won, step.observation
    assert "Target tests fixed: 1/1" in step.observation, step.observation


@needs_namespaces
def test_the_same_type_passes(calc_task: SweTask) -> None:
    """An int computed another way (bools add as ints) is the gold value and type."""
    step = _play(calc_task, AS_BOOL_SUM, "submit")
    assert step.info.won, step.observation
