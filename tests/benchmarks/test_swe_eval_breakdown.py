"""`benchmarks/swe_eval_breakdown.py`: each unresolved SWE episode falls in the class the
tools' messages show, and a run's evaluations are summarised stage by stage."""

from __future__ import annotations

from pathlib import Path

import pytest

from tripod.report.records import EpisodeRecord, TurnRecord, TurnTokens

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
EDITED = "Edited calc/__init__.py; lines 6-10 now read:\n    6  ..."
SUBMITTED = ("Submitted. Target tests fixed: {}/2; other tests broken: {}/5.\n"
             "Hidden checks (the package's functions called on inputs not shown): {}/4 pass.")


def _episode(*observations: str, won: bool = False, invalid: int = 0) -> EpisodeRecord:
    tokens = TurnTokens([], [], [], [])
    turns = [TurnRecord(o, "x", "invalid" if i < invalid else "ok", 0.0, tokens)
             for i, o in enumerate(observations)]
    return EpisodeRecord(0, "eval/sft", "swe/x", "test", 0, 0, 0, 0,
                         "won" if won else "lost", won, not won, "", "", turns)


CASES = {
    "resolved": _episode(EDITED, SUBMITTED.format(2, 0, 4), won=True),
    "no edit": _episode("Invalid tool call: ...", "Submitted. ...", invalid=1),
    "targets still fail": _episode(EDITED, SUBMITTED.format(0, 0, 0)),
    "partly fixed": _episode(EDITED, SUBMITTED.format(1, 0, 0)),
    "regressed": _episode(EDITED, SUBMITTED.format(2, 1, 4)),
    "tampering": _episode(EDITED, "Submitted. Scored as tampering: the gate refused ..."),
}


@pytest.mark.parametrize("expected", sorted(CASES))
def test_each_episode_is_classed_by_what_the_tools_said(monkeypatch, expected: str) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from swe_eval_breakdown import failure

    assert failure(CASES[expected]) == expected


def test_a_stage_is_summarised(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from swe_eval_breakdown import summarise

    row = summarise(list(CASES.values()))
    assert row["episodes"] == 6 and row["resolved"] == 1
    assert row["edit_applied"] == pytest.approx(5 / 6)
    assert row["mean_tool_calls"] == 2 and row["invalid_rate"] == pytest.approx(1 / 12)
    assert sum(row["outcomes"].values()) == 6 and row["ci95"][0] < 1 / 6 < row["ci95"][1]
