"""Measure the hidden checks of SWE tasks: how many tasks get them, what making them costs,
and that the gold patch passes every one while the buggy tree fails every one.

    python benchmarks/swe_hidden_checks.py [--tasks FILE] [--limit N] [--json] [--tiny]

For each task (the default generated suite, or those of ``--tasks``) a scored workspace is
built, its hidden checks are made (`Verifier.hidden_checks`: runs of the target tests on the
gold tree, then of the derived inputs on the buggy tree), and two scored runs follow: the
buggy tree as given, and the gold patch applied. A gold run that fails a check is a false
failure (an honest fix would be refused the reward); a buggy run that passes one is a check
that catches nothing. Each row names the interpreters of the checks' other-version
processes (none where the task's checks run on the trainer's alone). ``--tiny`` measures one single-bug task of inflection generated first.
"""

from __future__ import annotations

import argparse
import sys
import time

from _common import emit, loadavg, output_flags, progress
from swe_episodes import _tasks

from tripod.envs.swe.patches import apply_patch_to_texts, patched_paths
from tripod.envs.swe.sandbox import SandboxLimits
from tripod.envs.swe.task import SweTask
from tripod.envs.swe.verify import other_interpreters
from tripod.envs.swe.workspace import LocalWorkspace


def measure(task: SweTask, limits: SandboxLimits) -> dict:
    ws = LocalWorkspace.create(task)
    try:
        assert ws.verifier is not None
        start = time.monotonic()
        checks = ws.verifier.hidden_checks(limits)
        made_s = time.monotonic() - start
        buggy = ws.score(limits)
        current = {p: ws.read_text(p) for p in patched_paths(task.patch)}
        for path, text in apply_patch_to_texts(current, task.patch).items():
            ws.write_text(path, text or "")
        gold = ws.score(limits)
        main = ws.verifier.python
        others = sorted({p for p in ws.verifier.check_pythons() if p != main})
    finally:
        ws.close()
    return {"task": task.instance_id, "checks": len(checks), "make_s": round(made_s, 2),
            "other_versions": others,
            "targets": sorted({f"{c.module}.{c.qualname}" for c in checks}),
            "gold_failed": sum(v != "PASSED" for v in gold.hidden.values()),
            "buggy_passed": sum(v == "PASSED" for v in buggy.hidden.values()),
            "gold_status": gold.status}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="", help="a task file (default: the suite)")
    parser.add_argument("--limit", type=int, default=0, help="measure the first N tasks")
    parser.add_argument("--seed", type=int, default=0, help="generator seed of the suite")
    output_flags(parser)
    args = parser.parse_args()
    tasks = _tasks(args)
    tasks = tasks[:args.limit] if args.limit else tasks
    limits = SandboxLimits(wall_s=120, cpu_s=120)
    rows = []
    for i, task in enumerate(tasks):
        rows.append(measure(task, limits))
        progress(f"{i + 1}/{len(tasks)} {task.instance_id}: {rows[-1]['checks']} checks")
    with_checks = [r for r in rows if r["checks"]]
    emit({
        "tasks": len(rows),
        "tasks_with_checks": len(with_checks),
        "other_interpreters": list(other_interpreters(sys.executable)),
        "tasks_on_other_versions": sum(bool(r["other_versions"]) for r in with_checks),
        "mean_checks": round(sum(r["checks"] for r in rows) / max(len(rows), 1), 2),
        "gold_false_failures": sum(r["gold_failed"] for r in rows),
        "buggy_passes": sum(r["buggy_passed"] for r in rows),
        "gold_not_ok": sum(r["gold_status"] != "ok" for r in rows),
        "mean_make_s": round(sum(r["make_s"] for r in rows) / max(len(rows), 1), 2),
        "load": loadavg(),
        "rows": rows,
    }, args.json, _print)


def _print(report: dict) -> None:
    for row in report["rows"]:
        print(f"{row['task']}: {row['checks']} checks ({', '.join(row['targets']) or '-'}), "
              f"made in {row['make_s']:.1f}s; gold fails {row['gold_failed']}, "
              f"buggy passes {row['buggy_passed']}")
    print(f"tasks with hidden checks: {report['tasks_with_checks']}/{report['tasks']} "
          f"(mean {report['mean_checks']} per task, made in {report['mean_make_s']:.1f}s; "
          f"{report['tasks_on_other_versions']} of them also on "
          f"{', '.join(report['other_interpreters']) or 'no other interpreter'}); "
          f"gold false failures {report['gold_false_failures']}, buggy passes "
          f"{report['buggy_passes']}, gold runs not ok {report['gold_not_ok']}; "
          f"load {report['load']}")


if __name__ == "__main__":
    main()
