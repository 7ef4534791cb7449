"""Pieces both trainers share: seeding, run directories, metric logging, optimizers."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from tripod.core.config import TrainConfig, dump_config
from tripod.policy.rollout import RolloutConfig
from tripod.policy.sampler import SamplingParams


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def resident_mb() -> float:
    """This process's resident memory now (VmRSS), in MB; 0 where /proc is missing."""
    return _status_mb("VmRSS")


def _status_mb(field: str) -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class StagePeaks:
    """The process's peak resident memory per stage of a run, exact rather than sampled: the
    kernel's high-water mark (VmHWM) is read at the end of each stage and reset for the next
    one (`5` to /proc/self/clear_refs, Linux 4.0+). Where the mark cannot be reset it would
    span whatever ran before in this process (an earlier study arm), so stages read 0
    (unknown) and nothing fails. The reset also resets what `getrusage`'s `ru_maxrss` reads,
    so an outside measurement (`/usr/bin/time -v`) sees the last stage only."""

    def __init__(self) -> None:
        self.peaks: dict[str, float] = {}
        self.exact = self._reset()

    @staticmethod
    def _reset() -> bool:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            return True
        except OSError:
            return False

    def end(self, stage: str) -> float:
        """Close `stage`: its peak in MB (0 if unknown), kept in `peaks`; the next starts."""
        peak = _status_mb("VmHWM") if self.exact else 0.0
        self.peaks[stage] = round(max(self.peaks.get(stage, 0.0), peak), 1)
        self._reset()
        return peak


def release_memory() -> tuple[float, float]:
    """Collect unreachable objects (a finished learner's cycles: optimizer state, reference
    model, activations' buffers) and hand glibc's free heap pages back to the system
    (`malloc_trim`; on a GPU, the caching allocator's free blocks): after RL, the allocator otherwise keeps the update's peak resident
    while evaluation runs. Returns the resident MB before and after."""
    before = resident_mb()
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):   # not glibc: the collection alone
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()   # the caching allocator's blocks, on a GPU
    return before, resident_mb()


def env_options(cfg: TrainConfig, env_id: str) -> dict:
    """The options an env id plays with in this run: `env.options` for the recipe's env,
    `env.options_by_env` for the others (their defaults where it names none)."""
    if env_id == cfg.env.id:
        return dict(cfg.env.options)
    return dict(cfg.env.options_by_env.get(env_id, {}))


def other_env_ids(cfg: TrainConfig) -> list[str]:
    """The env ids a run plays besides `env.id`: its RL and demonstration mixes and its other
    evaluated envs."""
    played = [*cfg.rollout.env_ids, *cfg.sft.env_ids, *cfg.eval_env_ids()]
    return [e for e in dict.fromkeys(played) if e != cfg.env.id]


def rollout_config(cfg: TrainConfig, max_turns: int | None = None,
                   batch_size: int | None = None) -> RolloutConfig:
    """The rollout engine's settings of a run (`batch_size`: default `rollout.batch_size`;
    evaluations pass `cfg.eval_batch_size()`)."""
    return RolloutConfig(max_turns=max_turns or cfg.env.max_turns,
                         batch_size=batch_size or cfg.rollout.batch_size,
                         env_timeout_s=cfg.rollout.env_timeout_s,
                         env_overlap_s=cfg.rollout.env_overlap_s,
                         truncated_action=cfg.rollout.truncated_action,
                         restrict_actions=cfg.rollout.restrict_actions,
                         prompt=cfg.prompt.model_copy(), env_options=dict(cfg.env.options),
                         faults=cfg.env.faults,
                         options_by_env={e: env_options(cfg, e) for e in other_env_ids(cfg)})


def own_env_first(cfg: TrainConfig, more: list[str]) -> list[str]:
    """`env.id`, then the other env ids of a mix (`sft.env_ids`, `rollout.env_ids`)."""
    return [cfg.env.id, *(e for e in more if e != cfg.env.id)]


def turn_cap(cfg: TrainConfig, env_id: str) -> int:
    """The turn cap of `env_id` in this run: the recipe's `env.max_turns` for its own env,
    the paper's cap (`envs/play.default_max_turns`) for any other (mixes, evaluations)."""
    from tripod.envs.play import default_max_turns

    return cfg.env.max_turns if env_id == cfg.env.id else default_max_turns(env_id)


def eval_turn_cap(cfg: TrainConfig, env_id: str) -> int:
    """The turn cap an evaluation of `env_id` uses, one rule for `tripod train`'s evaluations
    and `tripod eval`: `eval.max_turns` if the recipe sets it; else the recipe's own cap for
    its training env, and the paper's cap for any other env id (a w2-o3-q4 recipe evaluated
    on w4-o6-q8 plays 24 turns there, not its own 12)."""
    return cfg.eval.max_turns or turn_cap(cfg, env_id)


def sampling_params(section) -> SamplingParams:
    return SamplingParams(temperature=section.temperature, top_p=section.top_p,
                          max_new_tokens=section.max_new_tokens)


RECIPE_FILE = "recipe.yaml"
"""The recipe a saved model was trained with, next to its weights (`tripod eval` reads it)."""


def write_recipe(folder: Path, cfg: TrainConfig) -> None:
    (Path(folder) / RECIPE_FILE).write_text(dump_config(cfg))


def read_recipe(folder: str | Path) -> TrainConfig | None:
    """The recipe saved with a model folder or checkpoint; None if it has none."""
    folder = Path(folder)
    if (folder / RECIPE_FILE).is_file():
        return TrainConfig.model_validate(yaml.safe_load((folder / RECIPE_FILE).read_text()))
    state = folder / "state.json"
    if state.is_file() and "config" in (data := json.loads(state.read_text())):
        return TrainConfig.model_validate(data["config"])
    return None


def prepare_run_dir(cfg: TrainConfig) -> Path:
    run_dir = cfg.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(dump_config(cfg))
    return run_dir


class MetricLogger:
    """Appends one JSON object per record to `metrics.jsonl` and mirrors scalars to
    TensorBoard (when enabled)."""

    def __init__(self, run_dir: Path, tensorboard: bool = True, append: bool = False) -> None:
        self.path = run_dir / "metrics.jsonl"
        if not append:  # a fresh run starts a fresh file; a resumed run appends
            self.path.write_text("")
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(run_dir / "tensorboard"))

    def log(self, step: int, metrics: dict[str, Any], prefix: str = "") -> None:
        record = {"step": step, "time": time.time(),
                  **{f"{prefix}{k}": v for k, v in metrics.items()}}
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        if self._tb is not None:
            for k, v in metrics.items():
                if isinstance(v, int | float) and not isinstance(v, bool):
                    self._tb.add_scalar(f"{prefix}{k}", v, step)
            self._tb.flush()

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def chunks(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def adamw(params: list, **kwargs: Any) -> torch.optim.AdamW:
    """AdamW, fused into one kernel where torch has one for the parameters (plain tensors on
    CPU or CUDA): the same update up to float rounding, a fifth of the time on CPU (SmolLM2:
    0.07 s instead of 0.34 s per step, 2 threads). Sharded (DTensor) parameters keep the
    default implementation."""
    flat = [p for group in params for p in (group["params"] if isinstance(group, dict)
                                             else [group])]
    fused = bool(flat) and all(type(p) is torch.nn.Parameter and p.device.type in ("cpu", "cuda")
                               for p in flat)
    return torch.optim.AdamW(params, fused=fused or None, **kwargs)
