"""A run's wall-clock budget: when RL stops, and which policy a time milestone gets.

A recipe that promises "N% after 60 minutes" has to be held to its minutes, not to an
iteration count guessed from someone else's machine. The clock starts once the run's games
exist (game generation is not the recipe's work) and counts demonstrations, SFT and RL;
evaluation after training is not counted.

- `train.budget_min`: RL stops at the first iteration boundary where one more iteration (as
  long as the last one) would end past the budget.
- `train.snapshots_min`: for each milestone m, the policy as it was at the last stage boundary
  (start, end of SFT, end of an RL iteration) at or before m is saved as a checkpoint under
  `RUN_DIR/snapshots/NNNmin`, with the minute it was taken. So the 15-minute snapshot is what
  15 minutes of this recipe produce, never a policy that trained longer. Holding that policy
  until the next boundary costs one in-memory copy of the model.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from tripod.core.config import TrainConfig
from tripod.policy.models import Policy
from tripod.train.checkpoint import save_checkpoint

SNAPSHOT_DIR = "snapshots"


def snapshot_path(run_dir: Path, minutes: float) -> Path:
    return Path(run_dir) / SNAPSHOT_DIR / f"{minutes:g}min"


@dataclass
class _Held:
    """The policy at one boundary (a copy, or the live policy if nothing trains after it)."""

    policy: Policy
    minutes: float
    stage: str


@dataclass
class RunClock:
    """Minutes since the run's work started, the budget and the milestone snapshots."""

    cfg: TrainConfig
    start: float = -1.0
    """perf_counter() when the clock started (-1: at construction)."""
    writes: bool = True
    """False on every torchrun rank but the first: they keep time, rank 0 saves."""
    saved: list[dict] = field(default_factory=list)
    _held: _Held | None = None
    _pending: list[float] = field(default_factory=list)
    _last_boundary: float = 0.0
    _last_stage_min: float = 0.0

    def __post_init__(self) -> None:
        if self.start < 0:
            self.start = time.perf_counter()
        self._pending = sorted(self.cfg.train.snapshots_min) if self.writes else []

    def minutes(self) -> float:
        return (time.perf_counter() - self.start) / 60.0

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Time spent inside (an evaluation) is not the recipe's time."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.start += time.perf_counter() - t0

    def boundary(self, policy: Policy, stage: str) -> None:
        """A stage just ended with `policy`: milestones passed since the previous boundary
        get the policy held there; this one is held next (copied only if a milestone is left)."""
        now = self.minutes()
        self._flush(until=now)
        self._last_stage_min, self._last_boundary = now - self._last_boundary, now
        if self._pending:
            self._held = _Held(_copy(policy), now, stage)

    def should_stop(self) -> bool:
        """True when one more stage as long as the last one (an RL iteration, when asked
        after one) would end past the budget."""
        budget = self.cfg.train.budget_min
        return budget is not None and self.minutes() + self._last_stage_min > budget

    def finish(self, policy: Policy, stage: str) -> list[dict]:
        """The run's training ended: milestones it passed get the policy held at the last
        boundary before them; milestones after the end get the final policy."""
        now = self.minutes()
        self._flush(until=now)
        held = _Held(policy, now, stage)
        for m in self._pending:
            self._write(held, m)
        self._pending = []
        self._held = None
        return self.saved

    def _flush(self, until: float) -> None:
        while self._pending and self._pending[0] < until and self._held is not None:
            self._write(self._held, self._pending.pop(0))

    def _write(self, held: _Held, milestone: float) -> None:
        path = snapshot_path(self.cfg.run_dir, milestone)
        record = {"milestone_min": milestone, "taken_min": round(held.minutes, 3),
                  "stage": held.stage}
        save_checkpoint(path, held.policy, {},
                        {**record, "iteration": 0, "config": self.cfg.model_dump(mode="json")})
        self.saved.append({**record, "path": str(path)})


def paused(clock: RunClock | None) -> AbstractContextManager:
    """`clock.paused()`, or nothing when the run has no clock (a resumed run)."""
    return clock.paused() if clock is not None else nullcontext()


def _copy(policy: Policy) -> Policy:
    model = copy.deepcopy(policy.model)
    model.eval()
    return Policy(model, policy.tokenizer, policy.name, policy.eos_token_ids)
