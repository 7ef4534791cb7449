"""The KV-arena sampler against plain recomputation: faster rollouts, the same numbers.

Every test drives `sample_turn` directly with the tiny model and checks what it recorded
against a fresh, unbatched, uncached Hugging Face forward pass over the whole context: the
arena (slots, in-place writes, moves, regrowth, shared prefixes, packed prefill and the
padded prefill of models without `sdpa`, rows that stop early) must change speed only, never a token or a logprob.
"""

from __future__ import annotations

import itertools
import random

import pytest
import torch

from tripod.policy import sampler
from tripod.policy.sampler import RowState, SamplingParams, sample_turn


@pytest.fixture(scope="module")
def model(tiny_policy_factory):
    m = tiny_policy_factory().model
    m.eval()
    return m


def _reference_logprobs(model, context: list[int], ids: list[int], temperature: float):
    """log softmax(logits / T) of each sampled id, from one uncached forward pass."""
    full = torch.tensor([context + ids])
    with torch.no_grad():
        logits = model(input_ids=full).logits[0].float()                     # [T, V]
    scaled = logits / temperature if temperature > 0 else logits
    logp = torch.log_softmax(scaled[len(context) - 1:-1], dim=-1)            # [n, V]
    return logp.gather(-1, torch.tensor(ids)[:, None])[:, 0].tolist()


def _turn(model, rows, contexts, params, seeds, eos=(2,)):
    gens = [torch.Generator().manual_seed(s) for s in seeds]
    return sample_turn(model, rows, contexts, params, gens, eos, pad_id=2)


def _assert_exact(model, contexts, samples, temperature):
    for ctx, s in zip(contexts, samples):
        ref = _reference_logprobs(model, ctx, s.ids, temperature)
        assert max(abs(a - b) for a, b in zip(ref, s.logprobs)) < 1e-5


def _random_ids(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(3, 2000) for _ in range(n)]


@pytest.mark.parametrize("pass_tokens", [2048, 16])
def test_multi_turn_rows_leave_join_and_stop_early(model, monkeypatch, pass_tokens):
    """Three turns; rows end at different steps (a tenth of the vocabulary ends a turn), one row
    leaves (a trailing row moves down a slot), one joins, and the arena regrows often. The
    prefill is packed (the tiny model's attention is `sdpa`); with 16 tokens per pass most
    rows' new tokens are split over several passes."""
    monkeypatch.setattr(sampler, "_GROW", 8)
    monkeypatch.setattr(sampler, "_PACKED_TOKENS", pass_tokens)
    assert sampler.packed.supports_packing(model.get_decoder())
    rng = random.Random(0)
    params = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=6)
    eos = tuple(range(0, 49152, 10))
    contexts = [_random_ids(rng, n) for n in (5, 40, 17)]
    rows = [RowState() for _ in contexts]
    lengths, prefilled = [], []
    for turn in range(3):
        samples = _turn(model, rows, contexts, params, [10 * turn + i for i in range(len(rows))],
                        eos)
        _assert_exact(model, contexts, samples, params.temperature)
        prefilled.append(rows[0].arena.stats.prefill_tokens)
        lengths += [len(s.ids) for s in samples]
        contexts = [c + s.ids + _random_ids(rng, 3 + 7 * i) for i, (c, s)
                    in enumerate(zip(contexts, samples))]
        if turn == 0:  # row 0 leaves: row 2 must move into the batch's leading slots
            rows, contexts = rows[1:], contexts[1:]
        if turn == 1:  # a new episode joins
            rows.append(RowState())
            contexts.append(_random_ids(rng, 23))
    assert len(set(lengths)) > 2  # rows did stop at different steps
    assert sorted(r.slot for r in rows) == list(range(len(rows)))
    stats = rows[0].arena.stats
    assert stats.padded_tokens == 0
    per_turn = [b - a for a, b in zip([0] + prefilled, prefilled)]      # tokens each turn
    assert stats.prefill_passes == sum(-(-n // pass_tokens) for n in per_turn)
    assert stats.prefill_passes > 3 or pass_tokens == 2048


def test_rows_that_end_early_play_on_exactly_with_their_own_padding(model):
    """The padding id is none of the end-of-turn ids, so a cache that held padding where a
    row's end-of-turn token belongs would show. Rows end early at different steps (a tenth
    of the vocabulary ends a turn) while their neighbours decode on, then every row plays
    three more turns; every logprob of every turn is checked against the uncached pass."""
    rng = random.Random(9)
    params = SamplingParams(temperature=0.7, max_new_tokens=8)
    eos, pad = tuple(range(0, 49152, 10)), 3
    assert pad not in eos
    contexts = [_random_ids(rng, n) for n in (6, 25, 14, 9)]
    rows = [RowState() for _ in contexts]
    ended_early = 0
    for turn in range(4):
        gens = [torch.Generator().manual_seed(50 + 10 * turn + i) for i in range(len(rows))]
        samples = sample_turn(model, rows, contexts, params, gens, eos, pad_id=pad)
        _assert_exact(model, contexts, samples, params.temperature)
        longest = max(len(s.ids) for s in samples)
        if turn < 3:  # ended before a neighbour stopped, and plays another turn
            ended_early += sum(s.ended and len(s.ids) < longest for s in samples)
        contexts = [c + s.ids + _random_ids(rng, 4) for c, s in zip(contexts, samples)]
    assert ended_early >= 2


def test_models_without_sdpa_prefill_in_padded_passes(tiny_policy_factory):
    """A model whose attention is not `sdpa` cannot take the packed attention: its rows are
    prefilled in right-padded passes, and the numbers are exact all the same."""
    model = tiny_policy_factory().model.eval()
    model.set_attn_implementation("eager")
    assert not sampler.packed.supports_packing(model.get_decoder())
    stats = _two_exact_turns(model, random.Random(5), (6, 30, 11), max_new_tokens=4)
    assert stats.padded_tokens > 0


def _two_exact_turns(model, rng: random.Random, lengths: tuple[int, ...], max_new_tokens: int):
    """Two sampled turns of rows with first prompts of `lengths` (each row then gets a few
    new tokens more than the last), every logprob checked; the arena's counters."""
    params = SamplingParams(temperature=0.7, max_new_tokens=max_new_tokens)
    contexts = [_random_ids(rng, n) for n in lengths]
    rows = [RowState() for _ in contexts]
    for turn in range(2):
        samples = _turn(model, rows, contexts, params, [turn + 10 * i for i in range(len(rows))])
        _assert_exact(model, contexts, samples, params.temperature)
        contexts = [c + s.ids + _random_ids(rng, 2 + 5 * i)
                    for i, (c, s) in enumerate(zip(contexts, samples))]
    return rows[0].arena.stats


def test_lora_wrapped_models_take_the_packed_prefill_exactly(tiny_policy_factory, monkeypatch):
    """LoRA (`model.lora.enabled`) wraps the projections, not the attention modules, so the
    packed prefill still serves it; with adapters that change the outputs (lora_B non-zero)
    every sampled logprob matches the wrapped model's own uncached forward pass."""
    from tripod.core.config import load_config
    from tripod.policy.models import wrap_lora

    monkeypatch.setattr(sampler, "_PACKED_TOKENS", 16)  # rows split over passes
    base = tiny_policy_factory(seed=3).model
    model = wrap_lora(base, load_config(overrides=["model.lora.enabled=true"]).model.lora).eval()
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    ids = torch.tensor([_random_ids(random.Random(1), 12)])
    with torch.no_grad(), model.disable_adapter():
        plain = model(input_ids=ids).logits
    assert (model(input_ids=ids).logits - plain).abs().max() > 1e-3  # the adapters act
    assert sampler.packed.supports_packing(model.get_decoder())
    stats = _two_exact_turns(model, random.Random(7), (9, 33, 20), max_new_tokens=5)
    assert stats.padded_tokens == 0 and stats.prefill_passes > 2


@pytest.mark.parametrize("seed", range(5))
def test_packed_passes_tile_every_row_within_the_budget(seed):
    rng = random.Random(seed)
    lengths = {r: rng.randrange(1, 40) for r in rng.sample(range(20), rng.randrange(1, 12))}
    budget = rng.choice([1, 7, 32, 100])
    passes = sampler._packed_passes(lengths, budget)
    assert all(0 < sum(b - a for _, a, b in p) <= budget for p in passes)
    assert all(sum(b - a for _, a, b in p) == budget for p in passes[:-1])  # no pass cut short
    pieces = [piece for p in passes for piece in p]
    for row, n in lengths.items():  # each row's pieces in order, end to end, once each
        mine = [(a, b) for r, a, b in pieces if r == row]
        assert mine[0][0] == 0 and mine[-1][1] == n
        assert all(b == c for (_, b), (c, _) in zip(mine, mine[1:]))
    assert all(len({r for r, _, _ in p}) == len(p) for p in passes)  # a row once per pass


def test_a_row_sitting_out_keeps_its_cache(model):
    """An episode waiting on its env sits out turns (`rollout.env_overlap_s`): a new row takes
    its leading slot, its cache moves to a trailing one, and when it comes back it prefills
    only its new tokens and samples exactly."""
    rng = random.Random(7)
    params = SamplingParams(temperature=0.7, max_new_tokens=5)
    contexts = [_random_ids(rng, n) for n in (9, 30)]
    rows = [RowState(), RowState()]
    first = _turn(model, rows, contexts, params, [1, 2])
    contexts = [c + x.ids + _random_ids(rng, 4) for c, x in zip(contexts, first)]
    out, held = rows[0], rows[0].length
    newcomer, new_ctx = RowState(), _random_ids(rng, 12)
    second = _turn(model, [rows[1], newcomer], [contexts[1], new_ctx], params, [3, 4])
    _assert_exact(model, [contexts[1], new_ctx], second, params.temperature)
    arena = out.arena
    assert arena is rows[1].arena and out.slot >= 2 and out.length == held
    assert arena.owners[out.slot] is out
    before = arena.stats.prefill_tokens
    back = _turn(model, [out], [contexts[0]], params, [5])
    _assert_exact(model, [contexts[0]], back, params.temperature)
    assert arena.stats.prefill_tokens - before == len(contexts[0]) - held
    assert out.slot == 0 and {rows[1].slot, newcomer.slot} & {0} == set()
    out.release()
    assert arena.owners.count(None) == len(arena.owners) - 2


def test_batched_equals_alone_greedy(model):
    """A row's greedy action and logprobs do not depend on its batch neighbours."""
    rng = random.Random(1)
    contexts = [_random_ids(rng, n) for n in (12, 60, 3, 31)]
    params = SamplingParams(temperature=0.0, max_new_tokens=8)
    together = _turn(model, [RowState() for _ in contexts], contexts, params, [0] * 4)
    for ctx, s in zip(contexts, together):
        alone = _turn(model, [RowState()], [ctx], params, [0])[0]
        assert alone.ids == s.ids
        assert max(abs(a - b) for a, b in zip(alone.logprobs, s.logprobs)) < 1e-5


def test_sampled_episode_does_not_depend_on_its_batch_neighbours(model):
    """Each row draws from its own generator, kept across turns (as the rollout engine does):
    a row that has ended must not draw again while its neighbours decode, or its next turn
    would depend on how long they took. Rows end at different steps here (a tenth of the
    vocabulary ends a turn); every row's three turns must equal the row played alone."""
    rng = random.Random(4)
    params = SamplingParams(temperature=1.0, max_new_tokens=8)
    eos = tuple(range(0, 49152, 10))
    firsts = [_random_ids(rng, n) for n in (7, 33, 15, 22)]
    extra = [[_random_ids(rng, 5) for _ in range(3)] for _ in firsts]

    def play(which: list[int]) -> tuple[list[list[list[int]]], list[int]]:
        gens = [torch.Generator().manual_seed(100 + i) for i in which]
        rows, contexts = [RowState() for _ in which], [list(firsts[i]) for i in which]
        ids, lengths = [[] for _ in which], []
        for turn in range(3):
            samples = sample_turn(model, rows, contexts, params, gens, eos, pad_id=2)
            for k, (i, s) in enumerate(zip(which, samples)):
                ids[k].append(s.ids)
                contexts[k] = contexts[k] + s.ids + extra[i][turn]
                lengths.append(len(s.ids))
        return ids, lengths

    together, lengths = play([0, 1, 2, 3])
    assert len(set(lengths)) > 2  # rows ended at different steps
    for i in range(4):
        assert play([i])[0][0] == together[i]


def test_identical_first_prompts_are_prefilled_once(model):
    """Prefix sharing: the members of a group start from one prompt, computed once."""
    rng = random.Random(2)
    shared, other = _random_ids(rng, 50), _random_ids(rng, 9)
    contexts = [shared, other, list(shared), list(shared)]
    rows = [RowState() for _ in contexts]
    params = SamplingParams(temperature=1.0, max_new_tokens=5)
    samples = _turn(model, rows, contexts, params, [1, 2, 3, 4])
    stats = rows[0].arena.stats
    assert stats.prefill_tokens == 50 + 9 and stats.shared_tokens == 2 * 50
    _assert_exact(model, contexts, samples, 1.0)
    # The copies are real caches: the episodes continue exactly after diverging.
    contexts = [c + s.ids + _random_ids(rng, 4) for c, s in zip(contexts, samples)]
    _assert_exact(model, contexts, _turn(model, rows, contexts, params, [5, 6, 7, 8]), 1.0)


def test_tiny_top_p_draws_the_mode_but_records_tempered_logprobs(model):
    """Nucleus filtering changes the draw, not the recorded (tempered, unfiltered) logprob."""
    rng = random.Random(3)
    contexts = [_random_ids(rng, 20), _random_ids(rng, 35)]
    greedy = _turn(model, [RowState(), RowState()], contexts,
                   SamplingParams(temperature=0.0, max_new_tokens=6), [0, 0])
    nucleus = _turn(model, [RowState(), RowState()], contexts,
                    SamplingParams(temperature=0.7, top_p=1e-6, max_new_tokens=6), [4, 5])
    assert [s.ids for s in nucleus] == [s.ids for s in greedy]
    _assert_exact(model, contexts, nucleus, 0.7)
    assert nucleus[0].logprobs != greedy[0].logprobs  # tempered, not the T=1 values


def _chunk_cost(lengths, chunks):
    return sum(len(c) * max(lengths[i] for i in c) + sampler._FORWARD_COST for c in chunks)


def _partitions(items):
    if not items:
        yield []
        return
    head, rest = items[0], items[1:]
    for part in _partitions(rest):
        for k in range(len(part)):
            yield part[:k] + [[head, *part[k]]] + part[k + 1:]
        yield [[head], *part]


@pytest.mark.parametrize("seed", range(5))
def test_prefill_chunks_are_optimal(seed):
    """The dynamic programme finds the cheapest grouping among all set partitions."""
    rng = random.Random(seed)
    lengths = [rng.choice([1, 3, 20, 45, 60, 300]) for _ in range(6)]
    chunks = sampler._prefill_chunks(lengths)
    assert sorted(itertools.chain(*chunks)) == list(range(6))
    best = min(_chunk_cost(lengths, p) for p in _partitions(list(range(6))))
    assert _chunk_cost(lengths, chunks) == best


def test_arena_regrow_keeps_contents_and_holds_one_extra_buffer(monkeypatch):
    """Growing the KV arena keeps every stored position and, at its worst moment, holds the
    larger of the old and new arenas plus one layer's buffer (not the old arena plus a whole
    new one: at SmolLM2's size that was ~0.4 GB on top of the rollout's peak)."""
    import weakref

    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(num_hidden_layers=8, hidden_size=16, vocab_size=32,
                                         num_attention_heads=2, num_key_value_heads=1,
                                         intermediate_size=32))
    live = {"bytes": 0, "peak": 0}
    zeros = torch.zeros

    def tracked(*args, **kwargs):
        t = zeros(*args, **kwargs)
        n = t.numel() * t.element_size()
        live["bytes"] += n
        live["peak"] = max(live["peak"], live["bytes"])
        weakref.finalize(t, lambda: live.__setitem__("bytes", live["bytes"] - n))
        return t

    monkeypatch.setattr(sampler.torch, "zeros", tracked)
    arena = sampler.KVArena(model, slots=3, capacity=8)
    for buf in arena.keys + arena.values:
        buf.copy_(torch.randn(buf.shape))
    del buf  # the test must not hold an old buffer itself
    before = [b.clone() for b in arena.keys + arena.values]
    old_bytes, old_capacity = live["bytes"], arena.capacity
    live["peak"] = live["bytes"]
    arena.reserve(3, arena.capacity + 1)                   # a regrow by the growth factor
    assert arena.capacity > old_capacity
    new_bytes = sum(b.numel() * b.element_size() for b in arena.keys + arena.values)
    assert live["bytes"] == new_bytes                       # the old buffers were freed
    largest = max(old_bytes, new_bytes)
    assert live["peak"] <= largest + largest // (2 * arena.layers)
    arena.reserve(4, arena.capacity)                        # a new slot
    for old, new in zip(before, arena.keys + arena.values):
        assert torch.equal(new[:3, :, :old_capacity], old)  # stored positions kept
        assert not new[3:].any() and not new[:, :, old_capacity:].any()  # the rest zero
