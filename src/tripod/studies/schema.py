"""The study file's schema (recipes/studies/*.yaml): arms, grids, the shared evaluation, plots.

Pydantic models only, so that both the study runner (`study.py`) and the plots (`plots.py`)
read them without importing each other.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class StudyError(ValueError):
    """A study file is invalid or inconsistent with what is on disk; the message says where."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class ArmSpec(_Strict):
    name: str
    """Arm name (its folder under the study directory)."""
    set: dict[str, Any] = Field(default_factory=dict)
    """Dotted recipe overrides of this arm, e.g. ``{algo.estimator: grpo}``."""
    tags: dict[str, Any] = Field(default_factory=dict)
    """Fields for tables and plots (e.g. ``{complexity: 2, sft_share: 0.5}``)."""


class GridSpec(_Strict):
    zip: dict[str, list[Any]] = Field(default_factory=dict)
    """Paired settings: the i-th values of every key form one arm (all lists equally long)."""
    product: dict[str, list[Any]] = Field(default_factory=dict)
    """Crossed settings: every combination, crossed with the zipped arms too."""
    names: list[str] | None = None
    """Arm names in expansion order (zip outer, product inner); default: from the values."""

    @model_validator(mode="after")
    def _check_lengths(self) -> GridSpec:
        lengths = {k: len(v) for k, v in self.zip.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"zip lists must be equally long, got {lengths}")
        if any(not v for v in [*self.zip.values(), *self.product.values()]):
            raise ValueError("a grid list is empty")
        return self


class EvalSpec(_Strict):
    env_ids: list[str] = Field(default_factory=list)
    """Env ids every arm is evaluated on (empty: each arm's own `env.id`)."""
    split: Literal["train", "sft", "valid", "test"] = "test"
    """Held-out split (report on `test`)."""
    games: int | None = Field(None, ge=1)
    """Games per env id (None: the base recipe's `eval.games`)."""
    max_turns: int | None = Field(None, ge=1)
    """Turn cap for evaluation (None: the recipe's)."""
    before_training: bool = False
    """Also evaluate the start (and SFT) model in every run (off: it costs time per run)."""


class PlotSpec(_Strict):
    kind: Literal["learning_curves", "success_by", "bars"]
    """`learning_curves`: a metrics.jsonl metric per iteration, mean and range over seeds per
    arm. `success_by`: success (95% interval) against `x`, one line per `series`. `bars`:
    grouped bars of success by `x`, one bar per `series` value."""
    name: str | None = None
    """File stem of the plot (default: the kind and fields)."""
    x: str | None = None
    """Row field on the x axis: `tag.NAME`, a dotted recipe key (`algo.estimator`), `arm`."""
    series: str | None = None
    """Row field giving one line / bar per value (None: one series)."""
    metric: str = "success_rate"
    """`learning_curves`: the metrics.jsonl key plotted."""
    panels: Literal["eval_env", "none"] = "eval_env"
    """One panel per evaluated env, or every evaluated env pooled in one panel."""

    @model_validator(mode="after")
    def _check_fields(self) -> PlotSpec:
        if self.kind != "learning_curves" and not self.x:
            raise ValueError(f"plot {self.kind} needs `x`")
        return self

    @property
    def stem(self) -> str:
        parts = [self.kind, self.x, self.series]
        return self.name or "-".join(re.sub(r"\W+", "_", p) for p in parts if p)


class SmokeSpec(_Strict):
    seeds: int | list[int] = 1
    """Seeds in smoke mode."""
    overrides: dict[str, Any] = Field(default_factory=dict)
    """Dotted overrides on top of `SMOKE_OVERRIDES` (below the arms' settings)."""
    grid: GridSpec | None = None
    """Replaces `grid` in smoke mode (it must give the same arm names), for arms whose own
    settings are what makes a run long (e.g. SFT:RL splits of a real budget)."""


class StudyFile(_Strict):
    """A whole study file (recipes/studies/*.yaml)."""

    name: str
    """Study name; its directory is `runs/studies/NAME` by default."""
    question: str
    """The question the study answers (shown in the summary)."""
    paper: str = ""
    """The paper's claim and number, for the summary."""
    base: str
    """Base recipe: a path relative to the study file, or a file name under recipes/."""
    overrides: dict[str, Any] = Field(default_factory=dict)
    """Dotted overrides of the base recipe shared by every arm."""
    seeds: int | list[int] = 2
    """Seeds: a count n (seeds 0..n-1) or a list."""
    shared_sft: bool = False
    """Run SFT once per seed (arm `sft`, evaluated too) and start every other arm's RL from
    it: equal SFT priors, and the SFT cost paid once instead of once per arm."""
    arms: list[ArmSpec] = Field(default_factory=list)
    """Explicit arms (run before the grid's arms)."""
    grid: GridSpec | None = None
    """Arms from zipped and crossed overrides."""
    eval: EvalSpec = Field(default_factory=EvalSpec)
    """The held-out evaluation shared by every arm."""
    compare: list[tuple[str, str]] = Field(default_factory=list)
    """Pairs of arms compared game by game (same games, same seeds)."""
    plots: list[PlotSpec] = Field(default_factory=list)
    """Plots written next to the summary."""
    smoke: SmokeSpec = Field(default_factory=SmokeSpec)
    """How `--smoke` shrinks the study."""
