"""One command per study: [evaluate] -> [SFT] -> [evaluate] -> RL -> evaluate, from a recipe.

`tripod train RECIPE` and `tripod quickstart` both run this. Every number is measured in the
run on held-out games (the `eval` section: split, env ids, games) with the evaluation
sampling parameters, and written to `results.json` in the run directory with the run's
provenance (commit, package versions, machine, command; also in `provenance.json`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tripod.core import provenance
from tripod.core.config import ConfigError, TrainConfig, env_options, eval_turn_cap
from tripod.core.progress import StageProgress
from tripod.envs.pool import EnvPool
from tripod.envs.ray_pool import open_pool
from tripod.envs.registry import check_options, family_of
from tripod.eval.evaluate import EvalResult, evaluate
from tripod.policy.models import Policy, load_policy
from tripod.policy.settings import rollout_config, sampling_params
from tripod.report.html import build_report
from tripod.report.records import TRAJECTORY_DIR, eval_path, write_trajectories
from tripod.train.clock import RunClock, paused
from tripod.train.common import StagePeaks, prepare_run_dir, release_memory, seed_everything
from tripod.train.distributed import init_parallel, shutdown_parallel
from tripod.train.rl import train_rl, training_env_ids
from tripod.train.sft import (
    action_accuracy,
    collect_demonstrations,
    dagger_episodes,
    demo_rows,
    expert_demonstrations,
    sft_env_ids,
    sft_options,
    train_sft,
)

console = Console(stderr=True)


def run_plan(cfg: TrainConfig) -> list[tuple[str, str, int, dict]]:
    """Every (env id, split, games, env options) the run will play, in order of use.

    Each env id plays with its options wherever it is used (`env_options`: `env.options`
    for the recipe's env, `env.options_by_env` for the others), demonstrations of the
    recipe's env with `sft.env_options` on top."""
    used = cfg.rollout.games_per_iter * cfg.train.iterations
    train_games = min(cfg.rollout.train_pool or used, used)
    plan = [(env_id, "train", train_games, env_options(cfg, env_id))
            for env_id in training_env_ids(cfg)]
    if cfg.sft.enabled:
        plan += [(env_id, "sft", cfg.sft.games + cfg.sft.recovery_games
                  + (cfg.sft.dagger_games if env_id == cfg.env.id else 0),
                  sft_options(cfg, env_id))
                 for env_id in sft_env_ids(cfg)]
    plan += [(env_id, cfg.eval.split, cfg.eval_games(env_id), env_options(cfg, env_id))
             for env_id in eval_env_ids(cfg)]
    if cfg.train.eval_every:
        plan.append((cfg.env.id, "valid", cfg.train.eval_games, cfg.env.options))
    if cfg.sft.enabled and cfg.sft.heldout_games:
        plan.append((cfg.env.id, "valid", cfg.sft.heldout_games, sft_options(cfg, cfg.env.id)))
    return [step for step in plan if step[2] > 0]


def check_envs(cfg: TrainConfig) -> None:
    """Fail before any work on an unknown env id or env option (naming the key)."""
    for env_id, _, _, options in run_plan(cfg):
        try:
            check_options(env_id, options)
        except (KeyError, ValueError) as exc:
            raise ConfigError(str(exc.args[0] if exc.args else exc)) from None


def prepare_games(cfg: TrainConfig) -> None:
    """Build the run's games up front (each env family says how, if it needs to)."""
    plan = [p for p in run_plan(cfg) if family_of(p[0]).prepare is not None]
    # generating ALFWorld or SWE games can take many minutes: a stage a log can follow
    with StageProgress("game preparation", len(plan), "env ids x splits") as progress:
        for env_id, split, n, options in plan:
            family_of(env_id).prepare(env_id, split, list(range(n)), dict(options))
            progress.advance(status=f"{env_id} {split}: {n} games ready")


def eval_env_ids(cfg: TrainConfig) -> list[str]:
    return cfg.eval_env_ids()


def evaluate_all(stage: str, policy: Policy, cfg: TrainConfig, results: dict,
                 pool: EnvPool) -> None:
    env_ids = eval_env_ids(cfg)
    with StageProgress(f"evaluation ({stage})", len(env_ids), "env ids",
                       console=console) as bar:
        for env_id in env_ids:
            res = _evaluate_one(stage, env_id, policy, cfg, pool)
            results.setdefault("eval", {}).setdefault(stage, {})[env_id] = res.to_json()
            bar.advance(status=f"last success {res.success_rate:.0%}")


def _evaluate_one(stage: str, env_id: str, policy: Policy, cfg: TrainConfig,
                  pool: EnvPool) -> EvalResult:
    """One env id's held-out evaluation; its episodes go to the run's trajectory files."""
    rcfg = rollout_config(cfg, max_turns=eval_turn_cap(cfg, env_id),
                          batch_size=cfg.eval_batch_size())
    rcfg.env_options = env_options(cfg, env_id)
    res, trajs = evaluate(policy, env_id, cfg.eval.split, cfg.eval_games(env_id),
                          sampling_params(cfg.rollout.eval), rcfg, seed=cfg.run.seed,
                          pool=pool)
    write_trajectories(eval_path(cfg.run_dir, stage, env_id), trajs, policy.tokenizer,
                       0, source=f"eval/{stage}")
    console.print(f"[bold]{stage}[/bold]: {res.summary()} ({res.seconds:.0f}s)")
    return res


def run_recipe(cfg: TrainConfig, resume: Path | None = None) -> dict:
    """Run a whole study arm; returns the results (also written to results.json).

    One env pool serves every stage (evaluations, demonstrations, RL), so game processes
    and workspaces start once per run, not once per stage (`cluster.backend: ray` makes it a
    pool of Ray env workers).

    Under torchrun, rank 0 alone runs the SFT stage and the evaluations and writes the run's
    files; the other ranks wait for it in RL's first collective (their policy gets rank 0's
    weights there, `build_learner`), train data-parallel, and return `{}`. The first process
    on each node builds the games (its ranks play their share of the training groups)."""
    start = time.perf_counter()
    parallel, _ = init_parallel(cfg.model.device, cfg.cluster.fsdp)
    seed_everything(cfg.run.seed)
    check_envs(cfg)
    run_dir = prepare_run_dir(cfg) if parallel.is_main else cfg.run_dir
    results: dict = {"run_dir": str(run_dir)}
    if parallel.is_main:
        console.print(f"run directory: {run_dir}")
        record = provenance.collect()   # commit, versions, machine, command: before any work
        provenance.write(run_dir, record)
        results["provenance"] = record.to_dict()
    if parallel.local_rank == 0:
        prepare_games(cfg)
    parallel.barrier()
    peaks = StagePeaks()   # resident memory per stage, into results.json
    clock = (RunClock(cfg, writes=parallel.is_main) if resume is None
             else None)   # a resumed run's minutes are unknown
    with open_pool(cfg.cluster) as pool:
        policy = None
        if resume is None and parallel.is_main:
            policy = sft_stage(cfg, results, pool, clock)
            peaks.end("sft")
        final_stage = "sft" if cfg.train.iterations == 0 else "final"
        if cfg.train.iterations > 0:
            rl = train_rl(cfg, policy=policy, resume=resume, pool=pool, clock=clock)
            results["rl_history"] = rl.history
            results["rl_iterations"] = rl.iterations
            results["checkpoint"] = str(rl.final_checkpoint)
            policy = rl.policy
            del rl
            before, after = release_memory()   # the learner's state: not needed to evaluate
            if parallel.is_main and before:
                console.print(f"memory after RL: {before / 1024:.1f} GB resident, "
                              f"{after / 1024:.1f} GB once the learner is freed")
            peaks.end("rl")
        shutdown_parallel(parallel)   # (train_rl already left the group; SFT-only runs)
        if not parallel.is_main:
            return {}
        if clock is not None:
            results["train_minutes"] = round(clock.minutes(), 2)
            results["snapshots"] = clock.finish(policy, final_stage)
        if final_stage == "final" or not cfg.eval.before_training:
            evaluate_all(final_stage, policy, cfg, results, pool)
            peaks.end("eval")
    results["seconds"] = time.perf_counter() - start
    if peaks.exact:
        results["peak_rss_mb"] = peaks.peaks
        console.print("peak resident memory: " + ", ".join(
            f"{stage} {mb / 1024:.2f} GB" for stage, mb in peaks.peaks.items()))
    (run_dir / "results.json").write_text(json.dumps(results, indent=2))
    print_table(results)
    report = build_report(run_dir)
    print(f"report: {report}  (open it in a browser; `tripod inspect` reads "
          f"{run_dir / TRAJECTORY_DIR} in a terminal)")
    return results


def sft_stage(cfg: TrainConfig, results: dict, pool: EnvPool,
              clock: RunClock | None = None) -> Policy:
    """Load the start model, evaluate it, and (if the recipe asks) SFT it and evaluate again.
    Evaluations stop the run's clock (`clock.paused`): they are not training time."""
    policy = load_policy(cfg.model.name, device=cfg.model.device, seed=cfg.run.seed)
    if cfg.eval.before_training:
        with paused(clock):
            evaluate_all("base", policy, cfg, results, pool)
    if clock is not None:
        clock.boundary(policy, "start")
    if not cfg.sft.enabled:
        return policy
    heldout = []
    if cfg.sft.heldout_games:
        with paused(clock):
            heldout = expert_demonstrations(policy, cfg, cfg.env.id, "valid",
                                            cfg.sft.heldout_games, pool)
            _heldout_accuracy("base", policy, heldout, cfg, results)
    t0 = time.perf_counter()
    with StageProgress("demonstrations", 1, "collections", console=console) as bar:
        demos = collect_demonstrations(policy, cfg, pool)
        bar.advance(status=f"{len(demos)} won")
    dagger = cfg.sft.dagger_games > 0
    if cfg.sft.epochs == 0:  # the start model is SFT'd already: straight to the DAgger round
        console.print(f"SFT: {len(demos)} demonstrations, kept for the DAgger round "
                      f"(sft.epochs=0: no SFT before it)")
        results["sft_train"] = {"demos": len(demos), "tokens": 0, "final_loss": None,
                                "seconds": 0.0}
    else:
        sft = train_sft(policy, demo_rows(demos), cfg,
                        out_dir=None if dagger else cfg.run_dir / "sft")
        console.print(f"SFT: {len(demos)} demonstrations, {sft.tokens} agent tokens, "
                      f"final loss {sft.final_loss:.3f} ({time.perf_counter() - t0:.0f}s)")
        results["sft_train"] = {"demos": len(demos), "tokens": sft.tokens,
                                "final_loss": sft.final_loss, "seconds": sft.seconds}
    if dagger:
        with paused(clock):  # the same measures before the DAgger round, for comparison
            if heldout:
                _heldout_accuracy("sft-before-dagger", policy, heldout, cfg, results)
            if cfg.eval.before_dagger:
                evaluate_all("sft-before-dagger", policy, cfg, results, pool)
        rounds = []
        for r in range(cfg.sft.dagger_rounds):
            if r and heldout:
                with paused(clock):
                    _heldout_accuracy(f"dagger-round-{r}", policy, heldout, cfg, results)
            rounds.append({"round": r + 1, **_dagger(policy, cfg, demos, pool)})
        results["sft_train"]["dagger"] = rounds[-1]
        results["sft_train"]["dagger_rounds"] = rounds
    if clock is not None:
        clock.boundary(policy, "sft")
    if heldout:
        with paused(clock):
            _heldout_accuracy("sft", policy, heldout, cfg, results)
    if cfg.eval.before_training:
        with paused(clock):
            evaluate_all("sft", policy, cfg, results, pool)
    return policy



def _dagger(policy: Policy, cfg: TrainConfig, demos: list, pool: EnvPool) -> dict:
    """DAgger's episodes with the SFT'd model, then SFT over them and the demonstrations."""
    t0 = time.perf_counter()
    with StageProgress("DAgger episodes", 1, "collections", console=console) as bar:
        mixed = dagger_episodes(policy, cfg, pool)
        bar.advance(status=f"{len(mixed)} episodes")
    turns = [t for ep in mixed for t in ep.turns]
    expert = sum(t.trainable for t in turns)
    console.print(f"DAgger: {len(mixed)} episodes ({sum(ep.won for ep in mixed)} won), "
                  f"{expert} expert turns, {len(turns) - expert} model turns "
                  f"({time.perf_counter() - t0:.0f}s)")
    sft = train_sft(policy, demo_rows(demos + mixed), cfg, out_dir=cfg.run_dir / "sft",
                    epochs=cfg.sft.dagger_epochs)
    return {"episodes": len(mixed), "won": sum(ep.won for ep in mixed),
            "expert_turns": expert, "model_turns": len(turns) - expert,
            "tokens": sft.tokens, "final_loss": sft.final_loss,
            "seconds": time.perf_counter() - t0}


def _heldout_accuracy(stage: str, policy: Policy, demos: list, cfg: TrainConfig,
                      results: dict) -> None:
    """Teacher-forced next-action accuracy on the held-out demonstrations, printed and kept
    in results.json (`sft_heldout`)."""
    acc = action_accuracy(policy, demos, cfg.rollout.restrict_actions,
                          cfg.sft.micro_batch_size)
    results.setdefault("sft_heldout", {"games": cfg.sft.heldout_games, "won": len(demos)})
    results["sft_heldout"][stage] = acc.to_json()
    console.print(f"[bold]{stage}[/bold]: next-action accuracy {acc.rate:.1%} on {acc.turns} "
                  f"expert turns of {len(demos)} held-out demonstrations ({cfg.env.id} valid)")


def print_table(results: dict) -> None:
    table = Table(title="held-out evaluation (greedy)")
    for col in ("stage", "env", "success", "95% CI", "won/n", "mean turns", "invalid rate",
                "env errors"):
        table.add_column(col)
    for stage, per_env in results.get("eval", {}).items():
        for env_id, r in per_env.items():
            lo, hi = r["ci95"]
            table.add_row(stage, env_id, f"{r['success_rate']:.0%}", f"{lo:.0%}-{hi:.0%}",
                          f"{r['won']}/{r['episodes']}", f"{r['mean_turns']:.1f}",
                          f"{r['invalid_rate']:.0%}", str(r.get("env_errors", 0)))
    Console().print(table)
    print(f"total time: {results['seconds'] / 60:.1f} min; run directory: {results['run_dir']}")
