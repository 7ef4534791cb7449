"""Each estimator makes the tiny model learn the two-turn toy task (issue: learning).

`toy/letters-2`: answer "apple" on turn 1 and "banana" on turn 2 (four admissible words,
listed in each game's objective in that game's own order: the test games use the orders of
odd parity and the training and SFT games those of even parity, so the held-out test games
show prompts never seen in training, `test_no_test_prompt_occurs_in_training`, while the
answers stay the same). The tiny model (random Llama, SmolLM2 tokenizer) first gets a *format* prior by SFT on
a uniformly random admissible word per turn (like an instruct model that knows how to answer
but not the task), so greedy success starts near a random policy's 1/16; then RL alone must
find the right word for each turn, which needs the model to tell the two turns apart.
Success is greedy (temperature 0) on 16 held-out `test` games.

Settings, measured on this task (see docs/glossary.md, "turn credit"):
- 64 episodes per iteration (16 games x 4). With 32, the noise in the shared "which word"
  direction of a context-free prior collapses the policy to one word for both turns
  (return 0.5, every group zero-variance) before it learns to read the turn.
- KL to the prior in the loss (0.05) keeps it from collapsing as well.
- The format prior is trained on whole batches of 8 (`sft.micro_batch_size=8`). Accumulating
  the same update over single rows (the SFT default) changes it only by float rounding, yet
  at lr 1e-2 over 8 epochs that gives a different prior. From that prior, rloo, grpo and
  reinforce_pp missed 90% in 50 iterations: 0%, 75% and 0% greedy success, the last after
  reaching 98% training success and collapsing. The 50-iteration budget has little margin.
- `gigpo` is not in this test. From the row-by-row prior it passed (>= 90%). From this prior it
  collapsed to one word for both turns: training success fell to 0 by iteration 30, with
  step_weight 1 and with 2. Its episode-level half scores every turn by the whole episode's
  return, the credit that stalls GRPO on this task (see above). Its math is tested in
  tests/algos/test_gigpo.py.
- Critic-free estimators score each turn by its own reward (``credit=turn``, gamma 0): a
  turn's reward here depends on that turn's answer only. With gamma 1 the model's habit of
  repeating its previous answer makes "banana, banana" as good as "apple, apple" for turn 1,
  and GRPO stalled there on one of three seeds. `gae` discounts per *token*, so it keeps
  gamma 1 and its critic learns the per-turn values.
"""

from __future__ import annotations

import copy

import pytest
import torch

from tripod.core.config import load_config
from tripod.eval.evaluate import evaluate
from tripod.policy.rollout import RolloutEngine, make_jobs, random_actor
from tripod.policy.sampler import SamplingParams
from tripod.policy.settings import rollout_config, sampling_params
from tripod.train.rl import train_rl
from tripod.train.sft import demo_rows, train_sft

ENV = "toy/letters-2"
BASE = [f"env.id={ENV}", "env.max_turns=2", "env.options={vocabulary: 4}", "model.name=tiny",
        "sft.lr=1e-2", "sft.epochs=8", "sft.batch_size=8", "sft.micro_batch_size=8",
        "rollout.games_per_iter=16",
        "rollout.group_size=4", "rollout.batch_size=64", "rollout.train.temperature=1.0",
        "rollout.train.max_new_tokens=4", "rollout.eval.max_new_tokens=4", "reward.kind=dense",
        "algo.credit=turn", "algo.lr=3e-3", "algo.critic_lr=3e-3", "algo.kl_coef=0.05",
        "algo.kl_in=loss", "algo.minibatch_size=64", "algo.micro_batch_size=64",
        "train.tensorboard=false"]
# BASE samples at temperature 1.0 because its settings were measured there; the learner's
# use of another temperature is pinned at 0.7 by tests/train/test_wiring.py, in seconds.
GAMMA = {"gae": 1.0, "grpo": 0.0, "rloo": 0.0, "reinforce_pp": 0.0}
ITERATIONS = 50


@pytest.fixture(scope="module")
def format_prior(tiny_policy_factory, tmp_path_factory):
    cfg = load_config(overrides=BASE + [f"run.out_dir={tmp_path_factory.mktemp('prior')}"])
    policy = tiny_policy_factory(seed=0)
    engine = RolloutEngine(policy, rollout_config(cfg))
    demos, _ = engine.collect(make_jobs(ENV, "sft", list(range(64)), 1, 0), SamplingParams(),
                              actor=random_actor())
    train_sft(policy, demo_rows(demos), cfg)
    return policy, cfg


def _success(policy, cfg) -> float:
    """Greedy success on 16 held-out test games."""
    assert cfg.rollout.eval.temperature == 0.0, "evaluation must be greedy"
    res, trajs = evaluate(policy, ENV, "test", 16, sampling_params(cfg.rollout.eval),
                          rollout_config(cfg))
    assert len({t.objective for t in trajs}) > 1, "the test games must differ"
    return res.success_rate


HEAVY = {"gae", "grpo", "reinforce_pp"}
"""Learning runs in `make test-all` for these; in CI for `rloo` (the quickstart's estimator)
only, for CI time (gae took 120-140 s and rloo 80-90 s on one core each of 2 pytest-xdist
workers). `grpo` and `reinforce_pp` share `rloo`'s path but for the baseline (unit-tested in
tests/algos); `gae`'s critic, GAE and value loss are checked against hand-computed values
(tests/algos), 2 processes against 1 (tests/scale) and in the PPO recipes end to end."""


@pytest.mark.slow
@pytest.mark.parametrize("estimator", [
    # each its own xdist group: two workers learn at once, each building the prior (~7 s)
    pytest.param(e, marks=([pytest.mark.heavy] if e in HEAVY else [])
                 + [pytest.mark.xdist_group(f"learning-{e}")]) for e in sorted(GAMMA)])
def test_estimator_learns_toy_task(format_prior, tmp_path, estimator):
    prior, _ = format_prior
    policy = copy.deepcopy(prior)
    cfg = load_config(overrides=BASE + [
        f"run.out_dir={tmp_path}", f"algo.estimator={estimator}",
        f"algo.gamma={GAMMA[estimator]}", f"train.iterations={ITERATIONS}"])
    before = _success(policy, cfg)
    result = train_rl(cfg, policy=policy, quiet=True)
    after = _success(result.policy, cfg)
    assert before <= 1 / 16, f"the format prior already solves the task ({before:.0%})"
    assert all(h["nan_skips"] == 0 for h in result.history), "a loss was not finite"
    assert all(torch.isfinite(torch.tensor(h["grad_norm"])) for h in result.history)
    moved = [not torch.equal(a, b) for a, b in zip(prior.model.parameters(),
                                                   result.policy.model.parameters())]
    assert all(moved), "some parameters did not change"
    assert after >= 0.9, f"{estimator}: {before:.0%} -> {after:.0%}; history " + str(
        [round(h["success_rate"], 2) for h in result.history])


def test_toy_games_differ_by_index_and_split():
    """Held-out games are other games (their own word order and id); the answers are not."""
    train = [_game("train", i) for i in range(16)]
    test = [_game("test", i) for i in range(16)]
    assert len({objective for objective, _, _ in train}) > 4  # 16 games, several orders
    assert not {i for _, i, _ in train} & {i for _, i, _ in test}  # ids differ by split
    assert {a for _, _, a in train + test} == {"apple"}  # the same first answer everywhere
    assert _game("test", 3) == _game("test", 3)  # a pure function of (split, index)


def test_no_test_prompt_occurs_in_training():
    """The games the learning test plays (every RL iteration's and the format prior's) never
    show the prompt of a test game it is scored on: the objective (the word list) and the
    first observation are all a first prompt holds besides the fixed template."""
    from tripod.train.rl import iteration_games

    cfg = load_config(overrides=BASE + [f"train.iterations={ITERATIONS}"])
    played = {g for it in range(ITERATIONS) for g in iteration_games(cfg, it)}
    seen = {_game("train", i, prompt=True) for i in played}
    seen |= {_game("sft", i, prompt=True) for i in range(64)}
    test = {_game("test", i, prompt=True) for i in range(16)}
    assert len(test) > 4 and len(seen) > 4
    assert not test & seen, "a test prompt occurs in training"


def _game(split: str, index: int, prompt: bool = False) -> tuple[str, str, str | None]:
    """(objective, game id, first expert action), or (objective, first observation) with
    `prompt`: what a game's first prompt is built from."""
    from tripod.envs import make

    observation, info = make(ENV, split=split, vocabulary=4).reset(index)
    if prompt:
        return info.objective, observation
    return info.objective, info.game_id, info.expert_action
