"""SWE task records in the SWE-Gym / SWE-bench instance format, and their loader.

A task is one instance: a repository at a base commit, an issue text, the gold patch, the
hidden test patch and the tests that must go from failing to passing (FAIL_TO_PASS) or keep
passing (PASS_TO_PASS). tripod adds `workspace`, which says how to build the files the agent
works on and how to run their tests. Rows from SWE-Gym or SWE-bench files have no
`workspace`; they get the Docker workspace those projects publish one image per instance for.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tripod.envs.swe.patches import patched_paths

DEFAULT_LOCAL_TEST_CMD = ("{python}", "-m", "pytest", "-rA", "--tb=short", "-q",
                          "-p", "no:cacheprovider", "-o", "addopts=", "{tests}")
"""pytest with the `-rA` summary (one PASSED/FAILED line per test, the format SWE-bench's
log parser reads) and without the project's own `addopts` (coverage plugins and the like)."""

DEFAULT_DOCKER_TEST_CMD = (
    "bash", "-c",
    "source /opt/miniconda3/bin/activate && conda activate testbed && "
    "pytest -rA --tb=short -p no:cacheprovider {tests}")
"""The SWE-bench image convention: a conda env `testbed` holding the repo at /testbed."""


@dataclass
class WorkspaceSpec:
    """How to materialise the files of one task and run its tests."""

    kind: str = "local"
    """"local" (a folder copy run in the tripod sandbox) or "docker" (one container)."""
    source: str = ""
    """local: "sdist:NAME==VERSION" (a cached PyPI source distribution), a folder, or a git
    repository (exported at `base_commit`). Relative paths are resolved against the task
    file's folder."""
    setup_patch: str = ""
    """Applied to the fresh copy before the episode starts (generated tasks: the bug)."""
    image: str = ""
    """docker: the image holding the repository at `base_commit` and its environment."""
    workdir: str = "/testbed"
    """docker: the repository folder inside the image."""
    python: str = ""
    """local: interpreter that runs the tests (default: the trainer's own)."""
    python_path: list[str] = field(default_factory=lambda: ["."])
    """local: PYTHONPATH entries relative to the workspace root (the code under test)."""
    test_cmd: list[str] = field(default_factory=list)
    """argv template; "{tests}" expands to the test files or ids, "{python}" to `python`."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment variables for test runs."""

    def resolved_test_cmd(self) -> list[str]:
        if self.test_cmd:
            return list(self.test_cmd)
        return list(DEFAULT_DOCKER_TEST_CMD if self.kind == "docker" else DEFAULT_LOCAL_TEST_CMD)


@dataclass
class SweTask:
    """One SWE-Gym-compatible instance (field names as in SWE-Gym / SWE-bench files)."""

    instance_id: str
    repo: str
    base_commit: str
    problem_statement: str
    patch: str
    """The gold patch (source files only)."""
    test_patch: str
    """Test-file changes applied before scoring (empty for generated tasks)."""
    FAIL_TO_PASS: list[str]
    PASS_TO_PASS: list[str]
    workspace: WorkspaceSpec = field(default_factory=WorkspaceSpec)
    difficulty: str = ""
    """easy / medium / hard (generated tasks; see `difficulty_of`)."""
    split: str = ""
    """Optional split assignment; tasks without one serve every split."""
    metadata: dict[str, Any] = field(default_factory=dict)

    def test_files(self) -> list[str]:
        """Files holding the target tests plus those the test patch touches (the files
        restored to their pristine state before scoring)."""
        files = {test_id.split("::")[0] for test_id in self.FAIL_TO_PASS + self.PASS_TO_PASS}
        files.update(patched_paths(self.test_patch) if self.test_patch else [])
        return sorted(f for f in files if f)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def difficulty_of(patch: str) -> str:
    """Tier by the gold patch: easy = a one-line change (one hunk, one line out and one
    in); medium = one file, at most two hunks; hard = several files or three hunks."""
    from tripod.envs.swe.patches import parse_patch

    files = parse_patch(patch)
    hunks = sum(len(f.hunks) for f in files)
    changed = sum(1 for f in files for h in f.hunks for line in h.lines if line[0] in "+-")
    if len(files) >= 2 or hunks >= 3:
        return "hard"
    return "easy" if hunks == 1 and changed <= 2 else "medium"


def _as_list(value: Any) -> list[str]:
    """SWE-bench files store FAIL_TO_PASS as a JSON string; SWE-Gym as a list."""
    if value is None:
        return []
    if isinstance(value, str):
        value = json.loads(value) if value.strip().startswith("[") else [value]
    return [str(v) for v in value]


def docker_image_for(instance_id: str) -> str:
    """SWE-Gym's published image name for an instance (``__`` becomes ``_s_``)."""
    return f"xingyaoww/sweb.eval.x86_64.{instance_id.replace('__', '_s_')}".lower()


def task_from_dict(row: dict[str, Any], base_dir: Path | None = None) -> SweTask:
    """Build a task from one JSON/parquet row (SWE-Gym, SWE-bench or tripod format)."""
    missing = [k for k in ("instance_id", "problem_statement", "patch") if not row.get(k)]
    if missing:
        raise ValueError(f"task row lacks {missing}: keys present are {sorted(row)}")
    ws_row = row.get("workspace") or {}
    if isinstance(ws_row, str):
        ws_row = json.loads(ws_row)
    workspace = WorkspaceSpec(**ws_row) if ws_row else WorkspaceSpec(
        kind="docker", image=docker_image_for(str(row["instance_id"])))
    source = workspace.source
    relative = source and not source.startswith("sdist:") and not Path(source).is_absolute()
    if base_dir is not None and relative:
        workspace.source = str((base_dir / source).resolve())
    return SweTask(
        instance_id=str(row["instance_id"]), repo=str(row.get("repo", "")),
        base_commit=str(row.get("base_commit", "")),
        problem_statement=str(row["problem_statement"]), patch=str(row["patch"]),
        test_patch=str(row.get("test_patch") or ""),
        FAIL_TO_PASS=_as_list(row.get("FAIL_TO_PASS")),
        PASS_TO_PASS=_as_list(row.get("PASS_TO_PASS")), workspace=workspace,
        difficulty=str(row.get("difficulty") or difficulty_of(str(row["patch"]))),
        split=str(row.get("split") or ""), metadata=dict(row.get("metadata") or {}))


def _read_rows(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as exc:
            raise ImportError("reading parquet task files needs pyarrow "
                              "(pip install pyarrow), or convert the file to JSONL") from exc
        return pq.read_table(path).to_pylist()
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        data = json.loads(text)
        return data if isinstance(data, list) else [data]
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def load_tasks(path: str | Path) -> list[SweTask]:
    """Read tasks from a .jsonl, .json (a list) or .parquet file of instances."""
    path = Path(path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"no task file at {path}")
    tasks = [task_from_dict(row, base_dir=path.parent) for row in _read_rows(path)]
    if not tasks:
        raise ValueError(f"{path} holds no tasks")
    return tasks


def save_tasks(tasks: list[SweTask], path: str | Path) -> Path:
    """Write tasks as JSONL (one instance per line), the format `load_tasks` reads back."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for task in tasks:
            fh.write(json.dumps(task.to_dict(), sort_keys=True) + "\n")
    return path
