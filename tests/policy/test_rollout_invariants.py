"""Token-in-token-out invariants of the rollout engine (issue: foundation).

(1) the agent tokens of the training row are exactly the sampled ids; (2) logprobs recomputed
by the trainer's teacher-forced forward pass match the sampling logprobs (fp32) to 1e-4;
(3) the loss mask covers exactly the agent tokens; (4) episodes never share history.

(2) is checked at the temperature every recipe trains with (0.7) and with nucleus sampling,
not only at T=1, where a trainer that forgot to divide by the temperature would still agree
with the sampler.
"""

from __future__ import annotations

import gc
import threading

import pytest
import torch

from tripod.envs.toy import LettersEnv
from tripod.policy.chat import PromptConfig
from tripod.policy.rollout import RolloutConfig, RolloutEngine, make_jobs
from tripod.policy.sampler import KVArena, SamplingParams
from tripod.train.batch import collate, token_logprobs, trajectory_rows

SAMPLING = [(1.0, 1.0), (0.7, 1.0), (0.7, 0.8)]
"""(temperature, top_p) settings the logprob invariant is checked at."""


def _play(policy, env_id, games, group, *, window=None, batch=8, tokens=12, turns=4, seed=0,
          temperature=1.0, top_p=1.0, truncated="step"):
    cfg = RolloutConfig(max_turns=turns, batch_size=batch, truncated_action=truncated,
                        prompt=PromptConfig(history_window=window))
    engine = RolloutEngine(policy, cfg)
    jobs = make_jobs(env_id, "train", list(range(games)), group, seed)
    trajs, stats = engine.collect(jobs, SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=tokens))
    engine.close()
    return trajs, stats


def _check_invariants(policy, trajs, temperature):
    rows = [r for t in trajs for r in trajectory_rows(t, [0.0] * t.num_turns)]
    batch = collate(rows, policy.pad_token_id)
    with torch.no_grad():
        logp, _, _ = token_logprobs(policy.model, batch.input_ids, batch.attention_mask,
                                    temperature, batch.loss_mask)
    worst = 0.0
    r = 0
    for traj in trajs:
        sampled = [tok for turn in traj.turns for tok in turn.action_ids]
        recorded = [lp for turn in traj.turns for lp in turn.logprobs]
        n_rows = len(trajectory_rows(traj, [0.0] * traj.num_turns))
        ids, lps, n_mask = [], [], 0
        for i in range(r, r + n_rows):
            m = batch.loss_mask[i].bool()
            ids += batch.input_ids[i][m].tolist()           # (1) agent tokens == sampled
            lps += logp[i][m].tolist()
            n_mask += int(m.sum())
        r += n_rows
        assert ids == sampled
        assert n_mask == len(sampled)                           # (3) mask == agent tokens
        if sampled:
            worst = max(worst, max(abs(a - b) for a, b in zip(lps, recorded)))
    assert worst < 1e-4, f"sampling vs teacher-forced logprobs differ by {worst}"  # (2)
    return rows


@pytest.mark.parametrize(("temperature", "top_p"), SAMPLING)
def test_invariants_tiny_full_history(tiny_policy_factory, temperature, top_p):
    policy = tiny_policy_factory()
    trajs, stats = _play(policy, "toy/letters-3", games=3, group=3, turns=3,
                         temperature=temperature, top_p=top_p)
    assert stats.generated_tokens > 0 and all(t.num_turns == 3 for t in trajs)
    rows = _check_invariants(policy, trajs, temperature)
    assert len(rows) == len(trajs)  # full history: one row per episode


@pytest.mark.parametrize(("temperature", "top_p"), SAMPLING)
def test_invariants_tiny_history_window(tiny_policy_factory, temperature, top_p):
    policy = tiny_policy_factory()
    trajs, _ = _play(policy, "toy/letters-3", games=2, group=2, turns=3, window=1,
                     temperature=temperature, top_p=top_p)
    rows = _check_invariants(policy, trajs, temperature)
    assert len(rows) == sum(t.num_turns for t in trajs)  # a finite window: one row per turn


def test_mask_excludes_environment_tokens(tiny_policy_factory):
    policy = tiny_policy_factory()
    trajs, _ = _play(policy, "toy/letters-2", games=1, group=2, turns=2)
    row = trajectory_rows(trajs[0], [0.0, 1.0])[0]
    first, second = trajs[0].turns
    # Everything before the first action and between the actions is env/template: mask 0.
    assert sum(row.loss_mask[: len(first.prompt_ids)]) == 0
    gap = slice(len(first.prompt_ids) + len(first.action_ids), len(second.prompt_ids))
    assert sum(row.loss_mask[gap]) == 0 and gap.stop > gap.start
    # Each turn's reward sits on its last agent token.
    last = len(second.prompt_ids) + len(second.action_ids) - 1
    assert row.rewards[last] == 1.0 and sum(row.rewards) == 1.0


def test_batching_does_not_change_an_episode(tiny_policy_factory):
    """Left-padded batched decoding over per-episode caches equals playing alone (greedy)."""
    policy = tiny_policy_factory()
    alone, _ = _play(policy, "toy/letters-3", games=1, group=1, batch=1, turns=3,
                     temperature=0.0)
    batched, _ = _play(policy, "toy/letters-3", games=3, group=2, batch=6, turns=3,
                       temperature=0.0)
    for a, b in zip(alone[0].turns, batched[0].turns):
        assert a.action_ids == b.action_ids and a.prompt_ids == b.prompt_ids
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-4


def test_group_members_never_share_history(tiny_policy_factory):
    policy = tiny_policy_factory()
    trajs, _ = _play(policy, "toy/letters-3", games=1, group=2, turns=3, seed=3)
    a, b = trajs
    assert a.sample_seed != b.sample_seed
    assert a.turns is not b.turns
    for ta, tb in zip(a.turns, b.turns):
        assert ta.prompt_ids is not tb.prompt_ids and ta.action_ids is not tb.action_ids
    # Different seeds sample different actions, so later prompts diverge.
    assert [t.action_ids for t in a.turns] != [t.action_ids for t in b.turns]
    assert a.turns[-1].prompt_ids != b.turns[-1].prompt_ids
    # Mutating one episode's records leaves the other untouched.
    before = list(b.turns[0].prompt_ids)
    a.turns[0].prompt_ids.append(-1)
    assert b.turns[0].prompt_ids == before


def test_same_seed_same_episode(tiny_policy_factory):
    policy = tiny_policy_factory()
    one, _ = _play(policy, "toy/letters-2", games=1, group=2, seed=5)
    two, _ = _play(policy, "toy/letters-2", games=1, group=2, seed=5)
    assert [t.action_ids for t in one[1].turns] == [t.action_ids for t in two[1].turns]


@pytest.mark.parametrize("window", [None, 1])
def test_collect_frees_its_kv_arena(tiny_policy_factory, window):
    """The arena is freed when `collect` returns, not when the cyclic collector next runs:
    at SmolLM2's size it is ~1 GB that would otherwise sit through the update."""
    policy = tiny_policy_factory()
    gc.collect()
    gc.disable()
    try:
        trajs, _ = _play(policy, "toy/letters-3", games=2, group=2, batch=3, turns=3,
                         window=window)
        alive = [o for o in gc.get_objects() if isinstance(o, KVArena)]
    finally:
        gc.enable()
    assert sum(t.num_turns for t in trajs) > 4   # the arena was used over several turns
    assert alive == []


def test_truncated_reply_ends_episode(tiny_policy_factory):
    """Paper rule: a reply without the end-of-turn token is invalid and ends the episode."""
    policy = tiny_policy_factory()
    trajs, _ = _play(policy, "toy/letters-3", games=1, group=2, tokens=2, truncated="end")
    truncated = [t for t in trajs if t.turns[0].action_ids[-1] not in policy.eos_token_ids]
    # A random tiny model almost never samples <|im_end|> within 2 tokens: the rule must fire.
    assert truncated
    for t in truncated:
        assert t.num_turns == 1 and t.end.value == "truncated_action"
        assert t.turns[0].status.value == "truncated"


class GatedLetters(LettersEnv):
    """`toy/letters-3` whose episode 0 holds its first step until `gate` opens; every other
    episode counts its finished episodes in `finished` and opens the gate when all are done.
    `log` lists (episode, turn) as steps return."""

    def __init__(self, episode: int, gate: threading.Event, log: list, others: int) -> None:
        super().__init__("toy/letters-3", turns=3)
        self.episode, self.gate, self.log, self.others = episode, gate, log, others

    def step(self, action):
        if self.episode == 0 and self._turn == 0:
            self.gate.wait(60)
        step = super().step(action)
        self.log.append((self.episode, self._turn))
        done = sum(1 for e, t in self.log if e != 0 and t == self.turns)
        if self.episode != 0 and step.terminated and done == self.others:
            self.gate.set()
        return step


def _gated(policy, overlap, timeout=60.0, others=2, batch=None):
    gate, log = threading.Event(), []
    cfg = RolloutConfig(max_turns=3, batch_size=batch or others + 1, truncated_action="step",
                        env_timeout_s=timeout, env_overlap_s=overlap)
    engine = RolloutEngine(policy, cfg,
                           env_factory=lambda job: GatedLetters(job.episode_id, gate, log,
                                                                others))
    try:
        trajs, stats = engine.collect(make_jobs("toy/letters-3", "train", [0], others + 1, 0),
                                      SamplingParams(temperature=0.7, max_new_tokens=6))
    finally:
        gate.set()  # a step still held (the default's time-out) returns and its thread ends
        engine.close()
    return trajs, stats, log


def test_with_env_overlap_the_others_decode_while_a_step_runs(tiny_policy_factory):
    """`env_overlap_s`: episode 0's first step returns only after the other episodes have
    finished all 3 turns, which they can only do by decoding while it runs. Every episode
    still plays its 3 turns token-exactly (invariants (1)-(3))."""
    policy = tiny_policy_factory()
    trajs, stats, log = _gated(policy, overlap=0.0)
    assert [t.failed for t in trajs] == [False] * 3
    assert [t.num_turns for t in trajs] == [3, 3, 3]
    assert log.index((0, 1)) > max(log.index((1, 3)), log.index((2, 3)))
    assert stats.overlapped_steps >= 1 and stats.env_steps == 9
    _check_invariants(policy, trajs, 0.7)


def test_new_episodes_join_the_arena_of_the_episodes_in_flight(tiny_policy_factory,
                                                               monkeypatch):
    """Batch of 3, 4 episodes: episode 3 starts when 1 and 2 finish and decodes alone while
    episode 0's step is held. It must take a slot in the rollout's one arena (a second
    arena would hold the caches twice), and everything stays token-exact."""
    made = []
    init = KVArena.__init__
    monkeypatch.setattr(KVArena, "__init__",
                        lambda self, *a, **k: (made.append(self), init(self, *a, **k))[1])
    policy = tiny_policy_factory()
    trajs, stats, log = _gated(policy, overlap=0.0, others=3, batch=3)
    assert [t.num_turns for t in trajs] == [3, 3, 3, 3] and not any(t.failed for t in trajs)
    assert log.index((0, 1)) > log.index((3, 3))   # episode 3 played while 0 was held
    assert len(made) == 1
    _check_invariants(policy, trajs, 0.7)


def test_without_env_overlap_a_turn_waits_for_every_step(tiny_policy_factory):
    """The default waits for all of a turn's steps: the others cannot go on, so episode 0's
    held step reaches the time-out (an env error) and only then do the others finish."""
    trajs, stats, log = _gated(tiny_policy_factory(), overlap=None, timeout=1.0)
    assert trajs[0].failed and "timed out" in trajs[0].error
    assert [t.num_turns for t in trajs[1:]] == [3, 3] and not any(t.failed for t in trajs[1:])
    assert stats.overlapped_steps == 0


def test_with_env_overlap_a_hung_step_still_times_out(tiny_policy_factory):
    """A step that never returns is an env error at its deadline while the others play on:
    with no other episode (others=0) nothing opens the gate."""
    trajs, stats, _ = _gated(tiny_policy_factory(), overlap=0.0, timeout=1.0, others=0)
    assert trajs[0].failed and "timed out" in trajs[0].error and stats.env_errors == 1


@pytest.mark.slow
def test_invariants_smollm2_textworld(smollm2):
    """The real model on a real game, at the recipes' sampling: invariants hold with the
    SmolLM2 chat template (groups share their first prompt: the prefix-sharing path)."""
    trajs, stats = _play(smollm2, "textworld/w2-o3-q4", games=2, group=2, tokens=10, turns=3,
                         batch=4, temperature=0.7, top_p=0.9)
    assert stats.episodes == 4
    _check_invariants(smollm2, trajs, 0.7)
