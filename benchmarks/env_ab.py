"""Whole RL-iteration runs under two process environments, alternating: does a setting that
must be in place before torch allocates (an allocator, transparent huge pages) change speed
or memory?

    python benchmarks/env_ab.py --b THP_MEM_ALLOC_ENABLE=1 [--a VAR=VALUE ...] [--rounds 2]
        [--json] [--tiny] -- [rl_iteration.py's arguments, e.g. --model PATH --iterations 2]

Each round runs `benchmarks/rl_iteration.py ARGS --json` once under setting A and once under
setting B, in a fresh process each (A first in odd rounds, B first in even ones: this
machine's speed drifts, so only neighbouring runs are compared). A variable that B sets and A
does not is removed from A's environment, so A is the default unless `--a` says otherwise.
Prints, per run: each iteration's wall time, rollout and update, the matmul peak the run
measured, the process's peak resident memory and the load average; per round the ratio B/A of
the summed iteration times; the median ratio over rounds.

`--tiny` passes `--tiny` to rl_iteration.py (tiny model, toy env, 1 round): a test that the
script runs; its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from _common import command_line, loadavg, progress

HERE = Path(__file__).resolve().parent


def _assignments(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SystemExit(f"error: {pair!r} is not VAR=VALUE")
        out[name] = value
    return out


def _env(setting: dict[str, str], other: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    for name in other:
        if name not in setting:
            env.pop(name, None)
    env.update(setting)
    return env


def _run(label: str, env: dict[str, str], args: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, str(HERE / "rl_iteration.py"), *args, "--json"]
    progress(f"run {label}: {' '.join(cmd[1:])}")
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"error: run {label} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    report = json.loads(out.stdout)
    runs = report["runs"]
    return {
        "iterations_s": [r["total_s"] for r in runs],
        "collect_s": [r["phases_s"]["collect"] for r in runs],
        "update_s": [r["phases_s"]["update"] for r in runs],
        "update_mfu": [r["update"]["mfu"] for r in runs],
        "total_s": sum(r["total_s"] for r in runs),
        "matmul_peak_gflops": report["machine"]["matmul_peak_gflops"],
        "peak_rss_mb": report["memory"]["ru_maxrss_mb"],
        "loadavg_before": report["machine"]["loadavg_before"],
        "loadavg_after": report["machine"]["loadavg_after"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", nargs="*", default=[], help="setting A: VAR=VALUE ... (default: none)")
    parser.add_argument("--b", nargs="+", required=True, help="setting B: VAR=VALUE ...")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("rest", nargs="*", help="rl_iteration.py's arguments (after --)")
    args = parser.parse_args()
    a, b = _assignments(args.a), _assignments(args.b)
    bench_args = [*args.rest, *(["--tiny"] if args.tiny else [])]
    rounds = 1 if args.tiny else args.rounds
    load_before = loadavg()
    results = []
    for k in range(rounds):
        order = [("A", a, b), ("B", b, a)]
        if k % 2:
            order.reverse()
        runs = {label: _run(label, _env(mine, other), bench_args) for label, mine, other in order}
        results.append({"round": k + 1, "first": order[0][0], "A": runs["A"], "B": runs["B"],
                        "ratio_b_over_a": runs["B"]["total_s"] / runs["A"]["total_s"]})
    report = {"command": command_line(), "A": a, "B": b, "rounds": results,
              "median_ratio_b_over_a": statistics.median(r["ratio_b_over_a"] for r in results),
              "loadavg_before": load_before, "loadavg_after": loadavg()}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print(report)


def _print(report: dict[str, Any]) -> None:
    def fmt(xs: list[float]) -> str:
        return " + ".join(f"{x:.1f}" for x in xs)

    print(f"A: {report['A'] or '(default environment)'}    B: {report['B']}")
    print("round  run  iterations (s)         collect (s)     update (s)      update MFU   "
          "matmul peak (GFLOP/s)  peak RSS   load before -> after")
    for r in report["rounds"]:
        for label in (r["first"], "B" if r["first"] == "A" else "A"):
            x = r[label]
            peak_s = " / ".join(f"{p:.0f}" for p in x["matmul_peak_gflops"])  # start / end
            print(f"{r['round']:>5}  {label:>3}  {fmt(x['iterations_s']):<22} "
                  f"{fmt(x['collect_s']):<15} {fmt(x['update_s']):<15} "
                  f"{' '.join(f'{m:.0%}' for m in x['update_mfu']):<12} {peak_s:<22} "
                  f"{x['peak_rss_mb']:>6.0f} MB  {x['loadavg_before'][0]} -> {x['loadavg_after'][0]}")
        print(f"       B/A (summed iterations): {r['ratio_b_over_a']:.3f}")
    print(f"median B/A over {len(report['rounds'])} round(s): {report['median_ratio_b_over_a']:.3f}")
    print(f"load average before {report['loadavg_before']}, after {report['loadavg_after']}")
    print(f"command: {report['command']}")


if __name__ == "__main__":
    main()
