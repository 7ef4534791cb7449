"""`tripod budget --budget B --demo-cost K`: the SFT:RL splits of a budget of episodes.

arXiv 2510.01132 prices an expert demonstration at K = 10 RL episodes and asks how a fixed
budget is best spent (60 demos + 400 episodes reached 85% in-domain at a budget of 1000). A
split spends `share` of the budget on demonstrations (whole demos, `floor(share * B / K)`) and
the rest on RL iterations of `games_per_iter * group_size` episodes each (whole iterations);
what does not fill a whole demo or iteration is reported as unused. The study file written
with `--out` trains every split with the same seeds and evaluates in-domain and on a harder
env, so the splits are compared on the same games.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from tripod.core.config import ConfigError, load_config


@dataclass(frozen=True)
class Split:
    """One way to spend the budget."""

    share: float
    """Requested share of the budget spent on demonstrations."""
    demos: int
    """Expert demonstrations (`sft.games`)."""
    iterations: int
    """RL iterations (`train.iterations`)."""
    demo_cost: int
    episodes_per_iter: int

    @property
    def sft_episodes(self) -> int:
        return self.demos * self.demo_cost

    @property
    def rl_episodes(self) -> int:
        return self.iterations * self.episodes_per_iter

    def unused(self, budget: int) -> int:
        return budget - self.sft_episodes - self.rl_episodes


def plan_splits(budget: int, demo_cost: int, episodes_per_iter: int,
                shares: list[float]) -> list[Split]:
    """The splits of `budget` episodes at each SFT share (identical splits once)."""
    if budget < 1 or demo_cost < 1 or episodes_per_iter < 1:
        raise ConfigError("budget, demo cost and episodes per iteration must be >= 1")
    if any(not 0.0 <= s <= 1.0 for s in shares):
        raise ConfigError(f"SFT shares must lie in [0, 1], got {shares}")
    splits: list[Split] = []
    for share in sorted(shares):
        demos = int(share * budget // demo_cost)
        iterations = (budget - demos * demo_cost) // episodes_per_iter
        split = Split(share, demos, iterations, demo_cost, episodes_per_iter)
        if demos == 0 and iterations == 0:
            continue
        if all((s.demos, s.iterations) != (demos, iterations) for s in splits):
            splits.append(split)
    if not splits:
        raise ConfigError(f"a budget of {budget} episodes buys neither a demonstration "
                          f"({demo_cost}) nor an RL iteration ({episodes_per_iter})")
    return splits


def split_table(splits: list[Split], budget: int) -> str:
    lines = [f"{'SFT share':>9}  {'demos':>5}  {'SFT episodes':>12}  {'RL iterations':>13}  "
             f"{'RL episodes':>11}  {'unused':>6}"]
    for s in splits:
        lines.append(f"{s.share:>9.0%}  {s.demos:>5}  {s.sft_episodes:>12}  {s.iterations:>13}"
                     f"  {s.rl_episodes:>11}  {s.unused(budget):>6}")
    return "\n".join(lines)


def _arm_name(split: Split) -> str:
    return f"sft{round(split.share * 100):03d}"


def _grid(splits: list[Split], shown: list[Split], budget: int) -> dict:
    """The zip grid training `splits`; the arms' table fields describe `shown` (the real
    splits, also in smoke mode, so that smoke arms carry the same fields)."""
    return {"zip": {"sft.enabled": [s.demos > 0 for s in splits],
                    "sft.games": [max(s.demos, 1) for s in splits],
                    "train.iterations": [s.iterations for s in splits],
                    "tag.sft_share": [round(s.sft_episodes / budget, 3) for s in shown],
                    "tag.demos": [s.demos for s in shown],
                    "tag.rl_episodes": [s.rl_episodes for s in shown]},
            "names": [_arm_name(s) for s in splits]}


SMOKE_DEMOS, SMOKE_ITERATIONS = 2, 2
"""Smoke size of a budget study: each split keeps its kind (SFT only, RL only, both) with at
most 2 demonstrations and 2 iterations, so every split's wiring runs in seconds."""


def resolve_base(base: str) -> Path:
    """A recipe path, or a file name under recipes/."""
    path = Path(base)
    return path if path.is_file() else Path(__file__).resolve().parents[3] / "recipes" / base


def episodes_per_iter(base: str) -> int:
    cfg = load_config(resolve_base(base))
    return cfg.rollout.games_per_iter * cfg.rollout.group_size


def budget_study(budget: int, demo_cost: int, per_iter: int, shares: list[float], base: str,
                 seeds: int, eval_env_ids: list[str], games: int) -> dict:
    """The study file (as a mapping) that trains every split of the budget; `base` as it
    will be written (relative to the study file, or a name under recipes/); an RL iteration
    plays `per_iter` episodes."""
    splits = plan_splits(budget, demo_cost, per_iter, shares)
    smoke = [Split(s.share, min(s.demos, SMOKE_DEMOS), min(s.iterations, SMOKE_ITERATIONS),
                   demo_cost, 4) for s in splits]
    names = [_arm_name(s) for s in splits]
    return {
        "name": f"sft-rl-budget-{budget}",
        "question": (f"How should a budget of {budget} episodes be split between SFT "
                     f"demonstrations (one costs {demo_cost} episodes) and RL?"),
        "paper": ("budget 1000, demo = 10 episodes: 60 demos + 400 episodes 85% in-domain and "
                  "59% on w4-o6-q8; pure SFT (100 demos) 95% / 55%"),
        "base": base, "seeds": seeds,
        "overrides": {"sft.recovery_games": 0},
        "grid": _grid(splits, splits, budget),
        "eval": {"env_ids": eval_env_ids, "split": "test", "games": games, "max_turns": 24},
        "compare": [list(pair) for pair in zip(names[:-1], names[1:])],
        "plots": [{"kind": "learning_curves"},
                  {"kind": "success_by", "x": "tag.sft_share", "name": "success_by_sft_share"}],
        "smoke": {"seeds": 1, "overrides": {"sft.recovery_games": 0},
                  "grid": _grid(smoke, splits, budget)},
    }


def cmd_budget(args: argparse.Namespace) -> int:
    shares = [float(s) for s in args.shares.split(",")]
    per_iter = episodes_per_iter(args.base)
    splits = plan_splits(args.budget, args.demo_cost, per_iter, shares)
    print(f"budget {args.budget} episodes; a demonstration costs {args.demo_cost}; an RL "
          f"iteration plays {per_iter} episodes ({args.base})")
    print(split_table(splits, args.budget))
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        base = (os.path.relpath(Path(args.base).resolve(), out.parent.resolve())
                if Path(args.base).is_file() else args.base)
        study = budget_study(args.budget, args.demo_cost, per_iter, shares, base, args.seeds,
                             args.eval_env, args.games)
        out.write_text(
            f"# Written by `tripod budget --budget {args.budget} --demo-cost {args.demo_cost}"
            f" --shares {args.shares}`.\n# Run: tripod study {args.out}\n"
            + yaml.safe_dump(study, sort_keys=False))
        print(f"study file: {out}  (run it: tripod study {out})")
    return 0


def add_budget_parser(sub: argparse._SubParsersAction) -> None:
    bp = sub.add_parser("budget", help="SFT:RL splits of a budget of episodes (and their study)")
    bp.add_argument("--budget", type=int, required=True, help="episodes to spend in all")
    bp.add_argument("--demo-cost", type=int, default=10,
                    help="episodes one expert demonstration costs (paper: 10)")
    bp.add_argument("--shares", default="0,0.5,1",
                    help="SFT shares of the budget, comma-separated (default 0,0.5,1)")
    bp.add_argument("--base", default="quickstart.yaml",
                    help="base recipe (its games_per_iter x group_size sizes an iteration)")
    bp.add_argument("--seeds", type=int, default=2)
    bp.add_argument("--eval-env", action="append",
                    default=None, help="evaluated env id (repeat; default w2-o3-q4, w4-o6-q8)")
    bp.add_argument("--games", type=int, default=20, help="evaluation games per env")
    bp.add_argument("--out", help="write the study file here")
    bp.set_defaults(fn=_cmd_budget_defaults)


def _cmd_budget_defaults(args: argparse.Namespace) -> int:
    args.eval_env = args.eval_env or ["textworld/w2-o3-q4", "textworld/w4-o6-q8"]
    return cmd_budget(args)
