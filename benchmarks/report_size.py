"""Size and opening time of the report of a 100-episode run (docs/report.md quotes it).

Not a test (no timing assertions in tests): run it by hand,

    PYTHONPATH=src python benchmarks/report_size.py [OUT_DIR]

It plays 5 iterations of 20 episodes (5 games x groups of 4) of textworld/w2-o3-q4 with the
tiny model: 12 turns of 24 sampled tokens each, every turn stepped even without an
end-of-turn token, so every episode is as long as the recipe allows (a worst case for
size). Each iteration gets real GAE advantages (`make_batch`, `score`, `advantage`) and trainer logprobs and
is written with `write_trajectories`; metrics.jsonl holds `rollout_metrics` per iteration
and results.json a summary of the last iteration. Then it builds the report and opens it in
headless Chromium three times: the wall time of `chromium --dump-dom` against a blank page,
and the page's own time from navigation start to the end of rendering (`data-render-ms`).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENV = "textworld/w2-o3-q4"
CONFIG = [f"env.id={ENV}", "env.max_turns=12", "model.name=tiny", "sft.enabled=false",
          "rollout.truncated_action=step", "rollout.train.max_new_tokens=24",
          "rollout.games_per_iter=5", "rollout.group_size=4", "rollout.batch_size=20",
          "algo.estimator=gae", "reward.invalid_penalty=-0.1", "train.tensorboard=false"]


def make_run(out: Path) -> Path:
    from tripod.core.config import dump_config, load_config
    from tripod.eval.evaluate import summarise
    from tripod.policy.rollout import RolloutEngine, make_jobs
    from tripod.report.records import iteration_path, token_stats_from_batch, write_trajectories
    from tripod.train.batch import token_logprobs
    from tripod.train.common import rollout_config, sampling_params
    from tripod.train.learner import build_learner, score
    from tripod.train.rl import advantage, make_batch, rollout_metrics

    cfg = load_config(overrides=[*CONFIG, f"run.out_dir={out}", "run.name=run100"])
    run = cfg.run_dir
    run.mkdir(parents=True, exist_ok=True)
    (run / "config.yaml").write_text(dump_config(cfg))
    learner = build_learner(cfg)
    engine = RolloutEngine(learner.policy, rollout_config(cfg))
    metrics = []
    for it in range(5):  # the test split's first 20 games are cached by the test suite
        jobs = make_jobs(ENV, "test", list(range(5 * it, 5 * it + 5)), 4, seed=it)
        trajs, stats = engine.collect(jobs, sampling_params(cfg.rollout.train))
        batch, _ = make_batch(trajs, cfg, learner.policy.pad_token_id)
        batch = score(learner, batch)
        advantage(batch, cfg.algo)
        logp, _, _ = token_logprobs(learner.policy.model, batch.input_ids,
                                    batch.attention_mask, cfg.rollout.train.temperature,
                                    batch.loss_mask)
        write_trajectories(iteration_path(run, it + 1), trajs, learner.policy.tokenizer, it + 1,
                           token_stats_from_batch(batch, logp.detach()))
        metrics.append({"step": it + 1, **rollout_metrics(trajs, cfg),
                        "tokens_per_s": stats.tokens_per_s})
        print(f"iteration {it + 1}: {len(trajs)} episodes, {stats.seconds:.0f}s", flush=True)
    engine.close()
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    res = summarise(trajs, ENV, "test", 0.0).to_json()
    (run / "results.json").write_text(json.dumps({"eval": {"final": {ENV: res}}}))
    return run


def chromium_load(url: str) -> tuple[float, str]:
    with tempfile.TemporaryDirectory() as profile:
        start = time.perf_counter()
        proc = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                               f"--user-data-dir={profile}", "--dump-dom", url],
                              capture_output=True, text=True, timeout=120, check=True)
        return time.perf_counter() - start, proc.stdout


def main() -> None:
    from tripod.report.html import build_report

    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())
    shutil.rmtree(out / "run100", ignore_errors=True)
    run = make_run(out)
    t0 = time.perf_counter()
    page = build_report(run)
    build_s = time.perf_counter() - t0
    files = sorted((run / "trajectories").iterdir())
    blank = out / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body></body></html>")
    walls, blanks, renders = [], [], []
    for _ in range(3):
        blanks.append(chromium_load(blank.as_uri())[0])
        wall, dom = chromium_load(page.as_uri())
        walls.append(wall)
        renders.append(int(dom.split('data-render-ms="')[1].split('"')[0]))
    print(json.dumps({
        "episodes": 100, "records_bytes": sum(f.stat().st_size for f in files),
        "report_bytes": page.stat().st_size, "build_s": round(build_s, 2),
        "chromium_wall_s": [round(w, 2) for w in walls],
        "chromium_blank_s": [round(b, 2) for b in blanks],
        "median_extra_s": round(statistics.median(walls) - statistics.median(blanks), 2),
        "render_ms": renders, "load_average": os.getloadavg()}, indent=1))


if __name__ == "__main__":
    main()
