"""Scripted play: the expert solves every game, random play rarely does, a human can play."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tripod.envs import make
from tripod.envs.play import PlaySummary, default_max_turns, play
from tripod.envs.textworld import prepare_games

CUSTOM = "textworld/w2-o3-q4"
SIMPLE = "textworld/simple-dense"
N_CUSTOM, N_SIMPLE = 10, 5


@pytest.fixture(scope="module", autouse=True)
def _games() -> Iterator[None]:
    """Generate the games once, in parallel; reused from /tmp/tripod-test-cache later."""
    with pytest.MonkeyPatch.context() as mp:
        if "TRIPOD_CACHE" not in os.environ:
            mp.setenv("TRIPOD_CACHE", "/tmp/tripod-test-cache")
        prepare_games(CUSTOM, "test", range(N_CUSTOM), workers=2, progress=False)
        prepare_games(SIMPLE, "test", range(N_SIMPLE), workers=2, progress=False)
        yield


@pytest.fixture(scope="module")
def expert_custom() -> PlaySummary:
    return play(CUSTOM, "expert", N_CUSTOM, print_fn=lambda *_: None)


def test_expert_wins_every_custom_game(expert_custom: PlaySummary) -> None:
    assert expert_custom.episodes == N_CUSTOM
    assert expert_custom.won == N_CUSTOM and expert_custom.success_rate == 1.0
    assert all(r.turns <= 12 and r.invalid_actions == 0 for r in expert_custom.records)
    assert expert_custom.lost == 0


def test_random_wins_far_fewer(expert_custom: PlaySummary) -> None:
    rand = play(CUSTOM, "random", N_CUSTOM, print_fn=lambda *_: None)
    assert rand.won <= expert_custom.won // 4
    assert rand.mean_turns > expert_custom.mean_turns
    again = play(CUSTOM, "random", N_CUSTOM, print_fn=lambda *_: None)
    assert [r.actions for r in again.records] == [r.actions for r in rand.records]  # seeded


def test_expert_wins_every_tw_simple_game() -> None:
    summary = play(SIMPLE, "expert", N_SIMPLE, print_fn=lambda *_: None)
    assert summary.won == N_SIMPLE and summary.lost == 0
    rand = play(SIMPLE, "random", N_SIMPLE, print_fn=lambda *_: None)
    assert rand.won < N_SIMPLE // 2


def test_summary_json_and_records(expert_custom: PlaySummary) -> None:
    data = expert_custom.to_json()
    assert data["episodes"] == N_CUSTOM and data["won"] == N_CUSTOM
    assert data["success_rate"] == 1.0
    assert [r["index"] for r in data["records"]] == list(range(N_CUSTOM))
    assert data["records"][0]["game_id"]


def test_human_policy_plays_from_input() -> None:
    env = make(CUSTOM, split="test")
    _, info = env.reset(3)
    env.close()
    typed = iter(["?", *info.extra["walkthrough"]])
    shown: list[str] = []
    summary = play(CUSTOM, "human", 1, seed=3, input_fn=lambda _: next(typed),
                   print_fn=lambda *a: shown.append(" ".join(map(str, a))))
    assert summary.won == 1
    assert any(info.objective in line for line in shown)  # the player saw the task
    assert any(", ".join(info.admissible_actions) in line for line in shown)  # "?" help


def test_human_quit_on_end_of_input() -> None:
    def eof(_: str) -> str:
        raise EOFError

    summary = play(CUSTOM, "human", 3, input_fn=eof, print_fn=lambda *_: None)
    assert summary.episodes == 0 and summary.success_rate == 0.0


def test_human_quit_by_typing_quit() -> None:
    """A new player types "quit": the play stops instead of sending it to the game."""
    typed = iter(["look", "quit"])
    shown: list[str] = []
    summary = play(CUSTOM, "human", 3, input_fn=lambda _: next(typed),
                   print_fn=lambda *a: shown.append(" ".join(map(str, a))))
    assert summary.episodes == 0
    assert '"quit" stops' in shown[0]


def test_turn_cap_and_defaults() -> None:
    summary = play(CUSTOM, "random", 2, max_turns=2, print_fn=lambda *_: None)
    assert all(r.turns == 2 and r.truncated for r in summary.records)
    assert default_max_turns(CUSTOM) == 12
    assert default_max_turns("textworld/w4-o6-q8") == 24
    assert default_max_turns(SIMPLE) == 24
    with pytest.raises(ValueError, match="unknown policy"):
        play(CUSTOM, "greedy", 1)
