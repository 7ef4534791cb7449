"""The learner: the trainable state (policy, critic, reference, optimizers) and its update.

`no_grad_passes` runs the no-gradient forward passes a batch needs before its advantages (reference
logprobs, critic values, the KL penalty in the reward); `update` runs PPO-style epochs over
minibatches, each minibatch one optimizer step accumulated over micro-batches.

Numerical guards: a minibatch whose logits, advantages, loss or gradient norm is not finite
is not applied (the optimizer step is skipped, the reason counted and returned); after
`MAX_CONSECUTIVE_SKIPS` skipped steps in a row the run stops with `TrainingStopped`, naming
the likely cause, instead of training on garbage.

Data parallelism (`tripod.train.distributed`, launched with torchrun): every rank computes
the same minibatch order and the normaliser of the WHOLE minibatch; `Learner.micro_batches`
keeps this rank's share of the micro-batches, `Learner.reduce_gradients` sums the
accumulated gradients over ranks (SUM: each micro-loss is already divided by the whole
minibatch's normaliser), and `Learner.agree` makes every rank skip a step when any of them
saw a non-finite value. On one process they are the identity.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from tripod.algos.advantages import get_estimator
from tripod.algos.losses import (
    add_kl_to_rewards,
    aggregate,
    kl_penalty,
    loss_normaliser,
    policy_loss,
    value_loss,
)
from tripod.core.config import TrainConfig
from tripod.policy.models import Policy, load_policy, use_checkpointing, wrap_lora
from tripod.train.batch import TrainBatch, decoder_hidden, on_device, token_logprobs
from tripod.train.common import adamw, chunks
from tripod.train.critic import Critic
from tripod.train.distributed import Parallel, full_state_dict, shard_layers

MAX_CONSECUTIVE_SKIPS = 5
"""Skipped optimizer steps in a row (across iterations) after which the run stops: one
non-finite minibatch is noise worth skipping; five in a row means the weights or the data
are broken and every later step would be skipped too."""

LIKELY_CAUSE = {
    "logits": "the policy's weights or activations are not finite: the learning rate is "
              "probably too high (lower algo.lr), or the model or checkpoint is corrupt",
    "advantages": "rewards or critic values are not finite: check the env's rewards, and "
                  "lower algo.critic_lr if a critic diverged",
    "loss": "the policy moved too far from the sampling or reference policy (a ratio or KL "
            "term overflowed): lower algo.lr or raise algo.kl_coef",
    "gradient": "the gradients exploded: lower algo.lr (or algo.grad_clip)",
}
"""Skip reason -> what probably caused it, for the message that stops the run."""


class TrainingStopped(RuntimeError):
    """The run cannot go on meaningfully (e.g. every update is non-finite)."""


@dataclass
class Learner:
    """The trainable state: policy (+ LoRA), optional critic and reference, optimizers."""

    policy: Policy
    cfg: TrainConfig
    critic: Critic | None = None
    ref_model: torch.nn.Module | None = None
    optimizer: torch.optim.Optimizer = field(init=False)
    critic_optimizer: torch.optim.Optimizer | None = field(init=False, default=None)
    nan_skips: int = 0
    """Optimizer steps skipped since the run started (any reason)."""
    consecutive_skips: int = 0
    """Optimizer steps skipped in a row, up to now."""
    parallel: Parallel = field(default_factory=Parallel)
    """This process's data-parallel rank (rank 0 of 1 without torchrun)."""
    rollout_policy: Policy | None = None
    """A copy of the policy that plays the rollouts, refreshed by `sync_rollout_policy`
    (FSDP: un-sharded, after every update; overlapped rollouts: when a collection starts);
    None: the policy itself plays them."""

    def __post_init__(self) -> None:
        algo = self.cfg.algo
        params = [p for p in self.policy.model.parameters() if p.requires_grad]
        groups = [{"params": params, "lr": algo.lr}]
        if self.critic is not None and self.critic.mode == "shared":
            groups.append({"params": list(self.critic.head.parameters()), "lr": algo.critic_lr})
        self.optimizer = adamw(groups, weight_decay=algo.weight_decay)
        if self.critic is not None and self.critic.mode == "copy":
            self.critic_optimizer = adamw(list(self.critic.parameters()), lr=algo.critic_lr)

    @property
    def uses_lora(self) -> bool:
        return hasattr(self.policy.model, "disable_adapter")

    @property
    def shared_critic(self) -> bool:
        return self.critic is not None and self.critic.mode == "shared"

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(),
                "critic": self.critic.state_dict() if self.critic else None,
                "critic_optimizer": (self.critic_optimizer.state_dict()
                                     if self.critic_optimizer else None),
                "nan_skips": self.nan_skips, "consecutive_skips": self.consecutive_skips}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        if self.critic is not None and state.get("critic") is not None:
            self.critic.load_state_dict(state["critic"])
        if self.critic_optimizer is not None and state.get("critic_optimizer") is not None:
            self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.nan_skips = state.get("nan_skips", 0)
        self.consecutive_skips = state.get("consecutive_skips", 0)

    # -- the data-parallel seams (identity on one process) ---------------------------------
    def micro_batches(self, mb: TrainBatch) -> list[tuple[TrainBatch, float]]:
        """The micro-batches of a minibatch this process computes, with their loss weights
        (all of them, weight 1, on one process; see `Parallel.micro_share`)."""
        rows = list(range(mb.num_rows))
        micros = [on_device(mb.select(r), self.policy.device)
                  for r in chunks(rows, self.cfg.algo.micro_batch_size)]
        return self.parallel.micro_share(micros)

    def reduce_gradients(self) -> None:
        """Sum the accumulated gradients over processes (nothing to do on one)."""
        self.parallel.reduce_gradients(self._trained_params())

    def agree(self, reason: str | None) -> str | None:
        """The skip decision every process takes (a step is skipped if any process skips)."""
        return self.parallel.agree(reason)

    def _trained_params(self) -> list[torch.nn.Parameter]:
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        if self.critic_optimizer is not None:
            params += [p for g in self.critic_optimizer.param_groups for p in g["params"]]
        return params

    @property
    def actor(self) -> Policy:
        """The policy that plays rollouts (its copy, when there is one)."""
        return self.rollout_policy or self.policy

    @property
    def latest(self) -> Policy:
        """A whole model with the latest weights (to evaluate and save): the policy, or under
        FSDP its un-sharded copy (synced after every update)."""
        return self.actor if self.parallel.fsdp else self.policy

    def add_rollout_copy(self) -> None:
        """Give rollouts their own copy of the policy (so they can run while it trains)."""
        if self.rollout_policy is None:
            p = self.policy
            self.rollout_policy = Policy(copy.deepcopy(p.model).eval().requires_grad_(False),
                                         p.tokenizer, p.name, p.eos_token_ids)

    def sync_rollout_policy(self) -> None:
        """Copy the policy's current weights into the rollout copy (if there is one; under
        FSDP a collective that gathers the shards)."""
        if self.rollout_policy is None:
            return
        state = (full_state_dict(self.policy.model) if self.parallel.fsdp
                 else self.policy.model.state_dict())
        self.rollout_policy.model.load_state_dict(state)

    # -- one optimizer step ----------------------------------------------------------------
    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        if self.critic_optimizer is not None:
            self.critic_optimizer.zero_grad(set_to_none=True)

    def clip_and_step(self) -> tuple[float, str | None]:
        """Clip, then step unless the gradient norm is not finite: (norm, skip reason)."""
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        grad_norm = self.parallel.clip_grad_norm(params, self.cfg.algo.grad_clip)
        reason = self.agree(None if torch.isfinite(grad_norm) else "gradient")
        if reason is not None:
            return float(grad_norm), reason
        self.optimizer.step()
        if self.critic_optimizer is not None:
            self.parallel.clip_grad_norm(list(self.critic.parameters()), self.cfg.algo.grad_clip)
            self.critic_optimizer.step()
        return float(grad_norm), None


def build_learner(cfg: TrainConfig, policy: Policy | None = None,
                  parallel: Parallel | None = None) -> Learner:
    """Load the policy (wrapping it with LoRA if asked), the critic and the reference; with
    `parallel` (torchrun), every rank starts from rank 0's weights, sharded under FSDP."""
    policy = policy or load_policy(cfg.model.name, device=cfg.model.device, seed=cfg.run.seed)
    if cfg.model.lora.enabled and not hasattr(policy.model, "disable_adapter"):
        policy.model = wrap_lora(policy.model, cfg.model.lora)
    use_checkpointing(policy.model, cfg.model.gradient_checkpointing)
    if parallel is not None:
        parallel.broadcast_module(policy.model)
    spec = get_estimator(cfg.algo.estimator)
    # The head is built on the CPU; a copied backbone is already on the policy's device.
    critic = (Critic(policy.model, cfg.algo.critic).to(policy.device)
              if spec.needs_critic else None)
    ref = None
    if cfg.algo.kl_coef > 0 and not hasattr(policy.model, "disable_adapter"):
        ref = copy.deepcopy(policy.model).eval().requires_grad_(False)
    if parallel is None or not parallel.fsdp:
        return Learner(policy, cfg, critic, ref, parallel=parallel or Parallel())
    return _sharded_learner(policy, cfg, critic, ref, parallel)


def _sharded_learner(policy: Policy, cfg: TrainConfig, critic: Critic | None,
                     ref: torch.nn.Module | None, parallel: Parallel) -> Learner:
    """FSDP2: the policy, reference and copied critic sharded layer by layer, an un-sharded
    copy of the policy for rollouts. LoRA is not sharded yet (docs/scale.md): refused."""
    if cfg.model.lora.enabled:
        raise ValueError("cluster.fsdp does not support model.lora yet; LoRA models usually "
                         "fit one device: use DDP (cluster.fsdp=false)")
    actor = Policy(copy.deepcopy(policy.model).eval().requires_grad_(False),
                   policy.tokenizer, policy.name, policy.eos_token_ids)
    shard_layers(policy.model.get_decoder())
    if ref is not None:
        shard_layers(ref.get_decoder())
    if critic is not None and critic.backbone is not None:
        shard_layers(critic.backbone)
    return Learner(policy, cfg, critic, ref, parallel=parallel, rollout_policy=actor)


# -- no_grad_passes: the no-gradient passes before the advantages ------------------------------------
def no_grad_passes(learner: Learner, batch: TrainBatch) -> TrainBatch:
    """Reference logprobs (with a KL penalty), old critic values (with a critic) and the
    KL-penalised rewards (with `algo.kl_in=reward`), added to the batch."""
    algo = learner.cfg.algo
    size = algo.micro_batch_size
    with torch.no_grad():
        if algo.kl_coef > 0:
            batch.ref_logprobs = _per_micro(learner, batch, size,
                                            lambda mb: reference_logprobs(learner, mb))
            if algo.kl_in == "reward":
                batch.kl_rewards = add_kl_to_rewards(
                    batch.token_rewards, batch.old_logprobs, batch.ref_logprobs,
                    batch.loss_mask, algo.kl_coef, algo.kl_kind)
        if learner.critic is not None:
            batch.old_values = _per_micro(learner, batch, size,
                                          lambda mb: _values(learner, mb))
    return batch


def reference_logprobs(learner: Learner, mb: TrainBatch) -> Tensor:
    """[B, T] logprobs under the reference: the frozen copy, or with LoRA the base model
    (the adapters switched off: no second copy of the weights)."""
    temperature = learner.cfg.rollout.train.temperature
    if learner.ref_model is not None:
        return token_logprobs(learner.ref_model, mb.input_ids, mb.attention_mask,
                              temperature, mb.loss_mask, allowed_ids=mb.allowed_ids)[0]
    with learner.policy.model.disable_adapter():
        return token_logprobs(learner.policy.model, mb.input_ids, mb.attention_mask,
                              temperature, mb.loss_mask, allowed_ids=mb.allowed_ids)[0]


def _per_micro(learner: Learner, batch: TrainBatch, size: int,
               fn: Callable[[TrainBatch], Tensor]) -> Tensor:
    """Apply `fn` to micro-batches (trimmed of shared padding, on the model's device);
    re-pad to [B, T] and stack (on the batch's device). Under torchrun with replicated
    weights each rank scores every world_size-th micro-batch and the ranks swap results
    (the same numbers, computed once); FSDP ranks must run every forward in lockstep, so
    there each rank scores them all."""
    t, device, parallel = batch.input_ids.shape[1], learner.policy.device, learner.parallel
    parts = list(enumerate(chunks(list(range(batch.num_rows)), size)))
    shared = parallel.enabled and not parallel.fsdp
    mine = parallel.share(parts) if shared else parts
    outs = {i: fn(on_device(batch.select(idx), device)).to(batch.input_ids.device)
            for i, idx in mine}
    if shared:
        outs = {i: o for (part,) in parallel.gather([outs]) for i, o in part.items()}
    return torch.cat([torch.nn.functional.pad(outs[i], (0, t - outs[i].shape[1]))
                      for i, _ in parts])


def _values(learner: Learner, mb: TrainBatch, hidden: Tensor | None = None) -> Tensor:
    if learner.shared_critic and hidden is None:
        hidden = decoder_hidden(learner.policy.model, mb.input_ids, mb.attention_mask)
    return learner.critic(mb.input_ids, mb.attention_mask, hidden)


# -- update ----------------------------------------------------------------------------------
@dataclass
class MicroLoss:
    """One micro-batch's actor loss, or the reason it must not be applied."""

    loss: Tensor
    """Actor loss (+ shared value loss), divided by the whole minibatch's normaliser."""
    stats: dict[str, float]
    problem: str | None = None
    """A key of `LIKELY_CAUSE` when a value is not finite (the step is then skipped)."""
    logprobs: Tensor | None = None
    """[b, t] the trainer's logprobs of the micro-batch's tokens (detached), for the records."""


def _finite_on(x: Tensor, mask: Tensor) -> bool:
    return bool(torch.isfinite(torch.where(mask.bool(), x, 0.0)).all())


def micro_loss(learner: Learner, mb: TrainBatch, norm: float) -> MicroLoss:
    """Actor loss (+ shared value loss). A copied critic's loss is `critic_micro_loss`."""
    cfg, algo = learner.cfg, learner.cfg.algo
    mask = mb.loss_mask
    logp, entropy, hidden = token_logprobs(
        learner.policy.model, mb.input_ids, mb.attention_mask, cfg.rollout.train.temperature,
        mask, with_entropy=True, with_hidden=learner.shared_critic, allowed_ids=mb.allowed_ids)
    per_tok, stats = policy_loss(logp, mb.old_logprobs, mb.advantages, mask,
                                 algo.clip_low, algo.clip_high, algo.dual_clip)
    loss = aggregate(per_tok, mask, algo.loss_agg, norm)
    stats["entropy"] = float(aggregate(entropy.detach(), mask, "token_mean"))
    if algo.entropy_coef:
        loss = loss - algo.entropy_coef * aggregate(entropy, mask, algo.loss_agg, norm)
    if mb.ref_logprobs is not None:
        kl = kl_penalty(logp, mb.ref_logprobs, algo.kl_kind)
        stats["kl"] = float(aggregate(kl.detach(), mask, "token_mean"))
        if algo.kl_in == "loss":
            loss = loss + algo.kl_coef * aggregate(kl, mask, algo.loss_agg, norm)
    if learner.critic is not None and learner.shared_critic:
        vl = critic_micro_loss(learner, mb, norm, hidden)
        stats["value_loss"] = float(vl.detach())
        loss = loss + algo.vf_coef * vl
    return MicroLoss(loss, stats, _problem(logp, mb, loss), logp.detach())


def critic_micro_loss(learner: Learner, mb: TrainBatch, norm: float,
                      hidden: Tensor | None = None) -> Tensor:
    """The value loss on a micro-batch (a shared critic reads the actor's `hidden`). A
    copied critic's graph is separate from the actor's, so `minibatch_step` builds it after
    the actor's backward: the two models' activations are never held at once (with long
    multi-turn rows they are most of the memory)."""
    algo = learner.cfg.algo
    return aggregate(value_loss(_values(learner, mb, hidden), mb.old_values, mb.returns,
                                mb.loss_mask, algo.value_clip), mb.loss_mask, algo.loss_agg,
                     norm)


def _problem(logp: Tensor, mb: TrainBatch, loss: Tensor) -> str | None:
    """The first non-finite quantity, in causal order (logits -> advantages -> loss)."""
    if not _finite_on(logp, mb.loss_mask):
        return "logits"
    if not _finite_on(mb.advantages, mb.loss_mask):
        return "advantages"
    return None if torch.isfinite(loss) else "loss"


def minibatch_step(learner: Learner, mb: TrainBatch
                   ) -> tuple[dict[str, list[float]], str | None, list[tuple[Tensor, Tensor]]]:
    """One optimizer step over a minibatch, accumulated over micro-batches: (stats, reason
    the step was skipped or None, (row_ids, trainer logprobs) of each micro-batch this
    process computed, when `mb.row_ids` is set)."""
    algo = learner.cfg.algo
    row_cap = learner.cfg.rollout.train.max_new_tokens * learner.cfg.env.max_turns
    norm = loss_normaliser(mb.loss_mask, algo.loss_agg, row_cap)
    learner.zero_grad()
    stats: dict[str, list[float]] = {}
    reason = None
    logps: list[tuple[Tensor, Tensor]] = []
    for micro, weight in learner.micro_batches(mb):
        out = micro_loss(learner, micro, norm)
        if weight and micro.row_ids is not None:
            logps.append((micro.row_ids, out.logprobs))
        if out.problem is not None:
            reason = reason or out.problem
            if not learner.parallel.fsdp:  # FSDP ranks must run every pass (lockstep)
                break
        (weight * out.loss).backward()
        if learner.critic is not None and not learner.shared_critic:
            vl = critic_micro_loss(learner, micro, norm)
            out.stats["value_loss"] = float(vl.detach())
            if not torch.isfinite(vl):
                reason = reason or "loss"
                if not learner.parallel.fsdp:
                    break
            (weight * vl).backward()
        for k, v in out.stats.items():
            if weight:
                stats.setdefault(k, []).append(v)
    reason = learner.agree(reason)
    if reason is None:
        learner.reduce_gradients()
        grad_norm, reason = learner.clip_and_step()
        stats.setdefault("grad_norm", []).append(grad_norm)
    if reason is not None:
        learner.zero_grad()
    return stats, reason, logps


def _place(target: Tensor, logps: list[tuple[Tensor, Tensor]]) -> None:
    """Write micro-batch logprobs (trimmed to their own length) into their rows of `target`.
    Under torch.distributed each process places only the rows it computed (the others stay
    NaN; rank 0 writes the records)."""
    for row_ids, lp in logps:
        target[row_ids.to(target.device), :lp.shape[1]] = lp.detach().to(target)


def update(learner: Learner, batch: TrainBatch, iteration: int) -> dict[str, float]:
    """PPO-style epochs over minibatches (a seeded shuffle: resumable), one optimizer step per
    minibatch; the gradients are freed when it returns. Fills `batch.trainer_logprobs` from
    the first epoch. Returns the mean of each statistic, `skipped_updates` (this iteration)
    with `skipped_<reason>` counts, and `nan_skips` (the run's total). Raises `TrainingStopped`
    after `MAX_CONSECUTIVE_SKIPS` skipped steps in a row."""
    algo = learner.cfg.algo
    gen = torch.Generator().manual_seed(learner.cfg.run.seed * 7919 + iteration)
    learner.policy.model.train()
    sums: dict[str, list[float]] = {}
    skipped: dict[str, int] = {}
    batch.trainer_logprobs = torch.full(batch.loss_mask.shape, float("nan"))
    groups = batch.group_ids.tolist()
    try:
        for epoch in range(algo.epochs):
            order = torch.randperm(batch.num_rows, generator=gen).tolist()
            for rows in chunks(order, algo.minibatch_size):
                # a group's rows side by side: micro-batches then share their first prompt
                # (`batch.decoder_hidden`); the minibatch and its gradient are the same
                rows.sort(key=lambda r: (groups[r], r))
                sub = batch.select(rows)
                sub.row_ids = torch.as_tensor(rows, dtype=torch.long)
                stats, reason, logps = minibatch_step(learner, sub)
                if epoch == 0:
                    _place(batch.trainer_logprobs, logps)
                for k, v in stats.items():
                    sums.setdefault(k, []).extend(v)
                _count_skip(learner, reason, skipped)
    finally:
        learner.policy.model.eval()
        # the last step's gradients (a full copy of the weights) are not needed until the next
        # update zeroes them: freed now, they are not resident through the next rollout
        learner.zero_grad()
    sums = learner.parallel.mean_stats(sums)
    out = {k: sum(v) / len(v) for k, v in sums.items()}
    out.update({f"skipped_{k}": float(v) for k, v in skipped.items()})
    out["skipped_updates"] = float(sum(skipped.values()))
    out["nan_skips"] = learner.nan_skips
    return out


def _count_skip(learner: Learner, reason: str | None, skipped: dict[str, int]) -> None:
    if reason is None:
        learner.consecutive_skips = 0
        return
    skipped[reason] = skipped.get(reason, 0) + 1
    learner.nan_skips += 1
    learner.consecutive_skips += 1
    if learner.consecutive_skips >= MAX_CONSECUTIVE_SKIPS:
        raise TrainingStopped(
            f"stopping: {learner.consecutive_skips} optimizer steps in a row were skipped "
            f"(last: non-finite {reason}). Likely cause: {LIKELY_CAUSE[reason]}.")
