"""A full disk in the middle of a run (simulated: ENOSPC raised by the writer, as no
size-limited mount is available without root): the run stops, the last good checkpoint is
intact, and the run resumes from its folder once space is back."""

from __future__ import annotations

import errno

import pytest

from tripod.train import checkpoint as ck
from tripod.train.checkpoint import resolve_resume, verify_checkpoint
from tripod.train.common import MetricLogger
from tripod.train.rl import train_rl

from .conftest import TINY


def _enospc(path):
    return OSError(errno.ENOSPC, "No space left on device", str(path))


def _ckpt_names(run):
    return sorted(p.name for p in (run / "checkpoints").iterdir())


@pytest.mark.slow
def test_full_disk_while_checkpointing_stops_the_cli_cleanly(tmp_path, monkeypatch, capsys):
    """The second checkpoint cannot be written: `tripod train` exits 1 with one line naming
    the disk and the last good checkpoint, no traceback; `--resume RUN_DIR` then replays
    iteration 2 and finishes."""
    from tripod.cli import main

    real, calls = ck.save_file, []

    def fills_up(tensors, path, *args, **kwargs):
        calls.append(path)
        if len(calls) == 2:
            raise _enospc(path)
        return real(tensors, path, *args, **kwargs)

    monkeypatch.setattr(ck, "save_file", fills_up)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("{}\n")
    args = ["train", str(recipe), *TINY, f"run.out_dir={tmp_path}", "run.name=full",
            "train.iterations=2", "train.checkpoint_every=1", "eval.games=1",
            "eval.before_training=false"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "the disk is full" in err and "last good checkpoint is" in err and "iter_000001" in err
    run = tmp_path / "full"
    assert _ckpt_names(run) == ["iter_000001"]  # no partial iter_000002 left behind
    verify_checkpoint(run / "checkpoints" / "iter_000001")
    monkeypatch.setattr(ck, "save_file", real)  # space is back
    assert main([*args, "--resume", str(run)]) == 0
    assert _ckpt_names(run) == ["iter_000001", "iter_000002"]


def test_full_disk_while_logging_metrics_keeps_the_last_checkpoint(tmp_path, monkeypatch,
                                                                    tiny_policy_factory,
                                                                    tiny_cfg):
    """metrics.jsonl cannot grow at iteration 2: the OSError (ENOSPC, naming the file) stops
    the run; checkpoint 1 is intact and is where the resume starts."""
    real_log = MetricLogger.log

    def log(self, step, metrics, prefix=""):
        if step == 2:
            raise _enospc(self.path)
        return real_log(self, step, metrics, prefix)

    monkeypatch.setattr(MetricLogger, "log", log)
    cfg = tiny_cfg(tmp_path, "train.iterations=2", "train.checkpoint_every=1")
    with pytest.raises(OSError, match="No space left on device.*metrics.jsonl") as info:
        train_rl(cfg, policy=tiny_policy_factory(), quiet=True)
    assert info.value.errno == errno.ENOSPC
    assert _ckpt_names(cfg.run_dir) == ["iter_000001"]
    assert resolve_resume(cfg.run_dir) == cfg.run_dir / "checkpoints" / "iter_000001"
    monkeypatch.setattr(MetricLogger, "log", real_log)
    result = train_rl(cfg, resume=cfg.run_dir, quiet=True)
    assert [h["iteration"] for h in result.history] == [2]


def test_full_disk_while_logging_metrics_is_one_line_from_the_cli(tmp_path, monkeypatch,
                                                                   capsys):
    """Through `tripod train`: exit 1, one line naming the file and how to resume, no
    traceback (any other OSError still propagates)."""
    from tripod.cli import main

    real_log = MetricLogger.log

    def log(self, step, metrics, prefix=""):
        if step == 1:
            raise _enospc(self.path)
        return real_log(self, step, metrics, prefix)

    monkeypatch.setattr(MetricLogger, "log", log)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("{}\n")
    args = ["train", str(recipe), *TINY, f"run.out_dir={tmp_path}", "run.name=full",
            "train.iterations=1", "eval.games=1", "eval.before_training=false"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "disk full while writing" in err and "metrics.jsonl" in err and "--resume" in err
