"""From trajectories to training tensors, using the exact recorded token ids.

When a trajectory kept its whole history (each turn's prompt extends the previous turn's
prompt + action), the episode becomes ONE row: the last prompt + last action, with the loss
mask on every action's tokens. Otherwise (a finite history window) each turn is its own row.
Either way the ids are the sampled ids; nothing is re-tokenized.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, fields, replace

import torch
from torch import Tensor

from tripod.algos.losses import entropy_from_logits
from tripod.core.types import Trajectory, TurnStatus
from tripod.policy import packed
from tripod.policy.restrict import restricted_logits


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
    state_ids: list[int] | None = None  # the turn's anchor-state key on agent tokens, else -1
    allowed: dict[int, list[int]] = field(default_factory=dict)
    """Restricted replies: position -> the ids the sampler allowed for that token."""


@dataclass
class Selection:
    """The episodes of an iteration that can be trained on, and what was left out."""

    trajectories: list[Trajectory]
    env_errors: int = 0
    """Episodes that ended in an env error (never trained on)."""
    dropped_groups: int = 0
    """Groups left with fewer episodes than the estimator's minimum once env errors were
    removed: their remaining episodes have no baseline and are left out of the loss."""
    dropped_episodes: int = 0
    """Episodes that ran but were left out with their group."""
    uniform_groups: int = 0
    """Groups left out because every episode had the same raw outcome (`uniform_outcomes`);
    their episodes are counted in `dropped_episodes` too."""


def trainable_episodes(trajs: list[Trajectory], min_group_size: int = 1,
                       uniform_outcomes: bool = True) -> Selection:
    """Drop env errors, then every group left with fewer than `min_group_size` episodes (a
    group estimator cannot give a baseline to a group of one). With `uniform_outcomes`
    false, also drop every group of two or more whose episodes share one raw outcome
    (`Trajectory.outcome`: all won or all lost, all resolved or none): whatever their
    shaped returns, such a group says nothing about what solves the task."""
    ran = [t for t in trajs if not t.failed]
    members: dict[int, list[Trajectory]] = {}
    for t in ran:
        members.setdefault(t.group_id, []).append(t)
    small = {g for g, group in members.items() if len(group) < min_group_size}
    uniform = set() if uniform_outcomes else {
        g for g, group in members.items()
        if g not in small and len(group) > 1 and len({t.outcome for t in group}) == 1}
    kept = [t for t in ran if t.group_id not in small | uniform]
    return Selection(kept, env_errors=len(trajs) - len(ran), dropped_groups=len(small),
                     dropped_episodes=len(ran) - len(kept), uniform_groups=len(uniform))


def _prefix_consistent(traj: Trajectory) -> bool:
    turns = traj.turns
    for prev, cur in zip(turns, turns[1:]):
        head = prev.prompt_ids + prev.action_ids
        if cur.prompt_ids[: len(head)] != head:
            return False
    return True


def state_key(text: str) -> int:
    """A stable non-negative 56-bit key of an observation text (same text, same key, across
    processes and runs: Python's `hash` is salted per process)."""
    digest = hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=7).digest()
    return int.from_bytes(digest, "big")


def turn_state_keys(traj: Trajectory) -> list[int]:
    """Per turn, a key of the environment state the turn's action was taken from (GiGPO's
    anchor state): the observation the agent acted on (the first observation for turn 0)
    together with the number of actions the env has carried out so far and the env's
    progress in that state.

    The count and the progress keep apart states that read alike but are not the same: the
    toy task asks the same question on every turn, a TextWorld room reads the same before
    and after an object in it was taken, and an ALFWorld `look` or `examine` reads the same
    before and after the object the agent carries was heated (a goal condition met: more
    progress). After an action the env did not carry out (invalid or truncated) the state
    has not changed, so the turn keeps the previous turn's key rather than taking the key of
    the env's "I didn't understand" message. Two episodes of a group share a key when they
    reached the same observation with the same progress after the same number of effective
    actions."""
    keys: list[int] = []
    done = 0
    for k in range(traj.num_turns):
        if k == 0:
            keys.append(state_key(f"0\n{traj.start_progress!r}\n{traj.first_observation}"))
        elif traj.turns[k - 1].status is not TurnStatus.OK:
            keys.append(keys[-1])
        else:
            done += 1
            before = traj.turns[k - 1]
            keys.append(state_key(f"{done}\n{before.progress!r}\n{before.observation}"))
    return keys


def trajectory_rows(traj: Trajectory, rewards: list[float]) -> list[Row]:
    """Rows for one trajectory; `rewards[k]` is turn k's reward."""
    if len(rewards) != traj.num_turns:
        raise ValueError(f"{len(rewards)} rewards for {traj.num_turns} turns")
    if not traj.turns:
        return []
    spans = [traj.turns] if _prefix_consistent(traj) else [[t] for t in traj.turns]
    keys = turn_state_keys(traj)
    rows = []
    offset = 0
    for span in spans:
        last = span[-1]
        ids = last.prompt_ids + last.action_ids
        mask, lps, rws, tids = ([0] * len(ids), [0.0] * len(ids), [0.0] * len(ids),
                                [-1] * len(ids))
        sids = [-1] * len(ids)
        allowed: dict[int, list[int]] = {}
        for j, turn in enumerate(span):
            start = len(turn.prompt_ids)
            k = offset + j
            for i, (tok, lp) in enumerate(zip(turn.action_ids, turn.logprobs)):
                assert ids[start + i] == tok, "recorded ids are inconsistent"
                mask[start + i], lps[start + i], tids[start + i] = int(turn.trainable), lp, k
                sids[start + i] = keys[k]
            for i, allowed_here in enumerate(turn.allowed_ids or []):
                allowed[start + i] = allowed_here
            if turn.action_ids:
                rws[start + len(turn.action_ids) - 1] = rewards[k]
        offset += len(span)
        rows.append(Row(ids, mask, lps, rws, tids, traj.group_id, traj.episode_id, sids,
                        allowed))
    return rows


@dataclass
class TrainBatch:
    """A training batch: B rows right-padded to T tokens.

    `collate` fills the recorded fields; the trainer's scoring step adds `ref_logprobs`,
    `old_values` and `kl_rewards`, its advantage step `advantages` and `returns`, its update
    `trainer_logprobs` (each None until then).
    """

    input_ids: Tensor
    """[B, T] long. The recorded ids (pad after the row's end)."""
    attention_mask: Tensor
    """[B, T] long. 1 on the row's tokens, 0 on padding."""
    loss_mask: Tensor
    """[B, T] float. 1 on trainable agent tokens."""
    old_logprobs: Tensor
    """[B, T] float. Sampling logprobs on agent tokens, 0 elsewhere."""
    token_rewards: Tensor
    """[B, T] float. Each turn's task reward on its last agent token."""
    turn_ids: Tensor
    """[B, T] long. Turn index on agent tokens, -1 elsewhere."""
    group_ids: Tensor
    """[B] long. Episodes of one game and seed share a group."""
    episode_ids: Tensor
    """[B] long. Rows of one episode share an id."""
    state_ids: Tensor | None = None
    """[B, T] long. On agent tokens, the key of the state the token's turn acted from
    (`turn_state_keys`); -1 elsewhere. Read by step-level estimators (`gigpo`)."""
    ref_logprobs: Tensor | None = None
    """[B, T] reference-policy logprobs (only with a KL penalty)."""
    old_values: Tensor | None = None
    """[B, T] critic values before the update (only with a critic)."""
    kl_rewards: Tensor | None = None
    """[B, T] `token_rewards` minus the KL penalty (only with `algo.kl_in=reward`): what the
    estimator reads then. `token_rewards` stays the task reward, for metrics."""
    advantages: Tensor | None = None
    """[B, T] the estimator's advantages (0 off the mask)."""
    returns: Tensor | None = None
    """[B, T] value targets (critic estimators) or each token's score."""
    row_ids: Tensor | None = None
    """[B] long. Set by the update on a minibatch: each row's index in the iteration's batch
    (kept by `select`), so per-row results can be placed back."""
    allowed_ids: Tensor | None = None
    """[B, T, K] long. Restricted replies: at an agent token, the ids the sampler allowed for
    it (padded with -1); all -1 where the token was sampled freely. None when no row of the
    batch was restricted. The trainer masks its logits with them (`policy/restrict.py`)."""
    trainer_logprobs: Tensor | None = None
    """[B, T] the trainer's logprobs of the sampled tokens at update time (first epoch, the
    forward pass the first gradient step of each row used; NaN where a skipped step left none),
    for the trajectory records: their gap to `old_logprobs` shows sampler/trainer mismatch."""

    @property
    def num_rows(self) -> int:
        return int(self.input_ids.shape[0])

    def select(self, rows: list[int]) -> TrainBatch:
        """The given rows, with the right padding they all share trimmed off (short rows
        then cost no compute for the longest row of the whole batch)."""
        idx = torch.as_tensor(rows, dtype=torch.long)
        t = int(self.attention_mask[idx].sum(1).max())
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if v is not None:
                v = v[idx, :t] if v.dim() >= 2 else v[idx]
            out[f.name] = v
        return TrainBatch(**out)


def collate(rows: list[Row], pad_id: int) -> TrainBatch:
    """Right-pad rows into a [B, T] batch."""
    t = max(len(r.input_ids) for r in rows)

    def pad(values: list, fill) -> list:
        return values + [fill] * (t - len(values))

    return TrainBatch(
        input_ids=torch.tensor([pad(r.input_ids, pad_id) for r in rows]),
        attention_mask=torch.tensor([pad([1] * len(r.input_ids), 0) for r in rows]),
        loss_mask=torch.tensor([pad(r.loss_mask, 0) for r in rows], dtype=torch.float32),
        old_logprobs=torch.tensor([pad(r.logprobs, 0.0) for r in rows]),
        token_rewards=torch.tensor([pad(r.rewards, 0.0) for r in rows]),
        turn_ids=torch.tensor([pad(r.turn_ids, -1) for r in rows]),
        group_ids=torch.tensor([r.group_id for r in rows]),
        episode_ids=torch.tensor([r.episode_id for r in rows]),
        state_ids=(torch.tensor([pad(r.state_ids, -1) for r in rows])
                   if all(r.state_ids is not None for r in rows) else None),
        allowed_ids=_allowed_ids(rows, t),
    )


def _allowed_ids(rows: list[Row], t: int) -> Tensor | None:
    """The rows' restricted positions as a [B, T, K] tensor padded with -1 (None if none)."""
    k = max((len(ids) for r in rows for ids in r.allowed.values()), default=0)
    if k == 0:
        return None
    out = torch.full((len(rows), t, k), -1, dtype=torch.long)
    for b, r in enumerate(rows):
        for pos, ids in r.allowed.items():
            out[b, pos, :len(ids)] = torch.as_tensor(ids, dtype=torch.long)
    return out


def decoder_mask(attention_mask: Tensor) -> Tensor | None:
    """The attention mask a causal decoder needs for a batch: None when every row is right-
    padded (1s then 0s), as `collate` makes them.

    In a causal decoder a real token attends only to earlier positions, all real in a right-
    padded row, and its positions are 0..t either way; so dropping the mask changes nothing at
    real positions (pad positions get other values, and no loss reads them), and the model
    skips building a [B, 1, T, T] mask and runs SDPA's causal path. Measured with
    a benchmark since removed (docs/performance.md, "Tried and not kept"; SmolLM2-135M, 2 rows
    x 1,024 tokens, forward + backward, load ~7): peak RSS 5,055 -> 4,548 MB, 123 -> 103 s, identical logprobs. A modest gain:
    activations, not attention probabilities, dominate training memory on this CPU build."""
    lengths = attention_mask.sum(dim=1, keepdim=True)                        # [B, 1]
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    right_padded = torch.equal(attention_mask.bool(), positions[None, :] < lengths)
    return None if right_padded else attention_mask


MIN_SHARED_PREFIX = 32
"""Rows sharing fewer leading tokens than this are run whole (a second pass costs more)."""


def _common_len(a: Tensor, b: Tensor, cap: int) -> int:
    """Leading tokens `a` and `b` have in common, at most `cap`."""
    same = a[:cap] == b[:cap]
    return int(same.int().cumprod(dim=0).sum())


def prefix_clusters(input_ids: Tensor, lengths: list[int]) -> list[tuple[list[int], int]]:
    """Rows grouped by a prefix they share: (rows, shared length) per cluster, every row in
    exactly one cluster; a row sharing nothing worth it is alone (length 0).

    Greedy in row order (the learner puts a group's rows side by side): a row joins the
    cluster whose first row it shares the most leading tokens with, when that is at least
    `MIN_SHARED_PREFIX` and does not shorten the cluster's prefix (a row of another game
    sharing only the system prompt does not cut a group's whole first prompt down to it).
    A shared prefix stops one token before its shortest row ends (each row keeps a token).
    """
    clusters: list[tuple[list[int], int]] = []
    for r, n in enumerate(lengths):
        best, best_len = None, 0
        for c, (rows, shared) in enumerate(clusters):
            first = rows[0]
            common = _common_len(input_ids[first], input_ids[r], min(lengths[first], n) - 1)
            if common >= MIN_SHARED_PREFIX and common > best_len and (
                    len(rows) == 1 or common >= shared):
                best, best_len = c, common
        if best is None:
            clusters.append(([r], 0))
        else:
            rows, shared = clusters[best]
            clusters[best] = (rows + [r], best_len if len(rows) == 1 else shared)
    return clusters


def decoder_hidden(model, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
    """The decoder's last hidden states [B, T, H] for right-padded rows (`model`: a causal
    LM, or its decoder stack as the critic's copy is).

    Rows that start with the same tokens (the episodes of a group share their first prompt,
    and often their first actions) have that prefix run once (`prefix_clusters`), in one
    forward pass with every row's own tokens (`_packed_pass`): no padding, attention only
    over each row's own context, and one weight gradient per micro-batch. The result equals
    the plain pass up to float rounding, with each prefix's arithmetic (forward and
    backward) paid once instead of once per row; gradients reach the prefix through every
    row that attends to it (tests/train/test_shared_prefix.py; with activation checkpointing
    too: each layer's recomputation gets the same packing). When no rows share a prefix or
    the model's attention is not `sdpa`, the rows run whole in one padded pass (running rows
    that share nothing one by one measured no faster: docs/performance.md).
    """
    decoder = model.get_decoder()
    lengths = attention_mask.sum(dim=1).tolist()
    shares = packed.supports_packing(decoder)
    clusters = [c for c in prefix_clusters(input_ids, lengths) if len(c[0]) > 1] if shares else []
    if not clusters:
        return decoder(input_ids=input_ids,
                       attention_mask=decoder_mask(attention_mask)).last_hidden_state
    return _packed_pass(model, decoder, input_ids, lengths, clusters)


def _packed_pass(model, decoder, input_ids: Tensor, lengths: list[int],
                 clusters: list[tuple[list[int], int]]) -> Tensor:
    """The micro-batch as one packed sequence (`policy.packed`): each cluster's prefix once,
    then its rows' own tokens; rows sharing nothing whole. Returns [B, T, H] like the plain
    pass (a padding position gets its row's last real token's state)."""
    device, rows = input_ids.device, len(lengths)
    packing = packed.PackedSegments()
    pieces: list[tuple[int, int, int]] = []                   # (row, from, to) in packed order
    first = [0] * rows                # where row r's own segment starts in the packed sequence
    prefix_at = [0] * rows            # where its prefix starts (if it has one)
    starts = [0] * rows
    clustered = {r for members, _ in clusters for r in members}
    groups = clusters + [([r], 0) for r in range(rows) if r not in clustered]
    for members, shared in groups:
        prefix = None
        if shared:
            prefix = packing.add(shared)
            pieces.append((members[0], 0, shared))
            packing.saved += shared * (len(members) - 1)
        for r in members:
            seg = packing.add(lengths[r] - shared, prefix)
            pieces.append((r, shared, lengths[r]))
            first[r], starts[r] = seg.start, shared
            prefix_at[r] = prefix.start if prefix is not None else 0
    flat = torch.cat([input_ids[r, a:b] for r, a, b in pieces])[None]             # [1, S]
    # transformers passes a 4D mask through untouched, so no [S, S] mask is built; the
    # packed attention does not read it
    hidden = decoder(inputs_embeds=_embed(model, flat), position_ids=packing.position_ids(device),
                     attention_mask=torch.zeros(1, 1, 1, 1, device=device),
                     **{packed.KWARG: packing}).last_hidden_state[0]                # [S, H]
    own = torch.tensor([n - s for n, s in zip(lengths, starts)], device=device)
    start_t = torch.tensor(starts, device=device)
    p = torch.arange(input_ids.shape[1], device=device)[None]                 # [1, T]
    index = torch.where(p < start_t[:, None],
                        torch.tensor(prefix_at, device=device)[:, None] + p,
                        torch.tensor(first, device=device)[:, None]
                        + (p - start_t[:, None]).clamp(max=own[:, None] - 1))
    return hidden[index]


def _embed(model, input_ids: Tensor) -> Tensor:
    """The input embeddings [B, T, H] of `input_ids`. When the embedding matrix is the LM
    head's too (tied, as in SmolLM2), its gradient from the lookup is sparse (the rows of
    the tokens seen) and autograd adds it into the head's dense gradient, instead of
    materialising a zero-filled [vocab, hidden] matrix per micro-batch."""
    embedding = model.get_input_embeddings()
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    tied = head is not None and getattr(head, "weight", None) is embedding.weight
    if type(embedding) is torch.nn.Embedding and tied and torch.is_grad_enabled():
        return torch.nn.functional.embedding(
            input_ids, embedding.weight, embedding.padding_idx, embedding.max_norm,
            embedding.norm_type, embedding.scale_grad_by_freq, sparse=True)
    return embedding(input_ids)


def token_logprobs(model, input_ids: Tensor, attention_mask: Tensor,
                   temperature: float = 1.0, loss_mask: Tensor | None = None,
                   with_entropy: bool = False, with_hidden: bool = False,
                   allowed_ids: Tensor | None = None):
    """Teacher-forced log p(token_t | tokens_<t) at every position t where `loss_mask` is set
    (all positions after the first if None); 0 elsewhere.

    The LM head runs only on the selected positions: the [tokens, vocab] logits of prompt and
    environment tokens would dominate memory and time (vocab 49k) and are never used.
    Returns logprobs [B, T] (aligned with input_ids), entropy [B, T] or None, and the last
    hidden states [B, T, H] or None. Temperature matches the sampler's tempered distribution
    (the entropy is the tempered distribution's too). Non-finite logits give non-finite
    logprobs (log-softmax of finite logits is finite), which the learner checks.
    `allowed_ids` [B, T, K] (restricted replies, `TrainBatch.allowed_ids`) masks each selected
    position's logits to the ids its sampling step allowed: logprobs and entropy are then the
    restricted distribution's, as sampled.
    """
    hidden = decoder_hidden(model, input_ids, attention_mask)                 # [B, T, H]
    if loss_mask is None:
        loss_mask = attention_mask.clone()
        loss_mask[:, 0] = 0
    select = loss_mask[:, 1:] > 0                                            # [B, T-1]
    logits = model.get_output_embeddings()(hidden[:, :-1][select]).float()  # [N, V]
    if temperature > 0:
        logits = logits / temperature
    if allowed_ids is not None:
        logits = restricted_logits(logits, allowed_ids[:, 1:][select])        # [N, V]
    logp_all = torch.log_softmax(logits, dim=-1)                            # [N, V]
    targets = input_ids[:, 1:][select]                                      # [N]
    logp = torch.zeros(input_ids.shape, dtype=logp_all.dtype, device=input_ids.device)
    logp[:, 1:][select] = logp_all.gather(-1, targets[:, None])[:, 0]
    entropy = None
    if with_entropy:
        entropy = torch.zeros_like(logp)
        entropy[:, 1:][select] = entropy_from_logits(logits)                 # [N]
    return logp, entropy, (hidden if with_hidden else None)


def on_device(mb: TrainBatch, device: torch.device) -> TrainBatch:
    """The micro-batch on the model's device (batches are collated on the CPU; on CUDA each
    micro-batch moves when it is computed, so a whole batch never has to fit the device)."""
    if mb.input_ids.device == device:
        return mb
    return replace(mb, **{f.name: getattr(mb, f.name).to(device)
                          for f in fields(mb) if getattr(mb, f.name) is not None})
