"""The RL loop, top to bottom: collect -> no-grad passes -> advantage -> update -> log -> eval ->
save.

One loop serves every estimator: the estimator table says whether a critic is needed and how
small a group may be, the config says where the KL goes; nothing branches on an algorithm's
name. The trainable state and the update live in `tripod.train.learner`.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console

from tripod.algos.advantages import AdvantageInput, get_estimator
from tripod.core.config import AlgoSection, TrainConfig, own_env_first, turn_cap
from tripod.core.progress import StageProgress
from tripod.core.types import EpisodeEnd, EpisodeJob, Trajectory
from tripod.envs.pool import EnvPool
from tripod.envs.ray_pool import open_pool
from tripod.eval.evaluate import evaluate
from tripod.policy.models import Policy, load_policy
from tripod.policy.ray_workers import RolloutWorkers, start_rollout_workers
from tripod.policy.rollout import RolloutConfig, RolloutEngine, make_jobs
from tripod.policy.settings import rollout_config, sampling_params
from tripod.report.records import (
    iteration_path,
    sample_groups,
    token_stats_from_batch,
    write_trajectories,
)
from tripod.rewards.per_turn import turn_rewards
from tripod.train.batch import TrainBatch, collate, trainable_episodes, trajectory_rows
from tripod.train.checkpoint import (
    drop_records_after,
    load_trainer_state,
    resolve_resume,
    save_checkpoint,
    set_rng_state,
)
from tripod.train.clock import RunClock, paused
from tripod.train.common import MetricLogger, prepare_run_dir, seed_everything
from tripod.train.distributed import Parallel, init_parallel, shutdown_parallel
from tripod.train.learner import Learner, TrainingStopped, build_learner, no_grad_passes, update

console = Console(stderr=True)



# -- collect ---------------------------------------------------------------------------------
def iteration_games(cfg: TrainConfig, iteration: int) -> list[int]:
    """The training games of an iteration: a pure function of the iteration (resumable)."""
    n = cfg.rollout.games_per_iter
    games = [iteration * n + j for j in range(n)]
    pool = cfg.rollout.train_pool
    return [g % pool for g in games] if pool else games


def training_jobs(cfg: TrainConfig, iteration: int) -> list[EpisodeJob]:
    """The iteration's episodes: `group_size` per game; with a mix (`rollout.env_ids`) group
    g plays env g mod n, with that env's turn cap."""
    jobs = make_jobs(cfg.env.id, "train", iteration_games(cfg, iteration),
                     cfg.rollout.group_size, seed=cfg.run.seed * 100_003 + iteration)
    envs = training_env_ids(cfg)
    if len(envs) == 1:
        return jobs
    return [replace(j, env_id=envs[j.group_id % len(envs)],
                    max_turns=turn_cap(cfg, envs[j.group_id % len(envs)])) for j in jobs]


def training_env_ids(cfg: TrainConfig) -> list[str]:
    return own_env_first(cfg, cfg.rollout.env_ids)


def collect(engine: RolloutEngine | RolloutWorkers, cfg: TrainConfig, iteration: int,
            parallel: Parallel | None = None) -> tuple[list[Trajectory], dict[str, float]]:
    """Play the iteration's episodes; under torchrun each rank plays whole groups (its
    share) and every rank gets all trajectories back, in job order."""
    parallel = parallel or Parallel()
    jobs = training_jobs(cfg, iteration)
    mine = set(parallel.share(sorted({j.group_id for j in jobs})))
    faults_before = sum(engine.faults_injected.values())
    trajs, stats = engine.collect([j for j in jobs if j.group_id in mine],
                                  sampling_params(cfg.rollout.train))
    faults = sum(engine.faults_injected.values()) - faults_before
    parts = parallel.gather([(trajs, stats.generated_tokens, stats.seconds, faults,
                              stats.env_wait_seconds, stats.overlapped_steps)])
    by_id = {t.job.episode_id: t for (part,) in parts for t in part[0]}
    seconds = max(part[2] for (part,) in parts)
    tokens = sum(part[1] for (part,) in parts)
    metrics = {"rollout_s": seconds, "tokens_per_s": tokens / max(seconds, 1e-9),
               "env_wait_s": max(part[4] for (part,) in parts)}
    if cfg.rollout.env_overlap_s is not None:  # steps that ran while others decoded
        metrics["overlapped_steps"] = float(sum(part[5] for (part,) in parts))
    if cfg.env.faults.rate > 0:  # fault injection on: how many this iteration (all ranks)
        metrics["faults_injected"] = float(sum(part[3] for (part,) in parts))
    return [by_id[j.episode_id] for j in jobs], metrics


def stop_if_nothing_ran(trajs: list[Trajectory], iteration: int) -> None:
    """Every episode an env error: there is nothing to learn from, and the next iteration
    would most likely fail the same way: stop loudly, with the errors counted by cause."""
    if not trajs or not all(t.failed for t in trajs):
        return
    reasons = Counter((t.error or "unknown error")[:200] for t in trajs)
    listed = "; ".join(f"{n} x {why}" for why, n in reasons.most_common())
    raise TrainingStopped(
        f"iteration {iteration + 1}: all {len(trajs)} episodes were env errors ({listed}). "
        f"Check env.id and env.options, or raise rollout.env_timeout_s if steps time out.")


# -- batch, advantage ------------------------------------------------------------------------
def make_batch(trajs: list[Trajectory], cfg: TrainConfig,
               pad_id: int) -> tuple[TrainBatch | None, dict[str, float]]:
    """Shaped rewards on the recorded tokens, for the episodes that can be trained on: env
    errors are left out, and so are groups they leave too small for the estimator."""
    spec = get_estimator(cfg.algo.estimator)
    sel = trainable_episodes(trajs, spec.min_group_size, cfg.algo.uniform_outcomes)
    counts = {"dropped_groups": sel.dropped_groups, "dropped_episodes": sel.dropped_episodes,
              "uniform_groups": sel.uniform_groups}
    rows = [r for t in sel.trajectories for r in trajectory_rows(t, turn_rewards(t, cfg.reward))]
    return (collate(rows, pad_id) if rows else None), counts


def advantage(batch: TrainBatch, algo: AlgoSection) -> dict[str, float]:
    """Run the recipe's estimator; sets `batch.advantages` and `batch.returns` and returns
    the estimator's own statistics."""
    rewards = batch.kl_rewards if batch.kl_rewards is not None else batch.token_rewards
    out = get_estimator(algo.estimator)(
        AdvantageInput(token_rewards=rewards, loss_mask=batch.loss_mask,
                       turn_ids=batch.turn_ids, group_ids=batch.group_ids,
                       values=batch.old_values, episode_ids=batch.episode_ids,
                       state_ids=batch.state_ids), algo)
    batch.advantages, batch.returns = out.advantages, out.returns
    return out.stats


def zero_variance_fraction(batch: TrainBatch) -> float:
    """Share of groups whose episodes all got the same task reward (KL terms excluded).

    Such a group gives a group baseline (GRPO, RLOO) no signal at all; it is reported for
    every estimator, since it also measures how much the group's samples differ.
    """
    row_return = batch.token_rewards.sum(-1)                                 # [B]
    episode_return: dict[int, float] = {}
    episode_group: dict[int, int] = {}
    for e, g, r in zip(batch.episode_ids.tolist(), batch.group_ids.tolist(),
                       row_return.tolist(), strict=True):
        episode_return[e] = episode_return.get(e, 0.0) + r
        episode_group[e] = g
    group_returns: dict[int, set[float]] = {}
    for e, r in episode_return.items():
        group_returns.setdefault(episode_group[e], set()).add(round(r, 9))
    return sum(len(v) == 1 for v in group_returns.values()) / max(len(group_returns), 1)


# -- metrics ---------------------------------------------------------------------------------
def rollout_metrics(trajs: list[Trajectory], cfg: TrainConfig) -> dict[str, float]:
    """Episode statistics over the episodes that RAN: an env error is not a lost game (it is
    counted in `env_errors`, and excluded from success, return and length)."""
    ran = [t for t in trajs if not t.failed]
    n = max(len(ran), 1)
    turns = [t for tr in ran for t in tr.turns]
    out = {
        "success_rate": sum(t.won for t in ran) / n,
        "return": sum(sum(turn_rewards(t, cfg.reward)) for t in ran) / n,
        "episode_length": sum(t.num_turns for t in ran) / n,
        "invalid_action_rate": sum(t.status.value in ("invalid", "truncated")
                                   for t in turns) / max(len(turns), 1),
        "episodes": len(trajs),
        "env_errors": len(trajs) - len(ran),
    }
    # stopped because the next prompt would not fit the model's context; trained on
    out["context_limit"] = sum(t.end is EpisodeEnd.CONTEXT_LIMIT for t in trajs)
    if any(t.env_id.startswith("swe") for t in trajs):  # scored as tampering (verify.py)
        out["swe/tampered"] = sum(t.env_status == "tampering" for t in ran)
    if any(t.resolved is not None for t in ran):   # the env's own verdict, apart from `won`
        out["resolved_rate"] = sum(t.outcome for t in ran) / n
    if len(envs := training_env_ids(cfg)) > 1:   # a mix: each env's own success rate too
        for env_id in envs:
            mine = [t for t in ran if t.env_id == env_id]
            out[f"success_rate/{env_id}"] = sum(t.won for t in mine) / max(len(mine), 1)
    return out


# -- one iteration ---------------------------------------------------------------------------
def rl_iteration(learner: Learner, engine: RolloutEngine | RolloutWorkers, it: int,
                 collected: tuple[list[Trajectory], dict[str, float]] | None = None,
                 ) -> dict[str, float]:
    """collect -> no-grad passes -> advantage -> update, with the iteration's metrics. `collected`:
    the iteration's episodes, already played (overlapped rollouts)."""
    cfg, t0 = learner.cfg, time.perf_counter()
    trajs, metrics = collected or collect(engine, cfg, it, learner.parallel)  # collect
    metrics.update(rollout_metrics(trajs, cfg))
    stop_if_nothing_ran(trajs, it)
    batch, dropped = make_batch(trajs, cfg, learner.policy.pad_token_id)
    metrics.update(dropped)
    if batch is not None:
        batch = no_grad_passes(learner, batch)
        metrics.update(advantage(batch, cfg.algo))                            # advantage
        metrics.update(update(learner, batch, it))                            # update
        if collected is None:  # overlapped: synced when the next collection starts
            sync_rollouts(learner, engine)
        metrics["zero_variance_groups"] = zero_variance_fraction(batch)
    if learner.parallel.is_main:
        save_trajectories(learner, trajs, batch, it)                          # record
    metrics["iteration_s"] = time.perf_counter() - t0
    return metrics


def save_trajectories(learner: Learner, trajs: list[Trajectory], batch: TrainBatch | None,
                      it: int) -> None:
    """Write `train.trajectory_groups` groups of the iteration, token by token with their
    advantages and loss masks, for `tripod report` / `tripod inspect`."""
    groups = learner.cfg.train.trajectory_groups
    if groups == 0:
        return
    kept = trajs if groups < 0 else sample_groups(trajs, groups)
    stats = (token_stats_from_batch(batch, batch.trainer_logprobs) if batch is not None
             else None)
    write_trajectories(iteration_path(learner.cfg.run_dir, it + 1), kept,
                       learner.policy.tokenizer, it + 1, stats)


def _eval_rollout_config(cfg: TrainConfig) -> RolloutConfig:
    """The rollout settings of the validation runs: `rollout_config` with the evaluation's
    batch size."""
    return rollout_config(cfg, batch_size=cfg.eval_batch_size())


def validate(learner: Learner, engine: RolloutEngine) -> dict[str, float]:
    cfg = learner.cfg
    res, _ = evaluate(learner.latest, cfg.env.id, "valid", cfg.train.eval_games,
                      sampling_params(cfg.rollout.eval), _eval_rollout_config(cfg),
                      seed=cfg.run.seed, engine=engine)
    return {"valid_success_rate": res.success_rate}


# -- the loop --------------------------------------------------------------------------------
@dataclass
class RLResult:
    run_dir: Path
    iterations: int
    history: list[dict]
    final_checkpoint: Path
    policy: Policy


def _start(cfg: TrainConfig, policy: Policy | None, resume: Path | None,
           parallel: Parallel) -> tuple[Learner, int]:
    """The learner, at iteration 0 or restored from the checkpoint `resume` (already
    resolved: a verified checkpoint folder)."""
    if resume is None:
        return build_learner(cfg, policy, parallel), 0
    if parallel.fsdp:
        raise ValueError("resuming an FSDP run is not supported yet (docs/scale.md)")
    trainer_state, state = load_trainer_state(resume)
    if parallel.is_main:  # iterations logged after this checkpoint by a killed run are replayed
        drop_records_after(cfg.run_dir / "metrics.jsonl", state["iteration"])
    learner = build_learner(cfg, load_policy(str(resume), device=cfg.model.device), parallel)
    learner.load_state_dict(trainer_state)
    set_rng_state(trainer_state["rng"])
    return learner, state["iteration"]


def train_rl(cfg: TrainConfig, policy: Policy | None = None, resume: Path | None = None,
             quiet: bool = False, pool: EnvPool | None = None,
             clock: RunClock | None = None) -> RLResult:
    """Run RL iterations as configured; resume from `resume` if given: a checkpoint folder,
    or a run folder (its newest checkpoint that verifies). `pool` shares envs with the rest
    of a run (the pipeline's); without one, the loop owns its envs. `clock` (the run's
    wall-clock budget) may end RL before `train.iterations` and keeps the milestone
    snapshots. Launched by torchrun, every rank runs this loop (data-parallel); rank 0 alone
    evaluates, logs and saves."""
    parallel, cfg = _join(cfg)
    if (cfg.cluster.overlap or cfg.cluster.rollout_workers) and parallel.enabled:
        raise ValueError("cluster.overlap and cluster.rollout_workers run in one process for "
                         "now (not under torchrun)")
    quiet = quiet or not parallel.is_main
    seed_everything(cfg.run.seed)
    resume = resolve_resume(resume) if resume is not None else None
    run_dir = prepare_run_dir(cfg) if parallel.is_main else cfg.run_dir
    learner, start_iter = _start(cfg, policy, resume, parallel)
    own_pool = pool is None
    pool = pool or open_pool(cfg.cluster)
    engine = _start_rollouts(learner, pool, own_pool)
    eval_engine = RolloutEngine(learner.latest, _eval_rollout_config(cfg), pool=pool)
    logger = (MetricLogger(run_dir, cfg.train.tensorboard, append=resume is not None)
              if parallel.is_main else None)
    history: list[dict] = []
    ckpt, saved_at, done = resume, start_iter, start_iter
    bar = StageProgress("RL", cfg.train.iterations, "iterations", console=console, quiet=quiet,
                        completed=start_iter).start()
    try:
        for it, metrics in iterations(learner, engine, start_iter, cfg.train.iterations):
            evaluating = cfg.train.eval_every and (it + 1) % cfg.train.eval_every == 0
            if evaluating and parallel.is_main:
                with paused(clock):
                    metrics.update(validate(learner, eval_engine))   # evaluate
            if logger is not None:
                logger.log(it + 1, metrics)                          # log
            history.append({"iteration": it + 1, **metrics})
            _report(it + 1, cfg.train.iterations, metrics, quiet)
            if cfg.train.checkpoint_every and (it + 1) % cfg.train.checkpoint_every == 0:
                ckpt, saved_at = _save(learner, run_dir, it + 1), it + 1   # save
            bar.advance(status=f"last success {metrics['success_rate']:.0%}")
            done = it + 1
            if clock is not None and _out_of_time(clock, learner, done):
                break
    finally:
        bar.stop()
        if logger is not None:
            logger.close()
        engine.close()
        if own_pool:
            pool.close()
    if ckpt is None or saved_at != done:
        ckpt = _save(learner, run_dir, done)
    shutdown_parallel(parallel)
    return RLResult(run_dir, done, history, ckpt, learner.latest)


def _start_rollouts(learner: Learner, pool: EnvPool,
                    own_pool: bool) -> RolloutEngine | RolloutWorkers:
    """The training rollouts' engine (with the rollout copy overlap needs). If it cannot
    start (e.g. rollout workers), a pool the loop opened is closed (its Ray actors freed)."""
    try:
        if learner.cfg.cluster.overlap and not learner.cfg.cluster.rollout_workers:
            learner.add_rollout_copy()
        return rollout_engine(learner, pool)
    except BaseException:
        if own_pool:
            pool.close()
        raise


def _out_of_time(clock: RunClock, learner: Learner, done: int) -> bool:
    """Mark the iteration's end on the run clock; True (on every rank alike) when the
    budget leaves no room for another iteration. Rank 0's clock decides: it alone ran the
    SFT stage and the evaluations, so only it knows the run's minutes (`run_recipe`)."""
    clock.boundary(learner.latest, f"iteration {done}")
    stop = bool(learner.parallel.gather([clock.should_stop()])[0][0])
    if stop and learner.parallel.is_main:
        console.print(f"[yellow]train.budget_min={learner.cfg.train.budget_min:g} reached after "
                      f"{done} iterations ({clock.minutes():.1f} min): RL stops here[/yellow]")
    return stop


def iterations(learner: Learner, engine: RolloutEngine | RolloutWorkers, start: int,
               end: int) -> Iterator[tuple[int, dict[str, float]]]:
    """(iteration, metrics) of each iteration: one after another, or overlapped
    (`cluster.overlap`), where iteration k+1 is played in a thread while k trains."""
    if not learner.cfg.cluster.overlap:
        for it in range(start, end):
            yield it, {**rl_iteration(learner, engine, it), "staleness": 0.0}
        return
    yield from _overlapped(learner, engine, start, end)


def _overlapped(learner: Learner, engine: RolloutEngine | RolloutWorkers, start: int,
                end: int) -> Iterator[tuple[int, dict[str, float]]]:
    """One-step off-policy: the rollout copy is synced to the policy, then plays iteration
    k+1 while the policy trains on k. A batch is thus played by weights at most one update
    older than those it trains (`staleness`, 0 or 1); PPO's ratio is taken against the
    recorded logprobs of the weights that played it. `wait_s`: time the update waited."""
    cfg = learner.cfg
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="collect") as executor:
        pending = executor.submit(collect, engine, cfg, start)
        synced_at = start  # the pending batch's weights are those before this iteration's update
        for it in range(start, end):
            t0 = time.perf_counter()
            collected = pending.result()
            waited, staleness = time.perf_counter() - t0, it - synced_at
            if it + 1 < end:
                sync_rollouts(learner, engine)
                synced_at = it
                pending = executor.submit(collect, engine, cfg, it + 1)
            metrics = rl_iteration(learner, engine, it, collected)
            yield it, {**metrics, "staleness": float(staleness), "wait_s": waited}


def rollout_engine(learner: Learner, pool: EnvPool) -> RolloutEngine | RolloutWorkers:
    """Who plays the training episodes: this process (with the policy or its rollout copy),
    or Ray rollout workers holding copies of the policy (`cluster.rollout_workers`)."""
    cfg = learner.cfg
    if cfg.cluster.rollout_workers:
        return start_rollout_workers(cfg, rollout_config(cfg), learner.policy.model)
    return RolloutEngine(learner.actor, rollout_config(cfg), pool=pool)


def sync_rollouts(learner: Learner, engine: RolloutEngine | RolloutWorkers) -> None:
    """Give the rollouts the policy's current weights: its rollout copy, if it has one, and
    the rollout workers (a broadcast), if they play."""
    learner.sync_rollout_policy()
    if isinstance(engine, RolloutWorkers):
        engine.publish()


def _join(cfg: TrainConfig) -> tuple[Parallel, TrainConfig]:
    """This process's rank (torchrun) and the recipe with its own device (`cuda:LOCAL_RANK`)."""
    parallel, device = init_parallel(cfg.model.device, cfg.cluster.fsdp)
    if device != cfg.model.device:
        cfg = cfg.model_copy(deep=True)
        cfg.model.device = device
    return parallel, cfg


def _save(learner: Learner, run_dir: Path, iteration: int) -> Path:
    """Rank 0 writes the checkpoint (DDP ranks hold equal weights and optimizer states;
    under FSDP the rollout copy holds the full weights, the optimizer state is left out)."""
    path = run_dir / "checkpoints" / f"iter_{iteration:06d}"
    if learner.parallel.is_main:
        state = {} if learner.parallel.fsdp else learner.state_dict()
        save_checkpoint(path, learner.latest, state,
                        {"iteration": iteration, "config": learner.cfg.model_dump(mode="json")})
    learner.parallel.barrier()
    return path


def warnings_for(m: dict[str, float]) -> list[str]:
    """What a user should hear about an iteration (at most one line per kind)."""
    out = []
    if m.get("dropped_groups", 0) > 0:
        out.append(f"{m['dropped_groups']:.0f} group(s) left with too few episodes after env "
                   f"errors were dropped from the loss ({m['dropped_episodes']:.0f} episodes)")
    if m.get("skipped_updates", 0) > 0:
        why = ", ".join(f"{k.removeprefix('skipped_')} {v:.0f}" for k, v in m.items()
                        if k.startswith("skipped_") and k != "skipped_updates")
        out.append(f"{m['skipped_updates']:.0f} update(s) skipped: non-finite {why}")
    if m.get("zero_variance_groups", 0.0) > 0.5:
        out.append("most groups have equal rewards: group baselines get no signal (raise the "
                   "temperature or the group size)")
    return out


def _report(it: int, total: int, m: dict, quiet: bool) -> None:
    if quiet:
        return
    keys = ("success_rate", "return", "episode_length", "invalid_action_rate", "env_errors",
            "kl", "entropy", "clip_fraction", "value_loss", "grad_norm", "tokens_per_s",
            "iteration_s", "valid_success_rate")
    parts = [f"{k}={m[k]:.3g}" for k in keys if k in m and isinstance(m[k], float | int)
             and not (isinstance(m[k], float) and math.isnan(m[k]))]
    console.print(f"[bold]iter {it}/{total}[/bold] " + " ".join(parts))
    for line in warnings_for(m):
        console.print(f"[yellow]warning: {line}")

