"""Measuring helpers the benchmarks share: the machine's matmul peak, the model arithmetic of
a piece of work, the rollout sampler's own counters, and resident memory.

Every figure a benchmark prints comes with the load average it was measured under: on a
machine shared with other jobs, compare ratios taken in one run, not absolute times.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import shlex
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from tripod.core import provenance
from tripod.core.types import Trajectory
from tripod.policy.rollout import RolloutEngine
from tripod.policy.sampler import ArenaStats
from tripod.train.common import resident_mb


def progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def command_line() -> str:
    """How the figures were produced: this very command."""
    return " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv])


def output_flags(parser: argparse.ArgumentParser, threads: int = 2) -> None:
    """The flags every benchmark takes: torch threads, a JSON report, a reduced run."""
    parser.add_argument("--threads", type=int, default=threads, help="torch threads")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument("--tiny", action="store_true", help="reduced run for tests")


SCHEMA = "tripod-benchmark/1"
"""The one JSON schema of every benchmark: `schema`, `benchmark` (the script's name),
`provenance` (`tripod.core.provenance.Provenance`: commit, versions, machine with its matmul
peak, command), then the script's own figures."""


def with_provenance(report: dict[str, Any]) -> dict[str, Any]:
    """`report` in the benchmarks' JSON schema, its provenance recorded now."""
    record = provenance.collect(command_line())
    return {"schema": SCHEMA, "benchmark": Path(sys.argv[0]).stem,
            "provenance": record.to_dict(), **report}


def print_json(report: dict[str, Any]) -> None:
    print(json.dumps(with_provenance(report), indent=2))


def emit(report: dict[str, Any], as_json: bool, printer: Callable[[dict], None]) -> None:
    """The report on stdout: one JSON object (`SCHEMA`), or the script's own text."""
    if as_json:
        print_json(report)
    else:
        printer(report)


def print_header(report: dict[str, Any]) -> None:
    """The command and the machine's line of a report with `machine` (`machine_facts`) and
    `matmul_peak_gflops` (start, end)."""
    m, peaks = report["machine"], report["matmul_peak_gflops"]
    print(f"command: {report['command']}")
    print(f"machine: nproc={m['nproc']} torch_threads={m['torch_threads']} torch={m['torch']} "
          f"matmul peak {peaks[0]:.0f} / {peaks[1]:.0f} GFLOP/s (start / end) "
          f"loadavg before={m['loadavg_before']} after={m['loadavg_after']}")


def machine_facts(load_before: list[float]) -> dict[str, Any]:
    """CPUs, torch threads and version, and the load average before and now."""
    return {"nproc": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "loadavg_before": load_before,
            "loadavg_after": loadavg()}


# -- the machine's matmul peak -------------------------------------------------------------
def matmul_peak() -> float:
    """Best fp32 GFLOP/s of `torch.mm` over a few shapes (one of them the model's MLP)."""
    best = 0.0
    for m, k, n in ((1024, 1024, 1024), (2048, 2048, 2048), (512, 576, 1536)):
        a, b = torch.randn(m, k), torch.randn(k, n)
        torch.mm(a, b)
        reps, start = 0, time.perf_counter()
        while reps < 3 or time.perf_counter() - start < 0.5:
            torch.mm(a, b)
            reps += 1
        best = max(best, 2 * m * k * n * reps / (time.perf_counter() - start) / 1e9)
    return best


# -- model arithmetic ------------------------------------------------------------------------
@dataclasses.dataclass
class FlopModel:
    """Forward FLOPs of a decoder-only transformer, per token."""

    linear: float
    """Matmuls of every layer's projections and MLP, per token."""
    attention: float
    """Scores and weighted sum per layer, per (token, key) pair."""
    head: float
    """LM head, per token whose logits are needed."""

    @classmethod
    def of(cls, model: torch.nn.Module) -> FlopModel:
        c = model.config.get_text_config()
        hd = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        kv = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
        q = c.num_attention_heads * hd
        per_layer = 2 * c.hidden_size * (2 * q + 2 * kv * hd) + 6 * c.hidden_size * c.intermediate_size
        return cls(linear=c.num_hidden_layers * per_layer,
                   attention=c.num_hidden_layers * 4 * q, head=2 * c.hidden_size * c.vocab_size)

    def tokens(self, start: int, end: int) -> float:
        """Running positions start..end-1 (each attends to itself and all before it)."""
        n = end - start
        keys = (start + 1 + end) * n / 2
        return n * self.linear + keys * self.attention


@dataclasses.dataclass
class RolloutWork:
    """The model arithmetic a rollout's work needs, by kind."""

    prefill_flops: float = 0.0
    """Layers over the prompt tokens run outside decoding."""
    decode_flops: float = 0.0
    """Layers over the sampled tokens fed back while decoding."""
    head_flops: float = 0.0
    """LM head, once per sampled token."""
    prefill_tokens: int = 0

    @property
    def flops(self) -> float:
        return self.prefill_flops + self.decode_flops + self.head_flops


def rollout_work(fm: FlopModel, trajs: list[Trajectory], reuse: bool) -> RolloutWork:
    """The arithmetic of a rollout, from its recorded token ids.

    With `reuse` every context token is run once, and a first prompt identical to one seen
    before (another member of the same group) is not run again; without, every turn runs
    its whole prompt. Sampled tokens but each turn's last are run while decoding; every
    sampled token needed the LM head once.
    """
    work, seen = RolloutWork(), set()
    for t in trajs:
        done = 0  # positions of this episode already run (reuse only)
        for turn in t.turns:
            end = len(turn.prompt_ids)
            start = done if reuse else 0
            if reuse and done == 0:
                first = tuple(turn.prompt_ids)
                start = end if first in seen else 0
                seen.add(first)
            work.prefill_flops += fm.tokens(start, end)
            work.decode_flops += fm.tokens(end, end + len(turn.action_ids) - 1)
            work.head_flops += len(turn.action_ids) * fm.head
            work.prefill_tokens += end - start
            done = end + len(turn.action_ids) - 1
    return work


def work_flops(fm: FlopModel, trajs: list[Trajectory], reuse: bool) -> tuple[float, int]:
    """(FLOPs, prefill tokens) a rollout's work needs (see `rollout_work`)."""
    work = rollout_work(fm, trajs, reuse)
    return work.flops, work.prefill_tokens


# -- the rollout sampler's own counters --------------------------------------------------------
class ArenaCountingEngine(RolloutEngine):
    """The training rollout engine, unchanged, that also keeps the counters of the KV arenas
    its turns used, so that a benchmark can read what the sampler actually ran (prefill,
    padding, shared prompt tokens, decode steps). It keeps each arena's `stats` object, not
    the arena: an arena holds the rollout's KV caches, and keeping it would hold them through
    the update (about 0.6 GB resident that training does not hold)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.arenas: dict[int, ArenaStats] = {}

    def _sample(self, active, sampling, arena=None):
        samples = super()._sample(active, sampling, arena)
        arena = active[0].row.arena
        self.arenas[id(arena.stats)] = arena.stats
        return samples

    def arena_stats(self) -> ArenaStats:
        """The counters summed over the arenas used since the last `arenas.clear()` (an arena
        lives across collections, so clear before a timed one and read its totals after)."""
        total = ArenaStats()
        for stats in self.arenas.values():
            for f in dataclasses.fields(ArenaStats):
                setattr(total, f.name, getattr(total, f.name) + getattr(stats, f.name))
        return total


# -- resident memory ---------------------------------------------------------------------------
def max_rss_mb() -> float:
    """`ru_maxrss` of this process (the kernel's high-water mark since it started), in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class RssSampler:
    """Samples this process's resident memory from /proc in a thread, and keeps the peak of
    each phase (`phase(name)` switches): `ru_maxrss` only gives one high-water mark for the
    whole process, model loading included. Child processes (env games) are not counted."""

    def __init__(self, interval_s: float = 0.1) -> None:
        self.interval_s = interval_s
        self.peaks: dict[str, float] = {}
        self._phase = "start"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def phase(self, name: str) -> None:
        self._sample()  # close the previous phase with a fresh reading
        self._phase = name
        self._sample()

    def _sample(self) -> None:
        phase, rss = self._phase, resident_mb()
        self.peaks[phase] = max(self.peaks.get(phase, 0.0), rss)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    @property
    def peak_mb(self) -> float:
        return max(self.peaks.values(), default=0.0)
