"""The RL loop, top to bottom: collect -> reward -> advantage -> update -> log -> eval -> save.

One loop serves every estimator: the estimator's spec says whether a critic is needed, the
config says where the KL goes; nothing branches on an algorithm's name.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from tripod.algos.advantages import AdvantageConfig, AdvantageInput, get_estimator
from tripod.algos.losses import (
    add_kl_to_rewards,
    aggregate,
    kl_penalty,
    policy_loss,
    value_loss,
)
from tripod.core.config import TrainConfig
from tripod.core.types import Trajectory
from tripod.eval.evaluate import evaluate
from tripod.policy.models import Policy, load_policy
from tripod.policy.rollout import RolloutEngine, make_jobs
from tripod.rewards.shaping import turn_rewards
from tripod.train.batch import collate, token_logprobs, trajectory_rows
from tripod.train.checkpoint import (
    load_trainer_state,
    save_checkpoint,
    set_rng_state,
)
from tripod.train.common import (
    MetricLogger,
    chunks,
    prepare_run_dir,
    rollout_config,
    sampling_params,
    seed_everything,
)
from tripod.train.critic import Critic

console = Console(stderr=True)


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

    def __post_init__(self) -> None:
        algo = self.cfg.algo
        params = [p for p in self.policy.model.parameters() if p.requires_grad]
        groups = [{"params": params, "lr": algo.lr}]
        if self.critic is not None and self.critic.mode == "shared":
            groups.append({"params": list(self.critic.head.parameters()), "lr": algo.critic_lr})
        self.optimizer = torch.optim.AdamW(groups, weight_decay=algo.weight_decay)
        if self.critic is not None and self.critic.mode == "copy":
            self.critic_optimizer = torch.optim.AdamW(self.critic.parameters(),
                                                      lr=algo.critic_lr)

    @property
    def uses_lora(self) -> bool:
        return hasattr(self.policy.model, "disable_adapter")

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(),
                "critic": self.critic.state_dict() if self.critic else None,
                "critic_optimizer": (self.critic_optimizer.state_dict()
                                     if self.critic_optimizer else None),
                "nan_skips": self.nan_skips}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        if self.critic is not None and state.get("critic") is not None:
            self.critic.load_state_dict(state["critic"])
        if self.critic_optimizer is not None and state.get("critic_optimizer") is not None:
            self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.nan_skips = state.get("nan_skips", 0)


def build_learner(cfg: TrainConfig, policy: Policy | None = None) -> Learner:
    """Load the policy (wrapping it with LoRA if asked), the critic and the reference."""
    policy = policy or load_policy(cfg.model.name, device=cfg.model.device, seed=cfg.run.seed)
    if cfg.model.lora.enabled and not hasattr(policy.model, "disable_adapter"):
        from peft import LoraConfig, get_peft_model

        lora = cfg.model.lora
        policy.model = get_peft_model(policy.model, LoraConfig(
            r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
            target_modules=lora.target_modules, task_type="CAUSAL_LM"))
    spec = get_estimator(cfg.algo.estimator)
    critic = Critic(policy.model, cfg.algo.critic) if spec.needs_critic else None
    ref = None
    if cfg.algo.kl_coef > 0 and not hasattr(policy.model, "disable_adapter"):
        ref = copy.deepcopy(policy.model).eval().requires_grad_(False)
    return Learner(policy, cfg, critic, ref)


# -- collect ---------------------------------------------------------------------------------
def iteration_games(cfg: TrainConfig, iteration: int) -> list[int]:
    """The training games of an iteration: a pure function of the iteration (resumable)."""
    n = cfg.rollout.games_per_iter
    games = [iteration * n + j for j in range(n)]
    pool = cfg.rollout.train_pool
    return [g % pool for g in games] if pool else games


def collect(engine: RolloutEngine, cfg: TrainConfig, iteration: int) -> tuple[list[Trajectory], dict]:
    jobs = make_jobs(cfg.env.id, "train", iteration_games(cfg, iteration),
                     cfg.rollout.group_size, seed=cfg.run.seed * 100_003 + iteration)
    trajs, stats = engine.collect(jobs, sampling_params(cfg.rollout.train))
    return trajs, {"rollout_s": stats.seconds, "tokens_per_s": stats.tokens_per_s,
                   "env_errors": stats.env_errors}


# -- score and advantage ----------------------------------------------------------------------
def _reference_logprobs(learner: Learner, batch: dict, temperature: float) -> torch.Tensor:
    model = learner.ref_model or learner.policy.model
    with torch.no_grad():
        if learner.ref_model is None:  # LoRA: the base model is the adapters switched off
            with learner.policy.model.disable_adapter():
                logp, _, _ = token_logprobs(model, batch["input_ids"], batch["attention_mask"],
                                            temperature, batch["loss_mask"])
        else:
            logp, _, _ = token_logprobs(model, batch["input_ids"], batch["attention_mask"],
                                        temperature, batch["loss_mask"])
    return logp


def prepare_batch(learner: Learner, trajs: list[Trajectory]) -> dict[str, torch.Tensor] | None:
    """Rewards on the right tokens, reference logprobs, old values and advantages."""
    cfg = learner.cfg
    usable = [t for t in trajs if not t.failed]  # env errors: excluded from the loss, counted
    rows = [r for t in usable for r in trajectory_rows(t, turn_rewards(t, cfg.reward))]
    if not rows:
        return None
    batch = collate(rows, learner.policy.pad_token_id)
    temperature = cfg.rollout.train.temperature
    mask = batch["loss_mask"]
    rewards = batch["token_rewards"]
    with torch.no_grad():
        if cfg.algo.kl_coef > 0:
            batch["ref_logprobs"] = _per_micro(
                batch, cfg.algo.micro_batch_size,
                lambda mb: _reference_logprobs(learner, mb, temperature))
            if cfg.algo.kl_in == "reward":
                rewards = add_kl_to_rewards(rewards, batch["old_logprobs"], batch["ref_logprobs"],
                                            mask, cfg.algo.kl_coef, cfg.algo.kl_kind)
        values = None
        if learner.critic is not None:
            values = _per_micro(batch, cfg.algo.micro_batch_size,
                                lambda mb: _values(learner, mb))
            batch["old_values"] = values
    algo = cfg.algo
    adv = get_estimator(algo.estimator)(
        AdvantageInput(token_rewards=rewards, loss_mask=mask, turn_ids=batch["turn_ids"],
                       group_ids=batch["group_ids"], values=values,
                       episode_ids=batch["episode_ids"]),
        AdvantageConfig(estimator=algo.estimator, gamma=algo.gamma, lam=algo.lam,
                        returns=algo.credit, whiten=algo.whiten))
    batch["advantages"], batch["returns"] = adv.advantages, adv.returns
    batch["adv_stats"] = adv.stats
    return batch


def zero_variance_fraction(batch: dict[str, torch.Tensor]) -> float:
    """Share of groups whose episodes all got the same task reward (KL terms excluded).

    Such a group gives a group baseline (GRPO, RLOO) no signal at all; it is reported for
    every estimator, since it also measures how much the group's samples differ.
    """
    row_return = batch["token_rewards"].sum(-1)                              # [B]
    episode_return: dict[int, float] = {}
    episode_group: dict[int, int] = {}
    for e, g, r in zip(batch["episode_ids"].tolist(), batch["group_ids"].tolist(),
                       row_return.tolist(), strict=True):
        episode_return[e] = episode_return.get(e, 0.0) + r
        episode_group[e] = g
    group_returns: dict[int, set[float]] = {}
    for e, r in episode_return.items():
        group_returns.setdefault(episode_group[e], set()).add(round(r, 9))
    return sum(len(v) == 1 for v in group_returns.values()) / max(len(group_returns), 1)


def _per_micro(batch: dict, size: int, fn) -> torch.Tensor:
    """Apply `fn` to micro-batches (trimmed of shared padding); re-pad to [B, T] and stack."""
    t = batch["input_ids"].shape[1]
    outs = [fn(_select(batch, idx)) for idx in chunks(list(range(len(batch["input_ids"]))), size)]
    return torch.cat([torch.nn.functional.pad(o, (0, t - o.shape[1])) for o in outs])


def _select(batch: dict, idx: list[int]) -> dict[str, torch.Tensor]:
    sub = {k: v[idx] for k, v in batch.items() if isinstance(v, torch.Tensor)}
    # Trim right padding shared by the selected rows (saves compute on short rows).
    t = int(sub["attention_mask"].sum(1).max())
    return {k: (v[:, :t] if v.dim() == 2 and v.shape[1] >= t and k not in ("group_ids",) else v)
            for k, v in sub.items()}


def _values(learner: Learner, mb: dict, hidden: torch.Tensor | None = None) -> torch.Tensor:
    if learner.critic.mode == "shared" and hidden is None:
        hidden = learner.policy.model.get_decoder()(
            input_ids=mb["input_ids"], attention_mask=mb["attention_mask"]).last_hidden_state
    return learner.critic(mb["input_ids"], mb["attention_mask"], hidden)


# -- update ----------------------------------------------------------------------------------
def _normaliser(cfg: TrainConfig, mb: dict) -> float:
    mask = mb["loss_mask"]
    if cfg.algo.loss_agg == "token_mean":
        return float(mask.sum())
    if cfg.algo.loss_agg == "seq_mean":
        return float((mask.sum(1) > 0).sum())
    # constant (Dr.GRPO): the longest a row could be in agent tokens.
    return float(mask.shape[0] * cfg.rollout.train.max_new_tokens * cfg.env.max_turns)


def _micro_loss(learner: Learner, mb: dict, norm: float) -> tuple[torch.Tensor,
                                                                  torch.Tensor | None, dict]:
    """Actor loss (+ shared value loss) and, for a copied critic, its own loss."""
    cfg, algo = learner.cfg, learner.cfg.algo
    shared = learner.critic is not None and learner.critic.mode == "shared"
    logp, entropy, hidden = token_logprobs(
        learner.policy.model, mb["input_ids"], mb["attention_mask"],
        cfg.rollout.train.temperature, mb["loss_mask"], with_entropy=True, with_hidden=shared)
    mask = mb["loss_mask"]
    per_tok, stats = policy_loss(logp, mb["old_logprobs"], mb["advantages"], mask,
                                 algo.clip_low, algo.clip_high, algo.dual_clip)
    loss = aggregate(per_tok, mask, algo.loss_agg, norm)
    stats["entropy"] = float(aggregate(entropy.detach(), mask, "token_mean"))
    if algo.entropy_coef:
        loss = loss - algo.entropy_coef * aggregate(entropy, mask, algo.loss_agg, norm)
    if "ref_logprobs" in mb:
        kl = kl_penalty(logp, mb["ref_logprobs"], algo.kl_kind)
        stats["kl"] = float(aggregate(kl.detach(), mask, "token_mean"))
        if algo.kl_in == "loss":
            loss = loss + algo.kl_coef * aggregate(kl, mask, algo.loss_agg, norm)
    critic_loss = None
    if learner.critic is not None:
        values = _values(learner, mb, hidden)
        vl = aggregate(value_loss(values, mb["old_values"], mb["returns"], mask, algo.value_clip),
                       mask, algo.loss_agg, norm)
        stats["value_loss"] = float(vl.detach())
        if shared:
            loss = loss + algo.vf_coef * vl
        else:
            critic_loss = vl
    return loss, critic_loss, stats


def update(learner: Learner, batch: dict, iteration: int) -> dict[str, float]:
    """PPO-style epochs over minibatches with gradient accumulation over micro-batches."""
    algo = learner.cfg.algo
    n = batch["input_ids"].shape[0]
    gen = torch.Generator().manual_seed(learner.cfg.run.seed * 7919 + iteration)
    params = [p for g in learner.optimizer.param_groups for p in g["params"]]
    learner.policy.model.train()
    sums: dict[str, list[float]] = {}
    for _ in range(algo.epochs):
        for mb_idx in chunks(torch.randperm(n, generator=gen).tolist(), algo.minibatch_size):
            norm = _normaliser(learner.cfg, _select(batch, mb_idx))
            learner.optimizer.zero_grad(set_to_none=True)
            if learner.critic_optimizer:
                learner.critic_optimizer.zero_grad(set_to_none=True)
            finite = True
            for micro in chunks(mb_idx, algo.micro_batch_size):
                loss, critic_loss, stats = _micro_loss(learner, _select(batch, micro), norm)
                total = loss + (critic_loss if critic_loss is not None else 0.0)
                if not torch.isfinite(total):
                    finite = False
                    break
                total.backward()
                for k, v in stats.items():
                    sums.setdefault(k, []).append(v)
            grad_norm = torch.nn.utils.clip_grad_norm_(params, algo.grad_clip)
            if not finite or not torch.isfinite(grad_norm):  # skip, count, report
                learner.nan_skips += 1
                learner.optimizer.zero_grad(set_to_none=True)
                if learner.critic_optimizer:
                    learner.critic_optimizer.zero_grad(set_to_none=True)
                continue
            learner.optimizer.step()
            if learner.critic_optimizer:
                torch.nn.utils.clip_grad_norm_(learner.critic.parameters(), algo.grad_clip)
                learner.critic_optimizer.step()
            sums.setdefault("grad_norm", []).append(float(grad_norm))
    learner.policy.model.eval()
    out = {k: sum(v) / len(v) for k, v in sums.items()}
    out["nan_skips"] = learner.nan_skips
    return out


# -- metrics ---------------------------------------------------------------------------------
def rollout_metrics(trajs: list[Trajectory], cfg: TrainConfig) -> dict[str, float]:
    n = max(len(trajs), 1)
    turns = [t for tr in trajs for t in tr.turns]
    returns = [sum(turn_rewards(t, cfg.reward)) for t in trajs]
    return {
        "success_rate": sum(t.won for t in trajs) / n,
        "return": sum(returns) / n,
        "episode_length": sum(t.num_turns for t in trajs) / n,
        "invalid_action_rate": sum(t.status.value in ("invalid", "truncated")
                                   for t in turns) / max(len(turns), 1),
        "episodes": len(trajs),
    }


# -- the loop --------------------------------------------------------------------------------
@dataclass
class RLResult:
    run_dir: Path
    iterations: int
    history: list[dict]
    final_checkpoint: Path
    policy: Policy


def train_rl(cfg: TrainConfig, policy: Policy | None = None, resume: Path | None = None,
             quiet: bool = False) -> RLResult:
    """Run RL iterations as configured; resume from `resume` (a checkpoint folder) if given."""
    seed_everything(cfg.run.seed)
    run_dir = prepare_run_dir(cfg)
    start_iter = 0
    if resume is not None:
        trainer_state, state = load_trainer_state(resume)
        policy = load_policy(str(resume), device=cfg.model.device)
        start_iter = state["iteration"]
    learner = build_learner(cfg, policy)
    if resume is not None:
        learner.load_state_dict(trainer_state)
        set_rng_state(trainer_state["rng"])
    engine = RolloutEngine(learner.policy, rollout_config(cfg))
    eval_engine = RolloutEngine(learner.policy, rollout_config(cfg))
    logger = MetricLogger(run_dir, cfg.train.tensorboard, append=resume is not None)
    history: list[dict] = []
    ckpt, saved_at = resume, start_iter
    bar = _progress(quiet)
    task = bar.add_task("collecting", total=cfg.train.iterations, completed=start_iter)
    bar.start()
    try:
        for it in range(start_iter, cfg.train.iterations):
            t0 = time.perf_counter()
            bar.update(task, description="collecting episodes")
            trajs, rstats = collect(engine, cfg, it)                             # collect
            bar.update(task, description="updating")
            batch = prepare_batch(learner, trajs)                                # reward + advantage
            metrics = {**rollout_metrics(trajs, cfg), **rstats}
            if batch is not None:
                metrics.update(update(learner, batch, it))                       # update
                metrics["zero_variance_groups"] = zero_variance_fraction(batch)
            metrics["iteration_s"] = time.perf_counter() - t0
            if cfg.train.eval_every and (it + 1) % cfg.train.eval_every == 0:    # evaluate
                bar.update(task, description="evaluating")
                res, _ = evaluate(learner.policy, cfg.env.id, "valid", cfg.train.eval_games,
                                  sampling_params(cfg.rollout.eval), rollout_config(cfg),
                                  seed=cfg.run.seed, engine=eval_engine)
                metrics["valid_success_rate"] = res.success_rate
            logger.log(it + 1, metrics)                                          # log
            history.append({"iteration": it + 1, **metrics})
            if not quiet:
                console.print(_line(it + 1, cfg.train.iterations, metrics))
            if metrics.get("zero_variance_groups", 0.0) > 0.5 and not quiet:
                console.print("[yellow]warning: most groups have equal rewards: group baselines "
                              "get no signal (raise the temperature or the group size)")
            if cfg.train.checkpoint_every and (it + 1) % cfg.train.checkpoint_every == 0:
                ckpt, saved_at = _save(learner, run_dir, it + 1), it + 1         # checkpoint
            bar.update(task, advance=1, description=f"last success {metrics['success_rate']:.0%}")
    finally:
        bar.stop()
    if ckpt is None or saved_at != cfg.train.iterations:
        ckpt = _save(learner, run_dir, cfg.train.iterations)
    logger.close()
    engine.close()
    eval_engine.close()
    return RLResult(run_dir, cfg.train.iterations, history, ckpt, learner.policy)


def _save(learner: Learner, run_dir: Path, iteration: int) -> Path:
    path = run_dir / "checkpoints" / f"iter_{iteration:06d}"
    return save_checkpoint(path, learner.policy, learner.state_dict(),
                           {"iteration": iteration, "config": learner.cfg.model_dump(mode="json")})


def _progress(quiet: bool) -> Progress:
    """The console bar over RL iterations (phase, done/total, elapsed, time left)."""
    return Progress(TextColumn("[bold]RL"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.description}"), TimeElapsedColumn(), TimeRemainingColumn(),
                    console=console, disable=quiet)


def _line(it: int, total: int, m: dict) -> str:
    keys = ("success_rate", "return", "episode_length", "invalid_action_rate", "kl", "entropy",
            "clip_fraction", "value_loss", "grad_norm", "tokens_per_s", "iteration_s")
    parts = [f"{k}={m[k]:.3g}" for k in keys if k in m and isinstance(m[k], float | int)
             and not (isinstance(m[k], float) and math.isnan(m[k]))]
    return f"[bold]iter {it}/{total}[/bold] " + " ".join(parts)

