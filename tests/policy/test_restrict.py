"""Replies restricted to admissible commands (`rollout.restrict_actions`).

The restriction changes the distribution the policy samples from, so the invariants of the
rollout must hold for the restricted distribution: every reply is exactly one admissible
command, and the trainer's teacher-forced logprobs (with the recorded allowed ids) equal the
sampling logprobs at the temperatures recipes train with, so the PPO ratio is 1 before the
first update. Without the allowed ids the trainer would compute another distribution: the
last test checks that this difference is visible (the invariant test can fail).
"""

from __future__ import annotations

import pytest
import torch

from tripod.algos.losses import entropy_from_logits
from tripod.core.config import TrainConfig
from tripod.core.types import Trajectory, Turn, TurnStatus
from tripod.envs.base import Step, StepInfo
from tripod.policy.restrict import MASKED_LOGIT, CommandTrie, mask_logits, restricted_logits
from tripod.policy.rollout import RolloutConfig, RolloutEngine, make_jobs, played_here
from tripod.policy.sampler import SamplingParams
from tripod.train.batch import collate, token_logprobs, trajectory_rows

EOS = 99
WORDS = ["apple", "banana", "cherry", "dates"]
"""The toy env's admissible words with `vocabulary: 4`."""


def test_trie_allows_exactly_the_continuations_of_the_commands():
    trie = CommandTrie([[1, 2, EOS], [1, 3, EOS], [1, 2, 4, EOS], [5, EOS]])
    assert trie.allowed([]) == [1, 5]
    assert trie.allowed([1]) == [2, 3]
    assert trie.allowed([1, 2]) == [4, EOS]        # a command ends here, a longer one goes on
    assert trie.allowed([1, 2, 4]) == [EOS]
    assert trie.allowed([1, 2, EOS]) == []         # after the end-of-turn id: nothing
    assert trie.allowed([7]) == []                 # off the trie
    with pytest.raises(ValueError, match="at least one"):
        CommandTrie([])


def test_trie_path_lists_each_steps_allowed_ids_of_a_whole_command():
    trie = CommandTrie([[1, 2, EOS], [1, 3, EOS], [1, 2, 4, EOS], [5, EOS]])
    assert trie.path([1, 2, EOS]) == [[1, 5], [2, 3], [4, EOS]]
    assert trie.path([5, EOS]) == [[1, 5], [EOS]]
    assert trie.path([1, 2]) is None            # stops before the command's end
    assert trie.path([1, 7, EOS]) is None       # leaves the trie


def test_trie_of_commands_tokenizes_like_a_demonstration(tiny_policy_factory):
    tok = tiny_policy_factory().tokenizer
    commands = ["go to desk 1", "go to desk 10", "open drawer 2", "go to desk 1", ""]
    trie = CommandTrie.of_commands(tok, commands, EOS, max_tokens=24)
    for text in ("go to desk 1", "go to desk 10", "open drawer 2"):
        ids = tok(text, add_special_tokens=False)["input_ids"] + [EOS]
        for k in range(len(ids)):
            assert ids[k] in trie.allowed(ids[:k])
    # a command that cannot finish within max_tokens is left out; none left -> no trie
    longest = max(len(tok(c, add_special_tokens=False)["input_ids"]) for c in commands if c)
    assert CommandTrie.of_commands(tok, commands, EOS, max_tokens=1) is None
    short = CommandTrie.of_commands(tok, ["look", "go to desk 10"], EOS, max_tokens=2)
    assert short is not None and short.allowed([]) == tok("look", add_special_tokens=False)["input_ids"]
    assert longest > 1


def test_sampler_mask_and_trainer_mask_give_one_distribution():
    torch.manual_seed(0)
    logits = torch.randn(3, 50)
    allowed = [[0, 7, 9], None, [49]]
    sampled = torch.log_softmax(mask_logits(logits, allowed) / 0.7, dim=-1)
    padded = torch.tensor([[0, 7, 9], [-1, -1, -1], [49, -1, -1]])
    trained = torch.log_softmax(restricted_logits(logits / 0.7, padded), dim=-1)
    for b, ids in enumerate(allowed):
        keep = ids if ids is not None else list(range(50))
        ref = torch.log_softmax(logits[b, keep] / 0.7, dim=-1)       # the hand-made restriction
        assert torch.allclose(sampled[b, keep], ref, atol=1e-6)
        assert torch.allclose(trained[b, keep], ref, atol=1e-6)
        assert float(sampled[b].exp().sum()) == pytest.approx(1.0, abs=1e-6)
    assert float(trained[2, 49]) == 0.0                 # one allowed id: certain
    assert float(trained[0, 1].exp()) == 0.0
    entropy = entropy_from_logits(restricted_logits(logits, padded))
    assert torch.isfinite(entropy).all() and float(entropy[2]) == pytest.approx(0.0, abs=1e-6)
    assert torch.finfo(torch.float32).min < MASKED_LOGIT / 0.01   # stays finite when tempered


def _play(policy, temperature: float, restrict: bool = True, greedy: bool = False):
    cfg = RolloutConfig(max_turns=3, batch_size=6, truncated_action="step",
                        restrict_actions=restrict, env_options={"vocabulary": 4})
    engine = RolloutEngine(policy, cfg)
    jobs = make_jobs("toy/letters-3", "train", [0, 1], 3, 0)
    params = SamplingParams(temperature=0.0 if greedy else temperature, max_new_tokens=8)
    trajs, _ = engine.collect(jobs, params)
    engine.close()
    return trajs


def _trainer_logprobs(policy, trajs, temperature, with_allowed=True):
    rows = [r for t in trajs for r in trajectory_rows(t, [0.0] * t.num_turns)]
    batch = collate(rows, policy.pad_token_id)
    with torch.no_grad():
        logp, _, _ = token_logprobs(policy.model, batch.input_ids, batch.attention_mask,
                                    temperature, batch.loss_mask,
                                    allowed_ids=batch.allowed_ids if with_allowed else None)
    return [lp for i in range(batch.num_rows) for lp in logp[i][batch.loss_mask[i].bool()].tolist()]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_restricted_rollout_replies_are_commands_and_logprobs_match(tiny_policy_factory,
                                                                   temperature):
    policy = tiny_policy_factory()
    trajs = _play(policy, temperature)
    words = WORDS
    for traj in trajs:
        assert traj.num_turns == 3
        for turn in traj.turns:
            assert turn.action_text in words              # exactly one admissible command
            assert turn.action_ids[-1] == policy.eos_token_ids[0]
            assert len(turn.allowed_ids) == len(turn.action_ids)
            assert all(t in ids for t, ids in zip(turn.action_ids, turn.allowed_ids))
    recorded = [lp for t in trajs for turn in t.turns for lp in turn.logprobs]
    trained = _trainer_logprobs(policy, trajs, temperature)
    assert len(trained) == len(recorded)
    assert max(abs(a - b) for a, b in zip(trained, recorded)) < 1e-4
    # the random tiny model puts almost no mass on these words: unrestricted logprobs of the
    # same ids are far lower, so a trainer that forgot the allowed ids would be caught
    free = _trainer_logprobs(policy, trajs, temperature, with_allowed=False)
    assert max(abs(a - b) for a, b in zip(free, recorded)) > 1.0


def test_restricted_greedy_takes_an_admissible_command(tiny_policy_factory):
    policy = tiny_policy_factory()
    trajs = _play(policy, 0.0, greedy=True)
    assert all(turn.action_text in WORDS for t in trajs for turn in t.turns)
    free = _play(policy, 0.0, restrict=False, greedy=True)
    assert all(turn.allowed_ids is None for t in free for turn in t.turns)


# -- rollout.avoid_repeats ---------------------------------------------------------------

class _Hall:
    """A room that reads the same whatever the agent does (a revisited state every turn):
    three commands, none of which changes the observation or the progress."""

    COMMANDS = ["apple", "banana", "cherry"]

    def reset(self, game_index: int):
        return "A hall.", self._info()

    def step(self, action: str):
        return Step("A hall.", 0.0, False, False, self._info())

    def _info(self):
        return StepInfo(objective="Leave the hall.", admissible_actions=list(self.COMMANDS),
                        max_score=1.0)

    def close(self) -> None:
        pass


def _turn(action: str, observation: str, progress: float = 0.0,
          status: TurnStatus = TurnStatus.OK) -> Turn:
    return Turn([], [], [], action, observation, 0.0, status, progress=progress)


def test_played_here_keys_a_state_by_its_observation_and_progress():
    job = make_jobs("toy/letters-3", "train", [0], 1, 0)[0]
    traj = Trajectory(job, objective="", first_observation="at A")
    traj.turns = [_turn("go to b", "at B"), _turn("go to a", "at A"),
                  _turn("take x", "at A", progress=0.5),     # same text, more progress
                  _turn("go to c ", "at A", progress=0.5, status=TurnStatus.INVALID),
                  _turn("go to b", "at B", progress=0.5)]
    assert played_here(traj, "at A", 0.0) == {"go to b", "take x"}
    # the invalid turn left the agent where it was (A with progress 0.5): it went to B from there
    assert played_here(traj, "at A", 0.5) == {"go to c", "go to b"}
    assert played_here(traj, "at B", 0.0) == {"go to a"}
    assert played_here(traj, "at C", 0.0) == set()


def _play_hall(policy, temperature: float, avoid: bool):
    cfg = RolloutConfig(max_turns=4, batch_size=4, restrict_actions=True, avoid_repeats=avoid)
    engine = RolloutEngine(policy, cfg, env_factory=lambda job: _Hall())
    jobs = make_jobs("toy/letters-3", "train", [0, 1], 2, 0)
    trajs, _ = engine.collect(jobs, SamplingParams(temperature=temperature, max_new_tokens=8))
    engine.close()
    return trajs


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_avoid_repeats_leaves_out_what_the_state_has_seen_and_logprobs_match(
        tiny_policy_factory, temperature):
    policy = tiny_policy_factory()
    trajs = _play_hall(policy, temperature, avoid=True)
    tok, eos = policy.tokenizer, policy.eos_token_ids[0]
    first_ids = {w: tok(w, add_special_tokens=False)["input_ids"][0] for w in _Hall.COMMANDS}
    for traj in trajs:
        actions = [t.action_text for t in traj.turns]
        assert len(actions) == 4 and set(actions) <= set(_Hall.COMMANDS)
        # each state is the hall: the first three turns take three different commands, and
        # the fourth, with all three played, may take any again
        assert len(set(actions[:3])) == 3
        for k, turn in enumerate(traj.turns[:3]):
            allowed_first = set(turn.allowed_ids[0])
            assert allowed_first == {first_ids[w] for w in _Hall.COMMANDS
                                     if w not in actions[:k]}
        assert set(traj.turns[3].allowed_ids[0]) == set(first_ids.values())
        assert all(t.action_ids[-1] == eos for t in traj.turns)
    if temperature > 0:   # the trainer recomputes the reduced distribution that was sampled
        recorded = [lp for t in trajs for turn in t.turns for lp in turn.logprobs]
        trained = _trainer_logprobs(policy, trajs, temperature)
        assert max(abs(a - b) for a, b in zip(trained, recorded)) < 1e-4


def test_without_avoid_repeats_every_command_stays_allowed(tiny_policy_factory):
    trajs = _play_hall(tiny_policy_factory(), 0.0, avoid=False)
    sizes = {len(t.allowed_ids[0]) for traj in trajs for t in traj.turns}
    assert sizes == {3}


def test_avoid_repeats_needs_restricted_replies():
    with pytest.raises(ValueError, match="avoid_repeats needs"):
        TrainConfig.model_validate({"rollout": {"avoid_repeats": True}})
    assert TrainConfig.model_validate(
        {"rollout": {"avoid_repeats": True, "restrict_actions": True}}).rollout.avoid_repeats
