"""The trainer's turn (`core.types.Turn`) and the recorded turn (`report.records.TurnRecord`)
agree: every field of a Turn is recorded under its own name, recorded under another, or
left out for a stated reason, so a field added to one schema cannot be forgotten in the
other."""

from __future__ import annotations

from dataclasses import fields

from tripod.core.types import EpisodeJob, Trajectory, Turn, TurnStatus
from tripod.report.records import TurnRecord, read_trajectories, write_trajectories

RENAMED = {"action_text": "action", "action_ids": "tokens.ids", "logprobs": "tokens.logprobs",
           "trainable": "tokens.loss_mask"}
"""Turn field -> where the record keeps it."""
LEFT_OUT = {
    "prompt_ids": "the prompt is the objective, history and observation the record keeps "
                  "as text; its ids would multiply a file's size by the context length",
    "allowed_ids": "restricted decoding's allowed ids per step are the trainer's input, not "
                   "something a reader inspects; the sampled ids and logprobs are recorded",
}
"""Turn fields a record does not keep, and why."""


def test_every_turn_field_is_recorded_renamed_or_left_out_on_purpose():
    turn = {f.name for f in fields(Turn)}
    record = {f.name for f in fields(TurnRecord)}
    shared = turn & record
    assert turn == shared | set(RENAMED) | set(LEFT_OUT), "decide how the record keeps it"
    renamed_top = {target.split(".")[0] for target in RENAMED.values()}
    assert record == shared | renamed_top, "a record field no Turn field fills"


class _CharTokenizer:
    def batch_decode(self, sequences, **kwargs):
        return ["".join(chr(i) for i in seq) for seq in sequences]


def test_shared_fields_survive_a_write_and_a_read(tmp_path):
    traj = Trajectory(EpisodeJob("toy/letters-2", "train", 0, 0, 0, 0), "obj", "start")
    traj.turns.append(Turn([1, 2], [ord("a")], [-0.5], "a", "obs", 0.25, TurnStatus.INVALID,
                           score=3.0, progress=0.75, expert_action="take a"))
    (ep,) = read_trajectories(write_trajectories(tmp_path / "t.jsonl", [traj],
                                                 _CharTokenizer(), 1))
    turn, rec = traj.turns[0], ep.turns[0]
    for name in {f.name for f in fields(Turn)} & {f.name for f in fields(TurnRecord)}:
        want = getattr(turn, name)
        want = want.value if isinstance(want, TurnStatus) else want
        assert getattr(rec, name) == want, name
    assert (rec.action, rec.tokens.ids, rec.tokens.logprobs) == ("a", [97], [-0.5])
