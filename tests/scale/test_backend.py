"""The generation seam: the HF sampler implements `GenerationBackend`, and `check_samples`
catches outputs that would break the token-exact invariants."""

from __future__ import annotations

import pytest
import torch

from tripod.policy.backend import ContractError, GenerationBackend, check_samples
from tripod.policy.sampler import HFSampler, RowState, Sample, SamplingParams, sample_turn

PARAMS = SamplingParams(temperature=1.0, max_new_tokens=5)


def _contexts(policy) -> list[list[int]]:
    tok = policy.tokenizer
    return [tok("open the box", add_special_tokens=False)["input_ids"],
            tok("go north then take the key", add_special_tokens=False)["input_ids"]]


def _gens(seed: int = 0) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(seed + i) for i in range(2)]


def test_hf_sampler_is_a_backend_and_keeps_the_contract(tiny_policy_factory):
    policy = tiny_policy_factory(seed=0)
    backend = HFSampler(policy.model, policy.eos_token_ids, policy.pad_token_id)
    assert isinstance(backend, GenerationBackend)
    got = backend.sample([RowState(), RowState()], _contexts(policy), PARAMS, _gens())
    check_samples(got, 2, PARAMS, policy.eos_token_ids)
    direct = sample_turn(policy.model, [RowState(), RowState()], _contexts(policy), PARAMS,
                         _gens(), policy.eos_token_ids, policy.pad_token_id)
    assert [s.ids for s in got] == [s.ids for s in direct]
    assert [s.logprobs for s in got] == [s.logprobs for s in direct]


def test_update_weights_makes_the_backend_sample_from_the_new_weights(tiny_policy_factory):
    a, b = tiny_policy_factory(seed=0), tiny_policy_factory(seed=5)
    backend = HFSampler(a.model, a.eos_token_ids, a.pad_token_id)
    backend.update_weights(b.model.state_dict())
    got = backend.sample([RowState(), RowState()], _contexts(a), PARAMS, _gens())
    want = HFSampler(b.model, b.eos_token_ids, b.pad_token_id).sample(
        [RowState(), RowState()], _contexts(b), PARAMS, _gens())
    assert [s.ids for s in got] == [s.ids for s in want]
    for g, w in zip(got, want):
        assert g.logprobs == pytest.approx(w.logprobs, abs=1e-5)


@pytest.mark.parametrize("bad, why", [
    (Sample([5, 6], [-1.0], ended=False), "logprobs"),
    (Sample([2, 6], [-1.0, -1.0], ended=False), "after an end-of-turn"),
    (Sample([5, 2], [-1.0, -1.0], ended=False), "ended=False"),
    (Sample([5, 6], [-1.0, 0.5], ended=False), "finite"),
    (Sample([5] * 6, [-1.0] * 6, ended=False), "max_new_tokens"),
])
def test_check_samples_rejects_broken_outputs(bad, why):
    check_samples([Sample([5, 2], [-1.0, -0.5], ended=True)], 1, PARAMS, (2,))
    with pytest.raises(ContractError, match=why):
        check_samples([bad], 1, PARAMS, (2,))
