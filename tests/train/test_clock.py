"""The run clock: RL stops within `train.budget_min`, and each `train.snapshots_min` milestone
gets the policy of the last boundary at or before it (never one that trained longer)."""

from __future__ import annotations

import json

import pytest
import torch

from tripod.core.config import ConfigError, load_config
from tripod.policy.models import load_policy
from tripod.train import clock as clock_mod
from tripod.train.checkpoint import STATE_FILE, verify_checkpoint
from tripod.train.clock import RunClock, snapshot_path
from tripod.train.pipeline import run_recipe

TINY = ["env.id=toy/letters-2", "env.max_turns=2", "env.options={vocabulary: 4}",
        "model.name=tiny", "sft.enabled=false", "train.tensorboard=false",
        "train.trajectory_groups=0", "rollout.games_per_iter=2", "rollout.group_size=2",
        "rollout.truncated_action=step", "rollout.train.max_new_tokens=3",
        "rollout.eval.max_new_tokens=3", "eval.games=2", "eval.before_training=false",
        "run.name=clock"]


class FakeTime:
    """perf_counter in minutes we set by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now * 60.0


@pytest.fixture
def fake_time(monkeypatch):
    t = FakeTime()
    monkeypatch.setattr(clock_mod.time, "perf_counter", t)
    return t


def _marker(policy) -> float:
    return float(policy.model.get_input_embeddings().weight[0, 0].detach())


def _mark(policy, value: float) -> None:
    with torch.no_grad():
        policy.model.get_input_embeddings().weight[0, 0] = value


def test_milestones_get_the_policy_of_the_last_boundary_before_them(tmp_path, fake_time):
    cfg = load_config(overrides=[*TINY, f"run.out_dir={tmp_path}",
                                 "train.snapshots_min=[5, 15, 30]"])
    policy = load_policy("tiny", seed=0)
    clock = RunClock(cfg)
    # boundaries: start at 0, SFT ends at 4, RL iterations end at 9, 14 and 19 minutes;
    # the live policy changes after each one (its marker is the boundary's minute)
    for minute, stage in [(0, "start"), (4, "sft"), (9, "iteration 1"), (14, "iteration 2")]:
        fake_time.now = minute
        _mark(policy, minute)
        clock.boundary(policy, stage)
    fake_time.now = 19
    _mark(policy, 19)
    saved = clock.finish(policy, "final")

    got = {s["milestone_min"]: (s["taken_min"], s["stage"]) for s in saved}
    assert got == {5: (4, "sft"), 15: (14, "iteration 2"), 30: (19, "final")}
    for milestone, (taken, _) in got.items():
        path = snapshot_path(cfg.run_dir, milestone)
        verify_checkpoint(path)
        assert _marker(load_policy(str(path))) == taken
        state = json.loads((path / STATE_FILE).read_text())
        assert state["taken_min"] == taken and state["config"]["run"]["name"] == "clock"


def test_budget_leaves_room_for_one_more_iteration_only_if_it_fits(tmp_path, fake_time):
    cfg = load_config(overrides=[*TINY, f"run.out_dir={tmp_path}", "train.budget_min=20"])
    policy = load_policy("tiny", seed=0)
    clock = RunClock(cfg)
    fake_time.now = 4
    clock.boundary(policy, "sft")
    fake_time.now = 9
    clock.boundary(policy, "iteration 1")     # 5-minute iteration: 9 + 5 <= 20
    assert not clock.should_stop()
    fake_time.now = 14
    clock.boundary(policy, "iteration 2")     # 14 + 5 <= 20
    assert not clock.should_stop()
    fake_time.now = 19
    clock.boundary(policy, "iteration 3")     # 19 + 5 > 20
    assert clock.should_stop()
    assert clock.saved == [] and not (cfg.run_dir / "snapshots").exists()


def test_paused_time_is_not_counted(tmp_path, fake_time):
    clock = RunClock(load_config(overrides=[*TINY, f"run.out_dir={tmp_path}"]))
    fake_time.now = 3
    with clock.paused():
        fake_time.now = 10       # an evaluation
    fake_time.now = 12
    assert clock.minutes() == pytest.approx(5)


def test_bad_milestones_are_config_errors():
    with pytest.raises(ConfigError, match="snapshot minutes"):
        load_config(overrides=[*TINY, "train.snapshots_min=[0, 5]"])
    with pytest.raises(ConfigError, match="budget_min"):
        load_config(overrides=[*TINY, "train.budget_min=-1"])


def test_pipeline_stops_rl_at_the_budget_and_writes_snapshots(tmp_path):
    """A budget far below one iteration: RL runs one iteration (the budget is checked after
    each), saves it as the final checkpoint, and the snapshots exist and load."""
    cfg = load_config(overrides=[*TINY, f"run.out_dir={tmp_path}", "train.iterations=50",
                                 "train.budget_min=0.0001", "train.snapshots_min=[0.00001, 600]"])
    results = run_recipe(cfg)
    assert results["rl_iterations"] == 1 and len(results["rl_history"]) == 1
    assert results["checkpoint"].endswith("iter_000001")
    stages = {s["milestone_min"]: s["stage"] for s in results["snapshots"]}
    assert stages == {0.00001: "start", 600: "final"}
    final = load_policy(str(snapshot_path(cfg.run_dir, 600)))
    trained = load_policy(results["checkpoint"])
    for a, b in zip(final.model.parameters(), trained.model.parameters(), strict=True):
        assert torch.equal(a, b)
    saved = json.loads((cfg.run_dir / "results.json").read_text())
    assert saved["train_minutes"] > 0 and "final" in saved["eval"]
