"""Success rate of a policy on held-out games, with a 95% Wilson interval.

Evaluation always uses its own sampling parameters (greedy by default), never the training
ones, and plays one episode per game of the requested split. Episodes the environment broke
(`env_errors`) say nothing about the policy: they are reported apart, and the success rate and
its interval are computed over the episodes that ran.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from tripod.core.types import EpisodeEnd, Trajectory, TurnStatus
from tripod.envs.pool import EnvPool
from tripod.eval.stats import wilson_interval
from tripod.policy.models import Policy
from tripod.policy.rollout import RolloutConfig, RolloutEngine, make_jobs
from tripod.policy.sampler import SamplingParams


@dataclass
class EvalResult:
    env_id: str
    split: str
    episodes: int
    """Episodes that ran (env errors excluded): the denominator of `success_rate`."""
    won: int
    lost: int
    env_errors: int
    """Episodes the env broke (crash, hang, bad output); not counted as lost games."""
    context_limits: int
    """Episodes ended because the prompt outgrew the model's context window."""
    success_rate: float
    ci95: tuple[float, float]
    mean_turns: float
    mean_progress: float
    invalid_rate: float
    seconds: float
    tampered: int = 0
    """Episodes scored as tampering (SWE: the gate or the runner caught a forgery)."""
    per_game: list[dict] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        lo, hi = self.ci95
        extra = "".join(f", {n} {what}" for n, what in ((self.env_errors, "env errors"),
                        (self.context_limits, "context limits")) if n)
        return (f"{self.success_rate:.1%} ({self.won}/{self.episodes}, 95% CI "
                f"{lo:.0%}-{hi:.0%}{extra}) on {self.env_id} [{self.split}]")


def summarise(all_trajs: list[Trajectory], env_id: str, split: str,
              seconds: float) -> EvalResult:
    trajs = [t for t in all_trajs if not t.failed]
    n = len(trajs)
    won = sum(t.won for t in trajs)
    turns = [t for tr in trajs for t in tr.turns]
    invalid = sum(t.status in (TurnStatus.INVALID, TurnStatus.TRUNCATED) for t in turns)
    return EvalResult(
        env_id=env_id, split=split, episodes=n, won=won, lost=sum(t.lost for t in trajs),
        env_errors=len(all_trajs) - n,
        context_limits=sum(t.end is EpisodeEnd.CONTEXT_LIMIT for t in trajs),
        success_rate=won / max(n, 1),
        ci95=wilson_interval(won, n), mean_turns=sum(t.num_turns for t in trajs) / max(n, 1),
        mean_progress=sum((t.turns[-1].progress if t.turns else 0.0) for t in trajs) / max(n, 1),
        invalid_rate=invalid / max(len(turns), 1), seconds=seconds,
        tampered=sum(t.env_status == "tampering" for t in trajs),
        per_game=[{"game": t.game_index, "won": t.won, "turns": t.num_turns,
                   "end": t.end.value, "actions": [x.action_text for x in t.turns],
                   "error": t.error}
                  for t in all_trajs])


def evaluate(policy: Policy, env_id: str, split: str, games: int, sampling: SamplingParams,
             rollout: RolloutConfig, seed: int = 0, engine: RolloutEngine | None = None,
             pool: EnvPool | None = None) -> tuple[EvalResult, list[Trajectory]]:
    """Play one episode on each of the first `games` games of `split`.

    Pass an `engine` (it must wrap `policy`) or a run's `pool` to reuse envs across
    evaluations."""
    jobs = make_jobs(env_id, split, list(range(games)), group_size=1, seed=seed)
    own = engine is None
    engine = engine or RolloutEngine(policy, rollout, pool=pool)
    try:
        trajs, stats = engine.collect(jobs, sampling)
    finally:
        if own:
            engine.close()
    return summarise(trajs, env_id, split, stats.seconds), trajs
