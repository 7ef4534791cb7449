"""Resumable checkpoints in standard formats.

A checkpoint folder holds the policy as a Hugging Face model folder (or a PEFT adapter
folder with LoRA), loadable by `load_policy(path)`, plus `trainer.pt` (optimizers, critic,
RNG states) and `state.json` (iteration, data position). Resuming restores all of them, so
the run continues exactly as if it had not stopped.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

STATE_FILE = "state.json"
TRAINER_FILE = "trainer.pt"


class CheckpointError(RuntimeError):
    """A checkpoint folder is missing files or cannot be read."""


def rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "numpy": np.random.get_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])


def save_checkpoint(path: Path, policy, trainer_state: dict[str, Any],
                    state: dict[str, Any]) -> Path:
    """Write atomically: into a temporary folder renamed at the end."""
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    policy.model.save_pretrained(tmp)
    policy.tokenizer.save_pretrained(tmp)
    torch.save({**trainer_state, "rng": rng_state()}, tmp / TRAINER_FILE)
    (tmp / STATE_FILE).write_text(json.dumps(state, indent=2))
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)
    return path


def load_trainer_state(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(trainer state, json state) of a checkpoint, with a clear error if it is corrupt."""
    path = Path(path)
    missing = [f for f in (STATE_FILE, TRAINER_FILE) if not (path / f).exists()]
    if missing:
        raise CheckpointError(f"{path} is not a resumable checkpoint: missing {', '.join(missing)}")
    try:
        state = json.loads((path / STATE_FILE).read_text())
        trainer = torch.load(path / TRAINER_FILE, map_location="cpu", weights_only=False)
    except Exception as exc:
        raise CheckpointError(f"{path}: cannot read checkpoint ({type(exc).__name__}: {exc})") from exc
    return trainer, state

