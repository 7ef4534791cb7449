"""SFT on expert trajectories, formatted exactly as RL prompts are.

Demonstrations are played by the rollout engine itself with a scripted actor (the env's
`expert_action`), so the prompt ids are the ones RL will see. Every expert turn is trained on
(not only the last). Recovery demonstrations inject random admissible actions with some
probability; those turns are masked out, and the expert's way back is trained on: plain
walkthroughs contain no mistakes, so a model trained only on them never learns to recover.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

from tripod.core.config import TrainConfig, env_options, own_env_first, turn_cap, write_recipe
from tripod.core.progress import StageProgress
from tripod.core.types import Trajectory
from tripod.envs.pool import EnvPool
from tripod.policy.models import Policy, use_checkpointing
from tripod.policy.rollout import RolloutEngine, expert_actor, make_jobs
from tripod.policy.sampler import SamplingParams
from tripod.policy.settings import rollout_config
from tripod.train.batch import (
    Row,
    TrainBatch,
    collate,
    on_device,
    token_logprobs,
    trajectory_rows,
)
from tripod.train.common import adamw, chunks


@dataclass
class SFTResult:
    demos: int
    tokens: int
    final_loss: float
    seconds: float
    losses: list[float]


class NoDemonstrationsError(RuntimeError):
    """SFT found nothing to learn from; the message says what happened to each episode."""


def collect_demonstrations(policy: Policy, cfg: TrainConfig,
                           pool: EnvPool | None = None) -> list[Trajectory]:
    """Expert (and, if configured, recovery) demonstrations on the `sft` split of `env.id`
    and of each `sft.env_ids`: the won episodes without env errors. None at all from an env
    id stops the run with the reasons counted."""
    demos: list[Trajectory] = []
    for env_id in sft_env_ids(cfg):
        played = _play_demonstrations(policy, cfg, env_id, pool)
        won = [d for d in played if not d.failed and d.won]
        if not won:
            raise NoDemonstrationsError(describe_failures(played, env_id))
        demos += won
    return demos


def sft_env_ids(cfg: TrainConfig) -> list[str]:
    return own_env_first(cfg, cfg.sft.env_ids)


def sft_options(cfg: TrainConfig, env_id: str) -> dict:
    """An env id's options for demonstrations: its run options (`env_options`), and for the
    recipe's env `sft.env_options` on top."""
    extra = cfg.sft.env_options if env_id == cfg.env.id else {}
    return {**env_options(cfg, env_id), **extra}


def _play_demonstrations(policy: Policy, cfg: TrainConfig, env_id: str,
                         pool: EnvPool | None) -> list[Trajectory]:
    """One env id's expert and recovery episodes. The recipe's env gets its options,
    `sft.env_options` and `sft.max_turns`; another env id its own options (`env.options_by_env`)
    and the paper's cap."""
    own = env_id == cfg.env.id
    rcfg = rollout_config(cfg, max_turns=cfg.sft.max_turns if own else turn_cap(cfg, env_id))
    rcfg.env_options = sft_options(cfg, env_id)
    engine = RolloutEngine(policy, rcfg, pool=pool)
    greedy = SamplingParams(temperature=0.0)
    plain = make_jobs(env_id, "sft", list(range(cfg.sft.games)), 1, cfg.run.seed)
    played, _ = engine.collect(plain, greedy, actor=expert_actor(0.0))
    if cfg.sft.recovery_games:
        games = list(range(cfg.sft.games, cfg.sft.games + cfg.sft.recovery_games))
        noisy = make_jobs(env_id, "sft", games, 1, cfg.run.seed + 1)
        more, _ = engine.collect(noisy, greedy, actor=expert_actor(cfg.sft.recovery_noise))
        played += more
    engine.close()
    return played


def describe_failures(played: list[Trajectory], env_id: str) -> str:
    """'0 of N expert episodes won on ENV: k env errors (first: ...), m ended by max_turns'."""
    ends = Counter(t.end.value for t in played)
    errors = [t.error for t in played if t.failed and t.error]
    parts = [f"{n} ended by {end}" for end, n in sorted(ends.items())]
    if errors:
        common, count = Counter(errors).most_common(1)[0]
        parts.append(f"most common env error ({count}x): {common}")
    return (f"no usable demonstration: 0 of {len(played)} expert episodes on {env_id} were won "
            f"without an env error ({'; '.join(parts) or 'nothing was played'}). SFT would train "
            "on an empty set; fix the env (try `tripod play ENV --policy expert`) or the turn "
            "cap (sft.max_turns).")


def demo_rows(demos: list[Trajectory]) -> list[Row]:
    return [row for d in demos for row in trajectory_rows(d, [0.0] * d.num_turns)]


def sft_loss(policy: Policy, batch: TrainBatch) -> tuple[torch.Tensor, int]:
    """Summed NLL over agent tokens and the token count (so callers can token-mean)."""
    mask = batch.loss_mask
    logp, _, _ = token_logprobs(policy.model, batch.input_ids, batch.attention_mask,
                                loss_mask=mask)
    return -(logp * mask).sum(), int(mask.sum())


def sft_step(policy: Policy, rows: list[Row], cfg: TrainConfig, opt: torch.optim.Optimizer,
             params: list[torch.nn.Parameter]) -> tuple[float, int]:
    """One optimizer step on `rows`: the token-mean NLL over all their agent tokens, its
    gradient accumulated over micro-batches of `sft.micro_batch_size` rows (each micro-batch's
    summed NLL divided by the whole step's token count). Returns (loss, agent tokens)."""
    n = sum(sum(r.loss_mask) for r in rows)
    opt.zero_grad(set_to_none=True)
    total = 0.0
    for part in chunks(list(range(len(rows))), cfg.sft.micro_batch_size):
        # Rows are collated on the CPU; each micro-batch moves to the model's device.
        mb = on_device(collate([rows[i] for i in part], policy.pad_token_id), policy.device)
        nll, _ = sft_loss(policy, mb)
        (nll / max(n, 1)).backward()
        total += float(nll.detach())
    torch.nn.utils.clip_grad_norm_(params, cfg.algo.grad_clip)
    opt.step()
    return total / max(n, 1), n


def train_sft(policy: Policy, rows: list[Row], cfg: TrainConfig,
              out_dir: Path | None = None) -> SFTResult:
    """Fine-tune on demonstration rows (token-mean NLL over agent tokens)."""
    model = policy.model
    use_checkpointing(model, cfg.model.gradient_checkpointing)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = adamw(params, lr=cfg.sft.lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(cfg.run.seed)
    losses: list[float] = []
    tokens = 0
    start = time.perf_counter()
    steps = cfg.sft.epochs * math.ceil(len(rows) / cfg.sft.batch_size)
    with StageProgress("SFT", steps, "steps") as progress:
        for _ in range(cfg.sft.epochs):
            order = torch.randperm(len(rows), generator=gen).tolist()
            for idx in chunks(order, cfg.sft.batch_size):
                loss, n = sft_step(policy, [rows[i] for i in idx], cfg, opt, params)
                losses.append(loss)
                tokens += n
                progress.advance(status=f"loss {loss:.3f}")
    model.eval()
    if out_dir is not None:
        policy.model.save_pretrained(out_dir)
        policy.tokenizer.save_pretrained(out_dir)
        write_recipe(out_dir, cfg)
    return SFTResult(len(rows), tokens, losses[-1] if losses else float("nan"),
                     time.perf_counter() - start, losses)
