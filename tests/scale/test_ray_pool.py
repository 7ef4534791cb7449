"""Env workers on Ray (`cluster.backend: ray`) with a local Ray of 2 CPUs: trajectories equal
the local backend's for equal seeds, and a worker that dies mid-episode is replaced, its
episodes counted as env errors."""

from __future__ import annotations

import pytest

from tripod.core.config import ClusterSection
from tripod.core.types import EpisodeEnd
from tripod.envs.pool import EnvPool
from tripod.policy.rollout import RolloutConfig, RolloutEngine, make_jobs
from tripod.policy.sampler import SamplingParams

ray = pytest.importorskip("ray")
from tripod.envs.ray_pool import start_ray_pool  # noqa: E402

CLUSTER = ClusterSection(backend="ray", num_cpus=2, env_workers=2)
SAMPLING = SamplingParams(temperature=1.0, max_new_tokens=3)
ROLLOUT = RolloutConfig(max_turns=3, batch_size=4, truncated_action="step",
                        env_options={"vocabulary": 4})


def _play(policy, pool, games, seed=7):
    engine = RolloutEngine(policy, ROLLOUT, pool=pool)
    return engine.collect(make_jobs("toy/letters-3", "train", games, 2, seed), SAMPLING)[0]


def _summary(trajs):
    return [(t.end, [(tn.action_ids, tn.logprobs, tn.reward, tn.observation) for tn in t.turns])
            for t in trajs]


def test_ray_workers_give_the_local_results(local_ray, tiny_policy_factory):
    policy = tiny_policy_factory(seed=0)
    with EnvPool() as pool:
        local = _play(policy, pool, [0, 1, 2])
    with start_ray_pool(CLUSTER) as pool:
        remote = _play(policy, pool, [0, 1, 2])
        assert pool.created >= 2 and len(pool.workers) == 2
    assert not any(t.failed for t in remote)
    assert _summary(remote) == _summary(local)


def test_a_dead_worker_is_replaced_and_its_episodes_are_env_errors(local_ray,
                                                                   tiny_policy_factory):
    def crashing(env_id, split="train", **options):
        """toy/letters-3 whose game 1 kills its worker process on the second step."""
        import os

        from tripod.envs.toy import LettersEnv

        class Crashing(LettersEnv):
            def step(self, action):
                if self.game_index == 1 and self._turn == 1:
                    os._exit(1)
                return super().step(action)

        return Crashing(env_id, split, turns=3, **options)

    policy = tiny_policy_factory(seed=0)
    with start_ray_pool(CLUSTER, factory=crashing) as pool:
        trajs = _play(policy, pool, [0, 1, 2])
        crashed = [t for t in trajs if t.job.game_index == 1]
        assert all(t.end is EpisodeEnd.ENV_ERROR for t in crashed)
        assert all("worker died" in t.error for t in trajs if t.failed)
        assert crashed[0].num_turns == 2  # died mid-episode: its first turn had run
        assert pool.replaced >= 1 and len(pool.workers) == 2
        again = _play(policy, pool, [0, 2, 3])  # the replacement workers play on
        assert not any(t.failed for t in again)


def test_open_pool_follows_the_recipe(local_ray):
    from tripod.envs.ray_pool import RayEnvPool, open_pool

    assert isinstance(open_pool(ClusterSection()), EnvPool)
    pool = open_pool(CLUSTER)
    assert isinstance(pool, RayEnvPool) and len(pool.workers) == 2
    pool.close()
    assert ray.is_initialized()  # a Ray the pool joined is not the pool's to stop
