"""Per-turn rewards, computed from a finished trajectory.

Worked example (dense, a game with max_score 4, won in 3 turns, second action invalid):

    turn   score after   progress   dense reward          + invalid_penalty=-0.1
    0      1             0.25       0.25 - 0.00 = 0.25    0.25
    1      1             0.25       0.25 - 0.25 = 0.00    -0.10
    2      4 (won)       1.00       1.00 - 0.25 = 0.75    0.75

Dense rewards are progress gains (from the progress at reset, 0 for a text game; an SWE
task starts with most of its tests passing) normalised by the game's own max score (`progress` is
score / max_score for TextWorld), so a won episode sums to 1 and a losing one to less (the
paper normalises the same way). Sparse gives [0, 0, 1]. `final_score` gives [0, 0, 1.0]: the
progress reached at the end (for an SWE task, the share of its tests passing: 3 of 5 passing
gives 0.6 on the last turn, while sparse gives 0). The trainer places each turn's reward on
that turn's last agent token (its end-of-turn token).

These rules read only what every env reports per turn (`won`, `lost`, `progress`): the reward
pillar is the one place that turns outcomes into rewards, so env options never change them.
"""

from __future__ import annotations

from tripod.core.config import RewardSection
from tripod.core.types import Trajectory, TurnStatus

_PENALISED = (TurnStatus.INVALID, TurnStatus.TRUNCATED)


def turn_rewards(traj: Trajectory, cfg: RewardSection) -> list[float]:
    """One reward per turn of `traj` under the reward config."""
    n = traj.num_turns
    if n == 0:
        return []
    if cfg.kind in ("sparse", "final_score"):
        rewards = [0.0] * n
        final = traj.turns[-1].progress if cfg.kind == "final_score" else 0.0
        rewards[-1] = 1.0 if traj.won else min(max(final, 0.0), 1.0)
    else:
        progress = [traj.start_progress] + [t.progress for t in traj.turns]
        rewards = [progress[k + 1] - progress[k] for k in range(n)]
    if traj.lost:
        rewards[-1] += cfg.lost_penalty
    for k, turn in enumerate(traj.turns):
        if turn.status in _PENALISED:
            rewards[k] += cfg.invalid_penalty
        rewards[k] -= cfg.turn_cost
    return rewards
