"""Study files: expansion of arms (zip x product), layering of settings, validation errors,
resumption (finished runs are skipped, unfinished ones redone from scratch)."""

from __future__ import annotations

import csv
import json
import os

import pytest
import yaml

from tripod.studies.schema import GridSpec, StudyError
from tripod.studies.study import (
    DONE_FILE,
    expand_grid,
    load_study,
    resolve_runs,
    run_study,
)

from .helpers import FakeRunner


def write_study(folder, **fields) -> str:
    data = {"name": "toy", "question": "q?", "base": "toy.yaml", "seeds": 2, **fields}
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_zip_pairs_settings_and_product_crosses_them():
    arms = expand_grid(GridSpec(zip={"sft.games": [10, 20], "train.iterations": [4, 2],
                                     "tag.share": [0.3, 0.6]},
                                product={"algo.estimator": ["grpo", "rloo"]}))
    assert [(a.settings["sft.games"], a.settings["train.iterations"],
             a.settings["algo.estimator"]) for a in arms] == [
        (10, 4, "grpo"), (10, 4, "rloo"), (20, 2, "grpo"), (20, 2, "rloo")]
    assert [a.tags for a in arms] == [{"share": 0.3}] * 2 + [{"share": 0.6}] * 2
    assert arms[0].name == "games=10-iterations=4-estimator=grpo"
    assert all("tag.share" not in a.settings for a in arms)


@pytest.mark.parametrize(("grid", "match"), [
    ({"zip": {"a.b": [1, 2], "c.d": [1]}}, "equally long"),
    ({"product": {"a.b": []}}, "empty"),
    ({"zip": {"a.b": [1, 2]}, "names": ["x"]}, "1 names for 2 arms"),
    ({"zip": {"a.b": [1, 2]}, "names": ["x", "x"]}, "repeated: x"),
])
def test_bad_grids_are_named(toy_dir, grid, match):
    with pytest.raises(StudyError, match=match):
        study, path = load_study(write_study(toy_dir, grid=grid))
        resolve_runs(study, path, toy_dir / "out")


def test_unknown_keys_name_the_file_the_arm_and_the_key(toy_dir):
    with pytest.raises(StudyError, match="study.yaml: sedes: unknown key"):
        load_study(write_study(toy_dir, sedes=2))
    study, path = load_study(write_study(toy_dir, grid={"zip": {"algo.group_size": [2]}}))
    with pytest.raises(StudyError, match="(?s)arm group_size=2, seed 0: .*algo.group_size: "
                                         "unknown key"):
        resolve_runs(study, path, toy_dir / "out")


def test_plot_fields_compared_arms_and_env_ids_are_checked_before_running(toy_dir):
    grid = {"zip": {"algo.estimator": ["grpo", "rloo"]}}
    bad = [({"plots": [{"kind": "bars", "x": "tag.missing"}]}, "field 'tag.missing'"),
           ({"compare": [["estimator=grpo", "nope"]]}, "unknown arm 'nope'"),
           ({"overrides": {"env.id": "toy/lettrs-2"}}, "unknown env id"),
           ({"plots": [{"kind": "bars"}]}, "needs `x`")]
    for fields, match in bad:
        runner = FakeRunner()
        with pytest.raises(StudyError, match=match):
            run_study(write_study(toy_dir, grid=grid, **fields), runner=runner, log=print)
        assert runner.calls == []


def test_layers_smoke_below_the_arm_and_run_identity_on_top(toy_dir):
    path = write_study(toy_dir, overrides={"train.iterations": 7, "eval.games": 9},
                       eval={"games": 5}, shared_sft=True,
                       arms=[{"name": "long", "set": {"train.iterations": 3}}],
                       smoke={"overrides": {"rollout.group_size": 3}, "seeds": 1})
    study, spath = load_study(path)
    real = resolve_runs(study, spath, toy_dir / "out")
    # seed-major, the shared SFT first within a seed: stopped after two runs, seed 0 is whole
    assert [(r.arm.name, r.seed) for r in real] == [("sft", 0), ("long", 0), ("sft", 1),
                                                    ("long", 1)]
    long0 = real[1].cfg
    assert long0.train.iterations == 3 and long0.eval.games == 5 and long0.run.seed == 0
    assert long0.run_dir == toy_dir / "out" / "long" / "seed0"
    assert long0.model.name == str(toy_dir / "out" / "sft" / "seed0" / "sft")
    assert not long0.sft.enabled and real[0].cfg.sft.enabled
    assert real[0].cfg.train.iterations == 0
    smoke = resolve_runs(study, spath, toy_dir / "smoke", smoke=True)
    assert [r.seed for r in smoke] == [0, 0]
    cfg = smoke[1].cfg
    assert cfg.train.iterations == 3          # the arm's own setting beats the smoke layer
    assert cfg.eval.games == 2                # the smoke layer beats the study's eval
    assert cfg.rollout.group_size == 3        # the study's smoke overrides beat the defaults


def test_smoke_grid_must_keep_the_arms(toy_dir):
    path = write_study(toy_dir, grid={"zip": {"train.iterations": [4, 8]}, "names": ["a", "b"]},
                       smoke={"grid": {"zip": {"train.iterations": [1]}, "names": ["a"]}})
    study, spath = load_study(path)
    with pytest.raises(StudyError, match="smoke.grid must give the arms"):
        resolve_runs(study, spath, toy_dir / "o", smoke=True)


def test_a_killed_study_reruns_only_what_did_not_finish(toy_dir):
    """Interrupt the study during its third run (after leaving a partial run directory);
    re-running it must not redo the two finished runs and must redo the third from scratch."""
    path = write_study(toy_dir, grid={"zip": {"algo.estimator": ["grpo", "rloo"]}})
    out = toy_dir / "out"

    class Killed(FakeRunner):
        def __call__(self, cfg):
            if len(self.calls) == 2:
                cfg.run_dir.mkdir(parents=True)
                (cfg.run_dir / "half-written.txt").write_text("partial")
                self.calls.append(cfg.run_dir)
                raise KeyboardInterrupt
            return super().__call__(cfg)

    with pytest.raises(KeyboardInterrupt):
        run_study(path, out, runner=Killed(), log=print)
    finished = sorted(out.glob(f"*/*/{DONE_FILE}"))
    assert len(finished) == 2
    stamps = {p: (p.stat().st_mtime_ns, (p.parent / "results.json").stat().st_mtime_ns)
              for p in finished}
    partial = out / "estimator=grpo" / "seed1"   # seed-major: seed 0 of both arms ran first
    assert (partial / "half-written.txt").exists() and not (partial / DONE_FILE).exists()

    summary = run_study(path, out, summarise_only=True, runner=FakeRunner(), log=print)
    assert summary.ran == [] and "Runs finished: 2 of 4" in summary.outputs["summary"].read_text()

    again = FakeRunner()
    outcome = run_study(path, out, runner=again, log=print)
    assert again.calls == [partial, out / "estimator=rloo" / "seed1"]
    assert [(r.arm.name, r.seed) for r in outcome.skipped] == [("estimator=grpo", 0),
                                                             ("estimator=rloo", 0)]
    assert not (partial / "half-written.txt").exists()
    assert {p: (p.stat().st_mtime_ns, (p.parent / "results.json").stat().st_mtime_ns)
            for p in finished} == stamps
    third = FakeRunner()
    run_study(path, out, runner=third, log=print)
    assert third.calls == []
    with open(out / "results.csv") as fh:
        assert len(list(csv.DictReader(fh))) == 4


def test_a_changed_study_file_does_not_silently_reuse_old_runs(toy_dir):
    path = write_study(toy_dir, arms=[{"name": "a"}])
    run_study(path, toy_dir / "out", runner=FakeRunner(), log=print)
    path = write_study(toy_dir, arms=[{"name": "a", "set": {"algo.lr": 0.5}}])
    with pytest.raises(StudyError, match="finished with another recipe"):
        run_study(path, toy_dir / "out", runner=FakeRunner(), log=print)


def test_runs_finished_before_tripod_added_a_field_are_still_recognised(toy_dir):
    """A run finished by an older tripod has no fingerprint entry for a field added since
    (here `train.budget_min`); at its default it is the same recipe, at another value not."""
    path = write_study(toy_dir, arms=[{"name": "a"}])
    run_study(path, toy_dir / "out", runner=FakeRunner(), log=print)
    for marker in (toy_dir / "out").glob(f"*/*/{DONE_FILE}"):
        saved = json.loads(marker.read_text())
        recipe = json.loads(saved["fingerprint"])
        del recipe["train"]["budget_min"]
        saved["fingerprint"] = json.dumps(recipe, sort_keys=True)
        marker.write_text(json.dumps(saved))
    again = FakeRunner()
    assert run_study(path, toy_dir / "out", runner=again, log=print).ran == []
    path = write_study(toy_dir, arms=[{"name": "a", "set": {"train.budget_min": 5}}])
    with pytest.raises(StudyError, match="finished with another recipe"):
        run_study(path, toy_dir / "out", runner=FakeRunner(), log=print)


def test_dry_run_runs_nothing_and_writes_nothing(toy_dir):
    path = write_study(toy_dir, arms=[{"name": "a"}])
    runner = FakeRunner()
    outcome = run_study(path, toy_dir / "out", dry_run=True, runner=runner, log=print)
    assert runner.calls == [] and not (toy_dir / "out").exists() and len(outcome.runs) == 2


def test_outputs_table_episodes_summary_and_plots(toy_dir):
    """Arm b wins every game, arm a the even ones: the table, the pooled summary, the paired
    comparison and the plots must say so."""
    path = write_study(
        toy_dir, grid={"zip": {"algo.estimator": ["grpo", "rloo"], "tag.x": [1, 2]},
                       "names": ["a", "b"]},
        eval={"games": 6}, compare=[["b", "a"]],
        plots=[{"kind": "learning_curves"}, {"kind": "success_by", "x": "tag.x"},
               {"kind": "bars", "x": "algo.estimator", "series": "tag.x"}])
    runner = FakeRunner(wins=lambda cfg, g: cfg.algo.estimator == "rloo" or g % 2 == 0)
    outcome = run_study(path, toy_dir / "out", runner=runner, log=print)
    with open(outcome.outputs["table"]) as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["arm"], r["seed"], r["successes"], r["episodes"], r["outcomes"])
            for r in rows] == [("a", "0", "3", "6", "101010"), ("a", "1", "3", "6", "101010"),
                               ("b", "0", "6", "6", "111111"), ("b", "1", "6", "6", "111111")]
    assert rows[0]["tag.x"] == "1" and rows[0]["algo.estimator"] == "grpo"
    with open(outcome.outputs["episodes"]) as fh:
        assert len(list(csv.DictReader(fh))) == 24
    summary = outcome.outputs["summary"].read_text()
    # Wilson 6/12: (0.5 + z^2/24 -+ z*sqrt(0.25/12 + z^2/576)) / (1 + z^2/12) = 0.254, 0.746
    assert "| a | x=1 | toy/letters-2 | 50% | 25%-75% | 6/12 | 0: 50%, 1: 50% |" in summary
    # 6 discordant pairs, all won by b: exact McNemar p = 2 / 2**6
    assert "| b vs a | toy/letters-2 | 12 | 6 | 0 | +50.0% |" in summary
    assert "| 0.0312 |" in summary
    plots = sorted(p.name for p in (toy_dir / "out" / "plots").iterdir())
    assert plots == sorted(f"{stem}.{ext}" for ext in ("png", "svg") for stem in (
        "learning_curves", "success_by-tag_x", "bars-algo_estimator-tag_x"))
    assert all(os.path.getsize(toy_dir / "out" / "plots" / p) > 1000 for p in plots)
    assert json.loads((toy_dir / "out" / "a" / "seed0" / DONE_FILE).read_text())["arm"] == "a"


def test_a_moved_study_folder_keeps_its_finished_runs(toy_dir):
    """The completion check ignores where the study lives (its folder, the shared SFT path)."""
    path = write_study(toy_dir, arms=[{"name": "a"}], shared_sft=True)
    run_study(path, toy_dir / "out", runner=FakeRunner(), log=print)
    (toy_dir / "out").rename(toy_dir / "moved")
    again = FakeRunner()
    outcome = run_study(path, toy_dir / "moved", runner=again, log=print)
    assert again.calls == [] and len(outcome.skipped) == 4


def test_a_shared_sft_copied_without_its_model_runs_again_before_its_seeds_arms(toy_dir):
    """Small files copied back from docs/results mark the `sft` arm finished, but its model
    is not there: it reruns when an arm of its seed is still to run, and only then."""
    path = write_study(toy_dir, arms=[{"name": "a"}, {"name": "b"}], shared_sft=True)
    out = toy_dir / "out"
    run_study(path, out, runner=FakeRunner(), log=print)
    (out / "sft" / "seed0" / "sft").mkdir()
    (out / "sft" / "seed0" / "sft" / "config.json").write_text("{}")   # seed 0 has its model
    for seed in (0, 1):
        (out / "b" / f"seed{seed}" / DONE_FILE).unlink()                # b is left to run
    (out / "a" / "seed1" / DONE_FILE).unlink()
    again, lines = FakeRunner(), []
    run_study(path, out, runner=again, log=lines.append)
    assert again.calls == [out / "b" / "seed0", out / "sft" / "seed1", out / "a" / "seed1",
                           out / "b" / "seed1"]
    assert any("sft, seed 1: finished, but its model" in line for line in lines)
    assert not any("sft, seed 0" in line for line in lines)
    # every arm finished: a missing model no longer matters, nothing runs
    third = FakeRunner()
    assert run_study(path, out, runner=third, log=print).ran == [] and third.calls == []
