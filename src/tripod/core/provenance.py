"""Where a result comes from: the code's commit, the package versions, the machine and the
command, recorded next to every result so that a figure in the docs traces to its run.

A record is written by the code that produced the result (the pipeline's run folder,
`tripod eval --out`, a study's aggregate, a benchmark's JSON), never typed by hand. Results
that predate these records carry a *recovered* one: the commit that added them, from git,
and the command their summary names; the fields nobody recorded stay empty.

The machine's matmul peak is measured, not looked up: CPU time on a shared machine varies
several-fold with the load, and a wall time means little without the throughput the machine
gave at the time (compare ratios taken in one run, or times at a similar peak).
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

PROVENANCE_FILE = "provenance.json"
"""A record's file name in a run folder, a study folder or a results folder."""
PACKAGES = ("tripod", "torch", "transformers", "peft", "textworld")
"""The packages whose versions a record names (the ones that change results)."""
MATMUL_SIZE = 512
"""Side of the square fp32 matmul timed for the machine's peak: small enough to take a
fraction of a second, large enough to run at the BLAS kernel's speed."""
REPO = Path(__file__).resolve().parents[3]


@dataclass
class Machine:
    """The machine a result was measured on, at the time."""

    cpu_model: str = ""
    cores: int = 0
    """Logical CPUs the OS reports."""
    torch_threads: int = 0
    matmul_peak_gflops: float | None = None
    """Best fp32 GFLOP/s of a fixed-size `torch.mm` (None: not measured)."""
    loadavg: list[float] = field(default_factory=list)
    """1, 5 and 15 minute load averages when the record was made."""


@dataclass
class Provenance:
    """One result's origin."""

    commit: str = ""
    """`git describe --always --dirty` of the code (`-dirty`: uncommitted changes ran)."""
    command: str = ""
    """The command line that produced the result."""
    versions: dict[str, str] = field(default_factory=dict)
    """Package -> version for `PACKAGES` (missing packages are left out)."""
    machine: Machine = field(default_factory=Machine)
    recorded_at: str = ""
    """UTC time of the record, ISO 8601."""
    source: Literal["recorded", "recovered"] = "recorded"
    """`recovered`: rebuilt after the fact from git; only `commit` and `command` are known."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Provenance:
        machine = Machine(**data.get("machine", {}))
        return cls(**{**data, "machine": machine})

    def short(self) -> str:
        """One line for a table: the commit, the peak and the load."""
        if self.source == "recovered":
            return f"{self.commit or 'unknown'} (recovered: the commit that added the result)"
        m = self.machine
        peak = f", {m.matmul_peak_gflops:.0f} GFLOP/s" if m.matmul_peak_gflops else ""
        load = f", load {m.loadavg[0]:.1f}" if m.loadavg else ""
        cores = f", {m.cores} cores" if m.cores else ""
        return f"{self.commit or 'unknown'} ({self.source}{cores}{peak}{load})"


def git_describe(repo: Path = REPO) -> str:
    """`git describe --always --dirty` of `repo`; "" outside a git checkout."""
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=repo,
                             capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what `platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def matmul_peak_gflops(size: int = MATMUL_SIZE, seconds: float = 0.3) -> float:
    """Best fp32 GFLOP/s of `torch.mm` on two size x size matrices, timed call by call for
    about `seconds` (the best call, so that a moment's contention does not count)."""
    import torch

    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)   # first call: thread pool and kernel selection
    best, deadline = float("inf"), time.perf_counter() + seconds
    while time.perf_counter() < deadline or best == float("inf"):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return round(2 * size**3 / best / 1e9, 1)


def machine(measure: bool = True) -> Machine:
    """The machine now; `measure=False` skips the matmul timing (and importing torch)."""
    threads = 0
    if "torch" in sys.modules or measure:
        import torch

        threads = torch.get_num_threads()
    return Machine(cpu_model=cpu_model(), cores=os.cpu_count() or 0, torch_threads=threads,
                   matmul_peak_gflops=matmul_peak_gflops() if measure else None,
                   loadavg=[round(x, 2) for x in os.getloadavg()])


def command_line(argv: list[str] | None = None) -> str:
    """This process's command as a shell would take it back."""
    args = sys.argv if argv is None else argv
    return " ".join(shlex.quote(a) for a in args)


def collect(command: str | None = None, measure: bool = True) -> Provenance:
    """A record of this process now: its commit, versions, machine and command."""
    return Provenance(commit=git_describe(), command=command or command_line(),
                      versions=package_versions(), machine=machine(measure),
                      recorded_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))


def write(folder: str | Path, record: Provenance) -> Path:
    path = Path(folder) / PROVENANCE_FILE
    path.write_text(json.dumps(record.to_dict(), indent=2) + "\n")
    return path


def read(folder: str | Path) -> Provenance | None:
    """The record in `folder`; None if it has none."""
    path = Path(folder) / PROVENANCE_FILE
    if not path.is_file():
        return None
    return Provenance.from_dict(json.loads(path.read_text()))
