"""The command line as a user runs it (fast paths: toy env, tiny model)."""

from __future__ import annotations

import json

import pytest

from tripod.cli import main


def test_envs_list(capsys):
    assert main(["envs", "list"]) == 0
    out = capsys.readouterr().out
    assert "textworld/w2-o3-q4" in out and "toy/letters-2" in out


def test_play_expert_json(capsys):
    assert main(["play", "toy/letters-2", "--policy", "expert", "--episodes", "3",
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["episodes"] == 3 and summary["won"] == 3 and summary["success_rate"] == 1.0


def test_unknown_env_lists_valid_ids(capsys):
    assert main(["play", "textworld/nonsense", "--episodes", "1", "--json"]) == 2
    err = capsys.readouterr().err
    assert "unknown env id" in err and "textworld/w2-o3-q4" in err


def test_rollout_writes_token_exact_jsonl(tmp_path, capsys):
    out = tmp_path / "traj.jsonl"
    assert main(["rollout", "--model", "tiny", "--env", "toy/letters-2", "--episodes", "2",
                 "--max-new-tokens", "3", "--max-turns", "2", "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["episodes"] == 2
    from tripod.report.records import read_trajectories

    records = read_trajectories(out)
    assert len(records) == 2 and all(r.turns[0].tokens.ids for r in records)
    # The same episodes played in-process: ids and logprobs survive the file exactly.
    from tripod.policy import load_policy
    from tripod.policy.rollout import RolloutConfig, RolloutEngine, make_jobs
    from tripod.policy.sampler import SamplingParams

    engine = RolloutEngine(load_policy("tiny"), RolloutConfig(max_turns=2))
    fresh, _ = engine.collect(make_jobs("toy/letters-2", "test", [0, 1], 1, 0),
                              SamplingParams(temperature=0.7, max_new_tokens=3))
    engine.close()
    for record, traj in zip(records, fresh, strict=True):
        for rt, turn in zip(record.turns, traj.turns, strict=True):
            assert rt.tokens.ids == turn.action_ids and rt.action == turn.action_text
            # the file keeps 4 decimals of each logprob
            assert rt.tokens.logprobs == pytest.approx(turn.logprobs, abs=6e-5)


def test_eval_reports_interval(capsys):
    assert main(["eval", "--checkpoint", "tiny", "--env", "toy/letters-2", "--episodes", "2",
                 "--max-new-tokens", "2", "--max-turns", "2", "--json"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["episodes"] == 2 and len(res["ci95"]) == 2


def test_eval_takes_env_options_over_the_recipes(capsys):
    """`--option` reaches the env: a valid value plays, one the env refuses is an env
    error of the episode."""
    args = ["eval", "--checkpoint", "tiny", "--env", "toy/letters-2", "--episodes", "1",
            "--max-new-tokens", "2", "--max-turns", "2", "--json"]
    errors = []
    for value in (3, 0):
        assert main([*args, "--option", f"vocabulary={value}"]) == 0
        out, err = capsys.readouterr()
        assert f"'vocabulary': {value}" in err
        errors.append(json.loads(out.strip().splitlines()[-1])["env_errors"])
    assert errors == [0, 1]


def test_eval_imitation_scores_the_experts_turns(capsys):
    """`tripod eval --imitation`: the expert plays the games, the model is scored on its
    turns (teacher-forced), and nothing is played by the model."""
    assert main(["eval", "--imitation", "--checkpoint", "tiny", "--env", "toy/letters-2",
                 "--split", "valid", "--episodes", "3", "--json"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["demonstrations"] == 3 and res["turns"] >= 3
    assert 0 <= res["correct"] <= res["turns"] and res["accuracy"] == res["correct"] / res["turns"]
    assert res["provenance"]["commit"]


@pytest.mark.parametrize("kind", ["TrainingStopped", "NoDemonstrationsError", "RuntimeError"])
def test_a_run_that_stops_itself_is_one_error_line(kind, monkeypatch, capsys):
    """A run's own stop (a guard, no demonstrations) prints its reason and exits 1; any
    other exception keeps its traceback."""
    from tripod import cli
    from tripod.train.learner import TrainingStopped
    from tripod.train.sft import NoDemonstrationsError

    error = {"TrainingStopped": TrainingStopped, "NoDemonstrationsError": NoDemonstrationsError,
             "RuntimeError": RuntimeError}[kind]

    def stop(args):
        raise error("the reason, in words")

    monkeypatch.setattr(cli, "cmd_train", stop)
    if error is RuntimeError:
        with pytest.raises(RuntimeError):
            main(["train", "recipes/quickstart.yaml"])
        return
    assert main(["train", "recipes/quickstart.yaml"]) == 1
    assert "error: the reason, in words" in capsys.readouterr().err


def test_ctrl_c_in_train_says_how_to_resume(tmp_path, monkeypatch, capsys):
    """Ctrl-C is one line, not a traceback: the checkpoint to resume from, or that none
    exists yet; and resuming a run folder without checkpoints says so."""
    from tripod.train import pipeline
    from tripod.train.checkpoint import CheckpointError, resolve_resume

    def interrupted(cfg, resume=None):
        cfg.run_dir.mkdir(parents=True)
        (cfg.run_dir / "config.yaml").write_text("{}\n")
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "run_recipe", interrupted)
    args = ["train", "recipes/quickstart.yaml", f"run.out_dir={tmp_path}", "run.name=r"]
    assert main(args) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and "no checkpoint yet" in err and "Traceback" not in err
    with pytest.raises(CheckpointError, match="stopped before its first checkpoint"):
        resolve_resume(tmp_path / "r")
    (tmp_path / "r" / "checkpoints" / "iter_000004").mkdir(parents=True)
    monkeypatch.setattr(pipeline, "run_recipe", lambda cfg, resume=None: (_ for _ in ()).throw(
        KeyboardInterrupt()))
    assert main(args) == 130
    assert f"--resume {tmp_path / 'r'}" in capsys.readouterr().err


def test_ctrl_c_in_a_sweep_is_one_line(monkeypatch, capsys):
    from tripod.studies import sweep

    def interrupted(recipe, grid):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep, "run_sweep", interrupted)
    assert main(["sweep", "recipes/quickstart.yaml", "algo.estimator=grpo,rloo"]) == 130
    err = capsys.readouterr().err
    assert "skips the finished runs" in err and "Traceback" not in err
