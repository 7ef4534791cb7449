"""DAgger demonstrations (`sft.dagger_games`): the expert hands a share of the turns to the
model being trained, and only its own turns, taken from the states the model led to, are
imitated. The model's turns must be recorded exactly as RL records them: the KV cache of an
episode whose turns alternate between the model and the expert stays the context's."""

from __future__ import annotations

import json

import pytest
import torch

from tripod.cli import main
from tripod.policy.rollout import RolloutConfig, RolloutEngine, expert_actor, make_jobs
from tripod.policy.sampler import SamplingParams
from tripod.train.batch import collate, token_logprobs, trajectory_rows


@pytest.mark.parametrize("restrict", [False, True])
def test_model_turns_between_expert_turns_are_recorded_as_sampled(tiny_policy_factory,
                                                                  restrict):
    policy = tiny_policy_factory()
    cfg = RolloutConfig(max_turns=6, batch_size=4, truncated_action="step",
                        restrict_actions=restrict, env_options={"vocabulary": 4})
    engine = RolloutEngine(policy, cfg)
    jobs = make_jobs("toy/letters-6", "train", [0, 1, 2, 3], 1, 0)
    trajs, _ = engine.collect(jobs, SamplingParams(temperature=0.7, max_new_tokens=8),
                              actor=expert_actor(0.0, policy_share=0.5))
    engine.close()
    turns = [x for t in trajs for x in t.turns]
    model = [x for x in turns if not x.trainable]
    expert = [x for x in turns if x.trainable]
    assert model and expert                          # both kinds, mixed within episodes
    assert any(len({x.trainable for x in t.turns}) == 2 for t in trajs)
    assert all(lp == 0.0 for x in expert for lp in x.logprobs)
    assert all(lp <= 0.0 for x in model for lp in x.logprobs)
    assert any(lp < 0.0 for x in model for lp in x.logprobs)
    if restrict:   # a token only one command allows is certain: logprob 0
        assert all(x.allowed_ids is not None for x in model)
    # the trainer's teacher-forced logprobs of the model's tokens equal the sampled ones
    rows = [r for t in trajs for r in trajectory_rows(t, [0.0] * t.num_turns)]
    assert len(rows) == len(trajs)                   # each episode stays one sequence
    batch = collate(rows, policy.pad_token_id)
    sampled = torch.tensor([[lp for lp in r.logprobs] + [0.0] * (batch.input_ids.shape[1]
                            - len(r.logprobs)) for r in rows])
    at = (batch.turn_ids >= 0) & (batch.loss_mask == 0)   # the model's tokens: not imitated
    with torch.no_grad():
        logp, _, _ = token_logprobs(policy.model, batch.input_ids, batch.attention_mask, 0.7,
                                    at.float(), allowed_ids=batch.allowed_ids)
    assert int(at.sum()) == sum(len(x.action_ids) for x in model)
    assert (logp[at] - sampled[at]).abs().max() < 1e-4


def _train_toy(tmp_path, sft: str, evaluation: str) -> dict:
    """`tripod train` of the toy env with the given `sft` and `eval` sections, for 0 RL
    iterations; its results.json."""
    recipe = tmp_path / "toy.yaml"
    recipe.write_text(
        "env: {id: toy/letters-4, max_turns: 4, options: {vocabulary: 4}}\nmodel: {name: tiny}\n"
        f"run: {{name: toy, out_dir: {tmp_path}}}\nalgo: {{estimator: grpo}}\n"
        "rollout: {group_size: 2, games_per_iter: 2, restrict_actions: true}\n"
        f"{sft}\ntrain: {{iterations: 0, tensorboard: false}}\n{evaluation}\n")
    assert main(["train", str(recipe), "rollout.eval.max_new_tokens=4"]) == 0
    return json.loads((tmp_path / "toy" / "results.json").read_text())


def test_a_dagger_round_trains_on_the_experts_turns_of_model_led_episodes(tmp_path):
    results = _train_toy(
        tmp_path, "sft: {enabled: true, games: 2, dagger_games: 3, dagger_share: 0.5, heldout_games: 2}",
        "eval: {games: 2, before_training: false, before_dagger: true}")
    dagger = results["sft_train"]["dagger"]
    assert dagger["episodes"] == 3 and dagger["expert_turns"] > 0 and dagger["model_turns"] > 0
    held = results["sft_heldout"]
    assert {"base", "sft-before-dagger", "sft"} <= set(held)
    # the SFT model is evaluated before and after its DAgger round, not the base model
    assert set(results["eval"]) == {"sft-before-dagger", "sft"}
    assert (tmp_path / "toy" / "sft" / "model.safetensors").is_file()


def test_a_dagger_round_starts_from_a_saved_sft_model_with_sft_epochs_0(tmp_path):
    """`sft.epochs: 0` skips the first SFT: the DAgger round starts from `model.name` as it
    is (its accuracy before the round is the loaded model's) and still trains on the
    demonstrations together with the DAgger episodes."""
    results = _train_toy(
        tmp_path, "sft: {enabled: true, games: 2, epochs: 0, dagger_games: 3, heldout_games: 2}",
        "eval: {games: 2, before_training: false}")
    assert results["sft_train"]["tokens"] == 0 and results["sft_train"]["demos"] == 2
    dagger = results["sft_train"]["dagger"]
    assert dagger["episodes"] == 3 and dagger["tokens"] > 0
    held = results["sft_heldout"]
    # no SFT between the base model and the DAgger round: the same model, the same accuracy
    assert held["base"] == held["sft-before-dagger"]
    assert (tmp_path / "toy" / "sft" / "model.safetensors").is_file()


def test_dagger_rounds_each_play_the_games_with_the_last_rounds_model(tmp_path):
    """`sft.dagger_rounds: 2`: two rounds of the same games, each followed by its SFT; the
    held-out accuracy is measured between them."""
    results = _train_toy(
        tmp_path, "sft: {enabled: true, games: 2, dagger_games: 3, dagger_rounds: 2, heldout_games: 2}",
        "eval: {games: 2, before_training: false}")
    rounds = results["sft_train"]["dagger_rounds"]
    assert [r["round"] for r in rounds] == [1, 2]
    assert all(r["episodes"] == 3 and r["tokens"] > 0 for r in rounds)
    assert results["sft_train"]["dagger"] == rounds[-1]
    assert {"base", "sft-before-dagger", "dagger-round-1", "sft"} <= set(results["sft_heldout"])


def test_sft_epochs_0_without_a_dagger_round_is_a_config_error():
    import pytest
    from pydantic import ValidationError

    from tripod.core.config import TrainConfig
    with pytest.raises(ValidationError, match="sft.epochs=0"):
        TrainConfig.model_validate({"env": {"id": "toy/letters-4"},
                                    "sft": {"enabled": True, "epochs": 0}})
