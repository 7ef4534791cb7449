"""Studies end to end at smoke size (tiny model, real envs and pipeline), and a study killed
with SIGKILL in the middle, then re-run: only the unfinished runs run again."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tripod.cli import main
from tripod.studies.study import (
    DONE_FILE,
    STUDIES,
    default_runner,
    load_study,
    resolve_runs,
    run_study,
    study_arms,
)

SRC = Path(__file__).resolve().parents[2] / "src"


IN_CI = ("06-sft-rl-budget", "05-algorithms-cpu")
"""The studies whose smoke size runs in `make test`; every other study's in `make test-all`
(CI time: a minute or more each)."""
GENERATES_SWE_SUITE = ("02c-generalisation-swe", "07-swe-reward")
"""Arms on `swe/generated` generate the whole task suite first in a cold cache (10+ minutes:
each candidate task's tests run), past the suite's default 900-s limit per test."""


def _smoke_marks(name: str) -> list:
    marks = [] if name in IN_CI else [pytest.mark.heavy]
    return marks + ([pytest.mark.timeout(3600)] if name in GENERATES_SWE_SUITE else [])


@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(p.stem, marks=_smoke_marks(p.stem))
                                  for p in sorted(STUDIES.glob("*.yaml"))])
def test_study_runs_end_to_end_at_smoke_size(tmp_path, name):
    out = tmp_path / "study"
    assert main(["study", name, "--smoke", "--out", str(out)]) == 0
    study, path = load_study(name)
    with open(out / "results.csv") as fh:
        rows = list(csv.DictReader(fh))
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    assert arms == [a.name for a in study_arms(study, smoke=True)]
    runs = {r.arm.name: r.cfg for r in resolve_runs(study, path, out, smoke=True)}
    for arm in arms:
        cfg = runs[arm]
        got = {r["eval_env"] for r in rows if r["arm"] == arm}
        assert got == set(cfg.eval.env_ids or [cfg.env.id])
        for r in rows:
            if r["arm"] == arm:  # every evaluated game is an episode or a counted env error
                games = cfg.eval.games_by_env.get(r["eval_env"], cfg.eval.games)
                assert int(r["episodes"]) + int(r["env_errors"]) == games, (arm, r)
    summary = (out / "summary.md").read_text()
    assert "smoke size" in summary
    for a, b in study.compare:   # paired where the arms share games, unpaired where not
        assert f"| {a} vs {b} |" in summary, (a, b)
    for plot in study.plots:
        for ext in ("png", "svg"):
            assert (out / "plots" / f"{plot.stem}.{ext}").stat().st_size > 1000


TOY_STUDY = {"name": "killed", "question": "q?", "base": "toy.yaml", "seeds": [0],
             "grid": {"zip": {"algo.estimator": ["grpo", "rloo", "reinforce_pp"]},
                      "names": ["a", "b", "c"]}}


@pytest.mark.slow
def test_a_study_killed_by_sigkill_finishes_only_the_rest(toy_dir):
    path = toy_dir / "study.yaml"
    path.write_text(yaml.safe_dump(TOY_STUDY))
    out = toy_dir / "out"
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, "-m", "tripod.cli", "study", str(path), "--out",
                             str(out)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    first = out / "a" / "seed0" / DONE_FILE
    try:
        deadline = time.monotonic() + 600
        while not first.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert first.exists(), "the first run never finished"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    stamp = first.stat().st_mtime_ns
    assert not (out / "c" / "seed0" / DONE_FILE).exists()
    calls = []

    def counting(cfg):
        calls.append(cfg.run_dir.parent.name)
        return default_runner(cfg)

    outcome = run_study(path, out, runner=counting, log=print)
    assert "a" not in calls and calls[-1] == "c"
    assert [r.arm.name for r in outcome.skipped][0] == "a"
    assert first.stat().st_mtime_ns == stamp
    assert all((out / arm / "seed0" / DONE_FILE).exists() for arm in "abc")
