"""Workspaces: the files one episode works on, and the way their tests are run.

`LocalWorkspace` is a fresh folder copy per episode whose tests run in the tripod sandbox
(`sandbox.run_sandboxed`) with a host Python. `DockerWorkspace` is one container per episode
from the instance's image (as SWE-Gym publishes them), driven through the Docker CLI with
no network and capped memory and processes. Both expose the same small file API, so tools,
patches and scoring never branch on the kind.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import uuid
from pathlib import Path, PurePosixPath
from typing import Protocol

from tripod.envs.base import EnvError
from tripod.envs.swe import owners, safefs
from tripod.envs.swe.patches import apply_patch_to_texts, patched_paths
from tripod.envs.swe.sandbox import (
    ABNORMAL_STATUSES,
    STATUS_WORKSPACE_LIMIT,
    RunResult,
    SandboxLimits,
    over_workspace_caps,
    run_capped,
    run_sandboxed,
    workspace_limit_message,
)
from tripod.envs.swe.scoring import parse_pytest_report
from tripod.envs.swe.task import SweTask
from tripod.envs.swe.verify import VerifiedRun, Verifier

PRIVATE_DIR = ".tripod"
"""Folder inside a local workspace holding the sandbox's HOME and TMPDIR (hidden from tools)."""
_SITECUSTOMIZE = (
    "# Written by tripod: seed `random` at interpreter start so that test outcomes that\n"
    "# depend on it (e.g. a random-replacement cache) are the same in every run.\n"
    "import random\nrandom.seed(0)\n")
_HIDDEN_PARTS = {PRIVATE_DIR, ".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".tox"}


def clean_relpath(raw: str, label: str = "/workspace") -> str:
    """A workspace-relative POSIX path from what an agent wrote; ValueError if it escapes
    the repository or names a private folder (``.tripod``, ``.git``, caches)."""
    text = raw.strip().strip("'\"`")
    for prefix in (label.rstrip("/") + "/", label):
        if text.startswith(prefix):
            text = text[len(prefix):]
    path = PurePosixPath(text.lstrip("/"))
    parts = [p for p in path.parts if p not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"path {raw!r} leaves the repository (no '..' allowed)")
    if any(p in _HIDDEN_PARTS for p in parts):
        raise ValueError(f"path {raw!r} is in a private folder of the workspace")
    return "/".join(parts)


def _visible(rel: str) -> bool:
    return not any(part in _HIDDEN_PARTS or part.endswith(".egg-info") for part in rel.split("/"))


class Workspace(Protocol):
    """The files of one episode (paths are relative to the repository root)."""

    label: str
    """How the repository root is named to the agent (e.g. "/workspace")."""

    def read_text(self, path: str) -> str | None:
        """The file's text, or None if there is no such file."""
        ...

    def write_text(self, path: str, text: str | None) -> None:
        """Create or overwrite a file (None deletes it)."""
        ...

    def is_dir(self, path: str) -> bool: ...

    def list_files(self, path: str = "") -> list[str]:
        """Visible files under `path`, sorted (caches and private folders left out)."""
        ...

    def run_tests(self, tests: list[str], limits: SandboxLimits) -> RunResult:
        """Run the task's test command on `tests` (files or pytest node ids) in this
        workspace, as the agent left it (feedback only: never scored)."""
        ...

    def score(self, limits: SandboxLimits) -> VerifiedRun:
        """Run the task's pristine tests on the agent's source changes (the reward)."""
        ...

    def close(self) -> None: ...


def apply_patch(ws: Workspace, patch_text: str) -> None:
    """Apply a unified diff to a workspace through its file API."""
    if not patch_text.strip():
        return
    texts = {path: ws.read_text(path) for path in patched_paths(patch_text)}
    for path, text in apply_patch_to_texts(texts, patch_text).items():
        ws.write_text(path, text)


def expand_test_cmd(template: list[str], tests: list[str], python: str) -> list[str]:
    """Fill "{tests}" (one argv element per test; joined when embedded in a longer string,
    e.g. a shell command) and "{python}" in a test command template."""
    argv: list[str] = []
    for part in template:
        if part == "{tests}":
            argv.extend(tests)
        else:
            argv.append(part.replace("{python}", python).replace("{tests}", " ".join(tests)))
    return argv


class LocalWorkspace:
    """A private folder copy of the repository; tests run sandboxed on the host.

    Layout: ``ROOT/repo`` is the agent's copy (base + setup patch), ``ROOT/base`` the
    pristine tree scoring starts from (base + setup patch + test patch), never shown to
    the agent's code (the sandbox mounts only the folder a command runs in)."""

    label = "/workspace"

    def __init__(self, root: Path, task: SweTask, base: Path | None = None) -> None:
        self.root = root.resolve()
        self.task = task
        self.python = task.workspace.python or sys.executable
        self.verifier = Verifier(task, base, self.python) if base is not None else None

    @classmethod
    def create(cls, task: SweTask, parent: Path | None = None,
               scored: bool = True) -> LocalWorkspace:
        """Copy the task's source into a new folder and apply its setup patch (and, when
        `scored`, build the pristine tree that scoring copies)."""
        parent = parent or Path(tempfile.gettempdir())
        parent.mkdir(parents=True, exist_ok=True)
        for prefix in ("swe-", safefs.REMOVING):  # what a killed trainer left here
            owners.sweep_once(parent, prefix, safefs.remove_tree)
        root = Path(tempfile.mkdtemp(prefix=f"swe-{owners.tag()}-{_slug(task.instance_id)}-",
                                     dir=parent))
        try:
            _materialise(task, root / "repo")
            apply_patch(cls(root / "repo", task), task.workspace.setup_patch)
            base = None
            if scored:
                base = root / "base"
                shutil.copytree(root / "repo", base, symlinks=True)
                apply_patch(cls(base, task), task.test_patch)
            ws = cls(root / "repo", task, base)
            for sub in ("home", "tmp", "site"):
                (ws.root / PRIVATE_DIR / sub).mkdir(parents=True, exist_ok=True)
            (ws.root / PRIVATE_DIR / "site" / "sitecustomize.py").write_text(_SITECUSTOMIZE)
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        return ws

    def read_text(self, path: str) -> str | None:
        data = safefs.read_bytes(self.root, path)
        return None if data is None else data.decode("utf-8", errors="replace")

    def write_text(self, path: str, text: str | None) -> None:
        safefs.write_bytes(self.root, path, None if text is None else text.encode("utf-8"))

    def is_dir(self, path: str) -> bool:
        return safefs.is_dir(self.root, path)

    def list_files(self, path: str = "") -> list[str]:
        if not self.is_dir(path):
            mode_ok = self.read_text(path) is not None
            return [path] if mode_ok else []
        return sorted(_shown(rel) for rel in safefs.walk_files(self.root, path)
                      if _visible(rel) and not rel.endswith((".pyc", ".pyo")))

    def run_tests(self, tests: list[str], limits: SandboxLimits) -> RunResult:
        spec = self.task.workspace
        argv = expand_test_cmd(spec.resolved_test_cmd(), tests, self.python)
        result = run_sandboxed(argv, self.root, env=self._env(), limits=limits)
        if result.status not in ABNORMAL_STATUSES:
            _check_usage(self.root, limits, result)
        return result

    def score(self, limits: SandboxLimits) -> VerifiedRun:
        if self.verifier is None:
            raise EnvError("this workspace was created without a scoring base")
        try:
            return self.verifier.score(self.root, limits)
        except OSError as exc:  # the trainer's own files (base, fresh copy): an env failure
            raise EnvError(f"cannot score {self.task.instance_id}: {exc}") from exc

    def _env(self) -> dict[str, str]:
        private = self.root / PRIVATE_DIR
        python_dir = str(Path(self.python).parent)
        env = {
            "PATH": f"{python_dir}:/usr/bin:/bin",
            "HOME": str(private / "home"), "TMPDIR": str(private / "tmp"),
            "PYTHONPATH": os.pathsep.join([*(str(self.root / p) for p in
                                             self.task.workspace.python_path),
                                           str(private / "site")]),
            "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "LANG": "C.UTF-8",
            "NO_COLOR": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        }
        env.update(self.task.workspace.env)
        return env

    def close(self) -> None:
        safefs.remove_tree(self.root.parent)


_CONTROL = {c: f"\\x{c:02x}" for c in (*range(32), *range(127, 160))}
"""Control characters (C0, DEL, C1) and their escapes: a name holding a newline or a
terminal escape would otherwise read as an extra line of output."""


def _shown(rel: str) -> str:
    """A path as the agent sees it: bytes of a name that are not valid UTF-8 (kept by the
    file system as surrogates), and control characters, written as escapes such as
    ``\\xff`` and ``\\x0a``, so an observation is always valid text with one name per
    line. Such a file is listed, but not found under the shown name."""
    shown = rel.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return shown.translate(_CONTROL)


def _check_usage(root: Path, limits: SandboxLimits, result: RunResult) -> None:
    """A run that left more entries or bytes in the workspace than the limits allow ends
    as `workspace_limit` (the sandbox also stops a run that gets there while it runs)."""
    if result.status != STATUS_WORKSPACE_LIMIT and over_workspace_caps(root, limits):
        result.status = STATUS_WORKSPACE_LIMIT
        result.output += workspace_limit_message(limits)


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text)[:40]


def _materialise(task: SweTask, dest: Path) -> None:
    """Put the task's source tree at `dest` (sdist cache, git export or folder copy)."""
    source = task.workspace.source
    if not source:
        raise EnvError(f"task {task.instance_id}: a local workspace needs workspace.source")
    if source.startswith("sdist:"):
        from tripod.envs.swe.sources import sdist_tree

        name, _, version = source[len("sdist:"):].partition("==")
        shutil.copytree(sdist_tree(name, version), dest, symlinks=True)
        return
    src = Path(source)
    if not src.is_dir():
        raise EnvError(f"task {task.instance_id}: source folder {src} does not exist")
    if task.base_commit and (src / ".git").exists():
        _git_export(src, task.base_commit, dest)
        return
    shutil.copytree(src, dest, symlinks=True,
                    ignore=shutil.ignore_patterns(".git", "__pycache__", "*.pyc"))


def _git_export(repo: Path, commit: str, dest: Path) -> None:
    """Files of `commit` without the history (so the agent cannot read later fixes)."""
    dest.mkdir(parents=True)
    with tempfile.TemporaryFile() as archive:
        subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", commit],
                       stdout=archive, check=True, timeout=300)
        archive.seek(0)
        with tarfile.open(fileobj=archive) as tar:
            tar.extractall(dest, filter="data")


@functools.cache
def docker_available() -> str | None:
    """None if a Docker daemon answers, else the reason it cannot be used."""
    if shutil.which("docker") is None:
        return "the docker CLI is not installed"
    try:
        done = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"],
                              capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"docker info failed: {exc}"
    if done.returncode != 0:
        return f"no Docker daemon reachable: {done.stderr.strip()[:200]}"
    return None


class DockerWorkspace:
    """One container per episode from the instance's image (network off, capped)."""

    label = "/workspace"

    def __init__(self, container: str, task: SweTask) -> None:
        self.container = container
        self.task = task
        self.workdir = task.workspace.workdir
        self.pristine_tests: dict[str, str | None] = {}

    @classmethod
    def create(cls, task: SweTask, limits: SandboxLimits) -> DockerWorkspace:
        why = docker_available()
        if why is not None:
            raise EnvError(f"docker workspace for {task.instance_id}: {why}")
        name = f"tripod-swe-{uuid.uuid4().hex[:12]}"
        subprocess.run(
            ["docker", "run", "-d", "--name", name, "--network", "none",
             "--pids-limit", str(limits.processes), "--memory", f"{limits.memory_mb}m",
             "--cpus", "1", "-w", task.workspace.workdir, task.workspace.image,
             "sleep", "infinity"], check=True, capture_output=True, timeout=600)
        ws = cls(name, task)
        apply_patch(ws, task.workspace.setup_patch)
        current = {p: ws.read_text(p) for p in task.test_files()}
        ws.pristine_tests = dict(current)
        if task.test_patch:
            ws.pristine_tests.update(apply_patch_to_texts(current, task.test_patch))
        return ws

    def _exec(self, argv: list[str], stdin: bytes | None = None,
              timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(["docker", "exec", "-i", "-w", self.workdir, self.container,
                               *argv], input=stdin, capture_output=True, timeout=timeout)

    def read_text(self, path: str) -> str | None:
        done = self._exec(["cat", "--", path])
        return done.stdout.decode("utf-8", errors="replace") if done.returncode == 0 else None

    def write_text(self, path: str, text: str | None) -> None:
        if text is None:
            self._exec(["rm", "-f", "--", path])
            return
        script = 'mkdir -p "$(dirname "$1")" && cat > "$1"'
        done = self._exec(["sh", "-c", script, "_", path], stdin=text.encode("utf-8"))
        if done.returncode != 0:
            raise OSError(f"cannot write {path}: {done.stderr.decode(errors='replace')}")

    def is_dir(self, path: str) -> bool:
        return self._exec(["test", "-d", path or "."]).returncode == 0

    def list_files(self, path: str = "") -> list[str]:
        script = ('git ls-files -co --exclude-standard -- "$1" 2>/dev/null '
                  '|| find "${1:-.}" -type f | sed "s|^\\./||"')
        done = self._exec(["sh", "-c", script, "_", path])
        names = done.stdout.decode("utf-8", errors="replace").splitlines()
        return sorted(n for n in names if n and _visible(n))

    def grep(self, text: str, path: str = "") -> list[tuple[str, int, str]]:
        """Literal search inside the container (one exec instead of one per file)."""
        done = self._exec(["grep", "-rnIF", "--exclude-dir=.git", "-e", text, "--",
                           path or "."], timeout=120)
        hits = []
        for line in done.stdout.decode("utf-8", errors="replace").splitlines():
            name, _, rest = line.partition(":")
            number, _, content = rest.partition(":")
            if number.isdigit() and _visible(name.removeprefix("./")):
                hits.append((name.removeprefix("./"), int(number), content))
        return hits

    def run_tests(self, tests: list[str], limits: SandboxLimits) -> RunResult:
        argv = expand_test_cmd(self.task.workspace.resolved_test_cmd(), tests, "python")
        # The in-container `timeout` stops the command even if the docker client is killed.
        cmd = ["docker", "exec", "-w", self.workdir, self.container,
               "timeout", "-s", "KILL", str(int(limits.wall_s)), *argv]
        result = run_capped(cmd, Path.cwd(), limits)
        if result.status:
            subprocess.run(["docker", "restart", "-t", "0", self.container],
                           capture_output=True, timeout=120)
        else:
            result.status = "ok" if result.exit_code == 0 else "failed"
        return result

    def score(self, limits: SandboxLimits) -> VerifiedRun:
        """Not hardened like local scoring (docs/swe.md): the pristine test files are
        written over the agent's and the tests run in the agent's container."""
        for path, text in self.pristine_tests.items():
            self.write_text(path, text)
        run = self.run_tests(self.task.test_files(), limits)
        if run.status in ABNORMAL_STATUSES:
            return VerifiedRun(run.status, output=run.output, reason=run.status, run=run)
        return VerifiedRun("ok", parse_pytest_report(run.output), run.output, "", run)

    def close(self) -> None:
        subprocess.run(["docker", "rm", "-f", self.container], capture_output=True, timeout=120)


def make_workspace(task: SweTask, limits: SandboxLimits,
                   parent: Path | None = None) -> Workspace:
    """The workspace kind the task asks for."""
    if task.workspace.kind == "local":
        return LocalWorkspace.create(task, parent)
    if task.workspace.kind == "docker":
        return DockerWorkspace.create(task, limits)
    raise EnvError(f"unknown workspace kind {task.workspace.kind!r} (use local or docker)")
