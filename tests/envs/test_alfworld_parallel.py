"""ALFWorld episodes in parallel give the same results as one at a time.

The rollout engine creates, resets and steps its envs from a thread pool. textworld's PDDL
layer keeps module-level state (a shared parser, fast-downward's global translator options),
so envs that shared one process break as soon as two episodes start together
(`IndexError: pop from empty list`, parser errors). Each env now plays in its own process.

Games: the two fastest task types to generate (about 1 s each), mixed round-robin, on the
test split (cached under $TRIPOD_CACHE, here /tmp/tripod-test-cache by default).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("alfworld")

from tripod.envs import EnvError, make  # noqa: E402
from tripod.envs.alfworld import prepare_games  # noqa: E402
from tripod.envs.play import play  # noqa: E402

ENV_ID = "alfworld/generated"
TYPES = ["pick_and_place_simple", "look_at_obj_in_light"]
GAMES = list(range(4))
MAX_TURNS = 24


@pytest.fixture(scope="module", autouse=True)
def _games() -> Iterator[None]:
    """Generate the games once (two child processes); later runs find them cached."""
    with pytest.MonkeyPatch.context() as mp:
        if "TRIPOD_CACHE" not in os.environ:
            mp.setenv("TRIPOD_CACHE", "/tmp/tripod-test-cache")
        prepare_games(ENV_ID, "test", GAMES, workers=2, task_types=TYPES)
        yield


Transcript = list[tuple[str, str, float, float, bool, bool, str | None]]


def _expert_transcript(env, index: int, barrier: threading.Barrier | None = None
                       ) -> Transcript:
    """Everything the env reports while the expert plays game `index`."""
    if barrier is not None:
        barrier.wait(timeout=60)  # all envs load their game at the same moment
    observation, info = env.reset(index)
    lines: Transcript = [("", observation, 0.0, info.progress, False, False,
                          info.expert_action)]
    for _ in range(MAX_TURNS):
        action = info.expert_action
        step = env.step(action)
        info = step.info
        lines.append((action, step.observation, step.reward, info.progress, step.terminated,
                      info.won, info.expert_action))
        if step.terminated or step.truncated:
            break
    return lines


def test_threaded_envs_play_exactly_like_one_env():
    """4 envs reset together and step concurrently from threads (as the engine does): the
    transcripts equal those of one env playing the same games one after the other."""
    env = make(ENV_ID, "test", task_types=TYPES)
    try:
        sequential = [_expert_transcript(env, i) for i in GAMES]
    finally:
        env.close()
    envs = [make(ENV_ID, "test", task_types=TYPES) for _ in GAMES]
    barrier = threading.Barrier(len(envs))
    try:
        with ThreadPoolExecutor(len(envs)) as pool:
            parallel = list(pool.map(lambda e, i: _expert_transcript(e, i, barrier), envs, GAMES))
        again = list(map(_expert_transcript, envs, reversed(GAMES)))  # reused, other games
    finally:
        for e in envs:
            e.close()
    assert parallel == sequential
    assert again == sequential[::-1]
    assert all(t[-1][5] for t in sequential)  # the expert won every game


def test_rollout_engine_expert_wins_as_often_as_tripod_play():
    """The expert through the real RolloutEngine (batch of 4 episodes at once, envs stepped in
    threads) wins the same games in the same number of turns as `tripod play --policy
    expert`."""
    from tripod.policy.models import load_policy
    from tripod.policy.rollout import RolloutConfig, RolloutEngine, expert_actor, make_jobs
    from tripod.policy.sampler import SamplingParams

    played = play(ENV_ID, "expert", episodes=len(GAMES), seed=GAMES[0], split="test",
                  print_fn=lambda *_: None, task_types=TYPES)
    policy = load_policy("tiny")
    cfg = RolloutConfig(max_turns=MAX_TURNS, batch_size=len(GAMES), env_timeout_s=120,
                        env_options={"task_types": TYPES})
    # The registry's own factory, given explicitly so that engine.close() closes the envs.
    engine = RolloutEngine(policy, cfg, env_factory=lambda job: make(
        job.env_id, split=job.split, task_types=TYPES))
    try:
        trajs, stats = engine.collect(make_jobs(ENV_ID, "test", GAMES, 1, 0), SamplingParams(),
                                      actor=expert_actor())
    finally:
        engine.close()
    assert stats.env_errors == 0, [t.error for t in trajs]
    assert [t.won for t in trajs] == [r.won for r in played.records]
    assert [t.num_turns for t in trajs] == [r.turns for r in played.records]
    assert [[turn.action_text for turn in t.turns] for t in trajs] == [
        r.actions for r in played.records]
    assert sum(t.won for t in trajs) == played.won == len(GAMES)


def test_a_crashed_or_hung_game_process_is_an_env_error_and_the_next_reset_recovers():
    env = make(ENV_ID, "test", task_types=TYPES, step_timeout_s=2)
    try:
        expected = _expert_transcript(env, 0)
        _, info = env.reset(0)
        os.kill(env.pid, signal.SIGKILL)
        with pytest.raises(EnvError, match="crashed during 'step'"):
            env.step(info.expert_action)
        with pytest.raises(EnvError, match="before reset"):  # no silent restart mid-episode
            env.step(info.expert_action)
        assert _expert_transcript(env, 0) == expected  # a fresh process, the same game
        env.reset(0)
        pid = env.pid
        os.kill(pid, signal.SIGSTOP)  # frozen: the step cannot answer
        with pytest.raises(EnvError, match="hung"):
            env.step(info.expert_action)
        assert env.pid is None
        with pytest.raises(ProcessLookupError):  # the frozen process was killed, not leaked
            os.kill(pid, 0)
        assert _expert_transcript(env, 0) == expected
    finally:
        env.close()
