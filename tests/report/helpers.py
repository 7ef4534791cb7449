"""Helpers of the report tests: a short tiny-model run with trajectory records, headless
Chromium, and hostile trajectories.

`run_recipe` trains 2 RL iterations (toy/letters-2, GAE, tiny model) and writes config.yaml,
metrics.jsonl, results.json and the trajectory records the RL loop itself keeps (every group:
`train.trajectory_groups=-1`, with advantages and the trainer's logprobs at update time) and
the evaluations' records.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

TINY_RUN = ["env.id=toy/letters-2", "env.max_turns=2", "env.options={vocabulary: 4}",
            "model.name=tiny", "sft.enabled=false", "train.iterations=2", "train.eval_every=0",
            "train.tensorboard=false", "rollout.games_per_iter=2", "rollout.group_size=2",
            "rollout.truncated_action=step", "rollout.train.temperature=0.7",
            "rollout.train.max_new_tokens=4", "rollout.eval.max_new_tokens=4", "eval.games=4",
            "algo.estimator=gae", "reward.invalid_penalty=-0.1", "train.trajectory_groups=-1"]


@dataclass
class TinyRun:
    run_dir: Path
    policy: object
    cfg: object


def make_tiny_run(out_dir: Path) -> TinyRun:
    from tripod.core.config import load_config
    from tripod.policy.models import load_policy
    from tripod.train.pipeline import run_recipe

    cfg = load_config(overrides=[*TINY_RUN, f"run.out_dir={out_dir}", "run.name=tiny"])
    run_recipe(cfg)
    run_dir = out_dir / "tiny"
    return TinyRun(run_dir, load_policy(str(run_dir / "checkpoints" / "iter_000002")), cfg)


# -- headless Chromium -------------------------------------------------------------------------
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


@dataclass
class PageLoad:
    dom: str
    """The DOM after scripts ran (`--dump-dom`)."""
    console: list[str]
    """Console messages and uncaught errors the page produced (chromium's log lines)."""
    seconds: float


class Browser:
    """Debian's chromium driven from the command line: no Python dependency, no download.

    Every call gets a fresh profile directory, so parallel runs do not share state."""

    def __init__(self, exe: str, tmp: Path) -> None:
        self.exe, self.tmp = exe, tmp

    def _run(self, url: str, *flags: str) -> tuple[str, str, float]:
        import subprocess
        import tempfile
        import time

        with tempfile.TemporaryDirectory(dir=self.tmp) as profile:
            cmd = [self.exe, "--headless", "--no-sandbox", "--disable-gpu",
                   "--no-first-run", "--disable-extensions", "--disable-background-networking",
                   f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
                   "--virtual-time-budget=10000", *flags, url]
            start = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            seconds = time.perf_counter() - start
        assert proc.returncode == 0, f"chromium failed ({proc.returncode}): {proc.stderr[-2000:]}"
        return proc.stdout, proc.stderr, seconds

    def load(self, path: Path, fragment: str = "") -> PageLoad:
        dom, log, seconds = self._run(path.resolve().as_uri() + fragment, "--dump-dom")
        console = [line for line in log.splitlines() if ":CONSOLE" in line]
        return PageLoad(dom, console, seconds)

    def screenshot(self, path: Path, out: Path, width: int = 1400, height: int = 3000) -> Path:
        self._run(path.resolve().as_uri(), f"--screenshot={out}",
                  f"--window-size={width},{height}", "--hide-scrollbars")
        assert out.is_file() and out.stat().st_size > 10_000, "no screenshot written"
        return out


# -- hostile trajectories ----------------------------------------------------------------------
HOSTILE = [
    "<script>document.body.setAttribute('data-pwned','script')</script>",
    "<img src=x onerror=\"document.body.setAttribute('data-pwned','img')\">",
    "</script><script>document.body.setAttribute('data-pwned','close')</script>",
    "<!-- <svg onload=\"document.body.setAttribute('data-pwned','svg')\"> &amp; ]]>",
    "lone \udcff surrogate, \x1b[31mANSI\x1b[0m and [bold red]rich markup[/]",
]
"""Model and env text that must show as text: each payload marks <body> if it ever runs."""


def hostile_trajectories(tokenizer) -> list:
    """Two groups of four episodes (won, lost, env error, turn cap) whose actions,
    observations, objective and error messages are the `HOSTILE` payloads, with
    advantages of both signs and one untrainable turn."""
    from tripod.core.types import EpisodeEnd, EpisodeJob, Trajectory, Turn, TurnStatus

    ends = [EpisodeEnd.WON, EpisodeEnd.LOST, EpisodeEnd.ENV_ERROR, EpisodeEnd.MAX_TURNS]
    trajs = []
    for group in range(2):
        for k, end in enumerate(ends):
            eid = group * len(ends) + k
            traj = Trajectory(EpisodeJob("toy/letters-2", "train", group, group, eid, eid),
                              objective=HOSTILE[0], first_observation=HOSTILE[1],
                              won=end is EpisodeEnd.WON, lost=end is EpisodeEnd.LOST, end=end,
                              error=HOSTILE[2] if end is EpisodeEnd.ENV_ERROR else None)
            for t, action in enumerate(HOSTILE[k:k + 2]):
                clean = action.encode("utf-8", "replace").decode("utf-8")
                ids = tokenizer(clean, add_special_tokens=False)["input_ids"] + [2]
                traj.turns.append(Turn(
                    prompt_ids=[1, 2, 3], action_ids=ids,
                    logprobs=[-0.05 * (i + 1) for i in range(len(ids))], action_text=action,
                    observation=HOSTILE[(k + t + 2) % len(HOSTILE)],
                    reward=1.0 if end is EpisodeEnd.WON and t == 1 else 0.0,
                    status=TurnStatus.ENV_ERROR if end is EpisodeEnd.ENV_ERROR and t == 1
                    else TurnStatus.OK, trainable=not (k == 1 and t == 0)))
            trajs.append(traj)
    return trajs


def hostile_stats(trajs: list) -> dict:
    from tripod.report.records import TokenStats

    return {t.episode_id: TokenStats(
        advantages=[[(0.8 if t.won else -0.6) * (i + 1) / len(turn.action_ids)
                     for i in range(len(turn.action_ids))] for turn in t.turns],
        trainer_logprobs=[[lp - 0.01 for lp in turn.logprobs] for turn in t.turns])
        for t in trajs}
