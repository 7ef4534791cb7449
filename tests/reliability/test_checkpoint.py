"""Crash-safe checkpoints: manifest verification naming the bad file, safetensors + JSON only
(no pickle), exact RNG round trips, resume from a run folder skipping bad checkpoints, and a
full disk that stops the run with the last good checkpoint intact."""

from __future__ import annotations

import errno
import json
import logging
import pickle
import random

import numpy as np
import pytest
import torch

from tripod.policy.models import load_policy
from tripod.train import checkpoint as ck
from tripod.train.checkpoint import (
    CheckpointError,
    drop_records_after,
    load_trainer_state,
    resolve_resume,
    save_checkpoint,
    verify_checkpoint,
)
from tripod.train.learner import TrainingStopped


def _ckpts(run):
    return run / "checkpoints"


def test_checkpoint_holds_only_safetensors_and_json(finished_run):
    ckpt = _ckpts(finished_run) / "iter_000002"
    manifest = verify_checkpoint(ckpt)
    names = set(manifest["files"])
    assert {"model.safetensors", "trainer.safetensors", "trainer.json", "state.json"} <= names
    assert all(n.endswith((".safetensors", ".json", ".jinja", ".txt")) for n in names), names
    assert sorted(p.name for p in ckpt.iterdir()) == sorted(names | {"manifest.json"})


def test_loading_never_unpickles(finished_run, monkeypatch):
    """Trainer state and policy load with pickle and torch.load disabled."""
    def refuse(*args, **kwargs):
        raise AssertionError("pickle used while loading a checkpoint")

    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(torch, "load", refuse)
    trainer, state = load_trainer_state(_ckpts(finished_run) / "iter_000002")
    assert state["iteration"] == 2 and trainer["optimizer"]["state"]
    load_policy(str(_ckpts(finished_run) / "iter_000002"))


def test_trainer_state_round_trips_exactly(tmp_path, tiny_policy_factory):
    """Optimizer state (int keys, tuples), counters and all three RNG states come back
    exactly: the draws after restoring equal the draws after saving."""
    random.seed(3)
    np.random.seed(4)
    torch.manual_seed(5)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.8, 0.99))
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    trainer = {"optimizer": opt.state_dict(), "critic": None, "nan_skips": 2}
    save_checkpoint(tmp_path / "c", tiny_policy_factory(), trainer, {"iteration": 1})
    draws = (random.random(), np.random.rand(3).tolist(), torch.rand(3).tolist())
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    loaded, _ = load_trainer_state(tmp_path / "c")
    ck.set_rng_state(loaded["rng"])
    assert (random.random(), np.random.rand(3).tolist(), torch.rand(3).tolist()) == draws
    assert loaded["optimizer"]["param_groups"][0]["betas"] == (0.8, 0.99)
    assert loaded["nan_skips"] == 2 and loaded["critic"] is None
    fresh = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.8, 0.99))
    fresh.load_state_dict(loaded["optimizer"])
    for k, v in opt.state_dict()["state"][0].items():
        assert torch.equal(fresh.state_dict()["state"][0][k], v), k


def test_saving_writes_the_optimizer_state_in_place_and_copies_only_shared_memory(
        tmp_path, tiny_policy_factory, monkeypatch):
    """Whole tensors (AdamW's moments) go to the file without a copy: cloning them doubled
    the optimizer state in memory while a checkpoint was saved (the quickstart's RL peak).
    A view of part of a storage, or a storage already stored under another key, is copied,
    since safetensors refuses shared memory; all of them come back exact."""
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    base = torch.arange(12.0)
    trainer = {"optimizer": opt.state_dict(), "view": base[2:5], "again": base,
               "strided": base.view(3, 4).t(), "base": base}
    stored: dict = {}
    original_save = ck.save_file
    monkeypatch.setattr(ck, "save_file", lambda t, path: (stored.update(t), original_save(t, path)))
    save_checkpoint(tmp_path / "c", tiny_policy_factory(), trainer, {"iteration": 1})
    moments = [v for st in opt.state_dict()["state"].values() for k, v in st.items()
               if k in ("exp_avg", "exp_avg_sq")]
    assert moments and all(any(t.data_ptr() == m.data_ptr() for t in stored.values())
                           for m in moments)                     # written in place
    ptrs = [t.untyped_storage().data_ptr() for t in stored.values() if t.numel()]
    assert len(ptrs) == len(set(ptrs))                           # no storage twice
    loaded, _ = load_trainer_state(tmp_path / "c")
    for key in ("view", "again", "strided", "base"):
        assert torch.equal(loaded[key], trainer[key]), key
    for k, v in opt.state_dict()["state"][0].items():
        assert torch.equal(loaded["optimizer"]["state"][0][k], v), k


@pytest.mark.parametrize("damage, named", [
    ("flip model.safetensors", "model.safetensors: corrupt"),
    ("truncate trainer.safetensors", "trainer.safetensors: corrupt"),
    ("delete trainer.json", "trainer.json: missing"),
    ("delete manifest.json", "manifest.json missing"),
    ("garble manifest.json", "manifest.json: unreadable"),
])
def test_damaged_checkpoint_names_the_file(run_copy, damage, named):
    action, name = damage.split()
    file = _ckpts(run_copy) / "iter_000002" / name
    if action == "flip":
        data = bytearray(file.read_bytes())
        data[len(data) // 2] ^= 0xFF
        file.write_bytes(bytes(data))
    elif action == "truncate":
        file.write_bytes(file.read_bytes()[:-10])
    elif action == "garble":
        file.write_text("{not json")
    else:
        file.unlink()
    with pytest.raises(CheckpointError, match=named.replace(".", r"\.")):
        load_trainer_state(file.parent)
    with pytest.raises(CheckpointError, match=named.replace(".", r"\.")):
        resolve_resume(file.parent)  # an explicit checkpoint folder is never swapped


def test_resume_from_run_folder_skips_bad_checkpoints(run_copy, caplog):
    ckpts = _ckpts(run_copy)
    assert resolve_resume(run_copy) == ckpts / "iter_000002"
    # a save killed before its rename leaves a hidden temporary folder: never a candidate
    (ckpts / ".iter_000003.tmp-999").mkdir()
    (ckpts / ".iter_000003.tmp-999" / "config.json").write_text("{}")
    (ckpts / "iter_000002" / "trainer.json").write_text("{}")
    with caplog.at_level(logging.WARNING, logger="tripod.train.checkpoint"):
        assert resolve_resume(run_copy) == ckpts / "iter_000001"
    assert "skipping checkpoint iter_000002" in caplog.text and "trainer.json" in caplog.text
    (ckpts / "iter_000001" / "state.json").unlink()
    with pytest.raises(CheckpointError, match=r"(?s)no good checkpoint.*iter_000002.*iter_000001"):
        resolve_resume(run_copy)
    with pytest.raises(CheckpointError, match="neither a checkpoint nor a run folder"):
        resolve_resume(run_copy / "trajectories")


def test_full_disk_while_saving_keeps_the_last_good_checkpoint(run_copy, monkeypatch,
                                                               tiny_policy_factory):
    """ENOSPC in the middle of a save: the run stops (a `TrainingStopped`, printed by the
    CLI without a traceback) naming the last good checkpoint, which still verifies; no
    temporary folder is left behind."""
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ck, "save_file", full)
    ckpts = _ckpts(run_copy)
    with pytest.raises(TrainingStopped, match=r"disk is full.*last good checkpoint is "
                       r".*iter_000002.*--resume"):
        save_checkpoint(ckpts / "iter_000003", tiny_policy_factory(), {}, {"iteration": 3})
    assert sorted(p.name for p in ckpts.iterdir()) == ["iter_000001", "iter_000002"]
    verify_checkpoint(ckpts / "iter_000002")


def test_a_real_write_error_keeps_the_last_good_checkpoint(run_copy, tiny_policy_factory):
    """A real write error from the kernel, without root: a file-size limit (RLIMIT_FSIZE,
    SIGXFSZ ignored) under the model's size makes the write fail with EFBIG inside
    safetensors, which reports it as its own error type, not OSError."""
    import resource
    import signal

    ckpts, policy = _ckpts(run_copy), tiny_policy_factory()
    size = (ckpts / "iter_000002" / "model.safetensors").stat().st_size
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size // 2, hard))
    try:
        with pytest.raises(CheckpointError, match=r"exceeds the size limit.*last good "
                           r"checkpoint is .*iter_000002"):
            save_checkpoint(ckpts / "iter_000003", policy, {}, {"iteration": 3})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)
    assert sorted(p.name for p in ckpts.iterdir()) == ["iter_000001", "iter_000002"]
    verify_checkpoint(ckpts / "iter_000002")


def test_overwriting_a_checkpoint_is_atomic(run_copy, tiny_policy_factory):
    """Saving under an existing name replaces it whole (no mix of old and new files)."""
    target = _ckpts(run_copy) / "iter_000002"
    save_checkpoint(target, tiny_policy_factory(seed=9), {"nan_skips": 7}, {"iteration": 2})
    trainer, _ = load_trainer_state(target)
    assert trainer["nan_skips"] == 7 and "optimizer" not in trainer
    assert not list(_ckpts(run_copy).glob(".*"))


def test_drop_records_after_removes_replayed_and_torn_lines(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"step": s, "return": s / 10}) for s in (1, 2, 3)]
    path.write_text("\n".join(lines) + '\n{"step": 4, "ret')
    assert drop_records_after(path, 2) == 2
    assert [json.loads(x)["step"] for x in path.read_text().splitlines()] == [1, 2]


def _cli_train(run, *extra):
    from tripod.cli import main

    from .conftest import TINY

    recipe = run.parent / "recipe.yaml"
    recipe.write_text("{}\n")
    return main(["train", str(recipe), *TINY, f"run.out_dir={run.parent}", f"run.name={run.name}",
                 "eval.games=2", "eval.before_training=false", "train.checkpoint_every=1", *extra])


def test_cli_resume_of_a_run_folder(run_copy, capsys):
    """`tripod train RECIPE --resume RUN_DIR`: one more iteration from the newest good
    checkpoint (the newest is corrupt here); a run folder with none fails cleanly."""
    (_ckpts(run_copy) / "iter_000002" / "model.safetensors").write_bytes(b"oops")
    assert _cli_train(run_copy, "train.iterations=2", "--resume", str(run_copy)) == 0
    steps = [json.loads(x)["step"] for x in (run_copy / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]  # iteration 2 replayed from checkpoint 1, logged once
    verify_checkpoint(_ckpts(run_copy) / "iter_000002")  # rewritten whole
    for ckpt in _ckpts(run_copy).iterdir():
        (ckpt / "state.json").unlink()
    capsys.readouterr()
    assert _cli_train(run_copy, "train.iterations=3", "--resume", str(run_copy)) == 1
    err = capsys.readouterr().err
    assert "error:" in err and "no good checkpoint" in err and "Traceback" not in err
