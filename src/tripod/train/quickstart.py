"""The README's main job: evaluate SmolLM2 -> SFT on expert games -> evaluate -> RL -> evaluate.

Base SmolLM2-135M wins no w2-o3-q4 game (it never emits a game command), so RL alone has no
signal; SFT on expert demonstrations (plus recovery demonstrations) gives a prior whose
sampled episodes mix wins and losses, and RL starts from there. Every number printed is
measured in this run on held-out `test` games with greedy decoding.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tripod.core.config import TrainConfig
from tripod.eval.evaluate import EvalResult, evaluate
from tripod.policy.models import load_policy
from tripod.train.common import prepare_run_dir, rollout_config, sampling_params, seed_everything
from tripod.train.rl import train_rl
from tripod.train.sft import collect_demonstrations, demo_rows, train_sft

console = Console(stderr=True)


def _prepare_games(cfg: TrainConfig, eval_games: int) -> None:
    """Generate every game the run will play up front, in parallel, with a progress bar."""
    if not cfg.env.id.startswith("textworld/"):
        return
    from tripod.envs.textworld import prepare_games

    train_games = cfg.rollout.train_pool or cfg.rollout.games_per_iter * cfg.train.iterations
    for split, n in (("test", eval_games), ("sft", cfg.sft.games + cfg.sft.recovery_games),
                     ("train", train_games)):
        prepare_games(cfg.env.id, split, list(range(n)), workers=2, **cfg.env.options)


def _eval(label: str, policy, cfg: TrainConfig, games: int, results: dict) -> EvalResult:
    res, _ = evaluate(policy, cfg.env.id, "test", games, sampling_params(cfg.rollout.eval),
                      rollout_config(cfg), seed=cfg.run.seed)
    console.print(f"[bold]{label}[/bold]: {res.summary()} ({res.seconds:.0f}s)")
    results[label] = res.to_json()
    return res


def run_quickstart(cfg: TrainConfig, eval_games: int = 20) -> dict:
    """Run the whole pipeline; returns (and writes to results.json) the measured table."""
    start = time.perf_counter()
    seed_everything(cfg.run.seed)
    run_dir = prepare_run_dir(cfg)
    console.print(f"run directory: {run_dir}")
    _prepare_games(cfg, eval_games)
    results: dict = {}
    policy = load_policy(cfg.model.name, device=cfg.model.device, seed=cfg.run.seed)
    _eval("base", policy, cfg, eval_games, results)

    t0 = time.perf_counter()
    demos = collect_demonstrations(policy, cfg)
    sft = train_sft(policy, demo_rows(demos), cfg, out_dir=run_dir / "sft")
    console.print(f"SFT: {len(demos)} demonstrations, {sft.tokens} agent tokens, final loss "
                  f"{sft.final_loss:.3f} ({time.perf_counter() - t0:.0f}s)")
    results["sft_train"] = {"demos": len(demos), "tokens": sft.tokens,
                            "final_loss": sft.final_loss, "seconds": sft.seconds}
    _eval("sft", policy, cfg, eval_games, results)

    rl = train_rl(cfg, policy=policy)
    results["rl_history"] = rl.history
    _eval("sft+rl", policy, cfg, eval_games, results)
    results["seconds"] = time.perf_counter() - start
    results["checkpoint"] = str(rl.final_checkpoint)
    (run_dir / "results.json").write_text(json.dumps(results, indent=2))
    _print_table(results, run_dir)
    return results


def _print_table(results: dict, run_dir: Path) -> None:
    table = Table(title="held-out test games (greedy)")
    for col in ("stage", "success", "95% CI", "won/n", "mean turns", "invalid rate"):
        table.add_column(col)
    for stage in ("base", "sft", "sft+rl"):
        r = results[stage]
        lo, hi = r["ci95"]
        table.add_row(stage, f"{r['success_rate']:.0%}", f"{lo:.0%}-{hi:.0%}",
                      f"{r['won']}/{r['episodes']}", f"{r['mean_turns']:.1f}",
                      f"{r['invalid_rate']:.0%}")
    Console().print(table)
    print(f"total time: {results['seconds'] / 60:.1f} min; run directory: {run_dir}")
