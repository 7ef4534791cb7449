"""GiGPO-style step-level advantages: hand-computed cases, a loop reference on random
batches, and the anchor-state keys the RL loop derives from observations."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from tripod.algos.advantages import AdvantageInput, get_estimator
from tripod.core.config import AlgoSection
from tripod.core.types import EpisodeJob, Trajectory, Turn, TurnStatus
from tripod.train.batch import collate, state_key, trajectory_rows, turn_state_keys

from .test_advantages import close, random_batch, split_into_turn_rows, turns_of

S = 1 / math.sqrt(2)  # (1 - 0.5) / sample std of [1, 0] = 0.5 / 0.7071


def with_states(inp: AdvantageInput, states: list[list[int]]) -> AdvantageInput:
    """`inp` with state key `states[i][k]` on every agent token of episode i's turn k."""
    ids = torch.full_like(inp.turn_ids, -1)
    for i in range(inp.loss_mask.shape[0]):
        for k, cols in turns_of(inp, i).items():
            ids[i, cols] = states[i][k]
    return AdvantageInput(inp.token_rewards, inp.loss_mask, inp.turn_ids, inp.group_ids,
                          inp.values, inp.episode_ids, ids)


def two_turn_rows(rewards: list[list[float]], states: list[list[int]],
                  groups: list[int] | None = None) -> AdvantageInput:
    """One row per episode, one agent token per turn (no env tokens)."""
    b, t = len(rewards), max(len(r) for r in rewards)
    mask, turn_ids = torch.zeros(b, t), torch.full((b, t), -1)
    token_rewards = torch.zeros(b, t, dtype=torch.float64)
    for i, r in enumerate(rewards):
        mask[i, : len(r)] = 1
        turn_ids[i, : len(r)] = torch.arange(len(r))
        token_rewards[i, : len(r)] = torch.tensor(r, dtype=torch.float64)
    inp = AdvantageInput(token_rewards, mask, turn_ids,
                         torch.tensor(groups if groups is not None else [0] * b))
    return with_states(inp, states)


def test_docstring_example_by_hand() -> None:
    # A: s0 -> s1, return 1; B: s0 -> s2, return 0. Episode level +-S; at s0 +-S; s1, s2 alone.
    inp = two_turn_rows([[0.0, 1.0], [0.0, 0.0]], [[10, 11], [10, 12]])
    out = get_estimator("gigpo")(inp, AlgoSection(estimator="gigpo"))
    close(out.advantages, [[2 * S, S], [-2 * S, -S]])
    close(out.returns, [[1.0, 1.0], [0.0, 0.0]])  # each turn's return-to-go
    assert out.stats["step_grouped_fraction"] == pytest.approx(0.5)


def test_a_state_revisited_within_and_across_episodes_by_hand() -> None:
    # Three episodes of one game, gamma 0.5. Returns-to-go G per turn:
    #   A: s0 (0) -> s1 (0) -> s2 (1):  G = [0.25, 0.5, 1]
    #   B: s0 (0) -> s1 (0):            G = [0, 0]
    #   C: s0 (0) -> s0 (1):            G = [0.5, 1]  (an action that did not move it)
    # Episode returns [1, 0, 1]: mean 2/3, sample std sqrt(1/3): A_episode = [.577, -1.155, .577]
    # Step group s0: {A0 .25, B0 0, C0 .5, C1 1}: mean .4375, sample std of the four.
    # Step group s1: {A1 .5, B1 0}: mean .25, std .3536 -> +-0.7071. s2 alone -> 0.
    inp = two_turn_rows([[0, 0, 1], [0, 0], [0, 1]], [[0, 1, 2], [0, 1], [0, 0]])
    out = get_estimator("gigpo")(inp, AlgoSection(estimator="gigpo", gamma=0.5,
                                                  step_weight=0.5))
    ep_sd = statistics.stdev([1, 0, 1])
    a_ep = [(1 - 2 / 3) / ep_sd, (0 - 2 / 3) / ep_sd, (1 - 2 / 3) / ep_sd]
    s0 = [0.25, 0.0, 0.5, 1.0]
    m0, sd0 = statistics.mean(s0), statistics.stdev(s0)
    step = {"A": [(0.25 - m0) / sd0, S, 0.0], "B": [(0 - m0) / sd0, -S],
            "C": [(0.5 - m0) / sd0, (1 - m0) / sd0]}
    expected = [[a_ep[0] + 0.5 * x for x in step["A"]],
                [a_ep[1] + 0.5 * x for x in step["B"]] + [0.0],
                [a_ep[2] + 0.5 * x for x in step["C"]] + [0.0]]
    close(out.advantages.float(), expected, tol=1e-4)


def test_same_key_in_two_groups_is_not_one_step_group() -> None:
    # Groups 0 and 1 both have state 7 at turn 0; pooled, group 1's 5 and 4 would dominate.
    inp = two_turn_rows([[1.0], [0.0], [5.0], [4.0]], [[7], [7], [7], [7]], [0, 0, 1, 1])
    out = get_estimator("gigpo")(inp, AlgoSection(estimator="gigpo"))
    close(out.advantages[:, 0].float(), [2 * S, -2 * S, 2 * S, -2 * S], tol=1e-4)


@pytest.mark.parametrize("seed", range(3))
def test_all_states_distinct_is_grpo(seed: int) -> None:
    base = random_batch(seed)
    n = base.loss_mask.shape[0]
    inp = with_states(base, [[1000 * i + k for k in range(64)] for i in range(n)])
    cfg = AlgoSection(estimator="gigpo")
    torch.testing.assert_close(get_estimator("gigpo")(inp, cfg).advantages,
                               get_estimator("grpo")(base, cfg).advantages)


def gigpo_ref(inp: AdvantageInput, cfg: AlgoSection) -> torch.Tensor:
    """Plain-loop GiGPO over one-row-per-episode batches."""
    n = inp.loss_mask.shape[0]
    turns = [turns_of(inp, i) for i in range(n)]
    turn_r = [{k: float(inp.token_rewards[i, cols].sum()) for k, cols in turns[i].items()}
              for i in range(n)]
    ret = [sum(r.values()) for r in turn_r]
    g = [int(x) for x in inp.group_ids]
    rtg: list[dict[int, float]] = []
    for r in turn_r:
        acc, out = 0.0, {}
        for k in sorted(r, reverse=True):
            acc = r[k] + cfg.gamma * acc
            out[k] = acc
        rtg.append(out)
    state = [{k: int(inp.state_ids[i, cols[0]]) for k, cols in turns[i].items()} for i in range(n)]

    def norm(x: float, pool: list[float]) -> float:
        if len(pool) < 2 or statistics.stdev(pool) == 0:
            return 0.0
        return (x - statistics.mean(pool)) / (statistics.stdev(pool) + 1e-6)

    adv = torch.zeros_like(inp.token_rewards)
    for i in range(n):
        a_ep = norm(ret[i], [ret[j] for j in range(n) if g[j] == g[i]])
        for k, cols in turns[i].items():
            pool = [rtg[j][q] for j in range(n) if g[j] == g[i]
                    for q in rtg[j] if state[j][q] == state[i][k]]
            adv[i, cols] = a_ep + cfg.step_weight * norm(rtg[i][k], pool)
    return adv


@pytest.mark.parametrize("seed", range(4))
def test_vectorized_matches_loop_reference(seed: int) -> None:
    base = random_batch(seed)
    gen = torch.Generator().manual_seed(seed)
    n = base.loss_mask.shape[0]
    inp = with_states(base, torch.randint(0, 3, (n, 64), generator=gen).tolist())
    cfg = AlgoSection(estimator="gigpo", gamma=0.9, step_weight=0.7)
    out = get_estimator("gigpo")(inp, cfg)
    torch.testing.assert_close(out.advantages, gigpo_ref(inp, cfg))
    assert (out.advantages[inp.loss_mask == 0] == 0).all()


def test_episode_split_over_rows_gives_the_same_advantages() -> None:
    base = random_batch(3, n_groups=2, group_size=3)
    n = base.loss_mask.shape[0]
    inp = with_states(base, torch.randint(0, 2, (n, 64),
                                          generator=torch.Generator().manual_seed(2)).tolist())
    split, pick = split_into_turn_rows(inp)
    split.state_ids = inp.state_ids[pick]
    cfg = AlgoSection(estimator="gigpo", gamma=0.9)
    whole, parts = get_estimator("gigpo")(inp, cfg), get_estimator("gigpo")(split, cfg)
    back = torch.zeros_like(whole.advantages).index_add_(0, pick, parts.advantages)
    torch.testing.assert_close(back, whole.advantages)


def test_missing_state_ids_is_a_clear_error() -> None:
    inp = two_turn_rows([[1.0], [0.0]], [[0], [0]])
    inp.state_ids = None
    with pytest.raises(ValueError, match="gigpo needs state_ids"):
        get_estimator("gigpo")(inp, AlgoSection(estimator="gigpo"))


# -- anchor-state keys from trajectories -----------------------------------------------------
def _traj(steps: list[tuple[str, TurnStatus]], first: str = "kitchen") -> Trajectory:
    traj = Trajectory(EpisodeJob("toy/letters-2", "train", 0, 0, 0, 0), "obj", first)
    context = [1, 2]
    for k, (obs, status) in enumerate(steps):
        ids = [10 + k, 11 + k]
        traj.turns.append(Turn(list(context), ids, [-0.1, -0.2], f"a{k}", obs, 0.0, status))
        context = context + ids + [50 + k]
    return traj


def test_turn_state_keys_follow_observations_and_skip_invalid_actions() -> None:
    traj = _traj([("hall", TurnStatus.OK), ("I don't understand", TurnStatus.INVALID),
                  ("kitchen", TurnStatus.OK), ("hall", TurnStatus.OK)])
    keys = turn_state_keys(traj)
    # turn 0 acts from the first observation; turn 2 acts after an invalid action: still in
    # the hall after one effective action (not in the state "I don't understand"); turn 3
    # is back in the kitchen, but after two effective actions: another key than turn 0's.
    assert keys == [state_key("0\n0.0\nkitchen"), state_key("1\n0.0\nhall"),
                    state_key("1\n0.0\nhall"), state_key("2\n0.0\nkitchen")]
    assert len(set(keys)) == 3
    other = _traj([("hall", TurnStatus.OK), ("kitchen", TurnStatus.OK)])
    assert turn_state_keys(other)[:2] == keys[:2]  # same path so far, same keys
    # the same room after as many actions, with a goal condition met: another state
    other.turns[0].progress = 0.5
    assert turn_state_keys(other)[1] != keys[1]
    assert state_key("hall") == state_key("hall") != state_key("Hall")
    assert 0 <= state_key("\udcff invalid surrogate") < 2**63


def test_batches_carry_state_ids_on_agent_tokens_only() -> None:
    traj = _traj([("hall", TurnStatus.OK), ("kitchen", TurnStatus.OK)])
    batch = collate(trajectory_rows(traj, [0.0, 1.0]), pad_id=0)
    on = batch.turn_ids >= 0
    assert (batch.state_ids[~on] == -1).all()
    keys = turn_state_keys(traj)
    for k in (0, 1):
        assert (batch.state_ids[batch.turn_ids == k] == keys[k]).all()
