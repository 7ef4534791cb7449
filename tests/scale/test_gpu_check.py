"""`benchmarks/gpu/check.py` end to end: `--tiny --device cpu` in CI (its numbers mean
nothing), the real shape on a CUDA device when there is one (gpu marker)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "check.py"


def _check(*args: str) -> dict:
    out = subprocess.run([sys.executable, str(SCRIPT), "--json", *args], env=os.environ,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def _assert_sane(r: dict, episodes: int, turns: int) -> None:
    assert r["episodes"] == episodes and r["turns"] == episodes * turns
    assert r["generated_tokens"] > 0 and r["rollout_tokens_per_s"] > 0
    assert r["update_rows"] == episodes and r["update_tokens_per_s"] > 0
    assert r["skipped_updates"] == 0 and r["peak_memory_gb"] > 0
    # the update's FLOPs come from the passes the trainer ran: a group's shared first prompt
    # runs once, so some row tokens are not run again (groups of 4 share their prompt)
    assert r["update_tflop"] > 0 and 0 < r["update_shared_tokens"] < r["update_tokens"]
    # bf16 weights, fp32 logprobs: sampler and trainer agree closely (a temperature or
    # alignment mistake gives gaps of order 1)
    assert math.isfinite(r["logprob_gap_max"]) and r["logprob_gap_max"] < 0.05
    assert 0 <= r["logprob_gap_mean"] <= r["logprob_gap_max"]


def test_gpu_check_tiny_on_cpu():
    r = _check("--tiny", "--device", "cpu", "--episodes", "8", "--turns", "2",
               "--max-new-tokens", "4")
    _assert_sane(r, 8, 2)
    assert r["device"] == "cpu" and r["parameters_b"] < 0.01 and r["mfu"] > 0


@pytest.mark.gpu
def test_gpu_check_full_shape_on_cuda():
    r = _check("--episodes", "8", "--turns", "2", "--max-new-tokens", "8")
    _assert_sane(r, 8, 2)
    assert 1.5 < r["parameters_b"] < 1.6  # Qwen2.5-1.5B's shape
