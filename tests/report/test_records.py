"""Trajectory records: round trip, token alignment, and clear errors on damaged files."""

from __future__ import annotations

import gzip
import json
import math

import pytest

from tripod.core.types import EpisodeEnd, EpisodeJob, Trajectory, Turn, TurnStatus
from tripod.report.records import (
    RecordError,
    TokenStats,
    iteration_path,
    read_trajectories,
    sample_groups,
    token_pieces,
    token_stats_from_batch,
    trajectory_files,
    write_trajectories,
)
from tripod.train.batch import collate, trajectory_rows

from .helpers import HOSTILE, hostile_stats, hostile_trajectories


class CharTokenizer:
    """One token per character (id = code point), so a test can put any text in a piece."""

    def batch_decode(self, sequences, **kwargs):
        return ["".join(chr(i) for i in seq) for seq in sequences]


def _traj(actions: list[str], episode_id: int = 0, group_id: int = 0,
          consistent: bool = True) -> Trajectory:
    """A trajectory whose turns extend each other's prompts (one training row) or not."""
    traj = Trajectory(EpisodeJob("toy/letters-2", "train", 0, group_id, episode_id, 0), "obj",
                      "start")
    context = [1000, 1001]
    for k, action in enumerate(actions):
        ids = [ord(c) for c in action]
        prompt = list(context) if consistent else [2000 + k]
        traj.turns.append(Turn(prompt, ids, [-0.5 - 0.01 * i for i in range(len(ids))],
                               action, f"obs {k}", 0.5 * k, TurnStatus.OK))
        context = prompt + ids + [3000 + k]
    return traj


def test_round_trip_keeps_text_tokens_and_stats(tmp_path):
    traj = _traj(["ab", HOSTILE[4]], episode_id=7)
    traj.turns[0].trainable = False
    stats = {7: TokenStats(advantages=[[0.25, -1.0], [0.5] * len(HOSTILE[4])],
                           trainer_logprobs=[[-0.4, float("nan")], [-1.0] * len(HOSTILE[4])])}
    path = write_trajectories(tmp_path / "t.jsonl.gz", [traj], CharTokenizer(), 3, stats)
    (ep,) = read_trajectories(path)
    assert (ep.iteration, ep.source, ep.episode_id, ep.end) == (3, "train", 7, "max_turns")
    assert ep.turns[1].action == HOSTILE[4]            # lone surrogate and ANSI survive
    assert "".join(ep.turns[1].tokens.text) == HOSTILE[4]
    t0 = ep.turns[0].tokens
    assert t0.ids == [97, 98] and t0.loss_mask == [0, 0]  # untrainable turn: masked
    assert t0.advantages == [0.25, -1.0]
    assert t0.trainer_logprobs[0] == -0.4 and math.isnan(t0.trainer_logprobs[1])
    assert ep.turns[1].tokens.loss_mask == [1] * len(HOSTILE[4])
    assert ep.turns[1].reward == 0.5
    with gzip.open(path, "rb") as f:
        raw = f.read()
    raw.decode("ascii")  # strict JSON, ASCII only: no NaN token, no raw surrogate
    assert b"NaN" not in raw


def test_env_error_episode_is_masked_out_and_stats_are_optional(tmp_path):
    traj = _traj(["go"], episode_id=1)
    traj.end, traj.error = EpisodeEnd.ENV_ERROR, "boom"
    (ep,) = read_trajectories(write_trajectories(tmp_path / "t.jsonl", [traj],
                                                 CharTokenizer(), 0))
    assert ep.turns[0].tokens.loss_mask == [0, 0]
    assert ep.turns[0].tokens.advantages is None and ep.turns[0].tokens.trainer_logprobs is None
    assert ep.outcome == "env_error" and ep.error == "boom"


def test_misaligned_stats_are_an_error_naming_the_turn(tmp_path):
    traj = _traj(["abc", "de"], episode_id=4)
    stats = {4: TokenStats(advantages=[[0.0, 0.0, 0.0], [0.0]])}
    with pytest.raises(ValueError, match="episode 4 turn 1: 1 advantages for 2 sampled tokens"):
        write_trajectories(tmp_path / "t.jsonl", [traj], CharTokenizer(), 0, stats)


def test_append_adds_episodes_to_a_gzip_file(tmp_path):
    path = tmp_path / "t.jsonl.gz"
    write_trajectories(path, [_traj(["a"], episode_id=0)], CharTokenizer(), 1)
    write_trajectories(path, [_traj(["b"], episode_id=1)], CharTokenizer(), 2, append=True)
    assert [(e.iteration, e.episode_id) for e in read_trajectories(path)] == [(1, 0), (2, 1)]


def test_token_pieces_join_to_the_decoded_text(tokenizer):
    text = "héllo <b>日本</b> 🎉\nnext"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [2]
    pieces = token_pieces(tokenizer, ids)
    assert len(pieces) == len(ids)
    assert "".join(pieces) == tokenizer.decode(ids)
    assert "\ufffd" not in "".join(pieces)  # split characters land whole on one token
    assert "" in pieces                       # ... and their first bytes get empty pieces
    assert pieces[-1] == "<|im_end|>"


@pytest.mark.parametrize("consistent", [True, False], ids=["one-row", "row-per-turn"])
def test_token_stats_from_batch_align_with_each_turn(consistent):
    trajs = [_traj(["abc", "de", "f"], episode_id=e, group_id=e // 2, consistent=consistent)
             for e in range(3)]
    rows = [r for t in trajs for r in trajectory_rows(t, [0.0] * t.num_turns)]
    assert len(rows) == (3 if consistent else 9)
    batch = collate(rows, pad_id=0)
    batch.loss_mask[0, :] = 0  # a trainer mask differing from the trajectory's
    stats = token_stats_from_batch(batch, trainer_logprobs=batch.old_logprobs)
    assert sorted(stats) == [0, 1, 2]
    for t in trajs:
        s = stats[t.episode_id]
        assert s.advantages is None
        for k, turn in enumerate(t.turns):
            assert s.trainer_logprobs[k] == pytest.approx(turn.logprobs)
            want = 0 if (t.episode_id == 0 and (consistent or k == 0)) else 1
            assert s.loss_masks[k] == [want] * len(turn.action_ids)


def test_damaged_files_name_the_file_and_line(tmp_path):
    good = write_trajectories(tmp_path / "good.jsonl", [_traj(["a"], episode_id=e)
                                                        for e in range(3)], CharTokenizer(), 0)
    lines = good.read_text().splitlines()

    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(lines[:3]) + "\n" + lines[3][: len(lines[3]) // 2])
    with pytest.raises(RecordError, match=r"cut\.jsonl: line 4: "):
        read_trajectories(cut)

    missing = tmp_path / "missing.jsonl"
    data = json.loads(lines[2])
    del data["turns"][0]["tokens"]["loss_mask"]
    missing.write_text("\n".join([lines[0], lines[1], json.dumps(data)]) + "\n")
    with pytest.raises(RecordError, match=r"missing\.jsonl: line 3: missing field 'loss_mask'"):
        read_trajectories(missing)

    short = tmp_path / "short.jsonl"
    data = json.loads(lines[1])
    data["turns"][0]["tokens"]["logprobs"] = []
    short.write_text(lines[0] + "\n" + json.dumps(data) + "\n")
    with pytest.raises(RecordError, match=r"line 2: tokens\.logprobs has 0 values for 1 ids"):
        read_trajectories(short)

    newer = tmp_path / "newer.jsonl"
    newer.write_text('{"format": "tripod-trajectories", "version": 99}\n' + lines[1] + "\n")
    with pytest.raises(RecordError, match="line 1: format version 99 is newer"):
        read_trajectories(newer)

    gz = write_trajectories(tmp_path / "t.jsonl.gz", [_traj(["a" * 500], episode_id=e)
                                                      for e in range(50)], CharTokenizer(), 0)
    truncated = tmp_path / "truncated.jsonl.gz"
    truncated.write_bytes(gz.read_bytes()[: gz.stat().st_size // 2])
    with pytest.raises(RecordError, match=r"truncated\.jsonl\.gz: line \d+: cannot read the "
                                          r"file \(truncated or corrupt"):
        read_trajectories(truncated)


def test_sample_groups_and_run_layout(tmp_path):
    trajs = [_traj(["a"], episode_id=e, group_id=g) for e, g in enumerate([2, 2, 0, 0, 5])]
    assert [t.episode_id for t in sample_groups(trajs, 2)] == [0, 1, 2, 3]
    path = write_trajectories(iteration_path(tmp_path, 4), trajs, CharTokenizer(), 4)
    assert path == tmp_path / "trajectories" / "iter_000004.jsonl.gz"
    assert trajectory_files(tmp_path) == [path]


def test_hostile_trajectories_round_trip(tmp_path, tokenizer):
    trajs = hostile_trajectories(tokenizer)
    path = write_trajectories(tmp_path / "h.jsonl.gz", trajs, tokenizer, 1, hostile_stats(trajs))
    episodes = read_trajectories(path)
    assert [e.outcome for e in episodes] == ["won", "lost", "env_error", "truncated"] * 2
    assert episodes[0].objective == HOSTILE[0]
    assert episodes[3].turns[1].action == HOSTILE[4]


def test_tiny_run_records_match_the_trainer(tiny_run):
    """The RL loop's own records: the trainer's logprobs at update time match the sampling
    logprobs (README invariant, 1e-4 in fp32; records keep 4 decimals; one minibatch per
    iteration here, so every row is scored before the step), which only holds if every
    token's numbers are stored against the right token."""
    files = trajectory_files(tiny_run.run_dir)
    assert [f.name for f in files] == ["eval_base_toy_letters-2.jsonl.gz",
                                       "eval_final_toy_letters-2.jsonl.gz",
                                       "iter_000001.jsonl.gz", "iter_000002.jsonl.gz"]
    for path in files[2:]:
        episodes = read_trajectories(path)
        assert len(episodes) == 4 and {e.group_id for e in episodes} == {0, 1}
        for ep in episodes:
            for turn in ep.turns:
                t = turn.tokens
                assert t.advantages is not None and len(t.advantages) == len(t.ids) > 0
                assert t.trainer_logprobs == pytest.approx(t.logprobs, abs=2e-4)
        assert any(a != 0 for ep in episodes for turn in ep.turns for a in turn.tokens.advantages)
    evals = read_trajectories(files[1])
    assert {e.source for e in evals} == {"eval/final"}
    assert all(turn.tokens.advantages is None for e in evals for turn in e.turns)
