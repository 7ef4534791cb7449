"""Advantage estimators: pure, vectorized functions with one signature, in one registry.

Every estimator is ``fn(inp: AdvantageInput, cfg: AlgoSection) -> AdvantageOutput``: it reads
its settings (gamma, lam, credit, whiten) from the recipe's `algo` section itself, so there is
no second, mirrored config. The names a recipe may use, and what a trainer must know about
each (needs a critic, smallest group), live torch-free in `tripod.core.estimators`; this module
registers one implementation per name there and checks at import that the two agree. A
trainer looks the name up once and never branches on it::

    spec = get_estimator(cfg.estimator)
    if spec.needs_critic: ...            # build / train a value model
    out = spec(inp, cfg)                 # out.advantages, out.returns, out.stats

Data layout (B sequences right-padded to length T):

- each turn's reward sits on that turn's last agent token (``token_rewards``);
- ``loss_mask`` is 1 on agent (sampled) tokens only; ``turn_ids`` numbers the agent turns;
- an episode may fill one row (the usual case) or several rows (e.g. one per turn) that
  share an ``episode_ids`` entry. All estimators work at the level of *episodes*: the agent
  tokens of an episode are ordered by (turn, row, position) wherever they sit in the batch.

Only agent tokens are read. Rewards and values on prompt, environment, template or pad
tokens never change the result (see the GAE invariance test).

References: GAE (Schulman et al. 2016, arXiv 1506.02438); PPO (Schulman et al. 2017,
arXiv 1707.06347); GRPO (Shao et al. 2024, arXiv 2402.03300); Dr.GRPO (Liu et al. 2025,
arXiv 2503.20783); RLOO (Ahmadian et al. 2024, arXiv 2402.14740); REINFORCE++ (Hu 2025,
arXiv 2501.03262).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from tripod.core.config import AlgoSection
from tripod.core.estimators import ESTIMATORS, EstimatorInfo

EPS = 1e-6
"""Added to standard deviations before dividing (whitening, GRPO); equal scores (std 0) give
advantage 0 rather than a division by EPS."""


# ----------------------------------------------------------------------------- records


@dataclass(eq=False)
class AdvantageInput:
    """What every estimator reads. Shapes: B rows, T tokens per row (right-padded)."""

    token_rewards: Tensor
    """[B, T] float. Each turn's reward on that turn's last agent token, 0 elsewhere
    (per-token terms such as a KL penalty may sit on any agent token)."""
    loss_mask: Tensor
    """[B, T] bool or 0/1 float. 1 on agent (sampled) tokens; 0 on prompt, environment,
    template and pad tokens."""
    turn_ids: Tensor
    """[B, T] long. Turn index (0, 1, 2, ...) of each agent token; -1 on other tokens."""
    group_ids: Tensor
    """[B] long. Episodes of the same game and seed share a group id (GRPO/RLOO groups)."""
    values: Tensor | None = None
    """[B, T] float critic values per token; required by `gae` and `gae_turn` only."""
    episode_ids: Tensor | None = None
    """[B] long. Rows with the same id belong to one episode (they share the episode's
    score). None means one row per episode, i.e. ``arange(B)``."""
    state_ids: Tensor | None = None
    """[B, T] long. Key of the environment state each agent token's turn acted from (equal
    keys: the same state); required by `gigpo` only."""

    def __post_init__(self) -> None:
        b, t = self.loss_mask.shape
        for name in ("token_rewards", "turn_ids", "values", "state_ids"):
            x = getattr(self, name)
            if x is not None and tuple(x.shape) != (b, t):
                raise ValueError(f"{name} has shape {tuple(x.shape)}, expected {(b, t)}")
        for name in ("group_ids", "episode_ids"):
            x = getattr(self, name)
            if x is not None and tuple(x.shape) != (b,):
                raise ValueError(f"{name} has shape {tuple(x.shape)}, expected {(b,)}")

    @property
    def rows_episode_ids(self) -> Tensor:
        """[B] the episode id of each row (``arange(B)`` when `episode_ids` is None)."""
        if self.episode_ids is not None:
            return self.episode_ids
        return torch.arange(self.loss_mask.shape[0], device=self.loss_mask.device)


@dataclass(eq=False)
class AdvantageOutput:
    """What every estimator returns."""

    advantages: Tensor
    """[B, T] float, 0 where `loss_mask` is 0."""
    returns: Tensor
    """[B, T] float, 0 where `loss_mask` is 0. Value targets for `gae`/`gae_turn`; the
    (unnormalised) score of each token for the other estimators."""
    stats: dict[str, float] = field(default_factory=dict)
    """Scalars to log, e.g. ``zero_variance_group_fraction`` for group estimators."""


# ----------------------------------------------------------------------------- registry

Estimator = Callable[[AdvantageInput, AlgoSection], AdvantageOutput]


@dataclass(frozen=True)
class EstimatorSpec:
    """A registered estimator and what a trainer must know about it (from the table in
    `tripod.core.estimators`). Calling the spec calls the estimator."""

    name: str
    fn: Estimator
    info: EstimatorInfo

    @property
    def needs_critic(self) -> bool:
        """The estimator reads `AdvantageInput.values` (a critic must be trained)."""
        return self.info.needs_critic

    @property
    def min_group_size(self) -> int:
        """Smallest number of episodes per group the estimator accepts."""
        return self.info.min_group_size

    def __call__(self, inp: AdvantageInput, cfg: AlgoSection) -> AdvantageOutput:
        return self.fn(inp, cfg)


ADVANTAGE_ESTIMATORS: dict[str, EstimatorSpec] = {}


def register_estimator(name: str) -> Callable[[Estimator], Estimator]:
    """Decorator: register ``fn(inp, cfg) -> AdvantageOutput`` as the implementation of `name`,
    a name of the table in `tripod.core.estimators` (its metadata comes from there)."""

    def decorate(fn: Estimator) -> Estimator:
        if name not in ESTIMATORS:
            raise ValueError(f"advantage estimator {name!r} is not in tripod.core.estimators."
                             "ESTIMATORS; add it there first (recipes are validated against it)")
        if name in ADVANTAGE_ESTIMATORS:
            raise ValueError(f"advantage estimator {name!r} is already registered")
        ADVANTAGE_ESTIMATORS[name] = EstimatorSpec(name, fn, ESTIMATORS[name])
        return fn

    return decorate


def get_estimator(name: str) -> EstimatorSpec:
    """The registered estimator `name`; unknown names raise KeyError listing valid ones."""
    if name not in ADVANTAGE_ESTIMATORS:
        valid = ", ".join(sorted(ADVANTAGE_ESTIMATORS))
        raise KeyError(f"unknown advantage estimator {name!r}; valid: {valid}")
    return ADVANTAGE_ESTIMATORS[name]


def compute_advantages(inp: AdvantageInput, cfg: AlgoSection) -> AdvantageOutput:
    """Run the estimator named by ``cfg.estimator``."""
    return get_estimator(cfg.estimator)(inp, cfg)


# ----------------------------------------------------------------------------- layout


@dataclass(frozen=True, eq=False)
class _Layout:
    """The batch's N agent tokens, sorted by (episode, turn, row, position).

    A *unit* is one (episode, turn) pair. Episodes are re-indexed 0..E-1 and units 0..U-1;
    ranks count tokens (or units) from the start of their episode, so ``[episode, rank]``
    addresses a packed [E, L] tensor where each episode is one left-aligned row.
    """

    rows: Tensor  # [N] batch row of each token
    cols: Tensor  # [N] position of each token in its row
    episode: Tensor  # [N] episode index of each token
    token_rank: Tensor  # [N] index of the token among its episode's agent tokens
    unit: Tensor  # [N] unit (episode, turn) of each token
    unit_first: Tensor  # [U] index into N of each unit's first token
    unit_episode: Tensor  # [U] episode index of each unit
    unit_rank: Tensor  # [U] index of the unit among its episode's turns
    unit_turn: Tensor  # [U] turn id of each unit
    row_episode: Tensor  # [B] episode index of each row
    num_episodes: int


def _rank_within(sorted_keys: Tensor, num_keys: int) -> Tensor:
    """[M] position of each element among the elements with the same key (keys sorted)."""
    counts = torch.bincount(sorted_keys, minlength=num_keys)  # [K]
    starts = torch.cumsum(counts, 0) - counts  # [K]
    return torch.arange(sorted_keys.numel(), device=sorted_keys.device) - starts[sorted_keys]


def _layout(inp: AdvantageInput) -> _Layout:
    mask = inp.loss_mask.bool()  # [B, T]
    b, t = mask.shape
    _, row_episode = torch.unique(inp.rows_episode_ids, return_inverse=True)  # [B]
    num_episodes = int(row_episode.max()) + 1 if b else 0
    rows, cols = mask.nonzero(as_tuple=True)  # [N], [N]
    turns = inp.turn_ids[rows, cols].long()  # [N]
    if (turns < 0).any():
        raise ValueError("turn_ids must be >= 0 on every agent token (loss_mask == 1)")
    episode = row_episode[rows]  # [N]
    k = int(turns.max()) + 1 if turns.numel() else 1
    key = ((episode * k + turns) * b + rows) * t + cols  # [N] unique sort key
    order = torch.argsort(key)
    rows, cols, episode, turns = rows[order], cols[order], episode[order], turns[order]
    new_unit = torch.ones_like(episode, dtype=torch.bool)  # [N]
    new_unit[1:] = (episode[1:] != episode[:-1]) | (turns[1:] != turns[:-1])
    unit_first = new_unit.nonzero(as_tuple=True)[0]  # [U]
    unit_episode = episode[unit_first]  # [U]
    return _Layout(
        rows=rows,
        cols=cols,
        episode=episode,
        token_rank=_rank_within(episode, num_episodes),
        unit=torch.cumsum(new_unit.long(), 0) - 1,
        unit_first=unit_first,
        unit_episode=unit_episode,
        unit_rank=_rank_within(unit_episode, num_episodes),
        unit_turn=turns[unit_first],
        row_episode=row_episode,
        num_episodes=num_episodes,
    )


def _pack(x: Tensor, episode: Tensor, rank: Tensor, num_episodes: int) -> tuple[Tensor, Tensor]:
    """Scatter [M] elements to a left-aligned [E, L] tensor and its validity mask."""
    length = int(rank.max()) + 1 if rank.numel() else 0
    packed = x.new_zeros(num_episodes, length)  # [E, L]
    valid = torch.zeros(num_episodes, length, dtype=torch.bool, device=x.device)  # [E, L]
    packed[episode, rank] = x
    valid[episode, rank] = True
    return packed, valid


def _unpack_tokens(x: Tensor, lay: _Layout, like: Tensor) -> Tensor:
    """Scatter per-token values [N] back to the batch layout [B, T] (0 off the mask)."""
    out = torch.zeros_like(like, dtype=x.dtype)  # [B, T]
    out[lay.rows, lay.cols] = x
    return out


def _gather_tokens(x: Tensor, lay: _Layout) -> Tensor:
    """[N] the entries of a [B, T] tensor on the agent tokens, in layout order."""
    return x[lay.rows, lay.cols]


# ----------------------------------------------------------------------------- scans


def _gae_scan(
    rewards: Tensor, values: Tensor, valid: Tensor, gamma: float, lam: float
) -> tuple[Tensor, Tensor]:
    """GAE over packed steps (Schulman et al. 2016, eq. 16).

    ``delta_t = r_t + gamma V_{t+1} - V_t``; ``A_t = delta_t + gamma lam A_{t+1}``; the value
    after an episode's last valid step is 0 (the episode ended). `valid` is a prefix mask.
    Returns (advantages, returns = advantages + values), both [E, L] and 0 where invalid.
    """
    num, length = rewards.shape
    adv = torch.zeros_like(rewards)  # [E, L]
    next_adv = rewards.new_zeros(num)  # [E]
    next_value = rewards.new_zeros(num)  # [E]
    for step in reversed(range(length)):  # the one unavoidable loop: reverse over time
        ok = valid[:, step]  # [E]
        value = torch.where(ok, values[:, step], 0.0)  # [E]
        delta = rewards[:, step] + gamma * next_value - value  # [E]
        next_adv = torch.where(ok, delta + gamma * lam * next_adv, 0.0)  # [E]
        next_value = value
        adv[:, step] = next_adv
    return adv, adv + torch.where(valid, values, 0.0)


def _discounted_return_to_go(rewards: Tensor, valid: Tensor, gamma: float) -> Tensor:
    """[E, L] ``G_k = sum_{j>=k} gamma^(j-k) r_j`` (GAE with V = 0 and lambda = 1)."""
    adv, _ = _gae_scan(rewards, torch.zeros_like(rewards), valid, gamma, 1.0)
    return adv


def _masked_whiten(x: Tensor, eps: float) -> Tensor:
    """(x - mean) / (std + eps) over the [N] agent tokens (population std, as in the
    REINFORCE++ reference implementation in OpenRLHF)."""
    if x.numel() == 0:
        return x
    centred = x - x.mean()
    return centred / (centred.square().mean().sqrt() + eps)


# ----------------------------------------------------------------------------- critic


def _require_values(inp: AdvantageInput, name: str) -> Tensor:
    if inp.values is None:
        raise ValueError(f"{name} needs critic values (AdvantageInput.values is None)")
    return inp.values


def _gae_output(
    adv: Tensor, ret: Tensor, lay: _Layout, inp: AdvantageInput, cfg: AlgoSection
) -> AdvantageOutput:
    """Wrap per-token advantages / returns [N] (optionally whitened) into an output."""
    stats = {
        "advantage_mean": float(adv.mean()) if adv.numel() else 0.0,
        "advantage_std": float(adv.std(unbiased=False)) if adv.numel() else 0.0,
        "return_mean": float(ret.mean()) if ret.numel() else 0.0,
    }
    if cfg.whiten:
        adv = _masked_whiten(adv, EPS)
    rewards = inp.token_rewards
    return AdvantageOutput(
        _unpack_tokens(adv, lay, rewards), _unpack_tokens(ret, lay, rewards), stats
    )


@register_estimator("gae")
def gae(inp: AdvantageInput, cfg: AlgoSection) -> AdvantageOutput:
    """Token-level GAE over agent tokens only (Schulman et al. 2016), as in PPO.

    Each episode is compressed to its agent tokens in order (turn, then position), GAE runs
    on that sequence with the rewards on those tokens, and V after the last agent token is 0.
    Environment tokens are skipped, not treated as steps, so values and rewards placed on
    them cannot change the result; with gamma = 1 the gap between turns costs nothing.
    """
    values = _require_values(inp, "gae")
    lay = _layout(inp)
    rewards = _gather_tokens(inp.token_rewards, lay)  # [N]
    r_p, valid = _pack(rewards, lay.episode, lay.token_rank, lay.num_episodes)  # [E, L]
    v_p, _ = _pack(
        _gather_tokens(values, lay).to(r_p.dtype), lay.episode, lay.token_rank, lay.num_episodes
    )  # [E, L]
    adv_p, ret_p = _gae_scan(r_p, v_p, valid, cfg.gamma, cfg.lam)  # [E, L]
    adv = adv_p[lay.episode, lay.token_rank]  # [N]
    ret = ret_p[lay.episode, lay.token_rank]  # [N]
    return _gae_output(adv, ret, lay, inp, cfg)


@register_estimator("gae_turn")
def gae_turn(inp: AdvantageInput, cfg: AlgoSection) -> AdvantageOutput:
    """Turn-level GAE: one step per agent turn.

    A turn's value is the critic's value at the turn's FIRST agent token (the state before
    the action), its reward the sum of the rewards on its agent tokens. GAE runs over turns
    (gamma discounts per turn) and each turn's advantage and return are broadcast to all of
    its agent tokens, so the value loss pulls every token of a turn towards the turn return.
    """
    values = _require_values(inp, "gae_turn")
    lay = _layout(inp)
    rewards = _gather_tokens(inp.token_rewards, lay)  # [N]
    unit_rewards = rewards.new_zeros(lay.unit_first.numel()).index_add_(0, lay.unit, rewards)
    unit_values = _gather_tokens(values, lay).to(rewards.dtype)[lay.unit_first]  # [U]
    r_p, valid = _pack(unit_rewards, lay.unit_episode, lay.unit_rank, lay.num_episodes)
    v_p, _ = _pack(unit_values, lay.unit_episode, lay.unit_rank, lay.num_episodes)
    adv_p, ret_p = _gae_scan(r_p, v_p, valid, cfg.gamma, cfg.lam)  # [E, K]
    adv = adv_p[lay.unit_episode, lay.unit_rank][lay.unit]  # [U] -> [N]
    ret = ret_p[lay.unit_episode, lay.unit_rank][lay.unit]  # [U] -> [N]
    return _gae_output(adv, ret, lay, inp, cfg)


# ----------------------------------------------------------------------------- scores


@dataclass(frozen=True, eq=False)
class _Scores:
    token: Tensor  # [N] score of each agent token (episode return or turn return-to-go)
    episode: Tensor  # [E] each episode's total reward
    unit: Tensor | None  # [U] each turn's return-to-go (credit="turn"), else None


def _scores(inp: AdvantageInput, lay: _Layout, cfg: AlgoSection) -> _Scores:
    rewards = _gather_tokens(inp.token_rewards, lay)  # [N]
    episode = rewards.new_zeros(lay.num_episodes).index_add_(0, lay.episode, rewards)  # [E]
    if cfg.credit == "episode":
        return _Scores(token=episode[lay.episode], episode=episode, unit=None)
    unit_rewards = rewards.new_zeros(lay.unit_first.numel()).index_add_(0, lay.unit, rewards)
    r_p, valid = _pack(unit_rewards, lay.unit_episode, lay.unit_rank, lay.num_episodes)
    g_p = _discounted_return_to_go(r_p, valid, cfg.gamma)  # [E, K]
    unit = g_p[lay.unit_episode, lay.unit_rank]  # [U]
    return _Scores(token=unit[lay.unit], episode=episode, unit=unit)


# ----------------------------------------------------------------------------- groups


@dataclass(frozen=True, eq=False)
class _GroupStats:
    episode_group: Tensor  # [E] dense group index of each episode
    size: Tensor  # [G] episodes per group
    zero_variance_fraction: float  # groups whose episode returns are all equal


def _group_stats(
    inp: AdvantageInput, lay: _Layout, episode_scores: Tensor, name: str
) -> _GroupStats:
    _, row_group = torch.unique(inp.group_ids, return_inverse=True)  # [B]
    num_groups = int(row_group.max()) + 1 if row_group.numel() else 0
    episode_group = torch.zeros_like(episode_scores, dtype=torch.long)  # [E]
    episode_group[lay.row_episode] = row_group
    if (episode_group[lay.row_episode] != row_group).any():
        raise ValueError("rows of the same episode must share one group id")
    size = torch.bincount(episode_group, minlength=num_groups)  # [G]
    least = ESTIMATORS[name].min_group_size
    if (size < least).any():
        bad = torch.unique(inp.group_ids[(size < least)[row_group]]).tolist()
        raise ValueError(
            f"{name} needs at least {least} episodes per group (a group of 1 has no "
            f"baseline); groups {bad} have fewer. Sample several episodes per game and seed."
        )
    x = episode_scores  # [E]
    hi = x.new_full((num_groups,), -torch.inf).scatter_reduce_(0, episode_group, x, "amax")
    lo = x.new_full((num_groups,), torch.inf).scatter_reduce_(0, episode_group, x, "amin")
    return _GroupStats(
        episode_group=episode_group,
        size=size,
        zero_variance_fraction=float((hi == lo).float().mean()) if num_groups else 0.0,
    )


def _cell_stats(
    x: Tensor, cell: Tensor, num_cells: int, leave_one_out: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """Per element of `x` [M]: the baseline, sample std (Bessel-corrected, as torch.std in
    TRL and verl) and size of its cell. With `leave_one_out` the baseline is the mean of the
    OTHER elements of the cell (0 when there are none) and the std is 0 (unused)."""
    count = x.new_zeros(num_cells).index_add_(0, cell, torch.ones_like(x))[cell]  # [M]
    total = x.new_zeros(num_cells).index_add_(0, cell, x)[cell]  # [M]
    others = (count - 1).clamp(min=1)
    if leave_one_out:
        return torch.where(count > 1, (total - x) / others, 0.0), torch.zeros_like(x), count
    mean = total / count
    sq = x.new_zeros(num_cells).index_add_(0, cell, (x - mean) ** 2)[cell]
    return mean, torch.where(count > 1, (sq / others).sqrt(), 0.0), count


@dataclass(frozen=True, eq=False)
class _Baselines:
    mean: Tensor  # [N] baseline each agent token's score is compared with
    std: Tensor  # [N] std of the scores that baseline is taken over
    fallback_fraction: float  # turn credit: share of turns compared with episode returns


def _baselines(
    scores: _Scores, groups: _GroupStats, lay: _Layout, leave_one_out: bool
) -> _Baselines:
    """What each agent token's score is compared with (its *cell*).

    Episode credit: the episode returns of the token's group. Turn credit: the
    returns-to-go at the token's turn k of the group's episodes that reached turn k (a cell is
    one (group, turn) pair). A turn that fewer than 2 episodes of the group reached has no
    peer at turn k; it falls back to the episode-level cell: its return-to-go is compared with
    the group's episode returns. With `leave_one_out` (RLOO) the token's own episode is left
    out of the cell.
    """
    num_groups = int(groups.size.numel())
    ep_mean, ep_std, _ = _cell_stats(
        scores.episode, groups.episode_group, num_groups, leave_one_out
    )  # [E], [E]
    if scores.unit is None:
        return _Baselines(ep_mean[lay.episode], ep_std[lay.episode], 0.0)
    turns = int(lay.unit_turn.max()) + 1 if lay.unit_turn.numel() else 1
    cell = groups.episode_group[lay.unit_episode] * turns + lay.unit_turn  # [U]
    mean, std, count = _cell_stats(scores.unit, cell, num_groups * turns, leave_one_out)
    alone = count < 2  # [U] no other episode of the group reached this turn
    mean = torch.where(alone, ep_mean[lay.unit_episode], mean)  # [U]
    std = torch.where(alone, ep_std[lay.unit_episode], std)  # [U]
    fallback = float(alone.float().mean()) if alone.numel() else 0.0
    return _Baselines(mean[lay.unit], std[lay.unit], fallback)


def _group_output(
    adv: Tensor, scores: _Scores, groups: _GroupStats, base: _Baselines, lay: _Layout,
    inp: AdvantageInput,
) -> AdvantageOutput:
    stats = {
        "zero_variance_group_fraction": groups.zero_variance_fraction,
        "num_groups": float(groups.size.numel()),
        "score_mean": float(scores.episode.mean()) if scores.episode.numel() else 0.0,
        "advantage_abs_mean": float(adv.abs().mean()) if adv.numel() else 0.0,
    }
    if scores.unit is not None:
        stats["turn_fallback_fraction"] = base.fallback_fraction
    rewards = inp.token_rewards
    return AdvantageOutput(
        _unpack_tokens(adv, lay, rewards), _unpack_tokens(scores.token, lay, rewards), stats
    )


def _grpo(inp: AdvantageInput, cfg: AlgoSection, norm_by_std: bool, name: str) -> AdvantageOutput:
    lay = _layout(inp)
    scores = _scores(inp, lay, cfg)
    groups = _group_stats(inp, lay, scores.episode, name)
    base = _baselines(scores, groups, lay, leave_one_out=False)
    adv = scores.token - base.mean  # [N]
    if norm_by_std:  # equal scores (std 0) give 0, not 0 / eps
        adv = torch.where(base.std > 0, adv / (base.std + EPS), 0.0)
    return _group_output(adv, scores, groups, base, lay, inp)


@register_estimator("grpo")
def grpo(inp: AdvantageInput, cfg: AlgoSection) -> AdvantageOutput:
    """GRPO outcome advantage (Shao et al. 2024): ``(s - mean_g) / (std_g + eps)``.

    ``s`` is the token's score: the episode return, with mean and sample std over the episode
    returns of its group; or (``credit="turn"``) turn k's return-to-go, with mean and std
    over the returns-to-go at turn k of the group's episodes that reached turn k. Scores that
    are all equal (std 0) give advantage 0. `dr_grpo` is the same without the division by
    the std. The group mean includes the episode itself, so the baseline is slightly
    correlated with its own actions (the known GRPO bias, which vanishes as groups grow);
    `rloo` avoids it.

    Turn credit, turns no other episode reached: such a turn k has no return-to-go to be
    compared with, so it is compared with the group's episode returns instead (mean and std
    of the episode-credit baseline), never given advantage 0. One 4-turn win against three
    1-turn losses (episode returns [1, 0, 0, 0], gamma 1) gives the winner 1.5 on every turn,
    as episode credit does, instead of [1.5, 0, 0, 0], which would silence exactly the long
    winning episodes. The share of turns that fell back is logged (`turn_fallback_fraction`).
    """
    return _grpo(inp, cfg, True, "grpo")


@register_estimator("dr_grpo")
def dr_grpo(inp: AdvantageInput, cfg: AlgoSection) -> AdvantageOutput:
    """Dr.GRPO (Liu et al. 2025): ``s - mean_g``, GRPO without the division by the group std
    (same cells, same turn-credit fallback). Pair it with the "constant" loss aggregation to
    remove GRPO's length bias as well."""
    return _grpo(inp, cfg, False, "dr_grpo")


@register_estimator("rloo")
def rloo(inp: AdvantageInput, cfg: AlgoSection) -> AdvantageOutput:
    """RLOO (Ahmadian et al. 2024): ``s_i - mean_{j != i} R_j`` over the group's episodes.

    Group returns [1, 0, 0] give advantages [1, -0.5, -0.5]. With ``credit="turn"``,
    ``s_i`` is turn k's return-to-go G_k and the baseline is the mean G_k of the OTHER
    episodes of the group that reached turn k. Either baseline is unbiased: the other
    episodes are sampled independently of episode i, so it does not depend on the action
    a_k and ``E[grad log pi(a_k|s_k) * b] = b * E[grad log pi(a_k|s_k)] = 0``.

    Turn credit, turns no other episode reached: the baseline is the mean episode return of
    the other episodes of the group (still independent of episode i, so still unbiased); a
    4-turn win (return 1) against three 1-turn losses gets 1 on every turn, as with episode
    credit, instead of 0 on the turns only it reached.
    """
    lay = _layout(inp)
    scores = _scores(inp, lay, cfg)
    groups = _group_stats(inp, lay, scores.episode, "rloo")
    base = _baselines(scores, groups, lay, leave_one_out=True)
    return _group_output(scores.token - base.mean, scores, groups, base, lay, inp)


@register_estimator("reinforce_pp")
def reinforce_pp(inp: AdvantageInput, cfg: AlgoSection) -> AdvantageOutput:
    """REINFORCE++ (Hu 2025): scores whitened over all agent tokens of the batch.

    ``A = (s - mean) / (std + eps)`` with mean and (population) std over tokens, where ``s``
    is the episode return or the turn return-to-go (``cfg.credit``). No critic, no groups.
    """
    lay = _layout(inp)
    scores = _scores(inp, lay, cfg)
    adv = _masked_whiten(scores.token, EPS)  # [N]
    stats = {
        "score_mean": float(scores.token.mean()) if scores.token.numel() else 0.0,
        "score_std": float(scores.token.std(unbiased=False)) if scores.token.numel() else 0.0,
    }
    rewards = inp.token_rewards
    return AdvantageOutput(
        _unpack_tokens(adv, lay, rewards), _unpack_tokens(scores.token, lay, rewards), stats
    )


@register_estimator("gigpo")
def gigpo(inp: AdvantageInput, cfg: AlgoSection) -> AdvantageOutput:
    """GiGPO-style advantage (Feng et al. 2025, "Group-in-Group Policy Optimization"):
    ``A = A_episode + step_weight * A_step``.

    ``A_episode`` is GRPO's: the episode return against its group's, ``(R - mean)/(std +
    eps)``. ``A_step`` compares turns taken from the same state: within a group (one game),
    the turns whose `state_ids` are equal form a *step group*; a turn's score is its
    discounted return-to-go ``G_k`` (``cfg.gamma``), compared with the step group's mean and
    std. A turn alone in its state (or in a step group whose returns are equal) gets
    ``A_step = 0``, so with no repeated state GiGPO is GRPO. Text games revisit states across
    a group's episodes (every episode starts in the same one), which is where the step-level
    signal comes from: the same room with the same inventory, and one episode went on to win
    from it while another did not.

    Example (gamma 1, one group, episodes A: turns s0 -> s1, return 1 on the last turn;
    B: s0 -> s2, return 0): A_episode = +0.707 / -0.707; at s0 the step group is {A0: 1,
    B0: 0}, so A_step(A0) = +0.707, A_step(B0) = -0.707; s1 and s2 are alone (A_step 0).
    Advantages: A = [1.414, 0.707], B = [-1.414, -0.707] (step_weight 1).
    """
    if inp.state_ids is None:
        raise ValueError("gigpo needs state_ids (the state each turn acted from); the RL "
                         "loop fills them from the observations (train.batch.turn_state_keys)")
    lay = _layout(inp)
    rewards = _gather_tokens(inp.token_rewards, lay)  # [N]
    episode = rewards.new_zeros(lay.num_episodes).index_add_(0, lay.episode, rewards)  # [E]
    groups = _group_stats(inp, lay, episode, "gigpo")
    ep_mean, ep_std, _ = _cell_stats(episode, groups.episode_group, int(groups.size.numel()),
                                     False)
    a_episode = torch.where(ep_std > 0, (episode - ep_mean) / (ep_std + EPS), 0.0)  # [E]
    unit_rewards = rewards.new_zeros(lay.unit_first.numel()).index_add_(0, lay.unit, rewards)
    r_p, valid = _pack(unit_rewards, lay.unit_episode, lay.unit_rank, lay.num_episodes)
    unit_return = _discounted_return_to_go(r_p, valid, cfg.gamma)[lay.unit_episode,
                                                                  lay.unit_rank]  # [U]
    unit_state = _gather_tokens(inp.state_ids, lay)[lay.unit_first].long()  # [U]
    pairs = torch.stack([groups.episode_group[lay.unit_episode], unit_state], 1)  # [U, 2]
    _, cell = torch.unique(pairs, dim=0, return_inverse=True)  # [U]
    num_cells = int(cell.max()) + 1 if cell.numel() else 0
    s_mean, s_std, count = _cell_stats(unit_return, cell, num_cells, False)  # [U] each
    a_step = torch.where(s_std > 0, (unit_return - s_mean) / (s_std + EPS), 0.0)  # [U]
    adv_unit = a_episode[lay.unit_episode] + cfg.step_weight * a_step  # [U]
    stats = {
        "zero_variance_group_fraction": groups.zero_variance_fraction,
        "num_groups": float(groups.size.numel()),
        "score_mean": float(episode.mean()) if episode.numel() else 0.0,
        "step_grouped_fraction": float((count > 1).float().mean()) if count.numel() else 0.0,
        "step_signal_fraction": float((s_std > 0).float().mean()) if s_std.numel() else 0.0,
        "advantage_abs_mean": float(adv_unit.abs().mean()) if adv_unit.numel() else 0.0,
    }
    like = inp.token_rewards
    return AdvantageOutput(_unpack_tokens(adv_unit[lay.unit], lay, like),
                           _unpack_tokens(unit_return[lay.unit], lay, like), stats)


# ----------------------------------------------------------------------------- table check


def _check_registry() -> None:
    """The registry implements exactly the names recipes are validated against."""
    missing = sorted(set(ESTIMATORS) - set(ADVANTAGE_ESTIMATORS))
    extra = sorted(set(ADVANTAGE_ESTIMATORS) - set(ESTIMATORS))
    if missing or extra:
        raise RuntimeError(
            f"tripod.core.estimators.ESTIMATORS and the registered advantage estimators "
            f"disagree: not implemented {missing}, not in the table {extra}"
        )


_check_registry()
