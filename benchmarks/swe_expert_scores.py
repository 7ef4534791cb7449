"""Score an honest agent and an idle one on SWE tasks: the expert's episode and a bare
`submit`, per task, with their final progress and verdict.

    python benchmarks/swe_expert_scores.py --tasks FILE [--json] [--tiny]

The expert replays the gold patch through the tools (an honest fix); `submit` on the
untouched base is what doing nothing earns. Run it with another checkout's sources first on
``PYTHONPATH`` (it uses only `SweEnv`, `load_tasks` and the expert action, which every
version has) to compare scores before and after a change to scoring: an honest agent's must
not move. ``--tiny`` plays the calc-like one-module task a test builds.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import tripod
from tripod.envs.swe.env import SweEnv
from tripod.envs.swe.patches import make_patch
from tripod.envs.swe.task import SweTask, WorkspaceSpec, load_tasks

_GOLD = "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n"
_TESTS = ("from calc import clamp\n\n\ndef test_high():\n    assert clamp(15, 0, 10) == 10\n\n\n"
          "def test_low():\n    assert clamp(-3, 0, 10) == 0\n")


def _tiny_task(root: Path) -> SweTask:
    buggy = _GOLD.replace("min(x, hi)", "x")
    (root / "calc").mkdir()
    (root / "calc" / "__init__.py").write_text(_GOLD)
    (root / "tests").mkdir()
    (root / "tests" / "test_calc.py").write_text(_TESTS)
    rel = "calc/__init__.py"
    return SweTask(instance_id="calc-1", repo="tripod/calc", base_commit="",
                   problem_statement="clamp(15, 0, 10) returns 15.",
                   patch=make_patch(rel, buggy, _GOLD), test_patch="",
                   FAIL_TO_PASS=["tests/test_calc.py::test_high"],
                   PASS_TO_PASS=["tests/test_calc.py::test_low"],
                   workspace=WorkspaceSpec(kind="local", source=str(root),
                                           setup_patch=make_patch(rel, _GOLD, buggy)))


def progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def output_flags(parser: argparse.ArgumentParser) -> None:
    """The shared flags (`_common.output_flags`), kept here so that the script runs against
    an older checkout's sources too."""
    parser.add_argument("--threads", type=int, default=2, help="unused (no model)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument("--tiny", action="store_true", help="reduced run for tests")


def play(task: SweTask, policy: str) -> dict:
    """One episode of `policy` ("expert" or "submit") on `task`."""
    task.split = "train"
    env = SweEnv("swe/scores", "train", [task])
    try:
        _, info = env.reset(0)
        start, turns = info.progress, 0
        while True:
            step = env.step(info.expert_action if policy == "expert" else "submit")
            info, turns = step.info, turns + 1
            if step.terminated or step.truncated:
                break
        return {"task": task.instance_id, "policy": policy, "won": bool(info.won),
                "progress": round(info.progress, 4), "start": round(start, 4), "turns": turns}
    finally:
        env.close()


def measure(tasks: list[SweTask]) -> dict:
    rows = []
    for i, task in enumerate(tasks):
        progress(f"{i + 1}/{len(tasks)} {task.instance_id}")
        rows += [play(task, "expert"), play(task, "submit")]
    summary = {}
    for policy in ("expert", "submit"):
        mine = [r for r in rows if r["policy"] == policy]
        summary[policy] = {"won": sum(r["won"] for r in mine), "episodes": len(mine),
                           "mean_progress": round(sum(r["progress"] for r in mine) / len(mine),
                                                  4)}
    return {"tasks": len(tasks), **summary, "rows": rows}


def _print(r: dict) -> None:
    for policy in ("expert", "submit"):
        s = r[policy]
        print(f"{policy:<7} won {s['won']}/{s['episodes']}, mean final progress "
              f"{s['mean_progress']}")


def _emit(report: dict, as_json: bool) -> None:
    """The report with its provenance; against an older checkout that has no provenance
    module, with that checkout's commit and this command instead."""
    try:
        from _common import emit
    except ImportError:
        import json
        import subprocess
        import sys

        where = Path(tripod.__file__).parent
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=where,
                                capture_output=True, text=True).stdout.strip()
        report = {"benchmark": "swe_expert_scores", "provenance": {
            "commit": commit, "command": " ".join([sys.executable, *sys.argv]),
            "tripod": str(where)}, **report}
        print(json.dumps(report, indent=2) if as_json else report)
        return
    emit(report, as_json, _print)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="", help="a task file")
    output_flags(parser)
    args = parser.parse_args()
    if args.tiny:
        tasks = [_tiny_task(Path(tempfile.mkdtemp(prefix="tripod-scores-")))]
    elif args.tasks:
        tasks = load_tasks(args.tasks)
    else:
        parser.error("--tasks FILE is needed (or --tiny)")
    _emit(measure(tasks), args.json)


if __name__ == "__main__":
    main()
