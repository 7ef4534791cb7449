"""Replies restricted to the env's admissible commands (`rollout.restrict_actions`).

A turn's admissible commands become a token trie: each command is tokenized exactly as a
scripted demonstration is (`tokenizer(text, add_special_tokens=False)`) and followed by the
end-of-turn id. At every decode step the sampler keeps only the logits of the ids that extend
the reply so far along some path of the trie, so each reply is exactly one command. Logits off
the trie are set to `MASKED_LOGIT`, whose probability is exactly 0 in fp32 at any temperature
in use; the recorded logprob of a token is therefore the restricted, tempered distribution's
(`log_softmax` over the allowed ids only).

The sampler records, for every reply token, the ids it allowed at that step (`Sample.allowed`
-> `Turn.allowed_ids`); the trainer masks its teacher-forced logits with those same ids
(`restricted_logits`), so the trainer's logprobs are those of the distribution that was
sampled and the PPO ratio is exactly 1 before the first update. Storing the allowed ids, not
the commands, keeps the trainer independent of tokenizer calls and of the env.

A command whose tokens do not fit `max_new_tokens` with the end-of-turn id is left out: the
reply could not finish. Candidates that tokenize to the same ids are one path.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

MASKED_LOGIT = -1.0e9
"""The logit given to ids off the trie: exp of it underflows to exactly 0 next to any real
logit, and it stays finite, so `p * log p` in the entropy is 0, not NaN (with -inf it is NaN)."""


class CommandTrie:
    """Prefix tree over token-id sequences (commands followed by the end-of-turn id)."""

    def __init__(self, sequences: Sequence[Sequence[int]]) -> None:
        if not sequences:
            raise ValueError("a command trie needs at least one command")
        self._root: dict[int, dict] = {}
        for seq in sequences:
            node = self._root
            for tok in seq:
                node = node.setdefault(tok, {})

    @classmethod
    def of_commands(cls, tokenizer, commands: Sequence[str], eos_id: int,
                    max_tokens: int) -> CommandTrie | None:
        """The trie of `commands` as replies (ids + `eos_id`, at most `max_tokens` ids in all);
        None when no command fits (the turn is then sampled freely)."""
        seqs = []
        for text in dict.fromkeys(c for c in commands if c and c.strip()):
            ids = list(tokenizer(text, add_special_tokens=False)["input_ids"]) + [eos_id]
            if len(ids) <= max_tokens:
                seqs.append(ids)
        return cls(seqs) if seqs else None

    def allowed(self, prefix: Sequence[int]) -> list[int]:
        """The ids that may follow `prefix` (sorted); [] when `prefix` leaves the trie or a
        command has ended."""
        node = self._root
        for tok in prefix:
            node = node.get(tok)
            if node is None:
                return []
        return sorted(node)

    def path(self, ids: Sequence[int]) -> list[list[int]] | None:
        """The allowed ids at each step of the reply `ids` (as `Sample.allowed` records them),
        or None when `ids` is not one of the trie's commands (it leaves the trie or stops
        before a command's end)."""
        node, steps = self._root, []
        for tok in ids:
            steps.append(sorted(node))
            node = node.get(tok)
            if node is None:
                return None
        return steps if not node else None


def mask_logits(logits: Tensor, allowed: Sequence[Sequence[int] | None]) -> Tensor:
    """`logits` [B, V] with every id outside row b's `allowed[b]` set to `MASKED_LOGIT`;
    rows whose `allowed` is None are returned as they are."""
    rows = [b for b, ids in enumerate(allowed) if ids is not None]
    if not rows:
        return logits
    keep = torch.zeros(logits.shape, dtype=torch.bool, device=logits.device)   # [B, V]
    keep[[b for b in range(len(allowed)) if allowed[b] is None]] = True
    for b in rows:
        keep[b, torch.as_tensor(allowed[b], dtype=torch.long, device=logits.device)] = True
    return logits.masked_fill(~keep, MASKED_LOGIT)


def restricted_logits(logits: Tensor, allowed_ids: Tensor) -> Tensor:
    """The trainer's side of `mask_logits`: `logits` [N, V] of N reply tokens, `allowed_ids`
    [N, K] the ids each token's step allowed, padded with -1 (a row of -1 only: the token was
    sampled freely, nothing is masked)."""
    free = (allowed_ids < 0).all(dim=-1)                                     # [N]
    keep = torch.zeros(logits.shape, dtype=torch.bool, device=logits.device)   # [N, V]
    # padding repeats the row's first id (scattering False for it could undo a True)
    index = torch.where(allowed_ids >= 0, allowed_ids, allowed_ids[:, :1].clamp(min=0))
    keep.scatter_(1, index, True)
    keep |= free[:, None]
    return logits.masked_fill(~keep, MASKED_LOGIT)
