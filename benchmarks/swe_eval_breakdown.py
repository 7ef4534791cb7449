"""What the evaluations of a training run on SWE tasks did, episode by episode.

    python benchmarks/swe_eval_breakdown.py RUN_DIR [--json]

For each evaluation stage of the run (`base`, `sft`, `final`, ...) and env id, from the
saved evaluation trajectories: episodes, resolved (won) with a 95% Wilson interval, the
share of episodes with at least one edit that applied, mean tool calls, the invalid-call
rate, and a failure breakdown of the unresolved episodes:

- ``no edit``: no edit applied (only views, test runs or invalid calls);
- ``targets still fail``: an edit applied, no target test was fixed;
- ``partly fixed``: some target tests (or hidden checks) pass, not all;
- ``regressed``: an edit broke a test that passed before;
- ``tampering``: the gate or the runner refused the change.

The counts come from the tools' own messages (``Edited ...``, ``Target tests fixed: a/b;
other tests broken: c/d``), so they describe what the agent saw. The run's provenance
(commit, machine, command) is copied from its results.json.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

from tripod.eval.stats import wilson_interval
from tripod.report.records import EpisodeRecord, read_trajectories

_SCORED = re.compile(r"Target tests fixed: (\d+)/(\d+); other tests broken: (\d+)/(\d+)")
_HIDDEN = re.compile(r"Hidden checks [^:]*: (\d+)/(\d+) pass")


def failure(ep: EpisodeRecord) -> str:
    """The episode's outcome class (see the module docstring)."""
    if ep.won:
        return "resolved"
    text = "\n".join(t.observation for t in ep.turns)
    if "tampering" in text.lower() or "the gate refused" in text:
        return "tampering"
    if not any(t.observation.startswith("Edited ") for t in ep.turns):
        return "no edit"
    scored = _SCORED.findall(text)
    if not scored:
        return "targets still fail"  # never scored: edited, then ran out of calls
    fixed, targets, broken, _ = map(int, scored[-1])
    hidden = _HIDDEN.findall(text)
    checks = int(hidden[-1][0]) if hidden else 0
    if broken:
        return "regressed"
    return "partly fixed" if fixed or checks else "targets still fail"


def summarise(episodes: list[EpisodeRecord]) -> dict:
    n = len(episodes)
    won = sum(e.won for e in episodes)
    turns = [t for e in episodes for t in e.turns]
    edited = sum(any(t.observation.startswith("Edited ") for t in e.turns) for e in episodes)
    lo, hi = wilson_interval(won, n)
    return {"episodes": n, "resolved": won, "rate": won / max(n, 1),
            "ci95": [round(lo, 4), round(hi, 4)],
            "edit_applied": edited / max(n, 1),
            "mean_tool_calls": len(turns) / max(n, 1),
            "invalid_rate": sum(t.status != "ok" for t in turns) / max(len(turns), 1),
            "outcomes": dict(Counter(failure(e) for e in episodes).most_common())}


def breakdown(run_dir: Path) -> dict:
    stages: dict[str, dict] = {}
    for path in sorted((run_dir / "trajectories").glob("eval_*.jsonl.gz")):
        episodes = read_trajectories(path)
        if not episodes:
            continue
        stage = episodes[0].source.removeprefix("eval/")
        stages.setdefault(stage, {})[episodes[0].env_id] = summarise(episodes)
    results = json.loads((run_dir / "results.json").read_text())
    return {"run_dir": str(run_dir), "provenance": results.get("provenance"),
            "stages": stages}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    report = breakdown(args.run_dir)
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    for stage, per_env in report["stages"].items():
        for env_id, r in per_env.items():
            lo, hi = r["ci95"]
            print(f"{stage:>6} {env_id}: resolved {r['resolved']}/{r['episodes']} "
                  f"({r['rate']:.1%}, 95% CI {lo:.1%}-{hi:.1%}); edit applied "
                  f"{r['edit_applied']:.0%}; {r['mean_tool_calls']:.1f} tool calls; invalid "
                  f"{r['invalid_rate']:.0%}; {r['outcomes']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
