"""Kill and resume for real: a CPU training run in a subprocess is SIGKILLed in the middle of
an iteration, or in the middle of writing a checkpoint; resuming from the run folder (what
`tripod train RECIPE --resume RUN_DIR` does) finishes it, and the per-iteration metrics and
final weights equal those of a run that never stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import tripod
from tripod.train.checkpoint import KILL_HOOK, checkpoint_dirs, resolve_resume

from .conftest import TINY

ITERATIONS = 5
DRIVER = """
import json, sys
from pathlib import Path
from tripod.core.config import load_config
from tripod.train.rl import train_rl
cfg = load_config(overrides=json.loads(sys.argv[1]))
train_rl(cfg, resume=Path(sys.argv[2]) if sys.argv[2] else None, quiet=True)
"""
VOLATILE = {"time", "rollout_s", "tokens_per_s", "iteration_s", "env_wait_s"}
"""Wall-clock metrics (they differ between any two runs)."""

pytestmark = pytest.mark.slow


def _start(out: Path, name: str, resume: Path | None = None,
           env: dict[str, str] | None = None) -> subprocess.Popen:
    overrides = [*TINY, f"run.out_dir={out}", f"run.name={name}",
                 f"train.iterations={ITERATIONS}", "train.checkpoint_every=1"]
    src = str(Path(tripod.__file__).resolve().parents[1])
    # one thread: the same float arithmetic in every run (and polite on 2 cores)
    environ = {**os.environ, "PYTHONPATH": src, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.Popen([sys.executable, "-c", DRIVER, json.dumps(overrides),
                             str(resume or "")], env=environ, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen) -> int:
    _, err = proc.communicate(timeout=600)
    if proc.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"training subprocess failed ({proc.returncode}):\n{err[-3000:]}")
    return proc.returncode


def _metrics(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in rows]


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run / "checkpoints" / f"iter_{ITERATIONS:06d}" / "model.safetensors"))


def _assert_same_run(run: Path, reference: Path) -> None:
    got, want = _metrics(run), _metrics(reference)
    assert [r["step"] for r in got] == list(range(1, ITERATIONS + 1))
    for g, w in zip(got, want, strict=True):
        assert g.keys() == w.keys()
        for k in w:
            assert g[k] == pytest.approx(w[k], rel=1e-5, abs=1e-6), (g["step"], k)
    ref = _weights(reference)
    for name, tensor in _weights(run).items():
        torch.testing.assert_close(tensor, ref[name], rtol=1e-5, atol=1e-6)
    metric_diff = max(abs(g[k] - w[k]) for g, w in zip(got, want) for k in w
                      if isinstance(w[k], int | float))
    weight_diff = max(float((t - ref[n]).abs().max()) for n, t in _weights(run).items())
    print(f"resumed vs uninterrupted: {len(got)} iterations x {len(want[0]) - 1} metrics, "
          f"max metric difference {metric_diff:.3g}, max weight difference {weight_diff:.3g}")


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The run that never stopped."""
    out = tmp_path_factory.mktemp("ref")
    assert _finish(_start(out, "straight")) == 0
    return out / "straight"


def test_sigkill_mid_iteration_then_resume_equals_an_uninterrupted_run(reference, tmp_path):
    proc = _start(tmp_path, "killed")
    ckpts = tmp_path / "killed" / "checkpoints"
    while proc.poll() is None and not (ckpts / "iter_000002").exists():
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)  # somewhere in iteration 3 (or later)
    assert _finish(proc) == -signal.SIGKILL, "the run finished before it could be killed"
    left = [p.name for p in checkpoint_dirs(tmp_path / "killed")]
    print(f"killed with checkpoints {left} and "
          f"{len(_metrics(tmp_path / 'killed'))} logged iterations")
    assert left and len(left) < ITERATIONS
    assert _finish(_start(tmp_path, "killed", resume=tmp_path / "killed")) == 0
    _assert_same_run(tmp_path / "killed", reference)


@pytest.mark.parametrize("stage", ["after_model", "before_rename"])
def test_sigkill_while_writing_a_checkpoint_then_resume(reference, tmp_path, stage):
    """Killed inside the save of checkpoint 3: the partial folder is never used; the resume
    starts from checkpoint 2, replays iteration 3 (its logged metrics are replaced)."""
    proc = _start(tmp_path, "torn", env={KILL_HOOK: f"{stage}@iter_000003"})
    assert _finish(proc) == -signal.SIGKILL
    run = tmp_path / "torn"
    assert [p.name for p in checkpoint_dirs(run)] == ["iter_000002", "iter_000001"]
    assert [p.name.split(".tmp")[0] for p in (run / "checkpoints").glob(".*")] == [".iter_000003"]
    assert [r["step"] for r in _metrics(run)] == [1, 2, 3]
    assert resolve_resume(run) == run / "checkpoints" / "iter_000002"
    assert _finish(_start(tmp_path, "torn", resume=run)) == 0
    _assert_same_run(run, reference)
    assert not list((run / "checkpoints").glob(".*"))  # the partial folder was removed
