"""Trainer invariants on the tiny model: accumulation equivalence, numerical guards, exact
resume, the LoRA reference, env errors inside groups, and the rollout metrics."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from tripod.core.config import load_config
from tripod.core.types import EpisodeEnd, EpisodeJob, Trajectory, Turn, TurnStatus
from tripod.envs.toy import LettersEnv
from tripod.policy.rollout import RolloutEngine
from tripod.policy.settings import rollout_config
from tripod.train.batch import TrainBatch, token_logprobs
from tripod.train.learner import (
    MAX_CONSECUTIVE_SKIPS,
    TrainingStopped,
    build_learner,
    no_grad_passes,
    reference_logprobs,
    update,
)
from tripod.train.rl import (
    advantage,
    collect,
    make_batch,
    rl_iteration,
    rollout_metrics,
    train_rl,
    warnings_for,
    zero_variance_fraction,
)

TEMPERATURE = 0.7
"""The sampling temperature of every recipe (at T = 1 a trainer that ignored it would pass)."""
BASE = ["model.name=tiny", "env.id=toy/letters-2", "env.max_turns=2",
        "env.options={vocabulary: 4}", "rollout.games_per_iter=2", "rollout.group_size=2",
        "rollout.batch_size=4", f"rollout.train.temperature={TEMPERATURE}",
        "rollout.train.max_new_tokens=3",
        "rollout.truncated_action=step", "reward.kind=dense", "algo.lr=1e-3",
        "train.tensorboard=false"]


def _cfg(tmp_path, *extra):
    return load_config(overrides=BASE + [f"run.out_dir={tmp_path}", *extra])


def _params(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _batch(learner, engine=None) -> TrainBatch:
    """collect -> batch -> score -> advantage for iteration 0."""
    engine = engine or RolloutEngine(learner.policy, rollout_config(learner.cfg))
    trajs, _ = collect(engine, learner.cfg, 0)
    batch, _ = make_batch(trajs, learner.cfg, learner.policy.pad_token_id)
    batch = no_grad_passes(learner, batch)
    advantage(batch, learner.cfg.algo)
    return batch


@pytest.mark.parametrize("estimator", ["grpo", "gae"])
def test_micro_batch_accumulation_equivalence(tmp_path, tiny_policy_factory, estimator):
    """micro-batch 1 x accumulation 4 == micro-batch 4 x accumulation 1 (one optimizer step)."""
    results = []
    batch = None
    for micro in (1, 4):
        cfg = _cfg(tmp_path, f"algo.estimator={estimator}", "algo.minibatch_size=4",
                   f"algo.micro_batch_size={micro}", "algo.kl_coef=0.01", "algo.entropy_coef=0.01")
        learner = build_learner(cfg, tiny_policy_factory(seed=1))
        # Plain SGD with lr 1: the parameter change IS the accumulated gradient (Adam would
        # amplify float noise on near-zero gradients into lr-sized differences).
        learner.optimizer = torch.optim.SGD(learner.policy.model.parameters(), lr=1.0)
        if batch is None:
            batch = _batch(learner)
        update(learner, copy.deepcopy(batch), iteration=0)
        results.append(_params(learner.policy.model))
    assert not torch.equal(results[0], _params(tiny_policy_factory(seed=1).model))
    start = _params(tiny_policy_factory(seed=1).model)
    torch.testing.assert_close(results[0] - start, results[1] - start, rtol=1e-4, atol=1e-7)


def test_update_frees_its_gradients(tmp_path, tiny_policy_factory):
    """The last step's gradients (a copy of every trained weight) are gone when `update`
    returns, so they are not resident through the next rollout; the steps were taken."""
    cfg = _cfg(tmp_path, "algo.critic=copy", "algo.estimator=gae", "algo.minibatch_size=2",
               "algo.entropy_coef=0.01")
    learner = build_learner(cfg, tiny_policy_factory(seed=1))
    batch = _batch(learner)
    before = (_params(learner.policy.model), _params(learner.critic))
    stats = update(learner, batch, iteration=0)
    assert stats["skipped_updates"] == 0 and stats["grad_norm"] > 0
    assert not torch.equal(before[0], _params(learner.policy.model))
    assert not torch.equal(before[1], _params(learner.critic))
    trained = learner._trained_params()
    assert trained and all(p.grad is None for p in trained)


def test_copied_critic_runs_after_the_actor_backward(tmp_path, tiny_policy_factory):
    """PPO with a copied critic: each micro-batch's actor backward has run (its graph freed)
    before the critic's forward builds its own graph, so the two models' activations are
    never held at once; the critic still trains, and its value loss is reported."""
    cfg = _cfg(tmp_path, "algo.estimator=gae", "algo.critic=copy", "algo.minibatch_size=4",
               "algo.micro_batch_size=2")
    learner = build_learner(cfg, tiny_policy_factory(seed=1))
    batch = _batch(learner)
    policy_params = [p for p in learner.policy.model.parameters() if p.requires_grad]
    seen: list[bool] = []

    def before_critic(module, args):
        seen.append(all(p.grad is not None for p in policy_params))

    hook = learner.critic.register_forward_pre_hook(before_critic)
    critic_before = torch.cat([p.detach().flatten() for p in learner.critic.parameters()])
    try:
        stats = update(learner, batch, iteration=0)
    finally:
        hook.remove()
    assert seen == [True, True]                       # two micro-batches, actor first in each
    critic_after = torch.cat([p.detach().flatten() for p in learner.critic.parameters()])
    assert not torch.equal(critic_before, critic_after)
    assert "value_loss" in stats and math.isfinite(stats["value_loss"])


def test_trainer_logprobs_are_recorded_at_update_time(tmp_path, tiny_policy_factory):
    """`update` keeps, per row, the logprobs of the forward pass its first gradient step used:
    before any step they equal the sampling logprobs; a row trained after an earlier
    minibatch's step shows that step; a second epoch does not overwrite them."""
    cfg = _cfg(tmp_path, "algo.estimator=grpo", "algo.minibatch_size=1", "algo.epochs=2",
               "algo.lr=0.05")
    learner = build_learner(cfg, tiny_policy_factory(seed=3))
    batch = _batch(learner)
    batch.advantages = batch.loss_mask.clone()  # every step moves the weights
    before, _, _ = token_logprobs(learner.policy.model, batch.input_ids, batch.attention_mask,
                                  TEMPERATURE, batch.loss_mask)
    gen = torch.Generator().manual_seed(cfg.run.seed * 7919 + 0)
    first, later = torch.randperm(batch.num_rows, generator=gen).tolist()[:2]
    update(learner, batch, iteration=0)
    got, mask = batch.trainer_logprobs, batch.loss_mask.bool()
    assert torch.isfinite(got[mask]).all() and got.shape == batch.old_logprobs.shape
    torch.testing.assert_close(got[first][mask[first]], before[first][mask[first]],
                               rtol=0, atol=1e-5)
    torch.testing.assert_close(got[first][mask[first]], batch.old_logprobs[first][mask[first]],
                               rtol=0, atol=1e-4)
    assert (got[later][mask[later]] - before[later][mask[later]]).abs().max() > 1e-3
    after, _, _ = token_logprobs(learner.policy.model, batch.input_ids, batch.attention_mask,
                                 TEMPERATURE, batch.loss_mask)
    assert (got[mask] - after[mask]).abs().max() > 1e-3


def test_select_trims_shared_right_padding():
    ids = torch.tensor([[5, 6, 7, 0], [5, 6, 0, 0], [5, 0, 0, 0]])
    attn = (ids > 0).long()
    batch = TrainBatch(ids, attn, attn.float(), attn.float(), attn.float(), attn - 1,
                       torch.tensor([0, 0, 1]), torch.tensor([0, 1, 2]))
    sub = batch.select([2, 1])
    assert sub.input_ids.tolist() == [[5, 0], [5, 6]] and sub.group_ids.tolist() == [1, 0]
    assert sub.ref_logprobs is None and batch.select([0]).input_ids.shape == (1, 3)


# -- numerical guards ------------------------------------------------------------------------
def test_nan_advantages_skip_the_update_with_the_reason(tmp_path, tiny_policy_factory):
    cfg = _cfg(tmp_path, "algo.estimator=grpo")
    learner = build_learner(cfg, tiny_policy_factory())
    batch = _batch(learner)
    batch.advantages = torch.full_like(batch.advantages, float("nan"))
    before = _params(learner.policy.model)
    metrics = update(learner, batch, iteration=0)
    assert metrics["skipped_advantages"] == metrics["skipped_updates"] == 1
    assert metrics["nan_skips"] == 1 and learner.consecutive_skips == 1
    assert torch.equal(before, _params(learner.policy.model))
    assert "1 update(s) skipped: non-finite advantages 1" in warnings_for(metrics)


def test_non_finite_loss_is_named_and_a_good_step_resets_the_streak(tmp_path,
                                                                      tiny_policy_factory):
    cfg = _cfg(tmp_path, "algo.estimator=grpo", "algo.kl_coef=0.01", "algo.kl_in=loss")
    learner = build_learner(cfg, tiny_policy_factory())
    batch = _batch(learner)
    batch.advantages = batch.loss_mask.clone()  # the good step moves the weights
    good = copy.deepcopy(batch)
    batch.ref_logprobs = torch.full_like(batch.ref_logprobs, float("nan"))  # a broken reference
    before = _params(learner.policy.model)
    assert update(learner, batch, iteration=0)["skipped_loss"] == 1
    assert torch.equal(before, _params(learner.policy.model))
    assert learner.consecutive_skips == 1
    metrics = update(learner, good, iteration=1)
    assert metrics["skipped_updates"] == 0 and learner.consecutive_skips == 0
    assert not torch.equal(before, _params(learner.policy.model))


def test_consecutive_skips_stop_the_run_naming_the_cause(tmp_path, tiny_policy_factory):
    """Weights with a NaN (a diverged run or a corrupt checkpoint): every step's logits are
    NaN; the run stops after MAX_CONSECUTIVE_SKIPS steps instead of skipping forever."""
    cfg = _cfg(tmp_path, "algo.estimator=grpo", "algo.minibatch_size=1",
               "algo.micro_batch_size=1", "algo.epochs=2")
    learner = build_learner(cfg, tiny_policy_factory())
    batch = _batch(learner)  # 4 rows -> 4 minibatches per epoch, 8 steps in all
    with torch.no_grad():
        learner.policy.model.get_output_embeddings().weight[0, 0] = float("nan")
    with pytest.raises(TrainingStopped, match=r"5 optimizer steps in a row.*non-finite logits"
                       r".*learning rate.*checkpoint"):
        update(learner, batch, iteration=0)
    assert learner.consecutive_skips == MAX_CONSECUTIVE_SKIPS == 5


# -- resume ------------------------------------------------------------------------------------
def test_resume_continues_exactly(tmp_path, tiny_policy_factory):
    """2 iterations straight == 1 iteration, checkpoint, resume, 1 more (optimizer, RNG, data)."""
    straight = train_rl(_cfg(tmp_path, "run.name=straight", "algo.estimator=rloo",
                             "train.iterations=2"), policy=tiny_policy_factory(), quiet=True)
    first = train_rl(_cfg(tmp_path, "run.name=split", "algo.estimator=rloo",
                          "train.iterations=1", "train.checkpoint_every=1"),
                     policy=tiny_policy_factory(), quiet=True)
    resumed = train_rl(_cfg(tmp_path, "run.name=split", "algo.estimator=rloo",
                            "train.iterations=2", "train.checkpoint_every=1"),
                       resume=first.final_checkpoint, quiet=True)
    torch.testing.assert_close(_params(straight.policy.model), _params(resumed.policy.model),
                               rtol=0, atol=1e-6)
    assert [h["return"] for h in straight.history][1] == resumed.history[0]["return"]


# -- LoRA reference ------------------------------------------------------------------------------
def test_lora_reference_is_the_base_model_after_training(tmp_path, tiny_policy_factory):
    """Once the adapters have moved, the reference must still be the base model (adapters
    off), and differ from the policy. At initialisation the zero-initialised adapters make
    reference == policy anyway, so that alone would not tell a working reference from one
    that ignores `disable_adapter()`."""
    cfg = _cfg(tmp_path, "algo.estimator=grpo", "model.lora.enabled=true", "model.lora.r=4",
               "algo.kl_coef=0.01", "algo.lr=0.05", "algo.epochs=3", "algo.minibatch_size=2")
    learner = build_learner(cfg, tiny_policy_factory())
    assert learner.ref_model is None and learner.uses_lora  # no second copy
    batch = _batch(learner)
    update(learner, batch, iteration=0)
    trainable = [n for n, p in learner.policy.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora" in n for n in trainable)

    base = tiny_policy_factory().model  # the same random weights, no adapters

    def logprobs(model):
        return token_logprobs(model, batch.input_ids, batch.attention_mask, TEMPERATURE,
                              batch.loss_mask)[0][batch.loss_mask.bool()]

    with torch.no_grad():
        ref = reference_logprobs(learner, batch)[batch.loss_mask.bool()]
        base_logp, policy = logprobs(base), logprobs(learner.policy.model)
    torch.testing.assert_close(ref, base_logp, atol=1e-5, rtol=0)
    assert (ref - policy).abs().max() > 1e-3, "the update did not move the adapters"


# -- env errors inside groups --------------------------------------------------------------------
class CrashingEnv(LettersEnv):
    """Crashes on its first step (after a normal reset)."""

    def step(self, action: str):
        raise RuntimeError("simulated env crash")


def _engine(learner, crash: set[int]) -> RolloutEngine:
    def factory(job):
        env = CrashingEnv if job.episode_id in crash else LettersEnv
        return env("toy/letters-2", job.split, turns=2, vocabulary=4)

    return RolloutEngine(learner.policy, rollout_config(learner.cfg), env_factory=factory)


def test_env_errors_drop_groups_left_too_small(tmp_path, tiny_policy_factory):
    """group_size 2, one episode of each group crashes: each group is left with one episode,
    which GRPO cannot baseline. The groups are dropped and counted; the run goes on."""
    cfg = _cfg(tmp_path, "algo.estimator=grpo")
    learner = build_learner(cfg, tiny_policy_factory())
    before = _params(learner.policy.model)
    metrics = rl_iteration(learner, _engine(learner, crash={0, 3}), 0)  # groups 0 and 1
    assert metrics["env_errors"] == 2 and metrics["episodes"] == 4
    assert metrics["dropped_groups"] == 2 and metrics["dropped_episodes"] == 2
    assert "grad_norm" not in metrics and torch.equal(before, _params(learner.policy.model))
    assert warnings_for(metrics)[0].startswith("2 group(s) left with too few episodes")
    # Only group 0 loses an episode: group 1 still trains.
    metrics = rl_iteration(learner, _engine(learner, crash={1}), 1)
    assert metrics["dropped_groups"] == 1 and metrics["dropped_episodes"] == 1
    assert metrics["num_groups"] == 1 and "grad_norm" in metrics  # one optimizer step


def test_an_iteration_of_only_env_errors_stops_the_run(tmp_path, tiny_policy_factory):
    cfg = _cfg(tmp_path, "algo.estimator=rloo")
    learner = build_learner(cfg, tiny_policy_factory())
    with pytest.raises(TrainingStopped, match=r"all 4 episodes were env errors "
                       r"\(4 x RuntimeError: simulated env crash\)"):
        rl_iteration(learner, _engine(learner, crash={0, 1, 2, 3}), 0)


# -- metrics ---------------------------------------------------------------------------------------
def _traj(end: EpisodeEnd, won: bool = False, turns: int = 1) -> Trajectory:
    turn = Turn([1, 2], [3], [-0.5], "apple", "ok", float(won), TurnStatus.OK)
    return Trajectory(EpisodeJob("toy/letters-2", "train", 0, 0, 0, 0), "", "", [turn] * turns, won=won,
                      lost=not won and end is EpisodeEnd.LOST, end=end)


def test_rollout_metrics_do_not_count_env_errors_as_lost_games(tmp_path):
    cfg = _cfg(tmp_path)
    trajs = [_traj(EpisodeEnd.WON, won=True), _traj(EpisodeEnd.LOST, turns=2),
             _traj(EpisodeEnd.ENV_ERROR), _traj(EpisodeEnd.ENV_ERROR)]
    m = rollout_metrics(trajs, cfg)
    assert m["success_rate"] == 0.5 and m["env_errors"] == 2 and m["episodes"] == 4
    assert m["episode_length"] == 1.5


def test_context_limit_episodes_are_counted_and_trained_on(tmp_path, tiny_policy_factory):
    cfg = _cfg(tmp_path, "algo.estimator=reinforce_pp")
    trajs = [_traj(EpisodeEnd.CONTEXT_LIMIT, turns=2), _traj(EpisodeEnd.WON, won=True)]
    assert rollout_metrics(trajs, cfg)["context_limit"] == 1
    batch, _ = make_batch(trajs, cfg, pad_id=0)
    # both turns of the context-limit episode (one row each: their prompts are not a
    # prefix chain) and the won episode's turn are trained on
    assert batch is not None and batch.num_rows == 3 and int(batch.loss_mask.sum()) == 3


def test_zero_variance_fraction_counts_groups_with_equal_task_rewards():
    # Group 0: episodes 0 and 1 both return 1 (zero variance); group 1: episode 2 returns 1,
    # episode 3 (two rows, 0.5 each) returns 1 too -> zero variance; group 2: 1 vs 0.
    rewards = torch.tensor([[0, 1.0], [1.0, 0], [0, 1.0], [0.5, 0], [0, 0.5], [1.0, 0], [0, 0]])
    ones = torch.ones_like(rewards)
    batch = TrainBatch(ones.long(), ones.long(), ones, ones, rewards, ones.long(),
                       group_ids=torch.tensor([0, 0, 1, 1, 1, 2, 2]),
                       episode_ids=torch.tensor([0, 1, 2, 3, 3, 4, 5]))
    assert zero_variance_fraction(batch) == pytest.approx(2 / 3)



def test_a_pool_the_loop_opened_is_closed_when_its_rollouts_cannot_start(tmp_path, monkeypatch):
    """Rollout workers that fail to start (no free Ray CPU) must not leak the env pool (Ray
    env actors) that `train_rl` opened itself."""
    import tripod.train.rl as rl

    closed = []

    class Pool:
        def close(self):
            closed.append(True)

    def no_workers(learner, pool):
        raise TimeoutError("rollout workers did not start")

    monkeypatch.setattr(rl, "open_pool", lambda cluster: Pool())
    monkeypatch.setattr(rl, "rollout_engine", no_workers)
    with pytest.raises(TimeoutError):
        train_rl(_cfg(tmp_path, "train.iterations=1"), quiet=True)
    assert closed == [True]
