"""Rollout workers on Ray (`cluster.rollout_workers`) with a local Ray of 2 CPUs: for equal
seeds they play the learner-process engine's trajectories; after an update they hold the
learner's weights; an update that was not broadcast is refused; a worker that dies
mid-rollout costs its episodes (env errors), not the run.

The Ray tests share one group of 2 workers (starting one costs seconds on this machine) and
run in file order; each compares against the learner as it is when the test runs."""

from __future__ import annotations

import pytest
import torch

from tripod.core.config import ClusterSection, load_config
from tripod.policy import load_policy
from tripod.policy.models import wrap_lora
from tripod.policy.ray_workers import (
    StaleWeights,
    frozen_state,
    start_rollout_workers,
    trainable_state,
)
from tripod.policy.rollout import RolloutEngine
from tripod.policy.settings import rollout_config, sampling_params
from tripod.train.common import seed_everything
from tripod.train.learner import build_learner
from tripod.train.rl import collect, rl_iteration

from ._dp_worker import RECIPE

FLAGS = ["cluster.backend=ray", "cluster.rollout_workers=2", "algo.lr=1e-3"]
CRASH_GAME = 7
"""Iteration 2 plays games 6-8; game 7 (group 1: worker 1's share) kills its worker."""


def crashing_factory():
    """`toy/letters-2`, except that game `CRASH_GAME` kills its worker process on its second
    step (built inside a function so that Ray pickles it by value)."""
    import os

    from tripod.envs.toy import LettersEnv

    crash = CRASH_GAME

    class Crashing(LettersEnv):
        def step(self, action):
            if self.game_index == crash and self._turn == 1:
                os._exit(1)
            return super().step(action)

    def make(env_id, split="train", **options):
        return Crashing(env_id, split, turns=2, **options)

    return make


@pytest.fixture(scope="module")
def setup(local_ray, tmp_path_factory):
    """A learner (tiny model, seed 1) and 2 rollout workers publishing its weights (they
    build their copy with the recipe's seed 3: the first publish must overwrite it)."""
    cfg = load_config(overrides=RECIPE + FLAGS + [f"run.out_dir={tmp_path_factory.mktemp('rw')}"])
    seed_everything(cfg.run.seed)
    learner = build_learner(cfg, load_policy("tiny", seed=1))
    workers = start_rollout_workers(cfg, rollout_config(cfg), learner.policy.model,
                                    env_factory=crashing_factory())
    yield cfg, learner, workers
    workers.close()


def _in_process(learner, cfg, iteration):
    return collect(RolloutEngine(learner.policy, rollout_config(cfg)), cfg, iteration)[0]


def _assert_same(got, want, atol=1e-5):
    """Same episodes token for token; logprobs equal up to float summation order (the
    workers batch other episodes together than the learner's engine does)."""
    assert [t.job for t in got] == [t.job for t in want]
    for g, w in zip(got, want, strict=True):
        assert (g.end, g.won, len(g.turns)) == (w.end, w.won, len(w.turns))
        for a, b in zip(g.turns, w.turns, strict=True):
            assert (a.prompt_ids, a.action_ids, a.reward, a.observation) == (
                b.prompt_ids, b.action_ids, b.reward, b.observation)
            torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs),
                                       rtol=0, atol=atol)


def _logprobs(trajs) -> torch.Tensor:
    return torch.tensor([lp for t in trajs for turn in t.turns for lp in turn.logprobs])


def test_workers_play_the_in_process_trajectories(setup):
    cfg, learner, workers = setup
    got, metrics = collect(workers, cfg, 0)
    assert not any(t.failed for t in got) and len(got) == 6
    assert metrics["tokens_per_s"] > 0
    _assert_same(got, _in_process(learner, cfg, 0))


def test_after_an_update_the_workers_hold_the_learners_weights(setup):
    cfg, learner, workers = setup
    version = workers.version
    before = _in_process(learner, cfg, 1)
    metrics = rl_iteration(learner, workers, 0)  # played on the workers, then broadcast
    assert metrics["env_errors"] == 0 and workers.version == version + 1
    want = learner.policy.model.state_dict()
    import ray

    for worker in workers.workers:
        got = ray.get(worker.state_dict.remote())
        assert got.keys() == want.keys()
        assert all(torch.equal(got[k], want[k]) for k in want)
    played = collect(workers, cfg, 1)[0]
    _assert_same(played, _in_process(learner, cfg, 1))
    # ... and the update moved the logprobs: stale weights would have been caught above
    assert (_logprobs(played) - _logprobs(before)).abs().max() > 1e-3


def test_an_update_that_was_not_broadcast_is_refused(setup):
    cfg, learner, workers = setup
    param = next(p for p in learner.policy.model.parameters() if p.requires_grad)
    with torch.no_grad():
        param.add_(1e-3)  # an optimizer step, as the workers see it
    with pytest.raises(StaleWeights, match="changed after the last publish"):
        collect(workers, cfg, 1)
    workers.max_staleness = 1  # overlapped rollouts: one update behind is expected
    assert not any(t.failed for t in collect(workers, cfg, 1)[0])
    workers.max_staleness = 0
    workers.publish()
    import ray

    with pytest.raises(StaleWeights, match="learner published"):  # a worker that missed one
        ray.get(workers.workers[0].play.remote([], sampling_params(cfg.rollout.train),
                                               workers.version + 1))


def test_a_dead_worker_costs_its_episodes_not_the_run(setup):
    cfg, learner, workers = setup
    metrics = rl_iteration(learner, workers, 2)  # worker 1 dies on game 7's second step
    assert metrics["env_errors"] == 2 and workers.replaced == 1 and len(workers.workers) == 2
    metrics = rl_iteration(learner, workers, 3)  # the replacement holds the latest weights
    assert metrics["env_errors"] == 0


def test_lora_broadcasts_only_the_adapters(tiny_policy_factory):
    lora = load_config(overrides=["model.lora.enabled=true"]).model.lora
    learner, worker = (wrap_lora(tiny_policy_factory(seed=s).model, lora) for s in (1, 5))
    with torch.no_grad():
        for name, p in learner.named_parameters():
            if "lora_B" in name:
                p.normal_()  # trained adapters (peft starts B at 0)
    trainable, frozen = trainable_state(learner), frozen_state(learner)
    assert trainable and all("lora_" in k for k in trainable)
    assert not any("lora_" in k for k in frozen)
    for part in (frozen, trainable):
        assert not worker.load_state_dict(part, strict=False).unexpected_keys
    want = learner.state_dict()
    assert all(torch.equal(worker.state_dict()[k], want[k]) for k in want)


def test_rollout_workers_need_ray():
    with pytest.raises(ValueError, match="needs cluster.backend=ray"):
        ClusterSection(rollout_workers=2)
    assert ClusterSection(backend="ray", rollout_workers=2).rollout_workers == 2


def test_the_loop_with_workers_trains_as_the_learner_would_on_its_batches(setup, tmp_path,
                                                                          monkeypatch):
    """`train_rl` with 2 rollout workers and overlapped rollouts (the workers play batch k+1
    while the learner trains on k), replayed in the learner's process: each batch the workers
    played scores, token for token, as the weights that should have played it (the learner's
    before the previous update: one update of staleness), and a fresh learner trained on the
    same batches ends with the same weights.

    A second run played in the learner's process is no exact reference: it batches the
    episodes differently, so its logits differ by float summation order (~1e-7), and on the
    near-uniform tiny model that flips a sampled token now and then (one in three iterations
    with one torch thread). Runs last: it closes the shared workers first (the local Ray has
    2 CPUs)."""
    import tripod.train.rl as rl_module
    from tripod.envs.pool import EnvPool
    from tripod.train.batch import token_logprobs
    from tripod.train.rl import make_batch, train_rl

    setup[2].close()
    played: list = []
    real = rl_module.rl_iteration

    def spy(learner, engine, it, collected=None):
        played.append(collected)
        return real(learner, engine, it, collected)

    monkeypatch.setattr(rl_module, "rl_iteration", spy)
    cfg = load_config(overrides=RECIPE + [
        "cluster.backend=ray", "cluster.rollout_workers=2", "cluster.overlap=true",
        "algo.lr=1e-3", "train.iterations=3", f"run.out_dir={tmp_path}"])
    with EnvPool() as pool:  # not the Ray env workers: they would need more Ray CPUs
        remote = train_rl(cfg, load_policy("tiny", seed=1), quiet=True, pool=pool)
    monkeypatch.undo()
    assert [h["staleness"] for h in remote.history] == [0.0, 1.0, 1.0]
    assert len(played) == 3 and all(c is not None for c in played)

    seed_everything(cfg.run.seed)
    replay = build_learner(cfg, load_policy("tiny", seed=1))
    pad = replay.policy.pad_token_id
    temperature = cfg.rollout.train.temperature

    def assert_played_by_current_weights(trajs):
        batch, _ = make_batch(trajs, cfg, pad)
        with torch.no_grad():
            now = token_logprobs(replay.policy.model, batch.input_ids, batch.attention_mask,
                                 temperature, batch.loss_mask, allowed_ids=batch.allowed_ids)[0]
        mask = batch.loss_mask.bool()
        assert mask.sum() > 0
        torch.testing.assert_close(now[mask], batch.old_logprobs[mask], rtol=0, atol=1e-4)

    assert_played_by_current_weights(played[0][0])          # the initial weights
    for it, (trajs, metrics) in enumerate(played):
        if it + 1 < len(played):                            # played before update `it`
            assert_played_by_current_weights(played[it + 1][0])
        rl_module.rl_iteration(replay, None, it, (trajs, dict(metrics)))
    # The same batches through the same update: equal up to float noise, which Adam's
    # per-coordinate normalisation amplifies on near-zero gradients (2e-6 seen).
    for a, b in zip(remote.policy.model.parameters(), replay.policy.model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
