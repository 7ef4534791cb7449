"""ALFWorld family: generated games on the real engine, the real-data loader, progress.

Generated games are cached under $TRIPOD_CACHE (default here: /tmp/tripod-test-cache), so
only the first run pays for generation (about 1-25 s per game on 2 cores, planner-bound).
This module imports the generator (and so the `alfworld` wheel) into the test process, so it
points ALFWORLD_DATA into the test cache first (the wheel's import creates that folder).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("TRIPOD_CACHE", "/tmp/tripod-test-cache")
os.environ.setdefault("ALFWORLD_DATA", os.path.join(os.environ["TRIPOD_CACHE"], "alfworld", "data"))
pytest.importorskip("alfworld")

from tripod.envs import EnvError, make  # noqa: E402
from tripod.envs.alfworld import generator, real, scenes  # noqa: E402
from tripod.envs.alfworld.engine import Engine  # noqa: E402
from tripod.envs.alfworld.task_types import TASK_TYPES  # noqa: E402

GAMES_PER_TYPE = 2  # per task type (CI time: 3 cost pick_two alone 40 s)


def _play_expert(env, index: int, max_turns: int = 40):
    """Follow `expert_action` to the end; returns (final info, rewards, turns)."""
    _, info = env.reset(index)
    rewards = []
    for _ in range(max_turns):
        step = env.step(info.expert_action)
        info = step.info
        rewards.append(step.reward)
        if step.terminated or step.truncated:
            break
    return info, rewards


@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_expert_wins_every_generated_game(task_type):
    env = make(f"alfworld/generated-{task_type}", split="test")
    try:
        for index in range(GAMES_PER_TYPE):
            info, rewards = _play_expert(env, index)
            assert info.won, (task_type, index, info.game_id)
            assert info.extra["task_type"] == task_type
            assert info.progress == 1.0
            assert sum(rewards) == pytest.approx(1.0)  # dense progress telescopes
    finally:
        env.close()


def test_first_observation_objective_and_infos():
    env = make("alfworld/generated-pick_heat_then_place_in_recep", split="test")
    obs, info = env.reset(0)
    env.close()
    assert obs.startswith("You are in the middle of a room.")
    assert "Welcome to TextWorld" not in obs
    assert info.objective.startswith("Your task is to: ")
    assert info.objective in obs
    assert info.expert_action in info.admissible_actions
    assert info.progress == 0.0 and info.score == 0.0 and info.max_score == 3.0
    assert not info.won and not info.lost


def test_test_split_uses_unseen_scenes_only():
    """Every candidate the generator can draw for a test game is in a held-out scene (checked
    on the sampler itself, so it needs no cached game and no test order)."""
    train = set(scenes.split_scenes("train"))
    test = set(scenes.split_scenes("test"))
    assert train and test and not train & test
    for task_type in TASK_TYPES:
        for seed in range(30_000_000, 30_000_004):
            for split, allowed in (("test", test), ("train", train)):
                _, traj = generator.sample_game(split, seed, task_type, attempt=seed % 3)
                assert traj["scene"]["scene_num"] in allowed, (split, task_type, seed)
    kept = generator.cached_game("test", 30_000_000, "pick_and_place_simple")
    assert json.loads((kept.parent / "traj_data.json").read_text())["scene"]["scene_num"] in test


def test_bad_actions_get_nothing_happens():
    env = make("alfworld/generated-pick_and_place_simple", split="test")
    _, info = env.reset(0)
    for action in ("fly to the moon", "", "   ", "go to " + "x" * 10_000, "\x00\ud800 fly",
                   "TAKE everything"):
        step = env.step(action)
        assert step.observation == "Nothing happens."
        assert step.info.invalid_action
        assert step.reward == 0.0 and not step.terminated
    assert env.step("look").info.invalid_action is False  # still alive and responsive
    env.close()


def test_expert_recovers_after_a_detour_and_progress_stays_in_range():
    env = make("alfworld/generated-pick_clean_then_place_in_recep", split="test")
    _, info = env.reset(1)
    detour = next(a for a in info.admissible_actions
                  if a.startswith("go to") and a != info.expert_action)
    step = env.step(detour)
    info, rewards, progress = step.info, [step.reward], [step.info.progress]
    assert info.expert_action in info.admissible_actions  # replanned from the detour
    for _ in range(30):
        step = env.step(info.expert_action)
        info = step.info
        rewards.append(step.reward)
        progress.append(info.progress)
        if step.terminated:
            break
    env.close()
    assert info.won and progress[-1] == 1.0
    assert all(0.0 <= p <= 1.0 for p in progress)
    assert progress == sorted(progress)  # the expert never undoes a goal condition
    assert [p * 3 for p in progress] == [round(p * 3) for p in progress]  # thirds: 3 conditions
    assert sum(rewards) == pytest.approx(1.0)  # informational reward: progress gained


def test_max_turns_truncates():
    env = make("alfworld/generated-pick_and_place_simple", split="test", max_turns=2)
    env.reset(0)
    assert not env.step("look").truncated
    step = env.step("look")
    assert step.truncated and not step.terminated
    env.close()


def test_same_seed_same_game(tmp_path, monkeypatch):
    files = []
    for run in ("a", "b"):
        monkeypatch.setenv("TRIPOD_CACHE", str(tmp_path / run))
        path = generator.cached_game("train", 7, "pick_and_place_simple")
        files.append((path.read_text(), (path.parent / "traj_data.json").read_text()))
    assert files[0] == files[1]
    other = generator.sample_game("train", 8, "pick_and_place_simple", 0)[0]
    assert json.loads(files[0][0])["pddl_problem"] != other["pddl_problem"]


def test_generation_rejects_unsolvable_problems(monkeypatch):
    """Without canContain facts nothing can be put anywhere: the planner finds no plan."""
    game, _ = generator.sample_game("train", 3, "pick_and_place_simple", 0)
    broken = dict(game, pddl_problem="\n".join(
        line for line in game["pddl_problem"].splitlines() if "canContain" not in line))
    engine = Engine()
    plan, why = generator.solve(broken, engine)
    assert plan is None and why
    assert generator.solve(game, engine)[0]

    real_sample = generator.sample_game

    def first_unsolvable(split, seed, task_type, attempt):
        game, traj = real_sample(split, seed, task_type, attempt)
        if attempt == 0:
            game["pddl_problem"] = broken["pddl_problem"]
        return game, traj

    monkeypatch.setattr(generator, "sample_game", first_unsolvable)
    result = generator.generate("train", 3, "pick_and_place_simple", engine)
    engine.close()
    assert result.rejected == 1 and result.game["solvable"] and result.game["walkthrough"]


def _write_real_layout(root: Path) -> Path:
    """One generated game copied into ALFWorld's data layout (valid_unseen = tripod test)."""
    source = generator.cached_game("test", 30_000_000, "pick_and_place_simple")
    traj = json.loads((source.parent / "traj_data.json").read_text())
    params = traj["pddl_params"]
    task_dir = (root / "json_2.1.1" / "valid_unseen" /
                f"pick_and_place_simple-{params['object_target']}-None-"
                f"{params['parent_target']}-{traj['scene']['scene_num']}" / "trial_T0000")
    task_dir.mkdir(parents=True)
    for name in ("game.tw-pddl", "traj_data.json"):
        shutil.copy(source.parent / name, task_dir / name)
    # ALFWorld's filters: skipped task types, sliced tasks and unsolvable files.
    sliced = task_dir.parent.parent / "pick_and_place_simple-AppleSliced-None-Fridge-1" / "t"
    sliced.mkdir(parents=True)
    for name in ("game.tw-pddl", "traj_data.json"):
        shutil.copy(source.parent / name, sliced / name)
    return task_dir


def test_real_loader_plays_a_game_in_the_real_layout(tmp_path, monkeypatch):
    task_dir = _write_real_layout(tmp_path)
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    assert real.list_games("test", TASK_TYPES) == (task_dir / "game.tw-pddl",)  # sliced: skipped
    env = make("alfworld/real", split="test")
    info, rewards = _play_expert(env, 0)
    env.close()
    assert info.won and sum(rewards) == pytest.approx(1.0)
    assert info.game_id.endswith(task_dir.relative_to(tmp_path / "json_2.1.1" /
                                                      "valid_unseen").as_posix())
    with pytest.raises(EnvError, match="no solvable game"):
        make("alfworld/real-pick_heat_then_place_in_recep", split="test", data_dir=tmp_path)


def test_real_loader_names_the_variable_when_data_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(EnvError, match=r"ALFWORLD_DATA.*json_2\.1\.1|json_2\.1\.1.*ALFWORLD_DATA"):
        make("alfworld/real", split="train")


def test_ids_and_overrides():
    with pytest.raises(KeyError):
        make("alfworld/generated-fly_to_the_moon")
    with pytest.raises(TypeError, match="reward"):  # rewards are the reward pillar's setting
        make("alfworld/generated", reward="dense")
    with pytest.raises(TypeError):
        make("alfworld/generated", colour="red")
    with pytest.raises(ValueError, match="max_turns"):
        make("alfworld/generated", max_turns=0)
    env = make("alfworld/generated", split="test",
               task_types=["pick_and_place_simple", "look_at_obj_in_light"])
    _, first = env.reset(0)
    _, second = env.reset(1)
    env.close()
    assert [first.extra["task_type"], second.extra["task_type"]] == [
        "pick_and_place_simple", "look_at_obj_in_light"]


def test_play_human_in_the_terminal():
    play = pytest.importorskip("tripod.envs.play")
    env = make("alfworld/generated-pick_and_place_simple", split="test")
    _, info = env.reset(0)
    env.close()
    commands = iter(["?", *(_expert_walk(info.game_id))])
    printed: list[str] = []
    summary = play.play("alfworld/generated-pick_and_place_simple", "human", episodes=1,
                        split="test", input_fn=lambda _: next(commands),
                        print_fn=lambda *a, **k: printed.append(" ".join(map(str, a))))
    assert summary.won == 1
    assert any("Your task is to:" in line for line in printed)


def _expert_walk(game_id: str) -> list[str]:
    task_seed = game_id.rsplit("/", 1)[1]
    task_type, seed = task_seed.rsplit("-", 1)
    path = generator.game_dir("test", int(seed), task_type) / "game.tw-pddl"
    return json.loads(path.read_text())["walkthrough"]


SEARCHED_TYPES = ("pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep")
"""Task types the searching expert is tested on (games the tests above generate anyway)."""


@pytest.mark.parametrize("task_type", SEARCHED_TYPES)
def test_searching_expert_wins_by_looking_where_the_planner_walks_straight(task_type):
    """ALFWorld's handcoded agent (`expert_type: handcoded`) wins the generated games, every
    action it proposes is admissible, and it plays no shorter than the planner (it finds the
    objects by visiting receptacles instead of reading their places from the state)."""
    searcher = make(f"alfworld/generated-{task_type}", split="test", expert_type="handcoded")
    planner = make(f"alfworld/generated-{task_type}", split="test")
    try:
        for index in range(GAMES_PER_TYPE):
            walked = []
            _, info = searcher.reset(index)
            for _ in range(40):
                assert info.expert_action in info.admissible_actions
                walked.append(info.expert_action)
                info = searcher.step(info.expert_action).info
                if info.won:
                    break
            assert info.won, (task_type, index, walked)
            planned, _ = _play_expert(planner, index)
            assert len(walked) >= planned.extra["turn"]
    finally:
        searcher.close()
        planner.close()


def test_searching_expert_is_reproducible_and_recovers_from_a_detour():
    """The same game gives the same proposals; after actions it did not choose (DAgger: the
    policy plays, the expert labels) it still leads to a win."""
    env = make("alfworld/generated-pick_and_place_simple", split="test", expert_type="handcoded")
    try:
        runs = []
        for _ in range(2):
            _, info = env.reset(1)
            proposals = [info.expert_action]
            for _ in range(3):
                info = env.step(info.expert_action).info
                proposals.append(info.expert_action)
            runs.append(proposals)
        assert runs[0] == runs[1]
        _, info = env.reset(1)
        for detour in ("inventory", "look", next(a for a in info.admissible_actions
                                               if a.startswith("go to"))):
            info = env.step(detour).info
        for _ in range(40):
            info = env.step(info.expert_action).info
            if info.won:
                break
        assert info.won
    finally:
        env.close()


def test_admissible_actions_option_lists_the_commands_after_the_observation():
    plain = make("alfworld/generated-pick_and_place_simple", split="test")
    listed = make("alfworld/generated-pick_and_place_simple", split="test",
                  admissible_actions=True)
    try:
        obs, info = plain.reset(0)
        obs_listed, info_listed = listed.reset(0)
        assert "Admissible actions:" not in obs
        assert obs_listed == f"{obs}\nAdmissible actions: {', '.join(info.admissible_actions)}"
        step = listed.step(info_listed.admissible_actions[0])
        assert step.observation.endswith(", ".join(step.info.admissible_actions))
    finally:
        plain.close()
        listed.close()
    with pytest.raises(ValueError, match="expert_type"):
        make("alfworld/generated", split="test", expert_type="oracle")


def test_hybrid_expert_asks_the_planner_only_where_the_searcher_gives_up():
    """`expert_type: hybrid` proposes what the handcoded agent proposes until it gives up
    (on pick_two it stalls after the first placement, proposing `look` or repeating itself);
    there the planner's next action is proposed, so the hybrid wins where the handcoded agent
    does not, with no `look` after the first turn."""
    kind = "alfworld/generated-pick_two_obj_and_place"
    hybrid = make(kind, split="test", expert_type="hybrid")
    handcoded = make(kind, split="test", expert_type="handcoded")
    try:
        for index in range(GAMES_PER_TYPE):
            _, info = hybrid.reset(index)
            _, alone = handcoded.reset(index)
            played, gave_up_at = [], None
            for turn in range(40):
                assert info.expert_action in info.admissible_actions
                if gave_up_at is None and info.expert_action != alone.expert_action:
                    gave_up_at = turn
                played.append(info.expert_action)
                info = hybrid.step(info.expert_action).info
                if gave_up_at is None:   # the handcoded agent sees the same game so far
                    alone = handcoded.step(played[-1]).info
                if info.won:
                    break
            assert info.won, (index, played)
            assert "look" not in played[1:], played
            assert gave_up_at is not None and gave_up_at > 0, played  # it searched first
    finally:
        hybrid.close()
        handcoded.close()


def test_objective_and_inventory_options_restate_the_task_state_after_each_step():
    plain = make("alfworld/generated-pick_and_place_simple", split="test")
    told = make("alfworld/generated-pick_and_place_simple", split="test", objective=True,
                inventory=True)
    try:
        obs, info = plain.reset(0)
        told_obs, _ = told.reset(0)
        assert told_obs == obs   # the intro already states the task
        held = None
        for action in _expert_walk(info.game_id):
            step, told_step = plain.step(action), told.step(action)
            if action.startswith("take "):
                held = action.removeprefix("take ").split(" from ")[0]
            elif action.startswith("move "):
                held = None
            carrying = f"You are carrying: a {held}." if held else "You are not carrying anything."
            assert told_step.observation == f"{step.observation}\n{info.objective}\n{carrying}"
        assert step.info.won and told_step.info.won
    finally:
        plain.close()
        told.close()
