"""`benchmarks/rollout_throughput.py --tiny` runs end to end (no timing is asserted).

It checks what the figures rest on: every path plays every episode, the four engine paths
replay identical actions (so their time ratios compare equal work), and the script's own
count of prefill tokens agrees with what the sampler's arena actually ran.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "rollout_throughput.py"


def test_rollout_benchmark_tiny():
    threads = os.environ.get("OMP_NUM_THREADS", "2")   # one per pytest-xdist worker
    out = subprocess.run([sys.executable, str(SCRIPT), "--tiny", "--json", "--threads", threads],
                         env=os.environ, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert report["schema"] == "tripod-benchmark/1" and report["provenance"]["commit"]
    runs = report["runs"]
    assert set(runs) == {"engine", "serial-env", "no-reuse", "one-at-a-time", "naive"}
    assert report["engine_paths_same_actions"]
    for path, rounds in runs.items():
        assert len(rounds) == 2  # --tiny times two rounds, in alternating order
        for s in rounds:
            assert s["episodes"] == 4 and s["generated_tokens"] > 0 and s["model_tflop"] > 0
            assert s["loadavg_before"] and s["flop_limit_s"] > 0
            if path in ("engine", "serial-env"):  # the script's count == what was run
                assert s["prefill_tokens"] == s["arena"]["prefill_tokens"]
    engine, alone = runs["engine"][0], runs["one-at-a-time"][0]
    assert engine["arena"]["shared_tokens"] > 0  # group members shared their first prompt
    assert alone["arena"]["prefill_tokens"] == (  # batch 1 cannot share: it ran them all
        engine["prefill_tokens"] + engine["arena"]["shared_tokens"])
    # Re-encoding every turn does more prefill than reusing the cache.
    assert runs["no-reuse"][0]["prefill_tokens"] > runs["engine"][0]["prefill_tokens"]
    assert runs["naive"][0]["prefill_tokens"] > runs["engine"][0]["prefill_tokens"]
    assert set(report["ratios"]) >= {"speed vs no-reuse", "tokens_per_s vs naive"}
