"""Every kept benchmark runs end to end in reduced form (no timing asserted).

Each script runs as a subprocess (`--tiny --json`); the tests check the shared JSON schema
(the figures' provenance included), that every printed figure is present and finite, and what the figures rest on: the counters see the work the
learner really does (the LM head only on agent tokens, no reference pass without a KL term,
backward = 1x forward with LoRA), and the TRL comparison did the
same work on both sides and changed both models. The text report of each is checked by
printing a measured report through the script's own printer.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _threads() -> str:
    """The test process's torch threads (one per pytest-xdist worker, `tests/conftest.py`)."""
    return os.environ.get("OMP_NUM_THREADS", "2")


def _run(script: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, str(BENCHMARKS / script), "--tiny", "--json",
                          "--threads", _threads(), *args],
                         env=os.environ, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)  # stdout holds the report alone (logs go to stderr)
    _check_schema(report, script)
    return report


def _check_schema(report: dict, script: str) -> None:
    """Every benchmark's JSON: the schema, its name and the provenance of its figures."""
    assert report["schema"] == "tripod-benchmark/1"
    assert report["benchmark"] == Path(script).stem
    record = report["provenance"]
    assert record["commit"] and record["versions"]["torch"] and record["command"]
    assert record["machine"]["matmul_peak_gflops"] > 0 and record["machine"]["cores"] > 0


def _finite(x) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)


def _printed(module: str, report: dict, monkeypatch, capsys) -> str:
    """The script's text report of `report` (the module imported without side effects)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    importlib.import_module(module)._print(report)
    return capsys.readouterr().out


def _check_rl_run(run: dict) -> None:
    assert set(run["phases_s"]) == {"collect", "batch", "score", "advantage", "update"}
    assert all(_finite(s) and s >= 0 for s in run["phases_s"].values())
    assert run["loadavg_before"] and _finite(run["cpu_seconds"])
    rollout, up = run["rollout"], run["update"]
    assert rollout["episodes"] == 16 and rollout["generated_tokens"] > 0  # 4 games x 4
    assert rollout["arena"]["shared_tokens"] > 0  # group members shared their first prompt
    assert rollout["prefill_tflop"] > 0 and _finite(rollout["efficiency"])
    assert up["agent_tokens"] > 0 and up["real_tokens"] >= up["agent_tokens"]
    assert up["head_tokens"] == up["agent_tokens"]  # the LM head only on agent tokens
    assert up["tflop"] > 0 and _finite(up["mfu"]) and up["mfu"] > 0
    assert _finite(up["agent_tokens_per_s"]) and _finite(up["real_tokens_per_s"])
    assert up["skipped_updates"] == 0


@pytest.mark.slow
def test_rl_iteration_reduced(monkeypatch, capsys):
    plain = _run("rl_iteration.py")
    (run,) = plain["runs"]
    _check_rl_run(run)
    assert run["score"]["passes"] == 0  # kl_coef = 0 and no critic: no scoring pass at all
    mem = plain["memory"]
    assert mem["ru_maxrss_mb"] > 0 and mem["phase_peaks_mb"]["update"] > 0
    assert all(p > 0 for p in plain["machine"]["matmul_peak_gflops"])
    text = _printed("rl_iteration", plain, monkeypatch, capsys)
    for label in ("matmul peak", "loadavg", "iteration 0:", "collect", "update", "MFU",
                  "efficiency", "ru_maxrss"):
        assert label in text
    assert not re.search(r"\bnan\b|\binf\b", text)

    # With a KL term the reference pass runs on the same rows, forward only. With LoRA the
    # update (forward + backward over the same real tokens, no weight gradients in the frozen
    # layers) costs 2x it. With all weights trained the counter's rule gives 3x; that run
    # (a third benchmark process) is left out for CI time.
    (run,) = _run("rl_iteration.py", "--lora", "algo.kl_coef=0.05")["runs"]
    _check_rl_run(run)
    sc, up = run["score"], run["update"]
    # 4 micro-batches of one group each: its shared first prompt and the rows' own tokens
    # packed into one pass per micro-batch
    assert sc["passes"] == 4
    assert sc["head_tokens"] == up["agent_tokens"]
    assert sc["real_tokens"] == up["real_tokens"]
    assert sc["shared_tokens"] == up["shared_tokens"] > 0
    assert up["tflop"] == pytest.approx(2 * sc["tflop"], rel=1e-9)


@pytest.mark.slow
def test_trl_grpo_reduced(monkeypatch, capsys):
    pytest.importorskip("trl", reason="the TRL comparison needs trl: pip install -e '.[bench]'")
    report = _run("trl_grpo.py")
    assert report["problems"] == []
    tripod, trl = report["sides"]
    assert (tripod["name"], trl["name"]) == ("tripod", "trl")
    for side in (tripod, trl):
        assert len(side["iteration_s"]) == 1 and _finite(side["iteration_s"][0])
        assert len(side["losses"]) == 2 and all(_finite(x) for x in side["losses"])
        assert side["changed_tensors"] > 0 and side["peak_rss_mb"] > 0
        assert side["torch_threads"] == int(_threads())   # both sides as asked
    # The same arithmetic: TRL's own defaults (bf16 autocast, activation checkpointing)
    # are switched off, both train fp32 weights.
    assert trl["settings"]["bf16"] is False and trl["settings"]["activation_checkpointing"] is False
    assert tripod["settings"]["dtype"] == trl["settings"]["dtype"] == "torch.float32"
    # The same work: 4 prompts x 2 samples x 8 tokens, every iteration, on both sides.
    assert tripod["generated_tokens"] == trl["generated_tokens"] == [64, 64]
    assert tripod["sequence_tokens"] == trl["sequence_tokens"]  # identical prompts too
    assert _finite(report["ratio_tripod_over_trl"]) and report["ratio_tripod_over_trl"] > 0
    text = _printed("trl_grpo", report, monkeypatch, capsys)
    assert "tripod / trl wall time per iteration: x" in text and "checks: ok" in text
    assert not re.search(r"\bnan\b|\binf\b", text)


def test_decode_matmuls_reduced(monkeypatch):
    """`benchmarks/decode_matmuls.py` on the tiny model: every linear shape of a layer, the
    LM head and the forward timed for each row count, every figure finite, the table
    printed with the peak and the load average."""
    r = _run("decode_matmuls.py")
    assert [x["rows"] for x in r["rows"]] == [1, 4]
    for x in r["rows"]:
        assert x["linears"] and all(_finite(v["ms"]) and v["gflops"] > 0
                                    for v in x["linears"].values())
        for key in ("layers_ms", "head_ms", "matmuls_ms", "forward_ms", "step_flops"):
            assert _finite(x[key]) and x[key] > 0
    assert r["peak_gflops"] > 0 and r["load_before"] and r["load_after"]
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    text = importlib.import_module("decode_matmuls").report(r)
    assert "matmul peak" in text and "loadavg" in text and "| 4 |" in text
    assert not re.search(r"\bnan\b|\binf\b", text)


def test_env_overlap_reduced():
    """`benchmarks/env_overlap.py` on the tiny model: both arms play every episode's turns
    with the same seeded sleeps; the overlapping arm went on decoding while slow steps ran
    (those counts do not depend on timing: a 0.3 s step outlasts a 0 s overlap wait)."""
    r = _run("env_overlap.py", "--overlap", "0.0")
    default, overlap = r["arms"]["default (wait for every step)"], r["arms"]["env_overlap_s=0.0"]
    for arm in (default, overlap):
        assert arm["env_steps"] == 8 * 3 and arm["env_errors"] == 0
        assert _finite(arm["wall_s_median"]) and arm["wall_s_median"] > 0
        assert arm["generated_tokens"] > 0 and arm["decode_steps"] > 0
    assert default["overlapped_steps"] == 0 and overlap["overlapped_steps"] > 0
    assert default["wall_ratio_to_default"] == 1.0 and _finite(overlap["wall_ratio_to_default"])


def test_counting_engine_keeps_counters_not_kv_caches(tiny_policy_factory, monkeypatch):
    """The benchmarks' engine reads the sampler's counters after a rollout; it must not keep
    the arenas (their KV caches) alive past `collect`, or the RL-iteration benchmark reports
    a memory peak that training does not have."""
    import gc

    from tripod.policy.rollout import RolloutConfig, make_jobs
    from tripod.policy.sampler import KVArena, SamplingParams

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    common = importlib.import_module("_common")
    engine = common.ArenaCountingEngine(tiny_policy_factory(),
                                        RolloutConfig(max_turns=3, batch_size=4))
    jobs = make_jobs("toy/letters-3", "train", [0, 1], 2, 0)
    gc.collect()
    gc.disable()
    try:
        engine.collect(jobs, SamplingParams(temperature=1.0, max_new_tokens=4))
        alive = [o for o in gc.get_objects() if isinstance(o, KVArena)]
    finally:
        gc.enable()
        engine.close()
    stats = engine.arena_stats()
    assert stats.decode_steps > 0 and stats.prefill_tokens > 0  # the counters survived
    assert alive == []


def test_prefill_passes_reduced(monkeypatch, capsys):
    report = _run("prefill_passes.py")
    assert set(report["modes"]) == {"padded", "packed-16", "packed-2048"}
    for r in report["modes"].values():
        assert all(_finite(r[k]) and r[k] > 0 for k in
                   ("first_turn_s", "later_turn_s", "first_gflops", "later_of_peak"))
        assert len(r["runs"]) == 1 and len(r["runs"][0]) == 3   # 1 round: first + 2 later
    text = _printed("prefill_passes", report, monkeypatch, capsys)
    assert "packed-2048" in text and "of peak" in text


@pytest.mark.slow
def test_textworld_env_reduced(monkeypatch, capsys):
    """`benchmarks/textworld_env.py --tiny`: generation, env starts both ways, resets and
    steps/s of both policies measured in a fresh game cache; the text report prints them."""
    r = _run("textworld_env.py")
    for key in ("one_game_s", "games_s", "fresh_start_s", "forked_start_s",
                "fork_server_first_s", "first_reset_s", "later_reset_s",
                "expert_steps_per_s", "random_steps_per_s"):
        assert _finite(r[key]) and r[key] > 0, key
    assert r["expert_steps"] > 0 and r["random_steps"] > 0
    text = _printed("textworld_env", r, monkeypatch, capsys)
    assert "steps/s" in text and "fork server" in text


@pytest.mark.slow
def test_overlap_reduced(monkeypatch, capsys):
    """`benchmarks/overlap.py --tiny`: one on-policy and one overlapped loop; the overlapped
    one really trained on a batch one update old, the on-policy one never did."""
    r = _run("overlap.py")
    plain, overlapped = r["runs"]
    assert (plain["overlap"], overlapped["overlap"]) == (False, True)
    assert plain["staleness"] == [0, 0] and max(overlapped["staleness"]) == 1
    for run in r["runs"]:
        assert all(_finite(run[k]) and run[k] >= 0 for k in ("wall_s", "rollout_s", "update_s"))
    assert "overlap=True" in _printed("overlap", r, monkeypatch, capsys)


@pytest.mark.slow
def test_env_workers_reduced(monkeypatch, capsys):
    """`benchmarks/env_workers.py --tiny`: the same scripted episodes played locally and on
    1 and 2 Ray env workers (the script checks no episode failed); the text report prints
    the 2 / 1 ratio."""
    r = _run("env_workers.py")
    assert set(r["seconds"]) == {"local", "ray_1", "ray_2"}
    assert all(_finite(s) and s > 0 for s in r["seconds"].values())
    assert r["steps"] == r["episodes"] * r["turns"]
    assert "2 workers / 1 worker" in _printed("env_workers", r, monkeypatch, capsys)


@pytest.mark.slow
def test_alfworld_env_reduced(monkeypatch, capsys):
    """`benchmarks/alfworld_env.py --tiny`: one pick_and_place_simple game generated in a
    fresh cache, then played by the expert, a random policy and a random policy with the
    expert on; the text report prints the row."""
    pytest.importorskip("alfworld", reason="ALFWorld games need the alfworld wheel: "
                                           "pip install -e '.[alfworld]'")
    r = _run("alfworld_env.py")
    assert r["mode"] == "steps" and r["task_types"] == ["pick_and_place_simple"]
    (row,) = r["rows"]
    assert len(row["generation_s"]) == 1 and all(_finite(s) and s > 0 for s in row["generation_s"])
    for key in ("reset_s", "expert_steps_per_s", "random_steps_per_s",
                "random_expert_on_steps_per_s"):
        assert _finite(row[key]) and row[key] > 0, key
    text = _printed("alfworld_env", r, monkeypatch, capsys)
    assert "pick_and_place_simple" in text and "random+expert st/s" in text


@pytest.mark.slow
@pytest.mark.xdist_group("sandbox")
def test_swe_generate_and_episodes_reduced(tmp_path, monkeypatch, capsys):
    """`benchmarks/swe_generate.py --tiny` makes one real task (a seeded bug in inflection,
    checked by its own suite in the sandbox) and saves it; `benchmarks/swe_episodes.py
    --tiny --tasks` plays it with the expert, which solves it with one test run (`submit`
    reuses it). Sharing the task keeps the generation cost to once."""
    from tripod.envs.swe.sandbox import namespaces_available

    if not namespaces_available():
        pytest.skip("the SWE sandbox needs namespaces, which unshare cannot create here")
    tasks = tmp_path / "tasks.jsonl"
    gen = _run("swe_generate.py", "--save", str(tasks))
    assert gen["tasks"] == 1 and [p["project"] for p in gen["projects"]] == ["inflection"]
    assert _finite(gen["tasks_per_min"]) and gen["tasks_per_min"] > 0
    assert sum(gen["tiers"].values()) == 1 and len(tasks.read_text().splitlines()) == 1
    assert "tasks/min" in _printed("swe_generate", gen, monkeypatch, capsys)
    episodes = _run("swe_episodes.py", "--tasks", str(tasks))
    (run,) = episodes["runs"]
    assert (run["workers"], run["episodes"], run["solved"]) == (1, 1, 1)
    assert run["run_tests_per_min"] == run["episodes_per_min"] > 0
    assert "solved 1/1" in _printed("swe_episodes", episodes, monkeypatch, capsys)
    checks = _run("swe_hidden_checks.py", "--tasks", str(tasks))
    assert checks["tasks"] == 1 and checks["gold_not_ok"] == 0
    assert checks["gold_false_failures"] == checks["buggy_passes"] == 0
    assert "tasks with hidden checks" in _printed("swe_hidden_checks", checks, monkeypatch,
                                                  capsys)


def test_swe_large_suite_reduced(monkeypatch, capsys):
    """`benchmarks/swe_large_suite.py --tiny`: one task of a held-out project, generated
    into a fresh suite cache, is a test task of the unseen-project set."""
    from tripod.envs.swe.sandbox import namespaces_available

    if not namespaces_available():
        pytest.skip("the SWE sandbox needs namespaces, which unshare cannot create here")
    report = _run("swe_large_suite.py")
    (row,) = report["projects"]
    assert (row["project"], row["held_out"], row["cached"], row["tasks"]) == (
        "webcolors", True, False, 1)
    assert row["splits"] == {"test": 1} and report["single_bug_tasks"] == {
        "test (unseen project)": 1}
    assert _finite(report["tasks_per_min"]) and report["tasks_per_min"] > 0
    assert "held out" in _printed("swe_large_suite", report, monkeypatch, capsys)


def test_swe_expert_scores_reduced(monkeypatch, capsys):
    """`benchmarks/swe_expert_scores.py --tiny`: the expert wins its one task with progress
    1, a bare `submit` loses with the base's progress."""
    from tripod.envs.swe.sandbox import namespaces_available

    if not namespaces_available():
        pytest.skip("the SWE sandbox needs namespaces, which unshare cannot create here")
    report = _run("swe_expert_scores.py")
    assert report["expert"] == {"won": 1, "episodes": 1, "mean_progress": 1.0}
    assert report["submit"]["won"] == 0 and report["submit"]["mean_progress"] < 1.0
    assert "mean final progress" in _printed("swe_expert_scores", report, monkeypatch, capsys)


@pytest.mark.slow
def test_report_size_reduced(monkeypatch, capsys):
    """`benchmarks/report_size.py --tiny`: a run of 2 episodes with advantages and trainer
    logprobs, its report built and opened once in headless Chromium, which rendered it."""
    names = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
    if not any(shutil.which(n) for n in names):
        pytest.skip("chromium is not installed (CI installs it: apt-get install -y chromium)")
    r = _run("report_size.py")
    assert r["episodes"] == 2 and r["records_bytes"] > 0 and r["report_bytes"] > 0
    assert len(r["chromium_wall_s"]) == len(r["chromium_blank_s"]) == len(r["render_ms"]) == 1
    assert r["render_ms"][0] >= 0 and _finite(r["build_s"])
    assert "episodes: trajectory records" in _printed("report_size", r, monkeypatch, capsys)
