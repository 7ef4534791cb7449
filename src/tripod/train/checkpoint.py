"""Resumable, crash-safe checkpoints in standard formats (safetensors and JSON only).

A checkpoint folder holds the policy as a Hugging Face model folder (or a PEFT adapter
folder with LoRA), loadable by `load_policy(path)`; the trainer state (optimizers, critic,
skip counters, RNG states) as `trainer.safetensors` (its tensors) plus `trainer.json` (the
rest, with each tensor replaced by a reference); `state.json` (iteration, recipe); and
`manifest.json`, the sha256 and size of every other file. Nothing in a checkpoint is read
with pickle, so loading one cannot run code.

Crash safety: a checkpoint is written into a hidden temporary folder next to its
final place, every file and the folder are fsynced, and only then is the folder renamed into
place (a rename is atomic on POSIX file systems) and the parent folder fsynced. A process
killed at any moment leaves either the previous checkpoint or the new one, never half of
one; a leftover temporary folder is ignored and removed by the next save. Loading checks the
manifest and names the missing or corrupt file. `resolve_resume(RUN_DIR)` picks the newest
checkpoint that verifies, skipping (and logging) the ones that do not.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import random
import re
import shutil
import signal
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from tripod.train.learner import TrainingStopped

STATE_FILE = "state.json"
TRAINER_TENSORS = "trainer.safetensors"
TRAINER_JSON = "trainer.json"
MANIFEST = "manifest.json"
CHECKPOINT_DIRS = "checkpoints"
_NAME = re.compile(r"iter_(\d+)")
_TMP_PREFIX = "."
_TMP_MARK = ".tmp-"

KILL_HOOK = "TRIPOD_FAULT_CHECKPOINT_KILL"
"""Test hook: set to a stage of `save_checkpoint` (``after_model``, ``after_trainer``,
``before_rename``), optionally ``STAGE@iter_000003`` for one checkpoint only, and the process
SIGKILLs itself there, as a crash while writing would."""

log = logging.getLogger(__name__)


class CheckpointError(TrainingStopped):
    """A checkpoint cannot be written (the run stops, the last good one is intact) or read
    (missing, partial or corrupt file, named in the message)."""


# -- trainer state: nested dicts of tensors, numbers and RNG states <-> safetensors + JSON --
def _storable(value: torch.Tensor, seen: set[int]) -> torch.Tensor:
    """`value` as safetensors can write it, copied only where it must be: a view of part of
    a storage, or a storage already stored under another key (safetensors refuses shared
    memory). Whole tensors are written in place: a clone of the optimizer state doubled
    it (1.08 GB for SmolLM2's AdamW) while a checkpoint was saved, the RL stage's peak."""
    t = value.detach().cpu()
    storage = t.untyped_storage()
    whole = (t.is_contiguous() and t.storage_offset() == 0
             and storage.nbytes() == t.numel() * t.element_size())
    if not whole or (t.numel() and storage.data_ptr() in seen):
        t = t.clone(memory_format=torch.contiguous_format)
    if t.numel():
        seen.add(t.untyped_storage().data_ptr())
    return t


def _encode(value: Any, tensors: dict[str, torch.Tensor], key: str,
            seen: set[int] | None = None) -> Any:
    """A JSON tree for `value`; tensors go to `tensors` under a path key (not copied unless
    they must be, `_storable`). Types JSON cannot tell apart (tuples, non-string dict keys,
    numpy arrays) are tagged so they come back exactly (the python and numpy RNG states must
    round-trip bit for bit)."""
    seen = set() if seen is None else seen
    if isinstance(value, torch.Tensor):
        tensors[key] = _storable(value, seen)
        return {"__tensor__": key}
    if isinstance(value, np.ndarray):
        return {"__ndarray__": value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v, tensors, f"{key}/{i}", seen)
                              for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [_encode(v, tensors, f"{key}/{i}", seen) for i, v in enumerate(value)]
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in value):
            return {k: _encode(v, tensors, f"{key}/{k}", seen) for k, v in value.items()}
        return {"__items__": [[_encode(k, tensors, f"{key}/k{i}", seen),
                               _encode(v, tensors, f"{key}/{i}", seen)]
                              for i, (k, v) in enumerate(value.items())]}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"trainer state at {key!r}: cannot store a {type(value).__name__}")


def _decode(node: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(node, list):
        return [_decode(v, tensors) for v in node]
    if not isinstance(node, dict):
        return node
    if "__tensor__" in node:
        return tensors[node["__tensor__"]]
    if "__ndarray__" in node:
        return np.array(node["__ndarray__"], dtype=node["dtype"])
    if "__tuple__" in node:
        return tuple(_decode(v, tensors) for v in node["__tuple__"])
    if "__items__" in node:
        return {_decode(k, tensors): _decode(v, tensors) for k, v in node["__items__"]}
    return {k: _decode(v, tensors) for k, v in node.items()}


def rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "numpy": np.random.get_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])


# -- writing ---------------------------------------------------------------------------------
def _fsync(path: Path) -> None:
    """Flush a file's or a folder's data and metadata to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _maybe_die(stage: str, name: str) -> None:
    """The kill hook (see `KILL_HOOK`): a real SIGKILL, no clean-up runs."""
    if os.environ.get(KILL_HOOK) in (stage, f"{stage}@{name}"):
        os.kill(os.getpid(), signal.SIGKILL)


def _write_manifest(folder: Path) -> None:
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    entries = {str(p.relative_to(folder)): {"sha256": sha256_of(p), "bytes": p.stat().st_size}
               for p in files}
    (folder / MANIFEST).write_text(json.dumps({"version": 1, "files": entries}, indent=1))
    for p in [*files, folder / MANIFEST]:
        _fsync(p)
    for sub in sorted({p.parent for p in files}, key=lambda d: -len(d.parts)):
        _fsync(sub)


def _write_files(tmp: Path, name: str, policy, trainer_state: dict[str, Any],
                 state: dict[str, Any]) -> None:
    policy.model.save_pretrained(tmp)
    policy.tokenizer.save_pretrained(tmp)
    _maybe_die("after_model", name)
    tensors: dict[str, torch.Tensor] = {}
    tree = _encode({**trainer_state, "rng": rng_state()}, tensors, "trainer")
    save_file(tensors, str(tmp / TRAINER_TENSORS))
    (tmp / TRAINER_JSON).write_text(json.dumps(tree))
    _maybe_die("after_trainer", name)
    (tmp / STATE_FILE).write_text(json.dumps(state, indent=2))
    _write_manifest(tmp)


def _swap_in(tmp: Path, path: Path) -> None:
    """Rename `tmp` to `path` (replacing an older folder of that name) and fsync the parent.
    The old folder is renamed away first: no moment without a complete checkpoint there."""
    old = path.with_name(f"{_TMP_PREFIX}{path.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if path.exists():
        path.rename(old)
    tmp.rename(path)
    _fsync(path.parent)
    shutil.rmtree(old, ignore_errors=True)


def remove_partial(folder: Path) -> None:
    """Delete temporary folders that a killed save left in `folder`."""
    for p in folder.glob(f"{_TMP_PREFIX}iter_*"):
        shutil.rmtree(p, ignore_errors=True)


def save_checkpoint(path: Path, policy, trainer_state: dict[str, Any],
                    state: dict[str, Any]) -> Path:
    """Write atomically (temporary folder, fsync, rename). A write error (a full disk)
    removes the temporary folder and raises `CheckpointError`; earlier checkpoints are not
    touched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_partial(path.parent)
    tmp = path.with_name(f"{_TMP_PREFIX}{path.name}{_TMP_MARK}{os.getpid()}")
    try:
        tmp.mkdir()
        _write_files(tmp, path.name, policy, trainer_state, state)
        _maybe_die("before_rename", path.name)
        _swap_in(tmp, path)
    except (OSError, SafetensorError) as exc:  # safetensors reports I/O errors its own way
        shutil.rmtree(tmp, ignore_errors=True)
        last = latest_good(path.parent)
        raise CheckpointError(
            f"cannot write checkpoint {path}{_why(exc)}: {exc}. The run stopped; the last "
            f"good checkpoint is {last or 'none'}; free space and resume with --resume "
            f"{path.parent.parent}") from exc
    return path


def _why(exc: Exception) -> str:
    """A plain-words reason for the usual write errors (ours or safetensors' 'os error N')."""
    code = getattr(exc, "errno", None)
    if code is None and (found := re.search(r"os error (\d+)", str(exc))):
        code = int(found.group(1))
    if code in (errno.ENOSPC, errno.EDQUOT):
        return " (the disk is full)"
    if code == errno.EFBIG:
        return " (a file exceeds the size limit)"
    return ""


# -- reading ---------------------------------------------------------------------------------
def verify_checkpoint(path: Path) -> dict[str, Any]:
    """Check every file of the manifest (present, size, sha256); returns the manifest.
    Raises `CheckpointError` naming the first bad or missing file."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: no such checkpoint folder")
    try:
        manifest = json.loads((path / MANIFEST).read_text())
        files = manifest["files"]
    except FileNotFoundError:
        raise CheckpointError(f"cannot read {path}: {MANIFEST} missing (a partial "
                              "checkpoint, or one written before manifests)") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{path / MANIFEST}: unreadable ({exc})") from None
    for name, entry in files.items():
        file = path / name
        if not file.is_file():
            raise CheckpointError(f"{file}: missing (listed in {MANIFEST})")
        if file.stat().st_size != entry["bytes"] or sha256_of(file) != entry["sha256"]:
            raise CheckpointError(f"{file}: corrupt (size or sha256 differs from {MANIFEST})")
    for required in (STATE_FILE, TRAINER_TENSORS, TRAINER_JSON):
        if required not in files:
            raise CheckpointError(f"{path / required}: missing (not a resumable checkpoint)")
    return manifest


def load_trainer_state(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(trainer state, json state) of a verified checkpoint, with a clear error if it is
    missing, partial or corrupt."""
    path = Path(path)
    verify_checkpoint(path)
    try:
        state = json.loads((path / STATE_FILE).read_text())
        tensors = load_file(str(path / TRAINER_TENSORS))
        trainer = _decode(json.loads((path / TRAINER_JSON).read_text()), tensors)
    except Exception as exc:  # verified yet unreadable: report the format problem
        raise CheckpointError(f"{path}: cannot read checkpoint ({type(exc).__name__}: {exc})"
                              ) from exc
    return trainer, state


def checkpoint_dirs(run_dir: Path) -> list[Path]:
    """The finished checkpoint folders of a run, newest first (temporary ones excluded)."""
    folder = Path(run_dir) / CHECKPOINT_DIRS
    found = [p for p in folder.glob("iter_*") if p.is_dir() and _NAME.fullmatch(p.name)]
    return sorted(found, key=lambda p: int(_NAME.fullmatch(p.name).group(1)), reverse=True)


def latest_good(folder: Path) -> Path | None:
    """The newest checkpoint in a `checkpoints/` folder that verifies (None if none)."""
    for ckpt in checkpoint_dirs(Path(folder).parent):
        with contextlib.suppress(CheckpointError):
            verify_checkpoint(ckpt)
            return ckpt
    return None


def resolve_resume(path: Path) -> Path:
    """A checkpoint folder to resume from. Given a checkpoint folder, it is verified; given
    a run folder, the newest checkpoint that verifies, the others skipped with a logged
    reason. Raises `CheckpointError` when there is none."""
    path = Path(path)
    if (path / MANIFEST).exists() or (path / STATE_FILE).exists():
        verify_checkpoint(path)
        return path
    candidates = checkpoint_dirs(path)
    if not candidates:
        if (path / "config.yaml").is_file():   # a run folder that stopped before any checkpoint
            raise CheckpointError(f"{path}: the run stopped before its first checkpoint "
                                  "(written every train.checkpoint_every RL iterations); "
                                  "start it again without --resume")
        raise CheckpointError(f"{path}: neither a checkpoint nor a run folder with "
                              f"{CHECKPOINT_DIRS}/iter_* inside")
    reasons = []
    for ckpt in candidates:
        try:
            verify_checkpoint(ckpt)
        except CheckpointError as exc:
            log.warning("skipping checkpoint %s: %s", ckpt.name, exc)
            reasons.append(f"{ckpt.name}: {exc}")
            continue
        return ckpt
    raise CheckpointError(f"{path}: no good checkpoint:\n  " + "\n  ".join(reasons))


def drop_records_after(metrics_path: Path, step: int) -> int:
    """Remove the records of iterations after `step` from a run's `metrics.jsonl` (a run
    killed after logging iteration k but before its checkpoint logs k again on resume).
    Rewritten atomically; a torn last line (killed mid-write) is dropped too. Returns the
    number of lines removed."""
    metrics_path = Path(metrics_path)
    if not metrics_path.exists():
        return 0
    kept, dropped = [], 0
    for line in metrics_path.read_text(errors="replace").splitlines():
        try:
            keep = int(json.loads(line)["step"]) <= step
        except (ValueError, KeyError, TypeError):
            keep = False
        if keep:
            kept.append(line)
        else:
            dropped += 1
    tmp = metrics_path.with_name(metrics_path.name + ".tmp")
    tmp.write_text("".join(f"{line}\n" for line in kept))
    tmp.replace(metrics_path)
    return dropped
