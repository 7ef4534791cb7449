"""Size and opening time of the report of a 100-episode run (docs/report.md quotes it).

    python benchmarks/report_size.py [--out OUT_DIR] [--json] [--tiny]

It plays 5 iterations of 20 episodes (5 games x groups of 4) of textworld/w2-o3-q4 with the
tiny model: 12 turns of 24 sampled tokens each, every turn stepped even without an
end-of-turn token, so every episode is as long as the recipe allows (a worst case for
size). Each iteration gets real GAE advantages (`make_batch`, `score`, `advantage`) and
trainer logprobs and is written with `write_trajectories`; metrics.jsonl holds
`rollout_metrics` per iteration and results.json a summary of the last iteration. Then it
builds the report and opens it in headless Chromium three times: the wall time of
`chromium --dump-dom` against a blank page, and the page's own time from navigation start
to the end of rendering (`data-render-ms`).

``--tiny`` plays one iteration of one game x 2 episodes, 2 turns of 8 tokens, and opens the
report once: it checks the script, not the size.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from _common import emit, loadavg, output_flags, progress

ENV = "textworld/w2-o3-q4"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


@dataclass(frozen=True)
class Shape:
    """The run's size: iterations x games x group, each episode `turns` x `tokens`."""

    iterations: int = 5
    games: int = 5
    group: int = 4
    turns: int = 12
    tokens: int = 24
    loads: int = 3
    """Times the report is opened in Chromium."""

    @property
    def episodes(self) -> int:
        return self.iterations * self.games * self.group

    def overrides(self) -> list[str]:
        return [f"env.id={ENV}", f"env.max_turns={self.turns}", "model.name=tiny",
                "sft.enabled=false", "rollout.truncated_action=step",
                f"rollout.train.max_new_tokens={self.tokens}",
                f"rollout.games_per_iter={self.games}", f"rollout.group_size={self.group}",
                f"rollout.batch_size={self.games * self.group}", "algo.estimator=gae",
                "reward.invalid_penalty=-0.1", "train.tensorboard=false"]


TINY = Shape(iterations=1, games=1, group=2, turns=2, tokens=8, loads=1)


def make_run(out: Path, shape: Shape) -> Path:
    from tripod.core.config import dump_config, load_config
    from tripod.eval.evaluate import summarise
    from tripod.policy.rollout import RolloutEngine, make_jobs
    from tripod.policy.settings import rollout_config, sampling_params
    from tripod.report.records import iteration_path, token_stats_from_batch, write_trajectories
    from tripod.train.batch import token_logprobs
    from tripod.train.learner import build_learner, no_grad_passes
    from tripod.train.rl import advantage, make_batch, rollout_metrics

    cfg = load_config(overrides=[*shape.overrides(), f"run.out_dir={out}", "run.name=run100"])
    run = cfg.run_dir
    run.mkdir(parents=True, exist_ok=True)
    (run / "config.yaml").write_text(dump_config(cfg))
    learner = build_learner(cfg)
    engine = RolloutEngine(learner.policy, rollout_config(cfg))
    metrics, n = [], shape.games
    for it in range(shape.iterations):  # the test split's first 20 games are cached by the tests
        jobs = make_jobs(ENV, "test", list(range(n * it, n * it + n)), shape.group, seed=it)
        trajs, stats = engine.collect(jobs, sampling_params(cfg.rollout.train))
        batch, _ = make_batch(trajs, cfg, learner.policy.pad_token_id)
        batch = no_grad_passes(learner, batch)
        advantage(batch, cfg.algo)
        logp, _, _ = token_logprobs(learner.policy.model, batch.input_ids,
                                    batch.attention_mask, cfg.rollout.train.temperature,
                                    batch.loss_mask)
        write_trajectories(iteration_path(run, it + 1), trajs, learner.policy.tokenizer, it + 1,
                           token_stats_from_batch(batch, logp.detach()))
        metrics.append({"step": it + 1, **rollout_metrics(trajs, cfg),
                        "tokens_per_s": stats.tokens_per_s})
        progress(f"iteration {it + 1}: {len(trajs)} episodes, {stats.seconds:.0f}s")
    engine.close()
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    res = summarise(trajs, ENV, "test", 0.0).to_json()
    (run / "results.json").write_text(json.dumps({"eval": {"final": {ENV: res}}}))
    return run


def chromium() -> str:
    """The headless browser's executable (Debian's chromium, or a Chrome)."""
    found = next((shutil.which(n) for n in CHROMIUM_NAMES if shutil.which(n)), None)
    if found is None:
        raise SystemExit(f"no browser found (looked for {', '.join(CHROMIUM_NAMES)})")
    return found


def chromium_load(exe: str, url: str) -> tuple[float, str]:
    with tempfile.TemporaryDirectory() as profile:
        start = time.perf_counter()
        proc = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu",
                               f"--user-data-dir={profile}", "--dump-dom", url],
                              capture_output=True, text=True, timeout=120, check=True)
        return time.perf_counter() - start, proc.stdout


def measure(out: Path, shape: Shape) -> dict:
    """Sizes of the run's records and report, the build time, and Chromium's opening times."""
    from tripod.report.html import build_report

    exe, before = chromium(), loadavg()
    shutil.rmtree(out / "run100", ignore_errors=True)
    run = make_run(out, shape)
    t0 = time.perf_counter()
    page = build_report(run)
    build_s = time.perf_counter() - t0
    files = sorted((run / "trajectories").iterdir())
    blank = out / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body></body></html>")
    walls, blanks, renders = [], [], []
    for _ in range(shape.loads):
        blanks.append(chromium_load(exe, blank.as_uri())[0])
        wall, dom = chromium_load(exe, page.as_uri())
        walls.append(wall)
        renders.append(int(dom.split('data-render-ms="')[1].split('"')[0]))
    return {"episodes": shape.episodes, "records_bytes": sum(f.stat().st_size for f in files),
            "report_bytes": page.stat().st_size, "build_s": build_s,
            "chromium_wall_s": walls, "chromium_blank_s": blanks,
            "median_extra_s": statistics.median(walls) - statistics.median(blanks),
            "render_ms": renders, "loadavg_before": before, "loadavg_after": loadavg()}


def _print(r: dict) -> None:
    print(f"{r['episodes']} episodes: trajectory records {r['records_bytes'] / 1e6:.2f} MB, "
          f"report {r['report_bytes'] / 1e6:.2f} MB, built in {r['build_s']:.2f} s")
    print("chromium --dump-dom of the report: "
          + ", ".join(f"{w:.2f}" for w in r["chromium_wall_s"]) + " s; of a blank page: "
          + ", ".join(f"{b:.2f}" for b in r["chromium_blank_s"])
          + f" s (median extra {r['median_extra_s']:.2f} s)")
    print("render (navigation start to rendered): "
          + ", ".join(str(ms) for ms in r["render_ms"]) + " ms")
    print(f"load average before {r['loadavg_before']}, after {r['loadavg_after']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="keep the run and its report here (default: a temporary "
                             "folder, removed after measuring)")
    output_flags(parser)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    shape = TINY if args.tiny else Shape()
    if args.out is not None:   # the run and its report stay there, to be opened
        emit(measure(args.out, shape), args.json, _print)
        return
    with tempfile.TemporaryDirectory(prefix="tripod-report-size-") as out:
        emit(measure(Path(out), shape), args.json, _print)


if __name__ == "__main__":
    main()
