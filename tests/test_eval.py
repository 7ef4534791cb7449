"""Evaluation: the interval against known values, env errors reported apart, and `tripod eval`
evaluating what was trained (the checkpoint's recipe)."""

from __future__ import annotations

import argparse

import pytest

from tripod.core.types import EpisodeEnd, EpisodeJob, Trajectory, Turn, TurnStatus
from tripod.eval.evaluate import summarise
from tripod.eval.stats import wilson_interval


@pytest.mark.parametrize(("won", "n", "lo", "hi"), [
    (10, 20, 0.2993, 0.7007),   # p = 0.5: centre 0.5, half-width 0.2007 (worked by hand)
    (0, 20, 0.0, 0.1611),       # the README's "0-16%" for 0/20
    (13, 20, 0.4329, 0.8188),   # the README's "43-82%" for 13/20
    (60, 100, 0.5020, 0.6906),  # the README's "50-69%" for 60/100
])
def test_wilson_interval_known_values(won, n, lo, hi):
    assert wilson_interval(won, n) == pytest.approx((lo, hi), abs=1e-4)


def _traj(i: int, end: EpisodeEnd) -> Trajectory:
    turns = [] if end is EpisodeEnd.ENV_ERROR else [Turn([1], [2], [0.0], "a", "o", 0.0,
                                                         TurnStatus.OK)]
    return Trajectory(EpisodeJob("toy/letters-2", "test", i, i, i, i), "obj", "obs", turns,
                      won=end is EpisodeEnd.WON, end=end,
                      error="reset failed: boom" if end is EpisodeEnd.ENV_ERROR else None)


def test_env_errors_are_reported_apart_not_as_lost_games():
    ends = [EpisodeEnd.WON, EpisodeEnd.WON, EpisodeEnd.MAX_TURNS, EpisodeEnd.ENV_ERROR,
            EpisodeEnd.CONTEXT_LIMIT]
    res = summarise([_traj(i, e) for i, e in enumerate(ends)], "toy/letters-2", "test", 1.0)
    assert (res.episodes, res.won, res.env_errors, res.context_limits) == (4, 2, 1, 1)
    assert res.success_rate == 0.5 and res.ci95 == wilson_interval(2, 4)
    assert "1 env errors" in res.summary()
    assert res.per_game[3]["error"] == "reset failed: boom"


def _eval_args(checkpoint, env, **flags):
    base = {"checkpoint": str(checkpoint), "env": env, "temperature": None,
            "max_new_tokens": None, "max_turns": None, "batch_size": None}
    return argparse.Namespace(**{**base, **flags})


def test_tripod_eval_uses_the_checkpoint_recipe(tmp_path, capsys):
    from tripod.cli import eval_settings
    from tripod.core.config import load_config, write_recipe

    cfg = load_config(None, ["env.id=textworld/w2-o3-q4", "env.max_turns=9",
                             "rollout.eval.max_new_tokens=16", "prompt.history_window=2",
                             "env.options={look: true}"])
    write_recipe(tmp_path, cfg)
    sampling, rcfg = eval_settings(_eval_args(tmp_path, "textworld/w2-o3-q4"))
    assert (sampling.temperature, sampling.max_new_tokens) == (0.0, 16)
    assert rcfg.max_turns == 9 and rcfg.prompt.history_window == 2
    assert rcfg.env_options == {"look": True}
    assert "recipe saved with" in capsys.readouterr().err
    # Flags override; another env gets its own defaults (the paper's 24 turns for w4-o6-q8).
    sampling, rcfg = eval_settings(_eval_args(tmp_path, "textworld/w4-o6-q8",
                                              max_new_tokens=8))
    assert sampling.max_new_tokens == 8 and rcfg.max_turns == 24 and rcfg.env_options == {}
    # ... unless the recipe gave that env id options of its own (`env.options_by_env`)
    mixed = load_config(None, ["env.id=textworld/w2-o3-q4", "rollout.env_ids=[textworld/w4-o6-q8]",
                               "env.options_by_env={textworld/w4-o6-q8: {inventory: true}}"])
    (tmp_path / "mixed").mkdir()
    write_recipe(tmp_path / "mixed", mixed)
    _, rcfg = eval_settings(_eval_args(tmp_path / "mixed", "textworld/w4-o6-q8"))
    assert rcfg.env_options == {"inventory": True}
    # `--restrict` / `--no-restrict` override the recipe's rollout.restrict_actions
    assert rcfg.restrict_actions is False
    _, rcfg = eval_settings(_eval_args(tmp_path / "mixed", "textworld/w4-o6-q8", restrict=True))
    assert rcfg.restrict_actions is True


def test_one_turn_cap_rule_for_train_evaluations_and_tripod_eval(monkeypatch):
    """A w2-o3-q4 recipe (12 turns) evaluated on w4-o6-q8 plays the paper's 24 turns there,
    in `tripod train`'s evaluations as in `tripod eval`; `eval.max_turns` wins everywhere."""
    from tripod.core.config import eval_turn_cap, load_config
    from tripod.train import pipeline

    base = ["env.id=textworld/w2-o3-q4", "env.max_turns=12",
            "eval.env_ids=[textworld/w2-o3-q4, textworld/w4-o6-q8, swe/generated-easy]"]
    cfg = load_config(None, base)
    assert [eval_turn_cap(cfg, e) for e in cfg.eval.env_ids] == [12, 24, 40]
    fixed = load_config(None, [*base, "eval.max_turns=7"])
    assert {eval_turn_cap(fixed, e) for e in fixed.eval.env_ids} == {7}

    played: dict[str, int] = {}

    def fake_evaluate(policy, env_id, split, games, sampling, rcfg, seed, pool):
        played[env_id] = rcfg.max_turns
        return summarise([], env_id, split, 0.0), []

    monkeypatch.setattr(pipeline, "evaluate", fake_evaluate)
    monkeypatch.setattr(pipeline, "write_trajectories", lambda *a, **k: None)
    pipeline.evaluate_all("final", argparse.Namespace(tokenizer=None), cfg, {}, pool=None)
    assert played == {"textworld/w2-o3-q4": 12, "textworld/w4-o6-q8": 24,
                      "swe/generated-easy": 40}


def test_evaluations_play_eval_batch_size_episodes_at_once(tmp_path, monkeypatch):
    """`eval.batch_size` sets how many episodes an evaluation plays at once: in `tripod
    train`'s evaluations, its validation runs and `tripod eval` of its checkpoint; unset,
    `rollout.batch_size`. A `--batch-size` flag wins."""
    from tripod.cli import eval_settings
    from tripod.core.config import load_config, write_recipe
    from tripod.train import pipeline, rl

    default = load_config(None, ["rollout.batch_size=12"])
    cfg = load_config(None, ["rollout.batch_size=12", "eval.batch_size=20"])
    assert (default.eval_batch_size(), cfg.eval_batch_size()) == (12, 20)
    assert rl._eval_rollout_config(cfg).batch_size == 20
    assert rl._eval_rollout_config(default).batch_size == 12

    sizes: list[int] = []

    def fake_evaluate(policy, env_id, split, games, sampling, rcfg, seed, pool):
        sizes.append(rcfg.batch_size)
        return summarise([], env_id, split, 0.0), []

    monkeypatch.setattr(pipeline, "evaluate", fake_evaluate)
    monkeypatch.setattr(pipeline, "write_trajectories", lambda *a, **k: None)
    for c in (cfg, default):
        pipeline.evaluate_all("final", argparse.Namespace(tokenizer=None), c, {}, pool=None)
    assert sizes == [20, 12]

    write_recipe(tmp_path, cfg)
    assert eval_settings(_eval_args(tmp_path, cfg.env.id))[1].batch_size == 20
    assert eval_settings(_eval_args(tmp_path, cfg.env.id, batch_size=4))[1].batch_size == 4
    assert eval_settings(_eval_args(tmp_path / "none", "toy/letters-2"))[1].batch_size == 16
