"""Teacher-forced next-action accuracy (`sft.heldout_games`): a turn counts as correct when
greedy decoding, given the demonstration's own history, would reply with its action."""

from __future__ import annotations

import copy

import pytest

from tripod.policy.rollout import RolloutConfig, RolloutEngine, expert_actor, make_jobs
from tripod.policy.sampler import SamplingParams
from tripod.train.sft import action_accuracy


def _greedy(policy, restrict: bool, actor=None):
    cfg = RolloutConfig(max_turns=3, batch_size=4, truncated_action="step",
                        restrict_actions=restrict, env_options={"vocabulary": 4})
    engine = RolloutEngine(policy, cfg)
    jobs = make_jobs("toy/letters-3", "train", [0, 1, 2], 1, 0)
    trajs, _ = engine.collect(jobs, SamplingParams(temperature=0.0, max_new_tokens=8), actor)
    engine.close()
    return trajs


def test_the_policys_own_greedy_replies_score_every_turn_and_a_changed_reply_misses(
        tiny_policy_factory):
    policy = tiny_policy_factory()
    trajs = _greedy(policy, restrict=True)
    acc = action_accuracy(policy, trajs, restricted=True)
    turns = sum(t.num_turns for t in trajs)
    assert (acc.turns, acc.correct, acc.restricted, acc.off_list) == (turns, turns, turns, 0)
    # scored over the whole vocabulary, the random tiny model prefers other tokens
    free = copy.deepcopy(trajs)
    for turn in (x for t in free for x in t.turns):
        turn.allowed_ids = None
    assert action_accuracy(policy, free, restricted=False).correct < turns
    # another admissible reply in the first turn of one episode: that turn alone misses
    # (every later turn keeps the history it was recorded with)
    changed = copy.deepcopy(trajs)
    first = changed[0].turns[0]
    other = next(i for i in first.allowed_ids[0] if i != first.action_ids[0])
    first.action_ids = [other] + first.action_ids[1:]
    for later in changed[0].turns[1:]:
        later.prompt_ids[len(first.prompt_ids)] = other
    assert action_accuracy(policy, changed, restricted=True).correct == turns - 1


def test_scripted_demonstrations_record_the_commands_allowed_ids(tiny_policy_factory):
    policy = tiny_policy_factory()
    demos = _greedy(policy, restrict=True, actor=expert_actor(0.0))
    turns = [x for t in demos for x in t.turns]
    assert turns and all(t.allowed_ids is not None for t in turns)
    assert all(len(t.allowed_ids) == len(t.action_ids) for t in turns)
    assert all(tok in ids for t in turns for tok, ids in zip(t.action_ids, t.allowed_ids))
    plain = _greedy(policy, restrict=False, actor=expert_actor(0.0))
    assert all(x.allowed_ids is None for t in plain for x in t.turns)
    acc = action_accuracy(policy, demos, restricted=True)
    assert acc.turns == len(turns) and acc.restricted == len(turns)


def test_restricted_sft_loss_is_the_nll_among_the_allowed_ids(tiny_policy_factory):
    """`sft.restricted_loss`: a demonstration token's loss is -log of its share among the
    ids its step allowed (a hand-made softmax over them); a forced token costs nothing."""
    import torch

    from tripod.core.config import load_config
    from tripod.train.batch import collate, decoder_hidden
    from tripod.train.sft import demo_rows, sft_loss

    policy = tiny_policy_factory()
    demos = _greedy(policy, restrict=True, actor=expert_actor(0.0))
    batch = collate(demo_rows(demos[:1]), policy.pad_token_id)
    with torch.no_grad():
        free, n = sft_loss(policy, batch)
        restricted, n_r = sft_loss(policy, batch, restricted=True)
        hidden = decoder_hidden(policy.model, batch.input_ids, batch.attention_mask)
        logits = policy.model.get_output_embeddings()(hidden).float()
    expected = 0.0
    for t in range(1, batch.input_ids.shape[1]):
        if batch.loss_mask[0, t] > 0:
            ids = [i for i in batch.allowed_ids[0, t].tolist() if i >= 0]
            share = torch.log_softmax(logits[0, t - 1, ids], dim=-1)
            expected -= float(share[ids.index(int(batch.input_ids[0, t]))])
    assert n == n_r and float(restricted) == pytest.approx(expected, rel=1e-4, abs=1e-5)
    assert float(restricted) < float(free)
    with pytest.raises(ValueError, match="restrict_actions"):
        load_config(overrides=["model.name=tiny", "sft.restricted_loss=true"])
