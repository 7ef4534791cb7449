"""The generation seam: what a sampler behind the rollout engine must do (token ids in,
sampled ids and their logprobs out).

The rollout engine owns prompts, chat templates, action parsing and envs; a backend only
extends token contexts. Today's backend is the Hugging Face sampler over a KV arena
(`policy.sampler.HFSampler`). Another engine (vLLM, SGLang) would implement the same
protocol; none ships, because none could be run here (docs/scale.md, "Generation backends").

The contract (`check_samples` verifies the parts that can be checked from the output):
1. The ids returned are the ids the trainer trains on, verbatim: never text to be
   re-tokenized, never ids after a detokenize/retokenize round trip.
2. `logprobs[i]` is log p(ids[i] | context, ids[:i]) under the tempered fp32 distribution
   `log_softmax(logits / temperature)` of the weights being trained (before any top-p
   filtering, as the trainer recomputes it). The trainer's teacher-forced logprobs must
   match them to ~1e-4 in fp32 (more in bf16: docs/scale.md gives the measured gap).
3. Sampling stops at the first end-of-turn id (kept as the last id, `ended=True`) or after
   `max_new_tokens` ids (`ended=False`); nothing follows an end-of-turn id.
4. An episode's sample depends only on its context, its generator and the weights, not on
   its batch neighbours, so results do not change with the batch size or the number of
   processes playing the episodes.
5. After an update, the backend samples from the new weights (`update_weights`) before the
   next rollout: PPO's ratio uses the recorded logprobs as the behaviour policy's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

import torch

from tripod.policy.sampler import RowState, Sample, SamplingParams


@runtime_checkable
class GenerationBackend(Protocol):
    """Samples one action per episode from token contexts."""

    def sample(self, states: list[RowState], contexts: list[list[int]],
               params: SamplingParams, generators: list[torch.Generator]) -> list[Sample]:
        """One reply per row. `contexts[i]` is row i's whole context so far (prompt, earlier
        replies and observations); `states[i]` is the row's handle across turns (a backend
        may keep the row's cache under it; a fresh `RowState()` has nothing cached; a row
        not passed to a call keeps its cache for a later one, until `RowState.release`);
        `generators[i]` is the row's own random stream."""
        ...

    def update_weights(self, state: Mapping[str, torch.Tensor]) -> None:
        """Sample from these weights from now on (names as in the trained model's
        `state_dict`)."""
        ...


class ContractError(AssertionError):
    """A backend returned samples that break the generation contract."""


def check_samples(samples: list[Sample], n_rows: int, params: SamplingParams,
                  eos_ids: tuple[int, ...]) -> None:
    """Raise `ContractError` if samples break points 1-3 of the contract (shape and stop
    rules, finite non-positive logprobs); the logprob values themselves are checked against
    the trainer by the invariant tests and `benchmarks/gpu/check.py`."""
    if len(samples) != n_rows:
        raise ContractError(f"{len(samples)} samples for {n_rows} rows")
    eos = set(eos_ids)
    for i, s in enumerate(samples):
        if not 1 <= len(s.ids) <= params.max_new_tokens:
            raise ContractError(f"row {i}: {len(s.ids)} ids (max_new_tokens "
                                f"{params.max_new_tokens})")
        if len(s.logprobs) != len(s.ids):
            raise ContractError(f"row {i}: {len(s.ids)} ids but {len(s.logprobs)} logprobs")
        if any(not math.isfinite(lp) or lp > 1e-6 for lp in s.logprobs):
            raise ContractError(f"row {i}: logprobs must be finite and <= 0")
        if any(t in eos for t in s.ids[:-1]):
            raise ContractError(f"row {i}: ids continue after an end-of-turn id")
        if s.ended != (s.ids[-1] in eos):
            raise ContractError(f"row {i}: ended={s.ended} but the last id is "
                                f"{'' if s.ids[-1] in eos else 'not '}an end-of-turn id")
