"""Failure modes of an ALFWorld evaluation, from its saved trajectories.

    python benchmarks/alfworld_eval_breakdown.py RUN_DIR

For each task type evaluated in RUN_DIR (``trajectories/eval_*.jsonl.gz``): games won, mean
turns, and of the lost games the share of `look` turns, the games that end in a loop (the
last 10 actions hold at most 3 distinct ones), distinct `go to` targets against all `go to`
actions, the games whose target object never appears in an observation (task types whose
objective names one to put somewhere), and the games where the agent took anything.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import re


def breakdown(run_dir: str) -> dict[str, collections.Counter]:
    out: dict[str, collections.Counter] = {}
    for path in sorted(glob.glob(f"{run_dir}/trajectories/eval_*.jsonl.gz")):
        with gzip.open(path, "rt") as f:
            rows = [json.loads(line) for line in f][1:]  # the first line is the header
        c: collections.Counter = collections.Counter()
        for row in rows:
            actions = [t["action"] for t in row["turns"]]
            c["episodes"] += 1
            c["won"] += bool(row["won"])
            c["turns"] += len(actions)
            if row["won"]:
                continue
            c["lost"] += 1
            c["lost_turns"] += len(actions)
            c["look_turns"] += sum(a == "look" for a in actions)
            tail = actions[-10:]
            c["loop_at_end"] += len(tail) == 10 and len(set(tail)) <= 3
            gotos = [a for a in actions if a.startswith("go to ")]
            c["goto"] += len(gotos)
            c["goto_distinct"] += len(set(gotos))
            target = re.search(r"put (?:some|a|two) (\w+)", row.get("objective") or "")
            if target:
                c["never_saw_object"] += not any(target.group(1) in (t["observation"] or "")
                                                 for t in row["turns"])
            c["took_something"] += any(a.startswith("take ") for a in actions)
        out[path.split("alfworld_generated-")[-1].removesuffix(".jsonl.gz")] = c
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    args = parser.parse_args()
    total: collections.Counter = collections.Counter()
    for name, c in breakdown(args.run_dir).items():
        total += c
        print(f"{name}: won {c['won']}/{c['episodes']}, mean turns "
              f"{c['turns'] / c['episodes']:.1f}; of {c['lost']} lost: look turns "
              f"{c['look_turns'] / max(c['lost_turns'], 1):.0%}, loop at the end "
              f"{c['loop_at_end']}, distinct go-to targets {c['goto_distinct']}/{c['goto']}, "
              f"never saw the object {c['never_saw_object']}, took something "
              f"{c['took_something']}")
    print(f"all: won {total['won']}/{total['episodes']}; of {total['lost']} lost: look turns "
          f"{total['look_turns'] / max(total['lost_turns'], 1):.0%}, loop at the end "
          f"{total['loop_at_end']}, distinct go-to targets "
          f"{total['goto_distinct']}/{total['goto']}, never saw the object "
          f"{total['never_saw_object']}, took something {total['took_something']}")


if __name__ == "__main__":
    main()
