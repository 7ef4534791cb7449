"""One command per study: [evaluate] -> [SFT] -> [evaluate] -> RL -> evaluate, from a recipe.

`tripod train RECIPE` and `tripod quickstart` both run this. Every number is measured in the
run on held-out games (the `eval` section: split, env ids, games) with the evaluation
sampling parameters, and written to `results.json` in the run directory.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tripod.core.config import TrainConfig
from tripod.eval.evaluate import evaluate
from tripod.policy.models import Policy, load_policy
from tripod.train.common import prepare_run_dir, rollout_config, sampling_params, seed_everything
from tripod.train.rl import train_rl
from tripod.train.sft import collect_demonstrations, demo_rows, train_sft

console = Console(stderr=True)


def prepare_games(cfg: TrainConfig) -> None:
    """Generate the TextWorld games the run will play, up front and in parallel."""
    if not cfg.env.id.startswith("textworld/"):
        return
    from tripod.envs.textworld import prepare_games as prepare

    used = cfg.rollout.games_per_iter * cfg.train.iterations
    train_games = min(cfg.rollout.train_pool or used, used)
    plan = [(cfg.env.id, "train", train_games)]
    if cfg.sft.enabled:
        plan.append((cfg.env.id, "sft", cfg.sft.games + cfg.sft.recovery_games))
    plan += [(env_id, cfg.eval.split, cfg.eval.games) for env_id in eval_env_ids(cfg)]
    for env_id, split, n in plan:
        if env_id.startswith("textworld/") and n:
            prepare(env_id, split, list(range(n)), workers=2, **cfg.env.options)


def eval_env_ids(cfg: TrainConfig) -> list[str]:
    return cfg.eval.env_ids or [cfg.env.id]


def evaluate_all(stage: str, policy: Policy, cfg: TrainConfig, results: dict) -> None:
    for env_id in eval_env_ids(cfg):
        rcfg = rollout_config(cfg, max_turns=cfg.eval.max_turns)
        if env_id != cfg.env.id:
            rcfg.env_options = {}
        res, _ = evaluate(policy, env_id, cfg.eval.split, cfg.eval.games,
                          sampling_params(cfg.rollout.eval), rcfg, seed=cfg.run.seed)
        console.print(f"[bold]{stage}[/bold]: {res.summary()} ({res.seconds:.0f}s)")
        results.setdefault("eval", {}).setdefault(stage, {})[env_id] = res.to_json()


def run_recipe(cfg: TrainConfig, resume: Path | None = None) -> dict:
    """Run a whole study arm; returns the results (also written to results.json)."""
    start = time.perf_counter()
    seed_everything(cfg.run.seed)
    run_dir = prepare_run_dir(cfg)
    console.print(f"run directory: {run_dir}")
    prepare_games(cfg)
    results: dict = {"run_dir": str(run_dir)}
    policy = None
    if resume is None:
        policy = load_policy(cfg.model.name, device=cfg.model.device, seed=cfg.run.seed)
        if cfg.eval.before_training:
            evaluate_all("base", policy, cfg, results)
        if cfg.sft.enabled:
            t0 = time.perf_counter()
            demos = collect_demonstrations(policy, cfg)
            sft = train_sft(policy, demo_rows(demos), cfg, out_dir=run_dir / "sft")
            console.print(f"SFT: {len(demos)} demonstrations, {sft.tokens} agent tokens, "
                          f"final loss {sft.final_loss:.3f} ({time.perf_counter() - t0:.0f}s)")
            results["sft_train"] = {"demos": len(demos), "tokens": sft.tokens,
                                    "final_loss": sft.final_loss, "seconds": sft.seconds}
            if cfg.eval.before_training:
                evaluate_all("sft", policy, cfg, results)
    final_stage = "sft" if cfg.train.iterations == 0 else "final"
    if cfg.train.iterations > 0:
        rl = train_rl(cfg, policy=policy, resume=resume)
        results["rl_history"] = rl.history
        results["checkpoint"] = str(rl.final_checkpoint)
        policy = rl.policy
    if final_stage == "final" or not cfg.eval.before_training:
        evaluate_all(final_stage, policy, cfg, results)
    results["seconds"] = time.perf_counter() - start
    (run_dir / "results.json").write_text(json.dumps(results, indent=2))
    print_table(results)
    return results


def print_table(results: dict) -> None:
    table = Table(title="held-out evaluation (greedy)")
    for col in ("stage", "env", "success", "95% CI", "won/n", "mean turns", "invalid rate"):
        table.add_column(col)
    for stage, per_env in results.get("eval", {}).items():
        for env_id, r in per_env.items():
            lo, hi = r["ci95"]
            table.add_row(stage, env_id, f"{r['success_rate']:.0%}", f"{lo:.0%}-{hi:.0%}",
                          f"{r['won']}/{r['episodes']}", f"{r['mean_turns']:.1f}",
                          f"{r['invalid_rate']:.0%}")
    Console().print(table)
    print(f"total time: {results['seconds'] / 60:.1f} min; run directory: {results['run_dir']}")
