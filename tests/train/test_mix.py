"""Env mixes: demonstrations from several env ids (`sft.env_ids`), RL groups spread over
several env ids (`rollout.env_ids`), each episode with its own env's turn cap."""

from __future__ import annotations

from collections import Counter

import pytest

from tripod.core.config import ConfigError, load_config
from tripod.core.types import EpisodeEnd
from tripod.policy.rollout import RolloutEngine, expert_actor, make_jobs
from tripod.policy.sampler import SamplingParams
from tripod.policy.settings import rollout_config
from tripod.train.pipeline import run_plan
from tripod.train.rl import rollout_metrics, training_jobs
from tripod.train.sft import collect_demonstrations

BASE = ["model.name=tiny", "env.id=toy/letters-2", "env.max_turns=2",
        "env.options={vocabulary: 4}", "rollout.games_per_iter=4", "rollout.group_size=2",
        "train.iterations=2"]


def test_a_jobs_turn_cap_overrides_the_engines(tiny_policy_factory):
    """The same toy game (2 turns to play) with the engine's cap 2 and a job cap of 1."""
    cfg = load_config(overrides=BASE)
    engine = RolloutEngine(tiny_policy_factory(), rollout_config(cfg))
    jobs = make_jobs("toy/letters-2", "train", [0, 1], 1, seed=0)
    jobs[1] = type(jobs[1])(**{**jobs[1].__dict__, "max_turns": 1})
    trajs, _ = engine.collect(jobs, SamplingParams(temperature=0.0),
                              actor=expert_actor(0.0))
    engine.close()
    assert [t.num_turns for t in trajs] == [2, 1]
    assert trajs[0].end is EpisodeEnd.WON and trajs[1].end is EpisodeEnd.MAX_TURNS


def test_rl_groups_take_the_mixed_env_ids_in_turn():
    cfg = load_config(overrides=[*BASE, "rollout.env_ids=[toy/letters-3]"])
    jobs = training_jobs(cfg, iteration=1)
    assert len({j.episode_id for j in jobs}) == len(jobs) == 8
    by_group = {j.group_id: (j.env_id, j.max_turns) for j in jobs}
    assert by_group == {0: ("toy/letters-2", 2), 1: ("toy/letters-3", 24),
                        2: ("toy/letters-2", 2), 3: ("toy/letters-3", 24)}
    assert all(len({j.env_id for j in jobs if j.group_id == g}) == 1 for g in by_group)
    # without a mix nothing changes: the recipe's env, the engine's own cap
    plain = training_jobs(load_config(overrides=BASE), iteration=1)
    assert {(j.env_id, j.max_turns) for j in plain} == {("toy/letters-2", None)}
    # the mix's games are prepared, with their defaults (not the recipe env's options)
    assert ("toy/letters-3", "train", 8, {}) in run_plan(cfg)


def test_rl_mix_plays_each_env_with_its_own_options(tiny_policy_factory):
    """letters-3 must not get letters-2's `vocabulary: 4`: with it, the 3-turn games would
    list 4 words; with their defaults they list 26."""
    cfg = load_config(overrides=[*BASE, "rollout.env_ids=[toy/letters-3]",
                                 "rollout.train.max_new_tokens=2"])
    engine = RolloutEngine(tiny_policy_factory(), rollout_config(cfg))
    trajs, _ = engine.collect(training_jobs(cfg, 0), SamplingParams(temperature=0.0),
                              actor=expert_actor(0.0))
    engine.close()
    metrics = rollout_metrics(trajs, cfg)
    assert {k for k in metrics if k.startswith("success_rate/")} == {
        "success_rate/toy/letters-2", "success_rate/toy/letters-3"}
    assert metrics["success_rate/toy/letters-3"] == 1.0   # the expert wins its games
    words = {t.env_id: t.objective.split(".")[0].count(",") + 1 for t in trajs}
    assert words == {"toy/letters-2": 4, "toy/letters-3": 26}
    assert Counter(t.num_turns for t in trajs if t.env_id == "toy/letters-3") == {3: 4}


def test_sft_takes_demonstrations_from_every_listed_env(tiny_policy_factory):
    cfg = load_config(overrides=[*BASE, "sft.enabled=true", "sft.games=3",
                                 "sft.env_ids=[toy/letters-3]"])
    demos = collect_demonstrations(tiny_policy_factory(), cfg)
    assert Counter(d.env_id for d in demos) == {"toy/letters-2": 3, "toy/letters-3": 3}
    assert {d.env_id: d.num_turns for d in demos} == {"toy/letters-2": 2, "toy/letters-3": 3}
    assert ("toy/letters-3", "sft", 3, {}) in run_plan(cfg)


def test_eval_games_can_differ_per_env_id():
    """`eval.games_by_env`: fewer games of the long env, the rest keep `eval.games`; a key
    that is not evaluated fails naming it."""
    cfg = load_config(overrides=[*BASE, "eval.env_ids=[toy/letters-2, toy/letters-3]",
                                 "eval.games=6", "eval.games_by_env={toy/letters-3: 2}"])
    assert (cfg.eval_games("toy/letters-2"), cfg.eval_games("toy/letters-3")) == (6, 2)
    plan = run_plan(cfg)
    assert ("toy/letters-2", "test", 6, {"vocabulary": 4}) in plan
    assert ("toy/letters-3", "test", 2, {}) in plan
    with pytest.raises(ConfigError, match="games_by_env.*letters-4"):
        load_config(overrides=[*BASE, "eval.games_by_env={toy/letters-4: 2}"])


def test_options_by_env_reach_every_use_of_that_env(tiny_policy_factory, tmp_path):
    """`env.options_by_env` gives each other env id its options wherever it is played: an
    RL-only id (letters-3), an SFT-only id (letters-4) and an evaluation-only id (letters-5),
    each with its own vocabulary; keys the run does not play, or env.id, fail."""
    from tripod.core.config import env_options
    from tripod.train import pipeline

    mix = [*BASE, "rollout.env_ids=[toy/letters-3]", "sft.enabled=true", "sft.games=2",
           "sft.env_ids=[toy/letters-4]", "eval.env_ids=[toy/letters-2, toy/letters-5]",
           "eval.games=2", f"run.out_dir={tmp_path}", "rollout.train.max_new_tokens=2",
           "env.options_by_env={toy/letters-3: {vocabulary: 5}, toy/letters-4: {vocabulary: 6},"
           " toy/letters-5: {vocabulary: 7}}"]
    cfg = load_config(overrides=mix)
    want = {"toy/letters-2": 4, "toy/letters-3": 5, "toy/letters-4": 6, "toy/letters-5": 7}
    assert {e: env_options(cfg, e)["vocabulary"] for e in want} == want
    assert {(step[0], step[1]): step[3]["vocabulary"] for step in run_plan(cfg)} == {
        ("toy/letters-2", "train"): 4, ("toy/letters-3", "train"): 5,
        ("toy/letters-2", "sft"): 4, ("toy/letters-4", "sft"): 6,
        ("toy/letters-2", "test"): 4, ("toy/letters-5", "test"): 7}

    def words(trajs):   # the objective lists the game's vocabulary
        return {t.env_id: t.objective.split(".")[0].count(",") + 1 for t in trajs}

    policy = tiny_policy_factory()
    engine = RolloutEngine(policy, rollout_config(cfg))
    trajs, _ = engine.collect(training_jobs(cfg, 0), SamplingParams(temperature=0.0),
                              actor=expert_actor(0.0))
    engine.close()
    assert words(trajs) == {"toy/letters-2": 4, "toy/letters-3": 5}
    assert words(collect_demonstrations(policy, cfg)) == {"toy/letters-2": 4, "toy/letters-4": 6}
    played = []
    real = pipeline.evaluate

    def recording(*args, **kwargs):
        result, trajs = real(*args, **kwargs)
        played.extend(trajs)
        return result, trajs

    pipeline.prepare_run_dir(cfg)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline, "evaluate", recording)
        pipeline.evaluate_all("final", policy, cfg, {}, pool=None)
    assert words(played) == {"toy/letters-2": 4, "toy/letters-5": 7}
    with pytest.raises(ConfigError, match="options_by_env.*letters-9"):
        load_config(overrides=[*mix, "env.options_by_env={toy/letters-9: {vocabulary: 5}}"])
    with pytest.raises(ConfigError, match="options_by_env.*env.options"):
        load_config(overrides=[*mix, "env.options_by_env={toy/letters-2: {vocabulary: 5}}"])
