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
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from tripod.core.config import TrainConfig, env_options, own_env_first, turn_cap, write_recipe
from tripod.core.progress import StageProgress
from tripod.core.types import Trajectory
from tripod.envs.pool import EnvPool
from tripod.policy.models import Policy, use_checkpointing
from tripod.policy.restrict import restricted_logits
from tripod.policy.rollout import RolloutEngine, expert_actor, make_jobs
from tripod.policy.sampler import SamplingParams
from tripod.policy.settings import rollout_config
from tripod.train.batch import (
    Row,
    TrainBatch,
    collate,
    decoder_hidden,
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
    played = _expert_episodes(policy, cfg, env_id, "sft", range(cfg.sft.games), 0.0,
                              cfg.run.seed, pool)
    if cfg.sft.recovery_games:
        games = range(cfg.sft.games, cfg.sft.games + cfg.sft.recovery_games)
        played += _expert_episodes(policy, cfg, env_id, "sft", games, cfg.sft.recovery_noise,
                                   cfg.run.seed + 1, pool)
    return played


def _expert_episodes(policy: Policy, cfg: TrainConfig, env_id: str, split: str,
                     games: range, noise: float, seed: int, pool: EnvPool | None,
                     max_turns: int | None = None, options: dict | None = None,
                     policy_share: float = 0.0) -> list[Trajectory]:
    own = env_id == cfg.env.id
    cap = max_turns or (cfg.sft.max_turns if own else turn_cap(cfg, env_id))
    rcfg = rollout_config(cfg, max_turns=cap)
    rcfg.env_options = sft_options(cfg, env_id) if options is None else options
    engine = RolloutEngine(policy, rcfg, pool=pool)
    try:
        played, _ = engine.collect(make_jobs(env_id, split, list(games), 1, seed),
                                   SamplingParams(temperature=0.0),
                                   actor=expert_actor(noise, policy_share))
    finally:
        engine.close()
    return played


def dagger_episodes(policy: Policy, cfg: TrainConfig,
                    pool: EnvPool | None = None) -> list[Trajectory]:
    """`sft.dagger_games` episodes on the `sft` games after the demonstrations' and the
    recovery games', each turn replied by `policy` (greedy, not trainable) with probability
    `sft.dagger_share`, else by the expert. Episodes without an env error and with at least
    one expert turn are kept, won or not: the expert's labels are right either way."""
    first = cfg.sft.games + cfg.sft.recovery_games
    played = _expert_episodes(policy, cfg, cfg.env.id, "sft",
                              range(first, first + cfg.sft.dagger_games), 0.0,
                              cfg.run.seed + 2, pool, policy_share=cfg.sft.dagger_share)
    return [t for t in played if not t.failed and any(x.trainable for x in t.turns)]


def expert_demonstrations(policy: Policy, cfg: TrainConfig, env_id: str, split: str,
                          games: int, pool: EnvPool | None = None,
                          max_turns: int | None = None,
                          options: dict | None = None) -> list[Trajectory]:
    """The expert's won episodes on the first `games` games of `split`, played as the
    recipe's demonstrations are (`options`: other env options), never trained on (`split`
    is `valid` or `test`)."""
    played = _expert_episodes(policy, cfg, env_id, split, range(games), 0.0, cfg.run.seed,
                              pool, max_turns, options)
    return [d for d in played if not d.failed and d.won]


@dataclass
class ActionAccuracy:
    """Teacher-forced next-action accuracy on demonstrations (`action_accuracy`)."""

    turns: int
    """Expert turns scored (the trainable turns of the demonstrations)."""
    correct: int
    """Turns whose every token is the model's most likely next token."""
    restricted: int
    """Turns scored among the admissible commands only (restricted replies)."""
    off_list: int
    """Expert replies that are not one of the env's admissible commands, with restricted
    replies on (scored freely; a policy restricted to the list could not say them)."""

    @property
    def rate(self) -> float:
        return self.correct / max(self.turns, 1)

    def to_json(self) -> dict:
        return {**asdict(self), "accuracy": self.rate}


@torch.no_grad()
def action_accuracy(policy: Policy, demos: list[Trajectory], restricted: bool,
                    micro_batch_size: int = 1) -> ActionAccuracy:
    """The share of the demonstrations' expert turns that greedy decoding would reproduce
    given the expert's own history: every token of the reply, end-of-turn id included, is the
    argmax of the model's next-token distribution there. A turn recorded with allowed ids
    (restricted replies) is scored among those ids, as restricted decoding chooses."""
    rows = demo_rows(demos)
    was_training = policy.model.training
    policy.model.eval()
    hits: dict[tuple[int, int], bool] = {}
    restricted_turns: set[tuple[int, int]] = set()
    for part in chunks(rows, micro_batch_size):
        mb = on_device(collate(part, policy.pad_token_id), policy.device)
        hidden = decoder_hidden(policy.model, mb.input_ids, mb.attention_mask)   # [B, T, H]
        select = mb.loss_mask[:, 1:] > 0                                        # [B, T-1]
        logits = policy.model.get_output_embeddings()(hidden[:, :-1][select]).float()
        if mb.allowed_ids is not None:
            allowed = mb.allowed_ids[:, 1:][select]                             # [N, K]
            logits = restricted_logits(logits, allowed)
            on_list = (allowed >= 0).any(dim=-1)
        else:
            on_list = torch.zeros(logits.shape[0], dtype=torch.bool)
        hit = logits.argmax(dim=-1) == mb.input_ids[:, 1:][select]              # [N]
        rows_of = torch.arange(mb.num_rows, device=select.device)[:, None].expand_as(select)
        episodes = mb.episode_ids.to(select.device)[rows_of[select]]
        turns = mb.turn_ids[:, 1:][select]
        for ep, turn, ok, listed in zip(episodes.tolist(), turns.tolist(), hit.tolist(),
                                        on_list.tolist()):
            hits[ep, turn] = hits.get((ep, turn), True) and ok
            if listed:
                restricted_turns.add((ep, turn))
    policy.model.train(was_training)
    return ActionAccuracy(turns=len(hits), correct=sum(hits.values()),
                          restricted=len(restricted_turns),
                          off_list=len(hits) - len(restricted_turns) if restricted else 0)


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


def sft_loss(policy: Policy, batch: TrainBatch,
             restricted: bool = False) -> tuple[torch.Tensor, int]:
    """Summed NLL over agent tokens and the token count (so callers can token-mean);
    `restricted`: under the recorded allowed ids where a turn has them (`sft.restricted_loss`)."""
    mask = batch.loss_mask
    logp, _, _ = token_logprobs(policy.model, batch.input_ids, batch.attention_mask,
                                loss_mask=mask,
                                allowed_ids=batch.allowed_ids if restricted else None)
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
        nll, _ = sft_loss(policy, mb, cfg.sft.restricted_loss)
        (nll / max(n, 1)).backward()
        total += float(nll.detach())
    torch.nn.utils.clip_grad_norm_(params, cfg.algo.grad_clip)
    opt.step()
    return total / max(n, 1), n


def train_sft(policy: Policy, rows: list[Row], cfg: TrainConfig,
              out_dir: Path | None = None, epochs: int | None = None) -> SFTResult:
    """Fine-tune on demonstration rows (token-mean NLL over agent tokens) for `epochs`
    (default `sft.epochs`)."""
    model = policy.model
    use_checkpointing(model, cfg.model.gradient_checkpointing)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = adamw(params, lr=cfg.sft.lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(cfg.run.seed)
    losses: list[float] = []
    tokens = 0
    start = time.perf_counter()
    epochs = epochs or cfg.sft.epochs
    steps = epochs * math.ceil(len(rows) / cfg.sft.batch_size)
    with StageProgress("SFT", steps, "steps") as progress:
        for _ in range(epochs):
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
