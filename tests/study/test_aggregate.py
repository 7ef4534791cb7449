"""Paired and unpaired comparisons against hand-computed and published values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tripod.studies.aggregate import (
    EvalRow,
    Paired,
    Unpaired,
    compare,
    compare_arms,
    fisher_exact,
    mcnemar_exact,
    newcombe_interval,
    paired_bootstrap,
    summarise_arms,
    summary_markdown,
)


def row(arm: str, seed: int, wins: str, env: str = "e") -> EvalRow:
    outcomes = {g: (None if c == "E" else c == "1") for g, c in enumerate(wins)}
    won = sum(v is True for v in outcomes.values())
    ran = sum(v is not None for v in outcomes.values())
    return EvalRow(arm, seed, env, "final", "test", won, ran, len(wins) - ran, 1.0, 0.0,
                   outcomes, "run")


@pytest.mark.parametrize(("a_only", "b_only", "p"), [
    (0, 0, 1.0),
    (6, 0, 2 / 64),                                  # 2 * P(X <= 0), X ~ Bin(6, 1/2)
    (23, 9, 2 * sum(math.comb(32, i) for i in range(10)) / 2**32),
    (3, 3, 1.0),
])
def test_mcnemar_exact(a_only, b_only, p):
    assert mcnemar_exact(a_only, b_only) == pytest.approx(p)
    assert mcnemar_exact(b_only, a_only) == pytest.approx(p)


def test_mcnemar_of_23_games_gained_and_9_lost():
    """The quickstart's RL checkpoint against its SFT one on 100 test games (23 gained, 9
    lost) was reported with p = 0.02."""
    assert round(mcnemar_exact(23, 9), 2) == 0.02


def test_paired_bootstrap_brackets_the_mean_and_is_degenerate_without_spread():
    assert paired_bootstrap(np.zeros(10)) == (0.0, 0.0)
    lo, hi = paired_bootstrap(np.array([1.0] * 6 + [0.0] * 6))
    assert 0.2 <= lo < 0.5 < hi <= 0.8


def test_compare_pairs_same_seed_and_game_and_skips_env_errors():
    rows = [row("a", 0, "1100"), row("a", 1, "10E1"), row("b", 0, "0101"), row("b", 1, "1001")]
    (c,) = compare_arms(rows, "a", "b")
    # pairs (seed, game): s0: (1,0) (1,1) (0,0) (0,1); s1: (1,1) (0,0) (E) (1,1) -> 7 pairs
    assert (c.pairs, c.a_only, c.b_only) == (7, 1, 1)
    assert c.difference.diff == pytest.approx(0.0)
    assert c.difference.p_value == pytest.approx(1.0)


def test_summaries_pool_seeds_and_keep_each_seed():
    (s,) = summarise_arms([row("a", 0, "1100"), row("a", 1, "1110")]).values()
    assert (s.successes, s.episodes, s.per_seed) == (5, 8, {0: 0.5, 1: 0.75})


@pytest.mark.parametrize(("counts", "interval"), [
    ((56, 70, 48, 80), (0.0524, 0.3339)),   # Newcombe (1998), Table II, method 10
    ((9, 10, 3, 10), (0.1705, 0.8090)),     # same table
])
def test_newcombe_interval_of_a_difference_of_proportions(counts, interval):
    assert newcombe_interval(*counts) == pytest.approx(interval, abs=5e-5)


def test_fisher_exact_two_sided():
    # 3 of 4 against 1 of 4: tables x = 0..4 have probabilities 1, 16, 36, 16, 1 (/70); all
    # but the middle one are at most as likely as the observed x = 3
    assert fisher_exact(3, 4, 1, 4) == pytest.approx(34 / 70)
    assert fisher_exact(1, 4, 3, 4) == pytest.approx(34 / 70)
    assert fisher_exact(0, 10, 10, 10) == pytest.approx(2 / math.comb(20, 10))
    assert fisher_exact(2, 4, 2, 4) == pytest.approx(1.0)


def test_arms_without_a_common_env_are_compared_unpaired():
    rows = [row("small", 0, "1110", env="w2"), row("small", 1, "1100", env="w2"),
            row("big", 0, "1000", env="w8"), row("big", 1, "00E0", env="w8")]
    assert compare_arms(rows, "small", "big") == []      # no game in common
    (c,) = compare(rows, "small", "big")
    assert isinstance(c, Unpaired)
    assert (c.a_envs, c.b_envs) == (["w2"], ["w8"])
    assert (c.a_won, c.a_n, c.b_won, c.b_n) == (5, 8, 1, 7)   # the env error is not a game
    assert c.difference.diff == pytest.approx(5 / 8 - 1 / 7)
    assert c.difference.ci95 == pytest.approx(newcombe_interval(5, 8, 1, 7))
    assert c.difference.p_value == pytest.approx(fisher_exact(5, 8, 1, 7))
    text = summary_markdown("t", [], rows, [c], [])
    assert "## Unpaired comparisons" in text and "## Paired comparisons" not in text
    assert "| small vs big | w2 | w8 | 5/8 | 1/7 | +48.2% |" in text
    paired = [row("a", 0, "1100"), row("b", 0, "0101")]
    assert all(isinstance(x, Paired) for x in compare(paired, "a", "b"))
