"""Advantage estimators: pure, vectorized functions with one signature, in one registry.

Every estimator is ``fn(inp: AdvantageInput, cfg: AdvantageConfig) -> AdvantageOutput`` and is
registered by name with its metadata (`EstimatorSpec`): whether it needs a critic and the
smallest group it accepts. A trainer looks the name up once and never branches on it::

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
from typing import Literal

import torch
from torch import Tensor

GROUP_MIN_SIZE = 2
"""Group baselines (GRPO, Dr.GRPO, RLOO) need at least two episodes per group: with one, the
GRPO advantage is identically 0 and the RLOO leave-one-out baseline is undefined."""


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

    def __post_init__(self) -> None:
        b, t = self.loss_mask.shape
        for name in ("token_rewards", "turn_ids", "values"):
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


@dataclass
class AdvantageConfig:
    """Settings shared by all estimators (each estimator reads the fields it needs)."""

    estimator: str = "gae"
    """Name in `ADVANTAGE_ESTIMATORS`: gae, gae_turn, grpo, dr_grpo, rloo, reinforce_pp."""
    gamma: float = 1.0
    """Discount factor: per agent token for `gae`, per turn for `gae_turn` and for
    ``returns="turn"``. The published recipe uses 1.0 (gamma < 1 hurt)."""
    lam: float = 1.0
    """GAE lambda (`gae`, `gae_turn`): 1.0 = Monte-Carlo return minus value, 0.0 = TD(0)."""
    norm_by_std: bool = True
    """`grpo`: divide by the group's standard deviation. False gives Dr.GRPO's advantage
    (`dr_grpo` never divides, whatever this says)."""
    returns: Literal["episode", "turn"] = "episode"
    """Score of a token for group estimators and `reinforce_pp`. "episode": the episode's
    total reward, compared with the group's episode returns. "turn": its turn's discounted
    return-to-go ``G_k = sum_{j>=k} gamma^(j-k) r_j``, compared (GRPO, RLOO) with the
    return-to-go at the same turn k of the group's episodes that reached turn k: comparing a
    turn-k return with whole-episode returns would push every late turn down (and divide by a
    zero std whenever the episode returns of a group are equal)."""
    eps: float = 1e-6
    """Added to standard deviations before dividing."""
    whiten: bool = True
    """`gae`, `gae_turn`: whiten advantages over the batch's agent tokens (returns, the value
    targets, are computed before whitening)."""

    def __post_init__(self) -> None:
        if self.returns not in ("episode", "turn"):
            raise ValueError(f"returns must be 'episode' or 'turn', got {self.returns!r}")
        if not 0.0 <= self.gamma <= 1.0 or not 0.0 <= self.lam <= 1.0:
            raise ValueError(f"gamma and lam must be in [0, 1], got {self.gamma}, {self.lam}")


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

Estimator = Callable[[AdvantageInput, AdvantageConfig], AdvantageOutput]


@dataclass(frozen=True)
class EstimatorSpec:
    """A registered estimator and what a trainer must know about it. Calling the spec
    calls the estimator."""

    name: str
    fn: Estimator
    needs_critic: bool = False
    """The estimator reads `AdvantageInput.values` (a critic must be trained)."""
    min_group_size: int = 1
    """Smallest number of episodes per group the estimator accepts."""

    def __call__(self, inp: AdvantageInput, cfg: AdvantageConfig) -> AdvantageOutput:
        return self.fn(inp, cfg)


ADVANTAGE_ESTIMATORS: dict[str, EstimatorSpec] = {}


def register_estimator(
    name: str, *, needs_critic: bool = False, min_group_size: int = 1
) -> Callable[[Estimator], Estimator]:
    """Decorator: register ``fn(inp, cfg) -> AdvantageOutput`` under `name`."""

    def decorate(fn: Estimator) -> Estimator:
        if name in ADVANTAGE_ESTIMATORS:
            raise ValueError(f"advantage estimator {name!r} is already registered")
        ADVANTAGE_ESTIMATORS[name] = EstimatorSpec(name, fn, needs_critic, min_group_size)
        return fn

    return decorate


def get_estimator(name: str) -> EstimatorSpec:
    """The registered estimator `name`; unknown names raise KeyError listing valid ones."""
    if name not in ADVANTAGE_ESTIMATORS:
        valid = ", ".join(sorted(ADVANTAGE_ESTIMATORS))
        raise KeyError(f"unknown advantage estimator {name!r}; valid: {valid}")
    return ADVANTAGE_ESTIMATORS[name]


def compute_advantages(inp: AdvantageInput, cfg: AdvantageConfig) -> AdvantageOutput:
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
    adv: Tensor, ret: Tensor, lay: _Layout, inp: AdvantageInput, cfg: AdvantageConfig
) -> AdvantageOutput:
    """Wrap per-token advantages / returns [N] (optionally whitened) into an output."""
    stats = {
        "advantage_mean": float(adv.mean()) if adv.numel() else 0.0,
        "advantage_std": float(adv.std(unbiased=False)) if adv.numel() else 0.0,
        "return_mean": float(ret.mean()) if ret.numel() else 0.0,
    }
    if cfg.whiten:
        adv = _masked_whiten(adv, cfg.eps)
    rewards = inp.token_rewards
    return AdvantageOutput(
        _unpack_tokens(adv, lay, rewards), _unpack_tokens(ret, lay, rewards), stats
    )


@register_estimator("gae", needs_critic=True)
def gae(inp: AdvantageInput, cfg: AdvantageConfig) -> AdvantageOutput:
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


@register_estimator("gae_turn", needs_critic=True)
def gae_turn(inp: AdvantageInput, cfg: AdvantageConfig) -> AdvantageOutput:
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
    unit: Tensor | None  # [U] each turn's return-to-go (returns="turn"), else None


def _scores(inp: AdvantageInput, lay: _Layout, cfg: AdvantageConfig) -> _Scores:
    rewards = _gather_tokens(inp.token_rewards, lay)  # [N]
    episode = rewards.new_zeros(lay.num_episodes).index_add_(0, lay.episode, rewards)  # [E]
    if cfg.returns == "episode":
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
    if (size < GROUP_MIN_SIZE).any():
        bad = torch.unique(inp.group_ids[(size < GROUP_MIN_SIZE)[row_group]]).tolist()
        raise ValueError(
            f"{name} needs at least {GROUP_MIN_SIZE} episodes per group (a group of 1 has no "
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


def _baselines(
    scores: _Scores, groups: _GroupStats, lay: _Layout, leave_one_out: bool
) -> tuple[Tensor, Tensor]:
    """[N] baseline and [N] sample std (Bessel-corrected, as torch.std in TRL and verl) of
    the scores each agent token is compared with.

    Episode returns: the episode returns of the token's group. Turn returns: the returns-to-go
    at the token's turn k of the group's episodes that reached turn k (a *cell* is one
    (group, turn) pair). With `leave_one_out` (RLOO) the token's own episode is left out; a
    cell with no other episode has baseline 0. A cell of one score has std 0.
    """
    if scores.unit is None:
        x, cell, index = scores.episode, groups.episode_group, lay.episode  # [E], [E], [N]
        num_cells = int(groups.size.numel())
    else:
        turns = int(lay.unit_turn.max()) + 1 if lay.unit_turn.numel() else 1
        x, index = scores.unit, lay.unit  # [U], [N]
        cell = groups.episode_group[lay.unit_episode] * turns + lay.unit_turn  # [U]
        num_cells = int(groups.size.numel()) * turns
    count = x.new_zeros(num_cells).index_add_(0, cell, torch.ones_like(x))[cell]
    total = x.new_zeros(num_cells).index_add_(0, cell, x)[cell]
    others = (count - 1).clamp(min=1)
    if leave_one_out:
        baseline = torch.where(count > 1, (total - x) / others, 0.0)
        return baseline[index], torch.zeros_like(baseline)[index]
    mean = total / count
    sq = x.new_zeros(num_cells).index_add_(0, cell, (x - mean) ** 2)[cell]
    std = torch.where(count > 1, (sq / others).sqrt(), 0.0)
    return mean[index], std[index]


def _group_output(
    adv: Tensor, scores: _Scores, groups: _GroupStats, lay: _Layout, inp: AdvantageInput
) -> AdvantageOutput:
    stats = {
        "zero_variance_group_fraction": groups.zero_variance_fraction,
        "num_groups": float(groups.size.numel()),
        "score_mean": float(scores.episode.mean()) if scores.episode.numel() else 0.0,
    }
    rewards = inp.token_rewards
    return AdvantageOutput(
        _unpack_tokens(adv, lay, rewards), _unpack_tokens(scores.token, lay, rewards), stats
    )


def _grpo(
    inp: AdvantageInput, cfg: AdvantageConfig, norm_by_std: bool, name: str
) -> AdvantageOutput:
    lay = _layout(inp)
    scores = _scores(inp, lay, cfg)
    groups = _group_stats(inp, lay, scores.episode, name)
    mean, std = _baselines(scores, groups, lay, leave_one_out=False)  # [N], [N]
    adv = scores.token - mean  # [N]
    if norm_by_std:  # equal scores (std 0) give 0, not 0 / eps
        adv = torch.where(std > 0, adv / (std + cfg.eps), 0.0)
    return _group_output(adv, scores, groups, lay, inp)


@register_estimator("grpo", min_group_size=GROUP_MIN_SIZE)
def grpo(inp: AdvantageInput, cfg: AdvantageConfig) -> AdvantageOutput:
    """GRPO outcome advantage (Shao et al. 2024): ``(s - mean_g) / (std_g + eps)``.

    ``s`` is the token's score: the episode return, with mean and sample std over the episode
    returns of its group; or (``returns="turn"``) turn k's return-to-go, with mean and std
    over the returns-to-go at turn k of the group's episodes that reached turn k. Scores that
    are all equal (std 0) give advantage 0.
    With ``cfg.norm_by_std=False`` this is the Dr.GRPO advantage. The group mean includes the
    episode itself, so the baseline is slightly correlated with its own actions (the known
    GRPO bias, which vanishes as groups grow); `rloo` avoids it.
    """
    return _grpo(inp, cfg, cfg.norm_by_std, "grpo")


@register_estimator("dr_grpo", min_group_size=GROUP_MIN_SIZE)
def dr_grpo(inp: AdvantageInput, cfg: AdvantageConfig) -> AdvantageOutput:
    """Dr.GRPO (Liu et al. 2025): ``s - mean_g`` with no std division, whatever
    ``cfg.norm_by_std`` says. Pair it with the "constant" loss aggregation to remove GRPO's
    length bias as well."""
    return _grpo(inp, cfg, False, "dr_grpo")


@register_estimator("rloo", min_group_size=GROUP_MIN_SIZE)
def rloo(inp: AdvantageInput, cfg: AdvantageConfig) -> AdvantageOutput:
    """RLOO (Ahmadian et al. 2024): ``s_i - mean_{j != i} R_j`` over the group's episodes.

    Group returns [1, 0, 0] give advantages [1, -0.5, -0.5]. With ``returns="turn"``,
    ``s_i`` is turn k's return-to-go G_k and the baseline is the mean G_k of the OTHER
    episodes of the group that reached turn k (0 when none did). Either baseline is unbiased:
    the other episodes are sampled independently of episode i, so it does not depend on the
    action a_k and ``E[grad log pi(a_k|s_k) * b] = b * E[grad log pi(a_k|s_k)] = 0``.
    """
    lay = _layout(inp)
    scores = _scores(inp, lay, cfg)
    groups = _group_stats(inp, lay, scores.episode, "rloo")
    baseline, _ = _baselines(scores, groups, lay, leave_one_out=True)  # [N]
    return _group_output(scores.token - baseline, scores, groups, lay, inp)


@register_estimator("reinforce_pp")
def reinforce_pp(inp: AdvantageInput, cfg: AdvantageConfig) -> AdvantageOutput:
    """REINFORCE++ (Hu 2025): scores whitened over all agent tokens of the batch.

    ``A = (s - mean) / (std + eps)`` with mean and (population) std over tokens, where ``s``
    is the episode return or the turn return-to-go (``cfg.returns``). No critic, no groups.
    """
    lay = _layout(inp)
    scores = _scores(inp, lay, cfg)
    adv = _masked_whiten(scores.token, cfg.eps)  # [N]
    stats = {
        "score_mean": float(scores.token.mean()) if scores.token.numel() else 0.0,
        "score_std": float(scores.token.std(unbiased=False)) if scores.token.numel() else 0.0,
    }
    rewards = inp.token_rewards
    return AdvantageOutput(
        _unpack_tokens(adv, lay, rewards), _unpack_tokens(scores.token, lay, rewards), stats
    )
