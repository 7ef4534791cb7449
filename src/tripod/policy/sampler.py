"""Batched sampling over a preallocated KV arena (the engine under `policy.rollout`).

Why this shape (profile in docs/performance.md): on a small CPU model the rollout
is bound by host overhead and memory traffic, not arithmetic. So

- every episode owns one *slot* of a `KVArena`: per layer one preallocated [S, H, L, D] key
  and value buffer where cache index == position id. A turn writes its new keys in place;
  nothing is concatenated, padded or split per step or per turn (growing per-row caches by
  `torch.cat` copied the whole cache at every decode step);
- a turn first *prefills* the tokens each episode has not seen yet (its first prompt, or the
  last action's final token plus the template delta and observation): all rows' new tokens
  laid end to end in one packed sequence per pass (`_PackedPrefill`), so the linear layers
  run on hundreds of tokens at once with no padding, and attention runs row by row over the
  row's slot. (A later turn brings 25-120 new tokens per row; run in padded passes of rows
  of similar length, matmuls of that few rows ran at a third of the machine's peak and each
  pass paid ~0.25 s of fixed cost. Models whose attention is not `sdpa` keep those padded
  passes, `_prefill_chunks`.);
- episodes whose first prompt is identical (the members of a group play the same game) are
  prefilled once and the keys copied to the others (prefix sharing);
- then all rows *decode* together: one forward per token for the whole batch, a 4D mask
  hiding each row's positions beyond its own length, explicit position ids keeping every
  row's positions those of its unpadded sequence.

The model is the plain Hugging Face module (LoRA-wrapped models work the same): the arena is
handed to it as a `Cache` whose `update` writes into the slots, and the mask is passed ready
made (transformers returns 4D masks as given). Models whose attention is not plain causal
(sliding windows, hybrid layers) are refused.

Logprobs are recorded from the tempered fp32 distribution `log_softmax(logits / T)`, the same
quantity the trainer recomputes with a teacher-forced forward pass. Nucleus (top-p) filtering
changes which token is drawn but not the recorded logprob (as in verl).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel
from transformers.cache_utils import Cache

from tripod.core.config import SamplingSection
from tripod.policy import packed
from tripod.policy.restrict import CommandTrie, mask_logits

_GROW = 256
"""Arena lengths grow in steps of this many positions (a regrow copies every slot)."""


SamplingParams = SamplingSection
"""How actions are sampled: the recipe's `rollout.train` / `rollout.eval` section itself."""


@dataclass(eq=False)
class RowState:
    """One episode's place in a `KVArena`: which slot, and how many positions hold its tokens.

    A fresh `RowState()` has nothing cached; `sample_turn` gives it a slot. Identity matters
    (eq=False): the arena tells the rows of a batch from the rows sitting it out.
    """

    length: int = 0
    arena: KVArena | None = None
    slot: int = -1

    def release(self) -> None:
        """Give the slot back and forget the arena. An arena and its rows refer to each
        other, so without this an arena no episode uses any more (its buffers: 46 KB per
        position per row for SmolLM2) stays allocated until Python's cyclic collector runs."""
        if self.arena is not None and self.arena.owners[self.slot] is self:
            self.arena.owners[self.slot] = None
        self.arena, self.slot, self.length = None, -1, 0


@dataclass
class Sample:
    """One row's sampled action."""

    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    ended: bool = False
    """True when the end-of-turn token was sampled."""
    trainable: bool = True
    """False for scripted turns that must not be imitated (e.g. injected random actions)."""
    allowed: list[list[int]] | None = None
    """With restricted replies (`policy/restrict.py`): per sampled id, the ids the step
    allowed (the trainer masks its logits with them); None when sampled freely."""


@dataclass
class ArenaStats:
    """What an arena's forward passes computed (for benchmarks and FLOP counts)."""

    prefill_tokens: int = 0
    """Real tokens run through prefill passes."""
    padded_tokens: int = 0
    """Padding positions run along with them (wasted arithmetic)."""
    shared_tokens: int = 0
    """Tokens copied from an identical first prompt instead of being computed."""
    prefill_passes: int = 0
    decode_steps: int = 0
    """Batched decode forwards (each runs every row of the batch, finished ones too)."""
    decode_rows: int = 0
    """Rows summed over decode forwards."""


class KVArena:
    """Per-layer key / value buffers [slots, kv_heads, capacity, head_dim], zero-initialised.

    Zeros matter: masked positions still enter the attention's dot products, and garbage
    memory could hold NaN, which a mask does not remove (NaN * 0 = NaN).
    """

    def __init__(self, model: PreTrainedModel, slots: int, capacity: int) -> None:
        cfg = model.config.get_text_config()
        _check_plain_causal(cfg)
        self.layers = cfg.num_hidden_layers
        self.heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        param = next(model.parameters())
        self.dtype, self.device = param.dtype, param.device
        self.owners: list[RowState | None] = []
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.capacity = 0
        self.stats = ArenaStats()
        self.reserve(slots, capacity)

    def reserve(self, slots: int, capacity: int) -> None:
        """Make room for `slots` rows of `capacity` positions (copying what is stored)."""
        slots = max(slots, len(self.owners))
        if capacity > self.capacity:  # grow geometrically: each regrow copies every slot
            capacity = -(-max(capacity, self.capacity * 5 // 4) // _GROW) * _GROW
        capacity = max(capacity, self.capacity)
        if slots == len(self.owners) and capacity == self.capacity:
            return
        shape = (slots, self.heads, capacity, self.head_dim)
        old_s, old_c = len(self.owners), self.capacity
        for buffers in (self.keys, self.values):
            if not buffers:
                buffers.extend(torch.zeros(shape, dtype=self.dtype, device=self.device)
                               for _ in range(self.layers))
                continue
            # One buffer at a time: the old one is freed before the next is allocated, so a
            # regrow holds the arena plus one layer's buffer, not the arena twice over.
            for i, old in enumerate(buffers):
                new = torch.zeros(shape, dtype=self.dtype, device=self.device)
                new[:old_s, :, :old_c] = old
                buffers[i] = new
            del old, new
        self.owners += [None] * (slots - old_s)
        self.capacity = capacity

    def assign(self, rows: list[RowState]) -> None:
        """Give the batch's rows the slots 0..len(rows)-1, keeping every cache.

        Keeping the batch in the leading slots lets decoding read the arena as a view. Rows
        not passed keep their caches (an episode waiting on its env sits out a turn): one in
        a leading slot the batch needs is moved to a trailing slot. Slots whose rows were
        released (`RowState.release`) are reused.
        """
        for s, owner in enumerate(self.owners):
            if owner is not None and (owner.arena is not self or owner.slot != s):
                self.owners[s] = None
        live = {id(r) for r in rows}
        idle = sum(o is not None and id(o) not in live for o in self.owners)
        self.reserve(len(rows) + idle, 1)
        n = len(rows)
        for row in rows:
            if row.arena is self and row.slot < n:
                continue
            dst = next(s for s in range(n) if self.owners[s] is None
                       or id(self.owners[s]) not in live)
            if self.owners[dst] is not None:  # a row sitting out: to a free trailing slot
                self._move(self.owners[dst], self._free_trailing(n))
            if row.arena is self:  # move a row from a trailing slot into the batch's range
                self._move(row, dst)
            else:  # a new row (or one from another arena): nothing cached yet
                row.length = 0
                row.arena, row.slot = self, dst
                self.owners[dst] = row

    def _free_trailing(self, n: int) -> int:
        free = [s for s in range(n, len(self.owners)) if self.owners[s] is None]
        if not free:
            self.reserve(len(self.owners) + 1, 1)
            return len(self.owners) - 1
        return free[0]

    def _move(self, row: RowState, dst: int) -> None:
        """Copy a row's cache to the free slot `dst` and free its old slot."""
        self.copy(row.slot, dst, row.length)
        self.owners[row.slot] = None
        row.slot = dst
        self.owners[dst] = row

    def copy(self, src: int, dst: int, length: int) -> None:
        for buffers in (self.keys, self.values):
            for buf in buffers:
                buf[dst, :, :length] = buf[src, :, :length]

    def cache(self, slots: torch.Tensor, positions: torch.Tensor, kv_len: int) -> _ArenaCache:
        return _ArenaCache(self, slots, positions, kv_len)


class _ArenaCache(Cache):
    """One forward pass's view of the arena, in the `Cache` protocol the model calls.

    `update` writes the new keys of row b, query q at position positions[b, q] of slot
    slots[b], and returns the first `kv_len` positions of those slots (a view when the slots
    are 0..B-1, a gathered copy otherwise).
    """

    def __init__(self, arena: KVArena, slots: torch.Tensor, positions: torch.Tensor,
                 kv_len: int) -> None:
        super().__init__(layers=[])
        self.arena, self.slots, self.positions, self.kv_len = arena, slots, positions, kv_len
        b = slots.numel()
        self.leading = bool((slots == torch.arange(b, device=slots.device)).all())

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int,
               *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        out = []
        for buf, new in ((self.arena.keys[layer_idx], key_states),
                         (self.arena.values[layer_idx], value_states)):
            # new [B, H, Q, D] -> buf[slot_b, :, positions[b, q]] (advanced dims first)
            buf[self.slots[:, None], :, self.positions] = new.transpose(1, 2)
            if self.leading:
                out.append(buf[: self.slots.numel(), :, : self.kv_len])     # [B, H, K, D]
            else:
                out.append(buf[:, :, : self.kv_len].index_select(0, self.slots))
        return out[0], out[1]


def _check_plain_causal(cfg) -> None:
    """The arena's mask is full causal attention; refuse models that attend otherwise."""
    kinds = set(getattr(cfg, "layer_types", None) or ["full_attention"])
    windowed = getattr(cfg, "use_sliding_window", bool(getattr(cfg, "sliding_window", None)))
    if kinds != {"full_attention"} or windowed:
        raise NotImplementedError(
            f"the rollout sampler supports full causal attention only (layer types {kinds}, "
            f"sliding window {windowed})")


def _attention_mask(positions: torch.Tensor, kv_len: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive mask [B, 1, Q, K]: query at position p sees cache positions 0..p of its row."""
    keys = torch.arange(kv_len, device=positions.device)
    allowed = keys[None, None, :] <= positions[:, :, None]                # [B, Q, K]
    mask = torch.zeros(allowed.shape, dtype=dtype, device=positions.device)
    return mask.masked_fill_(~allowed, torch.finfo(dtype).min)[:, None]


@torch.no_grad()
def _forward(model: PreTrainedModel, arena: KVArena, slots: list[int], ids: torch.Tensor,
             positions: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    """Run ids [B, Q] at positions [B, Q] in the given slots; fp32 logits [B, V] at `last` [B]."""
    device = arena.device
    slot_t = torch.tensor(slots, device=device)
    kv_len = int(positions.max()) + 1
    arena.reserve(0, kv_len)
    cache = arena.cache(slot_t, positions, kv_len)
    hidden = model.get_decoder()(input_ids=ids, position_ids=positions, past_key_values=cache,
                                 attention_mask=_attention_mask(positions, kv_len, arena.dtype),
                                 use_cache=True).last_hidden_state             # [B, Q, H]
    picked = hidden[torch.arange(len(slots), device=device), last]            # [B, H]
    return model.get_output_embeddings()(picked).float()                     # [B, V]


# -- one turn: prefill what each row has not seen, then decode all rows together ----------------
def sample_turn(model: PreTrainedModel, rows: list[RowState], contexts: list[list[int]],
                params: SamplingParams, generators: list[torch.Generator],
                eos_ids: tuple[int, ...], pad_id: int,
                arena: KVArena | None = None,
                restrict: list[CommandTrie | None] | None = None) -> list[Sample]:
    """Sample one action per row. `contexts[i]` is row i's whole context so far; the row's
    cache is extended with the part it does not hold yet, then every row decodes at once.
    `restrict[i]`: row i's reply is one path of this trie (None: sampled freely).

    Afterwards each row's cache holds every sampled token except the last one, which comes
    back as the first new token of its next context. Rows not passed keep their caches
    (moved out of the batch's slots if need be) until `RowState.release`. `arena` is the
    arena to use when no row passed holds one yet (the arena of rows sitting the turn out);
    by default the first row's, else a new one.
    """
    arena = next((r.arena for r in rows if r.arena is not None), arena)
    if arena is None:
        arena = KVArena(model, len(rows), max(map(len, contexts)) + params.max_new_tokens)
    arena.assign(rows)
    order = sorted(range(len(rows)), key=lambda i: rows[i].slot)  # slot order: 0..n-1
    rows = [rows[i] for i in order]
    new_ids = [contexts[i][rows[k].length:] for k, i in enumerate(order)]
    if not all(new_ids):
        raise ValueError("every row needs at least one token it has not seen")
    logits = _prefill(model, arena, rows, new_ids, pad_id)                    # [B, V]
    tries = [restrict[i] for i in order] if restrict is not None else [None] * len(rows)
    samples = _decode(model, arena, rows, logits, params,
                      [generators[i] for i in order], eos_ids, pad_id, tries)
    result: dict[int, Sample] = dict(zip(order, samples))
    return [result[i] for i in range(len(rows))]


def _prefill(model: PreTrainedModel, arena: KVArena, rows: list[RowState],
             new_ids: list[list[int]], pad_id: int) -> torch.Tensor:
    """Feed each row its new ids; returns fp32 logits [B, V] after each row's last token.

    Rows that start from the same first prompt are computed once (prefix sharing): the
    first of them is run, the others get a copy of its keys, values and logits.
    """
    first_of: dict[tuple[int, ...], int] = {}
    source = list(range(len(rows)))
    for i, (row, ids) in enumerate(zip(rows, new_ids)):
        if row.length == 0:
            source[i] = first_of.setdefault(tuple(ids), i)
    todo = [i for i in range(len(rows)) if source[i] == i]
    logits: list[torch.Tensor | None] = [None] * len(rows)
    if packed.supports_packing(model.get_decoder()):
        _prefill_packed(model, arena, rows, new_ids, todo, logits)
    else:
        _prefill_padded(model, arena, rows, new_ids, todo, logits, pad_id)
    for i, src in enumerate(source):
        if src != i:
            arena.copy(rows[src].slot, rows[i].slot, rows[src].length)
            rows[i].length, logits[i] = rows[src].length, logits[src]
            arena.stats.shared_tokens += rows[i].length
    return torch.stack(logits)                                                 # [B, V]


class _PackedPrefill:
    """One packed prefill pass: pieces of rows' new tokens laid end to end in [1, S].

    `pieces[k] = (slot, start, n)`: the k-th piece is n tokens of the row in `slot`, at
    positions start..start+n-1 (the row holds positions 0..start-1 already). The model runs
    the packed sequence with those position ids; in every layer the attention
    (`packed.attention` hands it here) writes the pieces' keys and values into their slots,
    then attends each piece over its slot's positions 0..start+n-1, causally over its own
    tokens. A row's tokens may be split over consecutive passes: a later piece reads what
    the earlier one wrote.
    """

    def __init__(self, arena: KVArena, pieces: list[tuple[int, int, int]]) -> None:
        self.arena, self.pieces = arena, pieces
        device = arena.device
        self.slots = torch.tensor([slot for slot, _, n in pieces for _ in range(n)],
                                  device=device)                                    # [S]
        self.positions = torch.cat([torch.arange(a, a + n) for _, a, n in pieces]).to(device)
        self.masks = [None if start == 0 else
                      packed._prefix_causal_mask(start, n, arena.dtype, device)   # [n, start+n]
                      for _, start, n in pieces]
        self.expand_kv = device.type == "cuda"

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               scaling: float | None, module) -> torch.Tensor:
        """query [1, Hq, S, D], key / value [1, Hkv, S, D] (the pieces' own, after rotary)
        -> output [1, S, Hq, D]."""
        layer = module.layer_idx
        keys, values = self.arena.keys[layer], self.arena.values[layer]
        for buf, new in ((keys, key), (values, value)):
            buf[self.slots, :, self.positions] = new[0].transpose(0, 1)          # [S, H, D]
        gqa = query.shape[1] != keys.shape[1]
        out, at = [], 0
        for (slot, start, n), mask in zip(self.pieces, self.masks):
            q = query[:, :, at:at + n]
            k, v = keys[slot:slot + 1, :, :start + n], values[slot:slot + 1, :, :start + n]
            if mask is None:
                out.append(torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, is_causal=True, scale=scaling, enable_gqa=gqa))
            else:
                out.append(packed.masked_attention(q, k, v, mask, scaling, self.expand_kv))
            at += n
        return torch.cat(out, dim=2).transpose(1, 2)


def _packed_passes(lengths: dict[int, int], budget: int) -> list[list[tuple[int, int, int]]]:
    """Cut rows' new tokens into passes of at most `budget` tokens: each pass a list of
    (row, from, to) pieces; a row longer than what is left of a pass continues in the next."""
    passes: list[list[tuple[int, int, int]]] = [[]]
    room = budget
    for row, n in lengths.items():
        at = 0
        while at < n:
            if room == 0:
                passes.append([])
                room = budget
            take = min(room, n - at)
            passes[-1].append((row, at, at + take))
            at, room = at + take, room - take
    return [p for p in passes if p]


@torch.no_grad()
def _prefill_packed(model: PreTrainedModel, arena: KVArena, rows: list[RowState],
                    new_ids: list[list[int]], todo: list[int],
                    logits: list[torch.Tensor | None]) -> None:
    """Prefill the rows `todo` in packed passes (`_PackedPrefill`); sets their logits."""
    device = arena.device
    for pieces in _packed_passes({i: len(new_ids[i]) for i in todo}, _PACKED_TOKENS):
        arena.reserve(0, max(rows[i].length + b - a for i, a, b in pieces))
        packing = _PackedPrefill(arena, [(rows[i].slot, rows[i].length, b - a)
                                         for i, a, b in pieces])
        ids = torch.tensor([t for i, a, b in pieces for t in new_ids[i][a:b]], device=device)
        hidden = model.get_decoder()(
            input_ids=ids[None], position_ids=packing.positions[None],
            # a 4D mask passes through transformers untouched; the packed attention ignores it
            attention_mask=torch.zeros(1, 1, 1, 1, dtype=arena.dtype, device=device),
            use_cache=False, **{packed.KWARG: packing}).last_hidden_state[0]     # [S, H]
        ends = torch.tensor(list(itertools.accumulate(b - a for _, a, b in pieces)),
                            device=device) - 1
        done = [k for k, (i, _, b) in enumerate(pieces) if b == len(new_ids[i])]
        out = model.get_output_embeddings()(hidden[ends[done]]).float()         # [done, V]
        for i, a, b in pieces:
            rows[i].length += b - a
        for k, o in zip(done, out):
            logits[pieces[k][0]] = o
        arena.stats.prefill_tokens += len(ids)
        arena.stats.prefill_passes += 1


@torch.no_grad()
def _prefill_padded(model: PreTrainedModel, arena: KVArena, rows: list[RowState],
                    new_ids: list[list[int]], todo: list[int],
                    logits: list[torch.Tensor | None], pad_id: int) -> None:
    """Prefill the rows `todo` in right-padded passes of rows of similar length (for models
    whose attention is not `sdpa`); sets their logits."""
    for chunk in _prefill_chunks([len(new_ids[i]) for i in todo]):
        idx = [todo[c] for c in chunk]
        width = max(len(new_ids[i]) for i in idx)
        ids = torch.full((len(idx), width), pad_id, dtype=torch.long)
        for b, i in enumerate(idx):  # right padding: pad queries come after the real ones
            ids[b, : len(new_ids[i])] = torch.tensor(new_ids[i])
        starts = torch.tensor([rows[i].length for i in idx])
        positions = starts[:, None] + torch.arange(width)[None]                  # [c, Q]
        last = torch.tensor([len(new_ids[i]) - 1 for i in idx])
        out = _forward(model, arena, [rows[i].slot for i in idx], ids.to(arena.device),
                       positions.to(arena.device), last.to(arena.device))
        for b, i in enumerate(idx):
            logits[i] = out[b]
            rows[i].length += len(new_ids[i])
        real = sum(len(new_ids[i]) for i in idx)
        arena.stats.prefill_tokens += real
        arena.stats.padded_tokens += len(idx) * width - real
        arena.stats.prefill_passes += 1


_FORWARD_COST = 32
"""One forward pass's fixed cost in prefill tokens (per-layer host overhead, weights read
once): the chunking weighs padding against more passes with it."""
_MAX_CHUNK_TOKENS = 4096
"""Tokens (padding included) per padded prefill pass at most (bounds activation memory)."""
_PACKED_TOKENS = 2048
"""Tokens per packed prefill pass at most (`benchmarks/prefill_passes.py`, 16 rows, SmolLM2,
3 interleaved rounds, medians): a 5.3k-token first turn 8.9 s with 1,024, 9.7 s with 2,048,
11.1 s with 4,096 (its MLP intermediates, 25 MB each, made the elementwise ops a large share
of the pass); later turns of 1.1-1.3k tokens 2.27 / 2.15 / 2.27 s. Padded passes: 11.0 s and
2.92 s."""


def _prefill_chunks(lengths: list[int]) -> list[list[int]]:
    """Group rows (indices into `lengths`) into passes that waste little on padding.

    Rows sorted by length are cut into contiguous runs minimising padded tokens plus
    `_FORWARD_COST` per run: an exact O(n^2) dynamic programme over n <= batch rows.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    n = len(order)
    best = [0.0] + [float("inf")] * n     # best[j]: cost of the first j sorted rows
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        width = lengths[order[j - 1]]    # the longest row of any run ending at j
        for i in range(j - 1, -1, -1):
            if (j - i) * width > _MAX_CHUNK_TOKENS and i < j - 1:
                break
            cost = best[i] + (j - i) * width + _FORWARD_COST
            if cost < best[j]:
                best[j], cut[j] = cost, i
    chunks, j = [], n
    while j > 0:
        chunks.append(order[cut[j]:j])
        j = cut[j]
    return chunks[::-1]


def _decode(model: PreTrainedModel, arena: KVArena, rows: list[RowState],
            logits: torch.Tensor, params: SamplingParams, generators: list[torch.Generator],
            eos_ids: tuple[int, ...], pad_id: int,
            tries: list[CommandTrie | None]) -> list[Sample]:
    """Sample up to `max_new_tokens` per row, one forward per token for all rows still going.

    A row that has sampled an end-of-turn token draws nothing more from its generator, so its
    next turn does not depend on how long its neighbours decode. Rows are in slot order
    (0..n-1), so each step runs the leading rows up to the last one still going (the arena
    read stays a view); an ended row among them feeds padding at its next free position
    (never advancing), its cache keeps only real tokens and its mask hides the padding.
    """
    samples = [Sample(allowed=None if t is None else []) for t in tries]
    active = [True] * len(rows)
    eos = set(eos_ids)
    for step in range(params.max_new_tokens):
        live = [i for i, act in enumerate(active) if act]
        allowed = [None if tries[i] is None else tries[i].allowed(samples[i].ids) for i in live]
        tokens, logps = _draw(mask_logits(logits[live], allowed), params,
                              [generators[i] for i in live])
        fed = [pad_id] * (live[-1] + 1)
        for i, tok, lp, ids in zip(live, tokens.tolist(), logps.tolist(), allowed):
            samples[i].ids.append(tok)
            samples[i].logprobs.append(lp)
            if ids is not None:
                samples[i].allowed.append(ids)
            if tok in eos:
                samples[i].ended, active[i] = True, False
            else:
                fed[i] = tok
        if not any(active) or step == params.max_new_tokens - 1:
            break
        n = max(i for i, act in enumerate(active) if act) + 1      # leading rows to run
        fed = fed[:n]
        positions = torch.tensor([[r.length] for r in rows[:n]], device=arena.device)  # [n, 1]
        logits = _forward(model, arena, [r.slot for r in rows[:n]],                # [n, V]
                          torch.tensor(fed, device=arena.device)[:, None], positions,
                          torch.zeros(n, dtype=torch.long, device=arena.device))
        for r, act in zip(rows[:n], active):
            r.length += act
        arena.stats.decode_steps += 1
        arena.stats.decode_rows += n
    return samples


def _draw(logits: torch.Tensor, params: SamplingParams,
          generators: list[torch.Generator]) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row; returns (tokens [B], logprobs [B])."""
    if params.greedy:
        logp = torch.log_softmax(logits, dim=-1)                            # [B, V]
        tokens = logp.argmax(dim=-1)
        return tokens, logp.gather(-1, tokens[:, None])[:, 0]
    logp = torch.log_softmax(logits / params.temperature, dim=-1)           # [B, V]
    probs = logp.exp()
    if params.top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        drop = sorted_p.cumsum(-1) - sorted_p > params.top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    # Inverse-CDF sampling with one generator per row: an episode's samples do not depend
    # on its batch neighbours (and it is much faster than torch.multinomial on CPU).
    cdf = probs.cumsum(dim=-1)                                               # [B, V]
    # The per-row generators live on the CPU (seeded, device-independent draws); the uniform
    # numbers then move to the logits' device.
    u = torch.cat([torch.rand(1, generator=g, dtype=cdf.dtype) for g in generators]).to(cdf.device)
    # right=True: the first id whose cumulative mass exceeds the draw, so an id of zero mass
    # (masked by a restriction or by top-p) is never taken, even for a draw of exactly 0
    tokens = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True)[:, 0]
    tokens = tokens.clamp(max=probs.shape[-1] - 1)
    return tokens, logp.gather(-1, tokens[:, None])[:, 0]


class HFSampler:
    """This module's sampler as a `tripod.policy.backend.GenerationBackend`: a Hugging Face
    model (plain or LoRA-wrapped) extended over a KV arena, in this process."""

    def __init__(self, model: PreTrainedModel, eos_ids: tuple[int, ...], pad_id: int) -> None:
        self.model, self.eos_ids, self.pad_id = model, eos_ids, pad_id

    def sample(self, states: list[RowState], contexts: list[list[int]],
               params: SamplingParams, generators: list[torch.Generator],
               restrict: list[CommandTrie | None] | None = None) -> list[Sample]:
        return sample_turn(self.model, states, contexts, params, generators, self.eos_ids,
                           self.pad_id, restrict=restrict)

    def update_weights(self, state) -> None:
        """Load `state` (a no-op when the trainer updates this very model in place)."""
        own = self.model.state_dict()
        if all(own[k].data_ptr() == v.data_ptr() for k, v in state.items() if k in own):
            return
        self.model.load_state_dict(state)
