"""From trajectories to training tensors, using the exact recorded token ids.

When a trajectory kept its whole history (each turn's prompt extends the previous turn's
prompt + action), the episode becomes ONE row: the last prompt + last action, with the loss
mask on every action's tokens. Otherwise (a finite history window) each turn is its own row.
Either way the ids are the sampled ids; nothing is re-tokenized.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tripod.core.types import Trajectory


@dataclass
class Row:
    """One training sequence."""

    input_ids: list[int]
    loss_mask: list[int]       # 1 on agent tokens
    logprobs: list[float]      # sampling logprobs on agent tokens, 0 elsewhere
    rewards: list[float]       # each turn's reward on its last agent token
    turn_ids: list[int]        # turn index on agent tokens, -1 elsewhere
    group_id: int
    episode_id: int


def _prefix_consistent(traj: Trajectory) -> bool:
    turns = traj.turns
    for prev, cur in zip(turns, turns[1:]):
        head = prev.prompt_ids + prev.action_ids
        if cur.prompt_ids[: len(head)] != head:
            return False
    return True


def trajectory_rows(traj: Trajectory, rewards: list[float]) -> list[Row]:
    """Rows for one trajectory; `rewards[k]` is turn k's reward."""
    if len(rewards) != traj.num_turns:
        raise ValueError(f"{len(rewards)} rewards for {traj.num_turns} turns")
    if not traj.turns:
        return []
    spans = [traj.turns] if _prefix_consistent(traj) else [[t] for t in traj.turns]
    rows = []
    offset = 0
    for span in spans:
        last = span[-1]
        ids = last.prompt_ids + last.action_ids
        mask, lps, rws, tids = ([0] * len(ids), [0.0] * len(ids), [0.0] * len(ids),
                                [-1] * len(ids))
        for j, turn in enumerate(span):
            start = len(turn.prompt_ids)
            k = offset + j
            for i, (tok, lp) in enumerate(zip(turn.action_ids, turn.logprobs)):
                assert ids[start + i] == tok, "recorded ids are inconsistent"
                mask[start + i], lps[start + i], tids[start + i] = int(turn.trainable), lp, k
            if turn.action_ids:
                rws[start + len(turn.action_ids) - 1] = rewards[k]
        offset += len(span)
        rows.append(Row(ids, mask, lps, rws, tids, traj.group_id, traj.episode_id))
    return rows


def collate(rows: list[Row], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad rows into tensors of shape [B, T]."""
    t = max(len(r.input_ids) for r in rows)

    def pad(values: list, fill) -> list:
        return values + [fill] * (t - len(values))

    return {
        "input_ids": torch.tensor([pad(r.input_ids, pad_id) for r in rows]),
        "attention_mask": torch.tensor([pad([1] * len(r.input_ids), 0) for r in rows]),
        "loss_mask": torch.tensor([pad(r.loss_mask, 0) for r in rows], dtype=torch.float32),
        "old_logprobs": torch.tensor([pad(r.logprobs, 0.0) for r in rows]),
        "token_rewards": torch.tensor([pad(r.rewards, 0.0) for r in rows]),
        "turn_ids": torch.tensor([pad(r.turn_ids, -1) for r in rows]),
        "group_ids": torch.tensor([r.group_id for r in rows]),
        "episode_ids": torch.tensor([r.episode_id for r in rows]),
    }


def token_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   temperature: float = 1.0, loss_mask: torch.Tensor | None = None,
                   with_entropy: bool = False, with_hidden: bool = False):
    """Teacher-forced log p(token_t | tokens_<t) at every position t where `loss_mask` is set
    (all positions after the first if None); 0 elsewhere.

    The LM head runs only on the selected positions: the [tokens, vocab] logits of prompt and
    environment tokens would dominate memory and time (vocab 49k) and are never used.
    Returns logprobs [B, T] (aligned with input_ids), entropy [B, T] or None, and the last
    hidden states [B, T, H] or None. Temperature matches the sampler's tempered distribution.
    """
    hidden = model.get_decoder()(input_ids=input_ids,
                                 attention_mask=attention_mask).last_hidden_state  # [B, T, H]
    if loss_mask is None:
        loss_mask = attention_mask.clone()
        loss_mask[:, 0] = 0
    select = loss_mask[:, 1:] > 0                                            # [B, T-1]
    logits = model.get_output_embeddings()(hidden[:, :-1][select]).float()  # [N, V]
    if temperature > 0:
        logits = logits / temperature
    logp_all = torch.log_softmax(logits, dim=-1)                            # [N, V]
    targets = input_ids[:, 1:][select]                                      # [N]
    logp = torch.zeros(input_ids.shape, dtype=logp_all.dtype, device=input_ids.device)
    logp[:, 1:][select] = logp_all.gather(-1, targets[:, None])[:, 0]
    entropy = None
    if with_entropy:
        entropy = torch.zeros_like(logp)
        entropy[:, 1:][select] = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy, (hidden if with_hidden else None)
