"""The data-parallel learner: 2 gloo processes (torchrun) equal 1 process for the same
global batch, with DDP-style all-reduce and with FSDP2 shards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tripod.train.distributed import Parallel

from . import _dp_worker

WORKER = Path(_dp_worker.__file__)


def _torchrun(*args: str | Path) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    src = str(Path(__file__).parents[2] / "src")
    env["PYTHONPATH"] = os.pathsep.join([src, str(WORKER.parents[2]), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
           "2", str(WORKER), *map(str, args)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]


def _load(path: Path) -> dict:
    return torch.load(path, weights_only=False)


@pytest.mark.parametrize("fsdp, estimator", [(False, "grpo"), (True, "gae")],
                         ids=["ddp", "fsdp2-critic"])
def test_two_processes_equal_one(tmp_path, fsdp, estimator):
    """Same global batch: the same losses and weights (policy and critic) on 1 process and
    on each of 2. FSDP2 runs with a critic (GAE), which shards both models; its policy-only
    path is the same code without the critic (CI time: one torchrun launch costs ~9 s)."""
    flags = [f"cluster.fsdp={str(fsdp).lower()}", f"algo.estimator={estimator}"]
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    _dp_worker.run(one, flags)
    _torchrun(two, *flags)
    ref = _load(one / "weights_rank0.pt")
    start = _dp_worker.load_policy("tiny", seed=1).model.state_dict()
    moved = max(float((ref["weights"][k] - start[k]).abs().max()) for k in start)
    assert moved > 1e-4  # the update did something
    assert any(k.startswith("critic.") for k in ref["weights"]) == (estimator == "gae")
    for rank in (0, 1):
        got = _load(two / f"weights_rank{rank}.pt")
        for k, w in ref["weights"].items():
            torch.testing.assert_close(got["weights"][k], w, rtol=1e-4, atol=1e-6, msg=k)
        if not fsdp:  # replicated weights: the reference passes are split, not repeated
            assert (ref["ref_calls"], got["ref_calls"]) == (6, 3)
        keys = ("ratio_mean", "entropy", "kl", "grad_norm", "success_rate", "episodes")
        for k in keys + (("value_loss",) if estimator == "gae" else ()):
            assert got["metrics"][k] == pytest.approx(ref["metrics"][k], rel=1e-4, abs=1e-6), k


def test_train_rl_under_torchrun_logs_and_saves_once(tmp_path):
    """The whole loop on 2 ranks: rank 0 alone logs and saves; the first iteration (before
    any update changes the sampling) has the one-process run's episodes and rewards."""
    flags = ["train.iterations=2", "algo.lr=1e-3", "run.name=dp"]
    history = _dp_worker.loop(tmp_path / "one", flags)
    _torchrun("--loop", tmp_path / "two", *flags)
    run_dir = tmp_path / "two" / "dp"
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2  # one writer
    assert (run_dir / "checkpoints" / "iter_000002" / "config.json").is_file()
    first = json.loads(lines[0])
    for k in ("episodes", "success_rate", "return", "episode_length"):
        assert first[k] == pytest.approx(history[0][k]), k


def test_one_process_seams_are_the_identity():
    p = Parallel()
    assert p.share([1, 2, 3]) == [1, 2, 3]
    assert p.gather([1]) == [[1]]
    assert p.micro_share(["a", "b"]) == [("a", 1.0), ("b", 1.0)]
    assert p.agree("loss") == "loss" and p.agree(None) is None


def test_shares_split_work_and_fsdp_pads_to_lockstep():
    assert Parallel(rank=1, world_size=2).share([0, 1, 2, 3, 4]) == [1, 3]
    micros = ["m0", "m1", "m2"]
    assert Parallel(rank=1, world_size=2).micro_share(micros) == [("m1", 1.0)]
    # FSDP averages shard gradients over ranks: weight 2 makes it a sum; padding weighs 0
    assert Parallel(rank=1, world_size=2, fsdp=True).micro_share(micros) == [
        ("m1", 2.0), ("m0", 0.0)]
    assert Parallel(rank=0, world_size=2, fsdp=True).micro_share(micros) == [
        ("m0", 2.0), ("m2", 2.0)]


def test_tripod_train_under_torchrun_runs_sft_and_evaluations_on_rank_0(tmp_path):
    """`run_recipe` on 2 ranks: rank 0 alone runs SFT, evaluates and writes the run's files;
    rank 1 starts RL from rank 0's SFT weights (not the base model it loaded) and returns
    nothing; the numbers equal one process's. Run with FSDP2, the harder case (the broadcast
    must come before the layers are sharded); DDP shares every line of it but the sharding."""
    flags = ["train.iterations=1", "algo.lr=1e-3", "cluster.fsdp=true"]
    one = _dp_worker.pipeline(tmp_path / "one", flags)
    _torchrun("--pipeline", tmp_path / "two", *flags)
    two = tmp_path / "two"
    assert json.loads((two / "results_rank1.json").read_text()) == {}
    got = json.loads((two / "results_rank0.json").read_text())
    assert got == json.loads((two / "p" / "results.json").read_text())
    assert len((two / "p" / "metrics.jsonl").read_text().splitlines()) == 1
    assert set(got["eval"]) == {"base", "sft", "final"}
    keys = ("won", "episodes", "mean_turns", "invalid_rate", "env_errors")
    for stage in ("base", "sft"):
        (mine,), (ref,) = got["eval"][stage].values(), one["eval"][stage].values()
        assert {k: mine[k] for k in keys} == {k: ref[k] for k in keys}, stage
    assert got["sft_train"]["final_loss"] == pytest.approx(one["sft_train"]["final_loss"])
    sft = _load(tmp_path / "one" / "rl_start_rank0.pt")
    base = _dp_worker.load_policy("tiny", seed=3).model.state_dict()
    assert max(float((sft[k] - base[k]).abs().max()) for k in base) > 1e-3  # SFT moved it
    rank0 = _load(two / "rl_start_rank0.pt")
    for k, w in _load(two / "rl_start_rank1.pt").items():
        assert torch.equal(w, rank0[k]), k   # broadcast from rank 0
        # one process (more threads) rounds SFT's sums differently: ~1e-6 vs SFT's > 1e-3
        torch.testing.assert_close(w, sft[k], rtol=0, atol=1e-5, msg=k)
    for k in ("episodes", "success_rate", "return", "entropy"):
        assert got["rl_history"][0][k] == pytest.approx(one["rl_history"][0][k], rel=1e-4), k
