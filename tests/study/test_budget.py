"""`tripod budget`: splits of a budget computed by hand, and the study file it writes."""

from __future__ import annotations

import pytest
import yaml

from tripod.cli import main
from tripod.core.config import ConfigError
from tripod.studies.budget import plan_splits
from tripod.studies.study import load_study, resolve_runs


def test_splits_of_640_episodes():
    # demo = 10 episodes, an iteration = 16 episodes:
    # 25%: 160 episodes -> 16 demos, 480 left -> 30 iterations; 75%: 48 demos, 160 -> 10.
    splits = plan_splits(640, 10, 16, [0, 0.25, 0.5, 0.75, 1])
    assert [(s.demos, s.iterations, s.unused(640)) for s in splits] == [
        (0, 40, 0), (16, 30, 0), (32, 20, 0), (48, 10, 0), (64, 0, 0)]


def test_splits_round_down_to_whole_demos_and_iterations():
    # 240, 50%: 120 -> 12 demos; 120 left -> 7 iterations (112), 8 unused.
    # 1000 with demo cost 10 and 16-episode iterations, 60%: 60 demos + 25 iterations (400).
    assert [(s.demos, s.iterations, s.unused(240)) for s in plan_splits(240, 10, 16, [0.5])] \
        == [(12, 7, 8)]
    (paper,) = plan_splits(1000, 10, 16, [0.6])
    assert (paper.demos, paper.rl_episodes) == (60, 400)


def test_identical_and_empty_splits_are_dropped_and_bad_budgets_fail():
    # 30 episodes, demo 10, 16 per iteration: 10% and 20% both give 0 demos + 1 iteration
    assert [(s.demos, s.iterations) for s in plan_splits(30, 10, 16, [0, 0.1, 0.2])] == [(0, 1)]
    with pytest.raises(ConfigError, match="buys neither"):
        plan_splits(5, 10, 16, [0, 1])
    with pytest.raises(ConfigError, match=r"\[0, 1\]"):
        plan_splits(100, 10, 16, [1.5])


def test_budget_command_prints_splits_and_writes_a_valid_study(tmp_path, capsys):
    out = tmp_path / "budget.yaml"
    assert main(["budget", "--budget", "320", "--demo-cost", "10", "--shares", "0,0.5,1",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "     50%     16           160             10          160       0" in printed
    data = yaml.safe_load(out.read_text())
    assert data["grid"]["zip"]["sft.games"] == [1, 16, 32]
    assert data["grid"]["zip"]["sft.enabled"] == [False, True, True]
    assert data["grid"]["zip"]["train.iterations"] == [20, 10, 0]
    study, path = load_study(out)
    runs = resolve_runs(study, path, tmp_path / "runs")
    assert [(r.arm.name, r.cfg.sft.enabled, r.cfg.sft.games, r.cfg.train.iterations)
            for r in runs if r.seed == 0] == [("sft000", False, 1, 20), ("sft050", True, 16, 10),
                                              ("sft100", True, 32, 0)]
    smoke = resolve_runs(study, path, tmp_path / "smoke", smoke=True)
    assert [(r.cfg.sft.games, r.cfg.train.iterations, r.arm.tags["sft_share"])
            for r in smoke] == [(1, 2, 0.0), (2, 2, 0.5), (2, 0, 1.0)]
