"""PPO's critic: a value head on a copy of the policy's backbone, or on the policy itself.

Values are aligned with tokens like logprobs are: `values[:, t]` is V of the context before
token t (computed from the hidden state at t-1), so GAE over agent tokens pairs each sampled
token with the value of the state it was sampled from.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from transformers import PreTrainedModel

from tripod.train.batch import decoder_hidden


def _backbone(model: PreTrainedModel) -> nn.Module:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.model  # the decoder stack without the LM head (Llama/Qwen/Mistral layout)


class Critic(nn.Module):
    """`copy`: own backbone (deep copy of the policy's at construction). `shared`: reads the
    policy's last hidden states, passed in by the trainer from the policy forward pass."""

    def __init__(self, policy_model: PreTrainedModel, mode: str) -> None:
        super().__init__()
        self.mode = mode
        self.backbone = copy.deepcopy(_backbone(policy_model)) if mode == "copy" else None
        if self.backbone is not None:
            for p in self.backbone.parameters():
                p.requires_grad_(True)
        hidden = policy_model.config.hidden_size
        self.head = nn.Linear(hidden, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                hidden: torch.Tensor | None = None) -> torch.Tensor:
        """Values [B, T] aligned with input_ids (0 at position 0)."""
        if self.backbone is not None:
            hidden = decoder_hidden(self.backbone, input_ids, attention_mask)
        if hidden is None:
            raise ValueError("a shared critic needs the policy's hidden states")
        values = self.head(hidden[:, :-1].float())[..., 0]                  # [B, T-1]
        return nn.functional.pad(values, (1, 0))                            # [B, T]
