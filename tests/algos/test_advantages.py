"""Advantage estimators: hand-computed examples, plain-loop references, invariances."""

from __future__ import annotations

import inspect
import math
import statistics

import pytest
import torch

from tripod.algos.advantages import (
    ADVANTAGE_ESTIMATORS,
    EPS,
    AdvantageInput,
    AdvantageOutput,
    compute_advantages,
    get_estimator,
    register_estimator,
)
from tripod.core.config import AlgoSection
from tripod.core.estimators import ESTIMATORS

ALL = ("gae", "gae_turn", "grpo", "dr_grpo", "rloo", "reinforce_pp")


def close(actual: torch.Tensor, expected: list, tol: float = 1e-5) -> None:
    torch.testing.assert_close(
        actual, torch.tensor(expected, dtype=actual.dtype), atol=tol, rtol=tol
    )


# ----------------------------------------------------------------------------- helpers


def episode_rows(
    rewards_per_turn: list[list[float]],
    tokens_per_turn: int = 1,
    group_ids: list[int] | None = None,
) -> AdvantageInput:
    """One row per episode; each turn = 1 env token then `tokens_per_turn` agent tokens,
    the turn's reward on its last agent token."""
    t = max(len(r) for r in rewards_per_turn) * (tokens_per_turn + 1)
    b = len(rewards_per_turn)
    rewards, mask = torch.zeros(b, t, dtype=torch.float64), torch.zeros(b, t)
    turns = torch.full((b, t), -1, dtype=torch.long)
    for i, turn_rewards in enumerate(rewards_per_turn):
        for k, r in enumerate(turn_rewards):
            start = k * (tokens_per_turn + 1) + 1
            mask[i, start : start + tokens_per_turn] = 1
            turns[i, start : start + tokens_per_turn] = k
            rewards[i, start + tokens_per_turn - 1] = r
    groups = torch.tensor(group_ids if group_ids is not None else [0] * b)
    return AdvantageInput(rewards, mask, turns, groups)


def random_batch(
    seed: int, n_groups: int = 3, group_size: int = 4, t: int = 40, binary: bool = False
) -> AdvantageInput:
    """Whole-episode rows with prompt / agent / environment segments, random rewards on
    agent tokens (always on each turn's last one), garbage rewards and values elsewhere."""
    g = torch.Generator().manual_seed(seed)
    b = n_groups * group_size

    def rint(lo: int, hi: int) -> int:
        return int(torch.randint(lo, hi + 1, (1,), generator=g))

    rewards = torch.randn(b, t, generator=g, dtype=torch.float64) * 10  # garbage off-mask
    values = torch.randn(b, t, generator=g, dtype=torch.float64)
    mask = torch.zeros(b, t)
    turns = torch.full((b, t), -1, dtype=torch.long)
    for i in range(b):
        pos, k = rint(1, 3), 0
        while pos < t and (k == 0 or rint(0, 4) > 0):
            n = min(rint(1, 4), t - pos)
            mask[i, pos : pos + n] = 1
            turns[i, pos : pos + n] = k
            for c in range(pos, pos + n):  # sparse per-token terms, e.g. a KL penalty
                on = rint(0, 2) == 0
                rewards[i, c] = float(torch.randn(1, generator=g)) * 0.1 if on else 0.0
            last = pos + n - 1
            rewards[i, last] = float(rint(0, 1)) if binary else float(torch.randn(1, generator=g))
            pos, k = pos + n + rint(0, 3), k + 1
    groups = torch.arange(n_groups).repeat_interleave(group_size)
    groups = groups[torch.randperm(b, generator=g)] + 100  # ids need not be dense
    return AdvantageInput(rewards, mask, turns, groups, values)


def agent_tokens(inp: AdvantageInput, i: int) -> list[int]:
    return [c for c in range(inp.loss_mask.shape[1]) if inp.loss_mask[i, c] > 0]


def turns_of(inp: AdvantageInput, i: int) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for c in agent_tokens(inp, i):
        out.setdefault(int(inp.turn_ids[i, c]), []).append(c)
    return dict(sorted(out.items()))


def whiten_ref(adv: torch.Tensor, inp: AdvantageInput, eps: float) -> torch.Tensor:
    xs = [float(adv[i, c]) for i in range(adv.shape[0]) for c in agent_tokens(inp, i)]
    mean = sum(xs) / len(xs)
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs))
    return (adv - mean) / (std + eps) * inp.loss_mask


# ----------------------------------------------------------------------------- loop references


def gae_ref(inp: AdvantageInput, cfg: AlgoSection) -> tuple[torch.Tensor, torch.Tensor]:
    adv = torch.zeros_like(inp.token_rewards)
    ret = torch.zeros_like(inp.token_rewards)
    for i in range(adv.shape[0]):
        a, next_v = 0.0, 0.0
        for c in reversed(agent_tokens(inp, i)):
            v = float(inp.values[i, c])
            a = float(inp.token_rewards[i, c]) + cfg.gamma * next_v - v + cfg.gamma * cfg.lam * a
            adv[i, c], ret[i, c], next_v = a, a + v, v
    return (whiten_ref(adv, inp, EPS) if cfg.whiten else adv), ret


def gae_turn_ref(inp: AdvantageInput, cfg: AlgoSection) -> tuple[torch.Tensor, torch.Tensor]:
    adv = torch.zeros_like(inp.token_rewards)
    ret = torch.zeros_like(inp.token_rewards)
    for i in range(adv.shape[0]):
        a, next_v = 0.0, 0.0
        for cols in reversed(list(turns_of(inp, i).values())):
            v = float(inp.values[i, cols[0]])
            r = sum(float(inp.token_rewards[i, c]) for c in cols)
            a = r + cfg.gamma * next_v - v + cfg.gamma * cfg.lam * a
            for c in cols:
                adv[i, c], ret[i, c] = a, a + v
            next_v = v
    return (whiten_ref(adv, inp, EPS) if cfg.whiten else adv), ret


def scores_ref(inp: AdvantageInput, cfg: AlgoSection) -> tuple[torch.Tensor, list[float]]:
    """Per-token score [B, T] and per-row episode return."""
    score = torch.zeros_like(inp.token_rewards)
    episode = []
    for i in range(score.shape[0]):
        turn_r = {
            k: sum(float(inp.token_rewards[i, c]) for c in cols)
            for k, cols in turns_of(inp, i).items()
        }
        episode.append(sum(turn_r.values()))
        g, ks = 0.0, list(turn_r)
        for k in reversed(ks):
            g = turn_r[k] + cfg.gamma * g
            for c in turns_of(inp, i)[k]:
                score[i, c] = episode[-1] if cfg.credit == "episode" else g
    return score, episode


def group_ref(inp: AdvantageInput, cfg: AlgoSection, kind: str) -> torch.Tensor:
    score, episode = scores_ref(inp, cfg)
    adv = torch.zeros_like(score)
    for i in range(score.shape[0]):
        members = [j for j in range(score.shape[0]) if inp.group_ids[j] == inp.group_ids[i]]
        for k, cols in turns_of(inp, i).items():
            # turn credit: the returns-to-go at turn k of the episodes that reached it;
            # episode credit, or a turn no other episode reached: the episode returns
            pool = {j: float(score[j, turns_of(inp, j)[k][0]])
                    for j in members if k in turns_of(inp, j)}
            if cfg.credit == "episode" or len(pool) < 2:
                pool = {j: episode[j] for j in members}
            others = [v for j, v in pool.items() if j != i]
            if kind == "rloo":
                baseline = sum(others) / len(others)
                scale = 1.0
            else:
                baseline = statistics.mean(pool.values())
                std = statistics.stdev(pool.values()) if len(pool) > 1 else 0.0
                scale = 1.0
                if kind == "grpo":
                    scale = 1.0 / (std + EPS) if std > 0 else 0.0
            for c in cols:
                adv[i, c] = (score[i, c] - baseline) * scale
    return adv


def reinforce_pp_ref(inp: AdvantageInput, cfg: AlgoSection) -> torch.Tensor:
    score, _ = scores_ref(inp, cfg)
    return whiten_ref(score, inp, EPS)


# ----------------------------------------------------------------------------- registry


def test_registry_implements_exactly_the_core_table() -> None:
    names = (*ALL, "gigpo")  # gigpo needs state ids: tests/algos/test_gigpo.py
    assert set(ADVANTAGE_ESTIMATORS) == set(ESTIMATORS) == set(names)
    meta = {n: (get_estimator(n).needs_critic, get_estimator(n).min_group_size) for n in names}
    assert meta == {
        "gae": (True, 1),
        "gae_turn": (True, 1),
        "grpo": (False, 2),
        "dr_grpo": (False, 2),
        "rloo": (False, 2),
        "reinforce_pp": (False, 1),
        "gigpo": (False, 2),
    }
    assert all(get_estimator(n).info is ESTIMATORS[n] for n in names)


def test_registering_a_name_outside_the_table_is_an_error() -> None:
    with pytest.raises(ValueError, match="not in tripod.core.estimators"):
        register_estimator("ppo2")(lambda inp, cfg: AdvantageOutput(inp.values, inp.values))
    assert "ppo2" not in ADVANTAGE_ESTIMATORS


def test_import_check_names_the_disagreement(monkeypatch) -> None:
    from tripod.algos import advantages

    monkeypatch.setitem(ESTIMATORS, "grpo_v2", ESTIMATORS["grpo"])
    with pytest.raises(RuntimeError, match=r"not implemented \['grpo_v2'\]"):
        advantages._check_registry()


def test_every_estimator_has_the_same_signature() -> None:
    sigs = {str(inspect.signature(spec.fn)) for spec in ADVANTAGE_ESTIMATORS.values()}
    assert len(sigs) == 1


def test_unknown_estimator_lists_valid_names() -> None:
    with pytest.raises(KeyError, match="rloo"):
        get_estimator("ppo2")


def test_duplicate_registration_is_an_error() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_estimator("gae")(lambda inp, cfg: AdvantageOutput(inp.values, inp.values))


def test_compute_advantages_dispatches_on_config_name() -> None:
    inp = episode_rows([[1.0], [0.0], [0.0]])
    out = compute_advantages(inp, AlgoSection(estimator="rloo"))
    close(out.advantages[:, 1], [1.0, -0.5, -0.5])


def test_input_checks_shapes() -> None:
    with pytest.raises(ValueError, match="turn_ids"):
        AdvantageInput(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 4), torch.zeros(2))


# ----------------------------------------------------------------------------- hand examples


def two_turn_row() -> AdvantageInput:
    # positions: 0 prompt | 1, 2 agent turn 0 (reward 0.5 on 2) | 3 env | 4 agent turn 1
    # (reward 1.0) | 5 pad. Env / pad values are garbage and must be ignored.
    rewards = torch.tensor([[0.0, 0.0, 0.5, 0.0, 1.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[0, 1, 1, 0, 1, 0]])
    turns = torch.tensor([[-1, 0, 0, -1, 1, -1]])
    values = torch.tensor([[9.0, 0.2, 0.4, -7.0, 0.6, 3.0]], dtype=torch.float64)
    return AdvantageInput(rewards, mask, turns, torch.tensor([0]), values)


def test_gae_two_turns_by_hand() -> None:
    # Agent tokens only: r = [0, 0.5, 1.0], V = [0.2, 0.4, 0.6], V after the end = 0.
    # gamma = 0.9, lam = 0.8 (gamma * lam = 0.72):
    # d2 = 1.0 + 0          - 0.6 = 0.4   A2 = 0.4
    # d1 = 0.5 + 0.9 * 0.6  - 0.4 = 0.64  A1 = 0.64 + 0.72 * 0.4   = 0.928
    # d0 = 0.0 + 0.9 * 0.4  - 0.2 = 0.16  A0 = 0.16 + 0.72 * 0.928 = 0.82816
    # returns = A + V = [1.02816, 1.328, 1.0]
    out = get_estimator("gae")(two_turn_row(), AlgoSection(gamma=0.9, lam=0.8, whiten=False))
    close(out.advantages, [[0.0, 0.82816, 0.928, 0.0, 0.4, 0.0]])
    close(out.returns, [[0.0, 1.02816, 1.328, 0.0, 1.0, 0.0]])


def test_gae_turn_two_turns_by_hand() -> None:
    # Turn values = value at each turn's first agent token: V0 = 0.2, V1 = 0.6.
    # Turn rewards: R0 = 0 + 0.5 = 0.5, R1 = 1.0. gamma = 0.9, lam = 0.8:
    # d1 = 1.0 - 0.6 = 0.4                 A1 = 0.4
    # d0 = 0.5 + 0.9 * 0.6 - 0.2 = 0.84    A0 = 0.84 + 0.72 * 0.4 = 1.128
    # returns: turn 0 = 1.128 + 0.2 = 1.328, turn 1 = 0.4 + 0.6 = 1.0 (on all its tokens)
    cfg = AlgoSection(gamma=0.9, lam=0.8, whiten=False)
    out = get_estimator("gae_turn")(two_turn_row(), cfg)
    close(out.advantages, [[0.0, 1.128, 1.128, 0.0, 0.4, 0.0]])
    close(out.returns, [[0.0, 1.328, 1.328, 0.0, 1.0, 0.0]])


def test_gae_whitening_by_hand() -> None:
    # Unwhitened A = [0.82816, 0.928, 0.4]: mean 0.71872, population std 0.229237...
    out = get_estimator("gae")(two_turn_row(), AlgoSection(gamma=0.9, lam=0.8))
    a = [0.82816, 0.928, 0.4]
    m = sum(a) / 3
    s = math.sqrt(sum((x - m) ** 2 for x in a) / 3)
    close(out.advantages[0, [1, 2, 4]], [(x - m) / (s + 1e-6) for x in a])
    close(out.returns, [[0.0, 1.02816, 1.328, 0.0, 1.0, 0.0]])  # targets not whitened


def test_grpo_by_hand() -> None:
    # Group returns [1, 0, 0, 0]: mean 0.25, sample std sqrt((0.75^2 + 3 * 0.25^2) / 3) = 0.5
    # with std: [0.75, -0.25, -0.25, -0.25] / 0.5 = [1.5, -0.5, -0.5, -0.5]
    inp = episode_rows([[1.0], [0.0], [0.0], [0.0]], tokens_per_turn=2)
    out = get_estimator("grpo")(inp, AlgoSection())
    close(out.advantages[:, 1:3], [[1.5, 1.5], [-0.5, -0.5], [-0.5, -0.5], [-0.5, -0.5]])
    assert (out.advantages[:, 0] == 0).all()  # env token
    close(out.returns[:, 2], [1.0, 0.0, 0.0, 0.0])


def test_dr_grpo_never_divides_by_std() -> None:
    inp = episode_rows([[1.0], [0.0], [0.0], [0.0]])
    out = get_estimator("dr_grpo")(inp, AlgoSection())
    close(out.advantages[:, 1], [0.75, -0.25, -0.25, -0.25])


def test_rloo_by_hand() -> None:
    # [1, 0, 0]: 1 - (0 + 0) / 2 = 1;  0 - (1 + 0) / 2 = -0.5 (twice)
    out = get_estimator("rloo")(episode_rows([[1.0], [0.0], [0.0]]), AlgoSection())
    close(out.advantages[:, 1], [1.0, -0.5, -0.5])


def test_two_groups_are_independent() -> None:
    # group 7: [1, 0] -> RLOO [1, -1]; group 3: [2, 2, 5] -> [2 - 3.5, 2 - 3.5, 5 - 2]
    inp = episode_rows([[1.0], [2.0], [0.0], [2.0], [5.0]], group_ids=[7, 3, 7, 3, 3])
    out = get_estimator("rloo")(inp, AlgoSection())
    close(out.advantages[:, 1], [1.0, -1.5, -1.0, -1.5, 3.0])


def turn_mode_pair() -> AdvantageInput:
    # Episode A turn rewards [0.5, 1.0]; episode B [0, 0]. gamma = 0.9:
    # G_A = [0.5 + 0.9 * 1.0, 1.0] = [1.4, 1.0], G_B = [0, 0]; episode returns 1.5 and 0.
    return episode_rows([[0.5, 1.0], [0.0, 0.0]])


def test_rloo_turn_returns_by_hand() -> None:
    # Each turn is compared with the other episode's return-to-go at the same turn:
    # A: [1.4 - 0, 1.0 - 0] = [1.4, 1.0];  B: [0 - 1.4, 0 - 1.0] = [-1.4, -1.0]
    out = get_estimator("rloo")(turn_mode_pair(), AlgoSection(gamma=0.9, credit="turn"))
    close(out.advantages[:, [1, 3]], [[1.4, 1.0], [-1.4, -1.0]])
    close(out.returns[:, [1, 3]], [[1.4, 1.0], [0.0, 0.0]])


def test_grpo_turn_returns_by_hand() -> None:
    # Turn 0: G = [1.4, 0], mean 0.7, sample std 0.7 sqrt(2); turn 1: G = [1.0, 0], mean 0.5,
    # std 0.5 sqrt(2). Dr.GRPO: A [0.7, 0.5], B [-0.7, -0.5]; GRPO: +-1/sqrt(2) everywhere.
    cfg = AlgoSection(gamma=0.9, credit="turn")
    out = get_estimator("dr_grpo")(turn_mode_pair(), cfg)
    close(out.advantages[:, [1, 3]], [[0.7, 0.5], [-0.7, -0.5]])
    out = get_estimator("grpo")(turn_mode_pair(), cfg)
    h = 1 / math.sqrt(2)
    close(out.advantages[:, [1, 3]], [[h, h], [-h, -h]])


def test_turn_returns_with_episodes_of_different_lengths() -> None:
    # gamma 1. A wins on turn 2: rewards [0, 1] -> G [1, 1]; B wins on turn 1: [1] -> G [1];
    # C loses after 3 turns: [0, 0, 0] -> G [0, 0, 0].
    # RLOO turn 0: A 1 - (1 + 0)/2 = 0.5, B 0.5, C 0 - (1 + 1)/2 = -1;
    #      turn 1 (A and C reached it): A 1 - 0 = 1, C 0 - 1 = -1;
    #      turn 2 (only C reached it): falls back to the other episodes' episode returns,
    #      C 0 - (1 + 1)/2 = -1.
    inp = episode_rows([[0.0, 1.0], [1.0], [0.0, 0.0, 0.0]])
    out = get_estimator("rloo")(inp, AlgoSection(credit="turn"))
    close(out.advantages[:, [1, 3, 5]], [[0.5, 1.0, 0.0], [0.5, 0.0, 0.0], [-1.0, -1.0, -1.0]])
    # GRPO turn 0: mean 2/3, std sqrt((1/9 + 1/9 + 4/9) / 2) = 1/sqrt(3);
    #      turn 1: mean 0.5, std 1/sqrt(2);
    #      turn 2 (only C): the group's episode returns [1, 1, 0], mean 2/3, std 1/sqrt(3).
    out = get_estimator("grpo")(inp, AlgoSection(credit="turn"))
    r3, r2 = math.sqrt(3), math.sqrt(2)
    close(out.advantages[:, [1, 3, 5]],
          [[r3 / 3, 0.5 * r2, 0.0], [r3 / 3, 0.0, 0.0], [-2 * r3 / 3, -0.5 * r2, -2 * r3 / 3]])
    assert out.stats["turn_fallback_fraction"] == pytest.approx(1 / 6)  # 1 of 6 turns


def test_turn_credit_does_not_silence_a_long_win() -> None:
    # One 4-turn win (reward 1 on its last turn) against three 1-turn losses, gamma 1.
    # Episode returns [1, 0, 0, 0]: mean 0.25, sample std 0.5.
    # Turn 0: G_0 = [1, 0, 0, 0], the same cell: winner (1 - 0.25) / 0.5 = 1.5, losers -0.5.
    # Turns 1-3, reached by the winner only: G_k = 1 against the episode returns -> 1.5.
    # (The old rule gave the winner [1.5, 0, 0, 0].) Dr.GRPO: 0.75 and -0.25. RLOO: the
    # winner 1 - mean(0, 0, 0) = 1 on every turn; a loser 0 - (1 + 0 + 0) / 3 = -1/3.
    inp = episode_rows([[0.0, 0.0, 0.0, 1.0], [0.0], [0.0], [0.0]])
    turn, episode = AlgoSection(credit="turn"), AlgoSection(credit="episode")
    win = [1, 3, 5, 7]  # the winner's agent tokens, one per turn
    for name, w, lose in (("grpo", 1.5, -0.5), ("dr_grpo", 0.75, -0.25), ("rloo", 1.0, -1 / 3)):
        out = get_estimator(name)(inp, turn)
        close(out.advantages[0, win], [w] * 4)
        close(out.advantages[1:, [1]], [[lose]] * 3)
        same = get_estimator(name)(inp, episode)  # here turn credit equals episode credit
        torch.testing.assert_close(out.advantages, same.advantages)


def test_grpo_equal_scores_give_zero_not_a_division_by_eps() -> None:
    # Every episode answers turn 0 right and turn 1 wrong: episode returns all 1 (std 0).
    # Per turn the scores are equal too, so every advantage is exactly 0.
    inp = episode_rows([[1.0, 0.0]] * 4)
    for returns in ("episode", "turn"):
        out = get_estimator("grpo")(inp, AlgoSection(credit=returns))
        assert torch.equal(out.advantages, torch.zeros_like(out.advantages))
        assert out.stats["zero_variance_group_fraction"] == 1.0


def test_reinforce_pp_whitening_by_hand() -> None:
    # Row 0: one agent token, return 1; row 1: three agent tokens, return 0.
    # Token scores [1, 0, 0, 0]: mean 0.25, population std sqrt(0.75 / 4) = sqrt(3) / 4
    # -> [0.75, -0.25, -0.25, -0.25] / (sqrt(3) / 4) = [sqrt(3), -1/sqrt(3) x 3]
    rewards = torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[0, 1, 0, 0], [0, 1, 1, 1]])
    turns = torch.tensor([[-1, 0, -1, -1], [-1, 0, 0, 1]])
    inp = AdvantageInput(rewards, mask, turns, torch.tensor([0, 1]))
    out = get_estimator("reinforce_pp")(inp, AlgoSection())
    r3 = math.sqrt(3)
    close(out.advantages, [[0, r3, 0, 0], [0, -1 / r3, -1 / r3, -1 / r3]])


def test_reinforce_pp_turn_returns_by_hand() -> None:
    # Scores by token (gamma 0.9): A: [1.4, 1.0], B: [0, 0]; mean 0.6,
    # population std sqrt((0.64 + 0.16 + 0.36 + 0.36) / 4) = sqrt(0.38)
    cfg = AlgoSection(gamma=0.9, credit="turn")
    out = get_estimator("reinforce_pp")(turn_mode_pair(), cfg)
    s = math.sqrt(0.38)
    close(out.advantages[:, [1, 3]], [[0.8 / s, 0.4 / s], [-0.6 / s, -0.6 / s]])


# ----------------------------------------------------------------------------- vs loops


CONFIGS = [
    AlgoSection(),
    AlgoSection(gamma=0.9, lam=0.8, whiten=False),
    AlgoSection(gamma=0.95, lam=0.0, credit="turn"),
    AlgoSection(gamma=0.7, lam=0.5, credit="turn", whiten=False),
]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"g{c.gamma}-l{c.lam}-{c.credit}")
def test_vectorized_matches_loop_reference(seed: int, cfg: AlgoSection) -> None:
    inp = random_batch(seed)
    for name, ref in (("gae", gae_ref), ("gae_turn", gae_turn_ref)):
        out = get_estimator(name)(inp, cfg)
        adv, ret = ref(inp, cfg)
        torch.testing.assert_close(out.advantages, adv)
        torch.testing.assert_close(out.returns, ret)
    for name in ("grpo", "dr_grpo", "rloo"):
        out = get_estimator(name)(inp, cfg)
        torch.testing.assert_close(out.advantages, group_ref(inp, cfg, name))
        torch.testing.assert_close(out.returns, scores_ref(inp, cfg)[0])
    out = get_estimator("reinforce_pp")(inp, cfg)
    torch.testing.assert_close(out.advantages, reinforce_pp_ref(inp, cfg))


@pytest.mark.parametrize("name", ALL)
def test_zero_off_the_mask_and_float32(name: str) -> None:
    inp = random_batch(11)
    inp32 = AdvantageInput(
        inp.token_rewards.float(),
        inp.loss_mask.bool(),
        inp.turn_ids,
        inp.group_ids,
        inp.values.float(),
    )
    out = get_estimator(name)(inp32, AlgoSection(gamma=0.9, lam=0.9))
    assert out.advantages.dtype == torch.float32
    assert (out.advantages[~inp32.loss_mask] == 0).all()
    assert (out.returns[~inp32.loss_mask] == 0).all()
    assert torch.isfinite(out.advantages).all()


# ----------------------------------------------------------------------------- invariances


@pytest.mark.parametrize("name", ALL)
def test_non_agent_rewards_and_values_do_not_matter(name: str) -> None:
    inp = random_batch(5)
    off = inp.loss_mask == 0
    g = torch.Generator().manual_seed(0)
    noise = torch.randn(inp.token_rewards.shape, generator=g, dtype=torch.float64) * 100
    changed = AdvantageInput(
        torch.where(off, noise, inp.token_rewards),
        inp.loss_mask,
        inp.turn_ids,
        inp.group_ids,
        torch.where(off, -noise, inp.values),
    )
    cfg = AlgoSection(gamma=0.9, lam=0.8)
    a, b = get_estimator(name)(inp, cfg), get_estimator(name)(changed, cfg)
    torch.testing.assert_close(a.advantages, b.advantages)
    torch.testing.assert_close(a.returns, b.returns)


def split_into_turn_rows(inp: AdvantageInput) -> tuple[AdvantageInput, torch.Tensor]:
    """One row per (episode, turn): the full row copied, with only that turn on the mask.
    Returns the new input and, for each new row, the original row it came from."""
    new_rows, origin = [], []
    for i in range(inp.loss_mask.shape[0]):
        for k in turns_of(inp, i):
            new_rows.append((i, inp.turn_ids[i] == k))
            origin.append(i)
    pick = torch.tensor(origin)
    only = torch.stack([m for _, m in new_rows])  # [B', T]
    return AdvantageInput(
        inp.token_rewards[pick],
        only.float(),
        torch.where(only, inp.turn_ids[pick], -1),
        inp.group_ids[pick],
        inp.values[pick],
        episode_ids=pick * 3 + 1,
    ), pick


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("returns", ["episode", "turn"])
def test_episode_split_over_rows_gives_the_same_advantages(name: str, returns: str) -> None:
    inp = random_batch(3, n_groups=2, group_size=3)
    split, pick = split_into_turn_rows(inp)
    perm = torch.randperm(pick.numel(), generator=torch.Generator().manual_seed(1))
    split = AdvantageInput(
        split.token_rewards[perm],
        split.loss_mask[perm],
        split.turn_ids[perm],
        split.group_ids[perm],
        split.values[perm],
        split.episode_ids[perm],
    )
    cfg = AlgoSection(gamma=0.9, lam=0.8, credit=returns)  # type: ignore[arg-type]
    whole, parts = get_estimator(name)(inp, cfg), get_estimator(name)(split, cfg)
    # Each token is on the mask in exactly one split row: summing the rows back recovers it.
    back = torch.zeros_like(whole.advantages).index_add_(0, pick[perm], parts.advantages)
    torch.testing.assert_close(back, whole.advantages)
    back = torch.zeros_like(whole.returns).index_add_(0, pick[perm], parts.returns)
    torch.testing.assert_close(back, whole.returns)


# ----------------------------------------------------------------------------- groups


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo"])
def test_group_of_one_is_an_error(name: str) -> None:
    inp = episode_rows([[1.0], [0.0], [1.0]], group_ids=[0, 0, 5])
    with pytest.raises(ValueError, match=r"at least 2 episodes per group.*\[5\]"):
        get_estimator(name)(inp, AlgoSection())


def test_rows_of_one_episode_count_once_in_a_group() -> None:
    # Two rows of episode 0 plus one row of episode 1: a group of 2 episodes, not 3 rows.
    inp = episode_rows([[1.0], [0.0], [0.0]])
    inp.episode_ids = torch.tensor([0, 0, 1])
    out = get_estimator("rloo")(inp, AlgoSection())  # returns: ep0 = 1, ep1 = 0
    close(out.advantages[:, 1], [1.0, 1.0, -1.0])
    inp.group_ids = torch.tensor([0, 1, 1])
    with pytest.raises(ValueError, match="share one group"):
        get_estimator("rloo")(inp, AlgoSection())


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo"])
def test_zero_variance_group_fraction(name: str) -> None:
    # groups: {1, 1} constant, {0, 0} constant, {1, 0} varied -> 2 / 3
    inp = episode_rows([[1.0], [1.0], [0.0], [0.0], [1.0], [0.0]], group_ids=[0, 0, 1, 1, 2, 2])
    out = get_estimator(name)(inp, AlgoSection())
    assert out.stats["zero_variance_group_fraction"] == pytest.approx(2 / 3)
    assert out.stats["num_groups"] == 3
    assert (out.advantages[:4] == 0).all()  # no signal from constant groups
