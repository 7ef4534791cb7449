"""`benchmarks/alfworld_eval_breakdown.py`: lost ALFWorld games counted by failure mode, on
hand-written trajectories."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _game(actions: list[str], won: bool, seen: str = "") -> dict:
    return {"won": won, "objective": "Your task is to: put some mug on desk.",
            "turns": [{"action": a, "observation": seen} for a in actions]}


def test_lost_games_are_counted_by_mode(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from alfworld_eval_breakdown import breakdown

    loop = ["go to shelf 1", "go to desk 1", "go to bed 1"] * 4
    games = [_game(["go to desk 1", "take mug 1 from desk 1"], True, "a mug 1"),
             _game(loop, False),
             _game(["look"] * 3 + ["take pen 1 from desk 1"], False, "a mug 1")]
    (tmp_path / "trajectories").mkdir()
    with gzip.open(tmp_path / "trajectories" / "eval_sft_alfworld_generated-pick_and_place_simple"
                   ".jsonl.gz", "wt") as f:
        for row in [{"format": "tripod-trajectories"}, *games]:
            f.write(json.dumps(row) + "\n")
    c = breakdown(str(tmp_path))["pick_and_place_simple"]
    assert (c["episodes"], c["won"], c["lost"]) == (3, 1, 2)
    assert (c["loop_at_end"], c["goto_distinct"], c["goto"]) == (1, 3, 12)
    assert (c["look_turns"], c["lost_turns"]) == (3, 16)
    assert (c["never_saw_object"], c["took_something"]) == (1, 1)
