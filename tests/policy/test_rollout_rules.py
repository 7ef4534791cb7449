"""Rules of the rollout engine beyond token exactness: the context window, the env family's
action format, who owns the idle envs, and loud failures of SFT data collection."""

from __future__ import annotations

import time

import pytest

from tripod.core.types import EpisodeEnd
from tripod.envs.base import Step, StepInfo, last_line_action, whole_reply_action
from tripod.envs.pool import EnvPool
from tripod.envs.registry import register
from tripod.envs.toy import LettersEnv
from tripod.policy.chat import PromptConfig
from tripod.policy.rollout import RolloutConfig, RolloutEngine, expert_actor, make_jobs
from tripod.policy.sampler import SamplingParams
from tripod.train.batch import trajectory_rows

MULTI_LINE = "edit calc.py\n<<<<<<< SEARCH\nx = 1\n=======\nx = 2\n>>>>>>> REPLACE"


class EchoEnv:
    """Records every action it receives; the expert answers with a multi-line block."""

    received: list[str] = []

    def __init__(self, env_id: str, split: str = "train") -> None:
        self.env_id, self.split, self.closed = env_id, split, False

    def reset(self, game_index: int):
        return "start", StepInfo(objective="echo", expert_action=MULTI_LINE)

    def step(self, action: str) -> Step:
        EchoEnv.received.append(action)
        return Step("ok", 0.0, False, False, StepInfo(objective="echo", expert_action=MULTI_LINE))

    def close(self) -> None:
        self.closed = True


def _echo(env_id: str, split: str = "train") -> EchoEnv:
    return EchoEnv(env_id, split)


register(r"test/echo-whole", _echo, ("test/echo-whole",), "test: whole replies",
         action_parser=whole_reply_action, instruction="Reply with one tool call.")
register(r"test/echo-line", _echo, ("test/echo-line",), "test: last line")


def _engine(policy, turns=2, batch=4, pool=None):
    return RolloutEngine(policy, RolloutConfig(max_turns=turns, batch_size=batch,
                                               truncated_action="step",
                                               prompt=PromptConfig()), pool=pool)


@pytest.mark.parametrize(("env_id", "expected"), [("test/echo-whole", MULTI_LINE),
                                                  ("test/echo-line", "last line")])
def test_the_family_decides_how_a_reply_becomes_an_action(tiny_policy_factory, env_id,
                                                          expected):
    if expected == "last line":  # the text-game rule keeps only the (cleaned) last line
        expected = last_line_action(MULTI_LINE)
        assert "REPLACE" in expected and "SEARCH" not in expected
    policy = tiny_policy_factory()
    EchoEnv.received.clear()
    engine = _engine(policy)
    trajs, _ = engine.collect(make_jobs(env_id, "train", [0, 1], 2, 0), SamplingParams(),
                              actor=expert_actor())
    engine.close()
    assert EchoEnv.received and all(a == expected for a in EchoEnv.received)
    assert all(t.turns[0].action_text == expected for t in trajs)


def test_the_family_instruction_is_the_default_prompt(tiny_policy_factory):
    policy = tiny_policy_factory()
    engine = _engine(policy, turns=1)
    trajs, _ = engine.collect(make_jobs("test/echo-whole", "train", [0], 1, 0),
                              SamplingParams(), actor=expert_actor())
    engine.close()
    prompt = policy.tokenizer.decode(trajs[0].turns[0].prompt_ids)
    assert "Reply with one tool call." in prompt and "expert game solver" not in prompt


def test_an_episode_that_outgrows_the_context_ends_with_context_limit(tiny_policy_factory):
    policy = tiny_policy_factory()
    sampling = SamplingParams(temperature=1.0, max_new_tokens=6)
    engine = _engine(policy, turns=6)
    first, _ = engine.collect(make_jobs("toy/letters-6", "train", [0], 1, 0), sampling)
    engine.close()
    # Room for the first turn and its reply only: the second prompt cannot fit.
    limit = len(first[0].turns[0].prompt_ids) + sampling.max_new_tokens + 2
    policy.model.config.max_position_embeddings = limit
    engine = _engine(policy, turns=6)
    trajs, stats = engine.collect(make_jobs("toy/letters-6", "train", [0, 1], 2, 0), sampling)
    engine.close()
    assert stats.context_limits == 4
    for traj in trajs:
        assert traj.end is EpisodeEnd.CONTEXT_LIMIT and traj.num_turns == 1
        assert "exceeds the context" in traj.error and not traj.failed
        last = traj.turns[-1]
        assert len(last.prompt_ids) + len(last.action_ids) <= limit
        assert trajectory_rows(traj, [0.0])  # its turns are kept for training


def test_a_shared_pool_outlives_its_engines_and_reuses_envs(tiny_policy_factory):
    policy = tiny_policy_factory()
    jobs = make_jobs("test/echo-line", "train", [0, 1], 1, 0)
    with EnvPool() as pool:
        for _ in range(2):
            engine = _engine(policy, turns=1, pool=pool)
            engine.collect(jobs, SamplingParams(), actor=expert_actor())
            engine.close()  # not the engine's pool: the envs stay
            assert pool.idle_count() == 2
        assert pool.created == 2  # the second engine reused both envs
        envs = [env for idle in pool._idle.values() for env in idle]
    assert pool.idle_count() == 0 and all(env.closed for env in envs)


def test_an_engine_closes_the_pool_it_owns(tiny_policy_factory):
    engine = _engine(tiny_policy_factory(), turns=1)
    engine.collect(make_jobs("test/echo-line", "train", [0], 1, 0), SamplingParams(),
                   actor=expert_actor())
    envs = [env for idle in engine.pool._idle.values() for env in idle]
    engine.close()
    assert envs and all(env.closed for env in envs)


def test_sft_without_a_single_demonstration_stops_with_the_reasons():
    from tripod.core.config import load_config
    from tripod.policy import load_policy
    from tripod.train.sft import NoDemonstrationsError, collect_demonstrations

    # Two turns are needed to win toy/letters-2; a turn cap of 1 leaves the expert no win.
    cfg = load_config(None, ["model.name=tiny", "env.id=toy/letters-2", "sft.enabled=true",
                             "sft.games=3", "sft.max_turns=1"])
    with pytest.raises(NoDemonstrationsError, match=r"0 of 3 expert episodes.*3 ended by "
                                                    r"max_turns"):
        collect_demonstrations(load_policy("tiny"), cfg)


def test_the_time_spent_waiting_for_envs_is_counted(tiny_policy_factory):
    """`env_wait_seconds`: the engine's wall time blocked on env resets and steps (what
    overlapping env work with decoding could hide at most). Every reset and step here sleeps
    0.1 s: resets run one after the other, a turn's steps together, so the count is at least
    2 resets + 1 step per turn, and never more than the rollout's own time. A reset that
    fails ends its episode alone, as an env error."""
    class Slow(LettersEnv):
        def reset(self, game_index: int):
            time.sleep(0.1)
            if game_index == 2:
                raise RuntimeError("no such game")
            return super().reset(game_index)

        def step(self, action):
            time.sleep(0.1)
            return super().step(action)

    engine = RolloutEngine(tiny_policy_factory(),
                           RolloutConfig(max_turns=2, batch_size=3, truncated_action="step",
                                         prompt=PromptConfig()),
                           env_factory=lambda job: Slow("toy/letters-2", turns=2))
    trajs, stats = engine.collect(make_jobs("toy/letters-2", "train", [0, 1, 2], 1, 0),
                                  SamplingParams(temperature=1.0, max_new_tokens=3))
    engine.close()
    assert [t.failed for t in trajs] == [False, False, True]
    assert "no such game" in trajs[2].error and stats.env_errors == 1
    turns = max(t.num_turns for t in trajs)
    assert turns >= 1
    assert 0.3 + 0.1 * turns <= stats.env_wait_seconds <= stats.seconds


@pytest.mark.parametrize("overlap", [None, 0.0])
def test_the_recipe_sets_env_overlap_and_training_logs_it(tiny_policy_factory, overlap):
    """`rollout.env_overlap_s` reaches the engine through the recipe; an RL iteration's
    metrics count the overlapped steps only when it is on (a timing-dependent count: off by
    default, so the metrics of two equal runs stay equal)."""
    from tripod.core.config import load_config
    from tripod.policy.settings import rollout_config
    from tripod.train.rl import collect

    extra = [] if overlap is None else [f"rollout.env_overlap_s={overlap}"]
    cfg = load_config(overrides=["model.name=tiny", "env.id=toy/letters-2", "env.max_turns=2",
                                 "rollout.games_per_iter=2", "rollout.group_size=2",
                                 "rollout.batch_size=4", "rollout.train.max_new_tokens=3",
                                 "rollout.truncated_action=step", *extra])
    assert rollout_config(cfg).env_overlap_s == overlap
    engine = RolloutEngine(tiny_policy_factory(), rollout_config(cfg))
    trajs, metrics = collect(engine, cfg, 0)
    engine.close()
    assert len(trajs) == 4 and not any(t.failed for t in trajs)
    assert ("overlapped_steps" in metrics) == (overlap is not None)
