"""One tiny RL iteration, run by the data-parallel tests: under torchrun on every rank
(`python -m torch.distributed.run ... _dp_worker.py OUT OVERRIDES...`), or in the test's own
process as the one-process reference. Each rank saves its weights and the metrics."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from tripod.core.config import load_config
from tripod.policy import load_policy
from tripod.policy.rollout import RolloutEngine
from tripod.policy.settings import rollout_config
from tripod.train import learner as learner_mod
from tripod.train import rl as rl_mod
from tripod.train.common import seed_everything
from tripod.train.distributed import full_state_dict, init_parallel, shutdown_parallel
from tripod.train.learner import build_learner
from tripod.train.pipeline import run_recipe
from tripod.train.rl import rl_iteration, train_rl

RECIPE = ["model.name=tiny", "env.id=toy/letters-2", "env.max_turns=2",
          "env.options={vocabulary: 4}", "rollout.games_per_iter=3", "rollout.group_size=2",
          "rollout.batch_size=4", "rollout.train.temperature=0.7",
          "rollout.train.max_new_tokens=3", "rollout.truncated_action=step",
          "reward.kind=dense", "algo.estimator=grpo", "algo.kl_coef=0.01",
          "algo.entropy_coef=0.01", "algo.minibatch_size=3", "algo.micro_batch_size=1",
          "train.tensorboard=false", "train.trajectory_groups=0", "run.seed=0"]
"""6 episodes -> 6 rows -> 2 minibatches of 3 micro-batches: uneven over 2 ranks (2 + 1).
Seed 0 (at temperature 0.7): one of the random tiny model's groups has a rewarded episode (with
seeds 2-4 every group's rewards are equal and the GRPO gradient is ~0), and its gradient norm
(1.8) is clipped, so clipping across ranks is compared too."""


def run(out: Path, overrides: list[str]) -> dict[str, float]:
    """One RL iteration (two SGD steps); saves `weights_rank{r}.pt`, returns the metrics."""
    cfg = load_config(overrides=RECIPE + [f"run.out_dir={out}", *overrides])
    parallel, _ = init_parallel("cpu", cfg.cluster.fsdp)
    seed_everything(cfg.run.seed)
    learner = build_learner(cfg, load_policy("tiny", seed=1), parallel)
    # SGD: the weight change is the summed gradient itself (Adam would turn float noise on
    # near-zero gradients into lr-sized steps, hiding what is compared).
    learner.optimizer = torch.optim.SGD(learner.policy.model.parameters(), lr=0.5)
    if learner.critic_optimizer is not None:
        learner.critic_optimizer = torch.optim.SGD(learner.critic.parameters(), lr=0.5)
    engine = RolloutEngine(learner.actor, rollout_config(cfg))
    ref_calls = [0]
    reference = learner_mod.reference_logprobs

    def counted(*args):  # count the reference passes (micro-batches) this rank runs
        ref_calls[0] += 1
        return reference(*args)

    learner_mod.reference_logprobs = counted
    try:
        metrics = rl_iteration(learner, engine, 0)
    finally:
        learner_mod.reference_logprobs = reference
    engine.close()
    weights = {k: v.detach().clone() for k, v in learner.actor.model.state_dict().items()}
    if learner.critic is not None:
        critic = (full_state_dict(learner.critic) if parallel.fsdp
                  else learner.critic.state_dict())
        weights.update({f"critic.{k}": v.detach().clone() for k, v in critic.items()})
    torch.save({"weights": weights, "metrics": metrics, "ref_calls": ref_calls[0]},
               out / f"weights_rank{parallel.rank}.pt")
    shutdown_parallel(parallel)
    return metrics


def loop(out: Path, overrides: list[str]) -> list[dict]:
    """`train_rl` itself (AdamW, logging, checkpoints) for the recipe's iterations."""
    cfg = load_config(overrides=RECIPE + [f"run.out_dir={out}", *overrides])
    return train_rl(cfg, load_policy("tiny", seed=1), quiet=True).history


PIPELINE = ["run.name=p", "sft.enabled=true", "sft.games=6", "sft.lr=3e-3", "sft.epochs=2",
            "eval.games=6", "eval.split=valid", "rollout.eval.max_new_tokens=3"]
"""`tripod train` as a whole, with an SFT stage that moves the tiny model's weights far beyond
float noise (> 1e-3), so a rank that skipped it would start RL visibly elsewhere."""


def pipeline(out: Path, overrides: list[str]) -> dict:
    """`run_recipe` (what `tripod train` runs); saves what it returned as
    `results_rank{r}.json`."""
    cfg = load_config(overrides=RECIPE + [f"run.out_dir={out}", *PIPELINE, *overrides])
    rank = int(os.environ.get("RANK", "0"))
    build = rl_mod.build_learner

    def recorded(*args, **kwargs):  # the weights RL starts from, on this rank
        learner = build(*args, **kwargs)
        torch.save({k: v.detach().clone() for k, v in learner.latest.model.state_dict().items()},
                   out / f"rl_start_rank{rank}.pt")
        return learner

    rl_mod.build_learner = recorded
    try:
        results = run_recipe(cfg)
    finally:
        rl_mod.build_learner = build
    (out / f"results_rank{rank}.json").write_text(json.dumps(results))
    return results


if __name__ == "__main__":
    torch.set_num_threads(1)
    if sys.argv[1] == "--loop":
        loop(Path(sys.argv[2]), sys.argv[3:])
    elif sys.argv[1] == "--pipeline":
        pipeline(Path(sys.argv[2]), sys.argv[3:])
    else:
        run(Path(sys.argv[1]), sys.argv[2:])
