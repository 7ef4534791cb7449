"""The verified reward: score only the agent's change to the package's source files.

Scoring never runs in the agent's workspace, where anything the agent left (a conftest, a
plugin, a ``sitecustomize``, a module shadowing the standard library, a fake ``*.dist-info``,
stale bytecode) would run with the tests. Instead, for each scoring:

1. a fresh copy is made of the task's repository at its base (source + setup patch + the
   pristine test files, test patch applied), built once per episode outside the agent's view;
2. only the agent's versions of the *existing, non-test Python source files* are carried
   over (`source_files`); every other file the agent created or changed is left behind;
3. the changed files are screened for code that reaches into the test runner (`screen`);
4. pytest runs in the sandbox through the trusted runner (`_runner.py`): plugin autoload
   off, a fixed invocation, results through a nonce-tagged pipe, an audit hook and a
   fingerprint of pytest's own functions;
5. the report is checked (`parse_report`): only nonce lines, a trailer whose exit status and
   count agree with the process and the records. Any evidence of tampering scores 0 with the
   status ``tampering``.

What this does not guarantee is written down in docs/swe.md (threat model).
"""

from __future__ import annotations

import ast
import json
import os
import secrets
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from tripod.envs.swe import safefs
from tripod.envs.swe.sandbox import ABNORMAL_STATUSES, RunResult, SandboxLimits, run_sandboxed
from tripod.envs.swe.scoring import PASSING
from tripod.envs.swe.task import SweTask

STATUS_TAMPERING = "tampering"
_RUNNER = Path(__file__).with_name("_runner.py")
_PYTEST_ARGS = ("-rA", "--tb=short", "-q", "-p", "no:cacheprovider", "-o", "addopts=")
"""The fixed invocation: the -rA summary for the agent's eyes, no cache, no project addopts
(coverage plugins and the like); plugins cannot be added (autoload is off)."""
_TEST_DIRS = {"test", "tests", "testing"}
_NOT_SOURCE = {"conftest.py", "sitecustomize.py", "usercustomize.py", "setup.py",
               "noxfile.py", "__main__.py"}


def is_source_file(rel: str) -> bool:
    """A package source file whose changes count: Python, not a test, not a hook that
    runs at interpreter or pytest start-up."""
    path = PurePosixPath(rel)
    name = path.name
    if path.suffix != ".py" or name in _NOT_SOURCE or any(p.startswith(".") for p in path.parts):
        return False
    if name.startswith("test_") or name.endswith("_test.py"):
        return False
    return not any(part in _TEST_DIRS for part in path.parts[:-1])


# --- static screen ------------------------------------------------------------------------

_RUNNER_NAMES = frozenset({
    "_pytest", "pytest", "pluggy", "gc", "_getframe", "currentframe",
    "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "tb_frame", "tb_next",
    "gi_frame", "cr_frame", "ag_frame", "__globals__", "__code__", "__closure__",
    "__builtins__", "builtins", "__import__", "importlib", "import_module", "exec", "eval",
    "compile", "ctypes", "_exit", "settrace", "setprofile", "addaudithook", "meta_path",
    "path_hooks", "path_importer_cache", "modules", "atexit", "faulthandler", "inspect",
    "walk_stack", "extract_stack", "_current_frames", "get_objects", "get_referrers",
    "get_referents", "fdopen", "dup", "dup2", "breakpoint", "__main__",
})
"""Names through which code reaches the test runner's objects or the result channel."""
_RUNNER_STRINGS = ("pytest", "pluggy", "PASSED", "FAILED", "/proc", "/dev/fd", "f_back", "__main__",
                   "f_globals", "tb_frame", "gi_frame", "__globals__", "__code__",
                   "__builtins__", "_getframe", "_exit", "get_objects", "get_referrers")


def _names(text: str) -> dict[str, int] | None:
    """How often each runner-reaching name or string fragment occurs (None: no parse)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    counts: dict[str, int] = {}

    def bump(key: str) -> None:
        counts[key] = counts.get(key, 0) + 1

    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in _RUNNER_NAMES:
            bump(node.id)
        elif isinstance(node, ast.Attribute) and node.attr in _RUNNER_NAMES:
            bump(node.attr)
        elif isinstance(node, ast.alias):
            for part in node.name.split(".") + [node.asname or ""]:
                if part in _RUNNER_NAMES:
                    bump(part)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for part in node.module.split("."):
                if part in _RUNNER_NAMES:
                    bump(part)
        elif isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
            value = node.value if isinstance(node.value, str) else node.value.decode("latin-1")
            for fragment in _RUNNER_STRINGS:
                if fragment in value:
                    bump(f"'{fragment}'")
    return counts


def screen(pristine: str | None, changed: str | None) -> list[str]:
    """Runner-reaching names that the agent's version uses more often than the pristine
    file (only new uses count, so a fix of a file that already uses one is not flagged)."""
    if changed is None:
        return []
    after = _names(changed)
    if after is None:  # does not parse: it will fail at import, harmlessly
        return []
    before = _names(pristine or "") or {}
    return sorted(k for k, n in after.items() if n > before.get(k, 0))


# --- report -------------------------------------------------------------------------------


@dataclass
class VerifiedRun:
    """One trusted scoring run."""

    status: str
    """"ok" (results can be trusted), "tampering", or the sandbox status that stopped the
    run (timeout, output_limit, cpu_limit, killed, sandbox_violation, sandbox_error)."""
    results: dict[str, str] = field(default_factory=dict)
    """test id -> PASSED / FAILED / ERROR / SKIPPED / XFAIL / XPASS."""
    output: str = ""
    """pytest's terminal output (shown to the agent; never parsed for the score)."""
    reason: str = ""
    """Why the run is not "ok"."""
    run: RunResult | None = None
    violations: tuple[str, ...] = ()
    """Blocked attempts the runner saw ("network", "write_outside"), caught or not."""

    def share(self, tests: list[str]) -> float:
        """Share of `tests` passing in this run (0 unless "ok")."""
        if self.status != "ok" or not tests:
            return 0.0
        return sum(self.results.get(t) in PASSING for t in tests) / len(tests)


def _tampered(reason: str, run: RunResult | None) -> VerifiedRun:
    return VerifiedRun(STATUS_TAMPERING, output=run.output if run else "", reason=reason,
                       run=run)


def parse_report(run: RunResult, nonce: str) -> VerifiedRun:
    """Check the runner's report for consistency; its results, or why it is not trusted."""
    text = run.channel.decode("utf-8", errors="replace")
    results: dict[str, str] = {}
    end: list[str] | None = None
    violations: set[str] = set()
    for line in text.splitlines():
        head, _, rest = line.partition(" ")
        if head != nonce or end is not None:
            return _tampered("a line in the result channel that the runner did not write"
                             if head != nonce else "output after the trailer", run)
        kind, _, rest = rest.partition(" ")
        if kind in ("FLAG", "TAMPER"):
            return _tampered(f"the code under test reached the test runner ({rest})", run)
        if kind == "R":
            status, _, test_id = rest.partition(" ")
            results[test_id] = status
        elif kind == "VIOLATION":
            violations.add(rest.strip())
        elif kind == "END":
            end = rest.split()
    verified = _check_trailer(run, results, end)
    verified.violations = tuple(sorted(violations))
    return verified


def _check_trailer(run: RunResult, results: dict[str, str],
                   end: list[str] | None) -> VerifiedRun:
    if end is None:
        if run.exit_code >= 128:  # killed by a signal: a crash, not a forged result
            return VerifiedRun("ok", {}, run.output, "the test process crashed", run)
        return _tampered(f"the test process exited (code {run.exit_code}) before pytest "
                         "finished", run)
    if len(end) != 3 or not all(x.isdigit() for x in end):
        return _tampered("a malformed trailer", run)
    code, count, flagged = map(int, end)
    failing = any(s in ("FAILED", "ERROR") for s in results.values())
    if flagged or count != len(results) or code != run.exit_code:
        return _tampered("the trailer does not match the records or the exit status", run)
    if (code == 0 and failing) or (code == 1 and not failing):
        return _tampered(f"pytest's exit status {code} contradicts the outcomes", run)
    return VerifiedRun("ok", results, run.output, "", run)


# --- the scorer -----------------------------------------------------------------------------


class Verifier:
    """Scores the source files of one episode's workspace in fresh copies of its base."""

    def __init__(self, task: SweTask, base: Path, python: str) -> None:
        self.task = task
        self.base = base
        """The pristine tree (built by the workspace; never written after)."""
        self.python = python
        self.sources = sorted(r for r in safefs.walk_files(base) if is_source_file(r))
        self.pristine = {r: (safefs.read_bytes(base, r) or b"") for r in self.sources}
        self._last: tuple[tuple, VerifiedRun] | None = None

    def changes(self, root: Path) -> dict[str, bytes | None]:
        """The agent's versions of the source files that differ from the base (None: the
        file is gone, or is no longer a regular file of a sane size)."""
        out: dict[str, bytes | None] = {}
        for rel in self.sources:
            try:
                data = safefs.read_bytes(root, rel)
            except (OSError, ValueError):
                data = None
            if data != self.pristine[rel]:
                out[rel] = data
        return out

    def score(self, root: Path, limits: SandboxLimits) -> VerifiedRun:
        """Score the workspace at `root` (reusing the last run if nothing changed)."""
        changed = self.changes(root)
        key = tuple(sorted(changed.items(), key=lambda kv: kv[0]))
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        flagged = {rel: hits for rel, data in changed.items()
                   if (hits := screen(_text(self.pristine[rel]), _text(data)))}
        if flagged:
            what = "; ".join(f"{rel}: {', '.join(h)}" for rel, h in sorted(flagged.items()))
            result = _tampered(f"the change uses what reaches the test runner ({what})", None)
        else:
            result = self._run(changed, limits)
        self._last = (key, result)
        return result

    def _run(self, changed: dict[str, bytes | None], limits: SandboxLimits) -> VerifiedRun:
        scratch = Path(tempfile.mkdtemp(prefix="score-", dir=self.base.parent))
        try:
            copy = scratch / "repo"
            shutil.copytree(self.base, copy, symlinks=True)
            for rel, data in changed.items():
                safefs.write_bytes(copy, rel, data)
            for sub in ("home", "tmp"):
                (copy / ".tripod" / sub).mkdir(parents=True, exist_ok=True)
            return self._sandboxed(copy, sorted(changed), limits)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _sandboxed(self, copy: Path, changed: list[str], limits: SandboxLimits) -> VerifiedRun:
        nonce = secrets.token_hex(16)
        report_r, report_w = os.pipe()
        nonce_r, nonce_w = os.pipe()
        os.write(nonce_w, nonce.encode())
        os.close(nonce_w)
        spec = {"paths": [str(copy / p) for p in self.task.workspace.python_path],
                "tests": self.task.test_files(), "report_fd": report_w, "nonce_fd": nonce_r,
                "watched": [str(copy / rel) for rel in changed],
                "args": [*_PYTEST_ARGS, *self.task.test_files()]}
        # Not -I: that would also drop PYTHONHASHSEED, and outcomes that depend on set
        # order must be the same as when the task was made. The environment is ours alone.
        argv = [self.python, "-s", "-B", "-c", _RUNNER.read_text(), json.dumps(spec)]
        try:
            run = run_sandboxed(argv, copy, env=_runner_env(copy, self.task), limits=limits,
                                pass_fds=(report_w, nonce_r), drain=report_r)
        finally:
            os.close(report_r)
        if run.status in ABNORMAL_STATUSES:
            return VerifiedRun(run.status, output=run.output, reason=run.status, run=run)
        return parse_report(run, nonce)


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")


def _runner_env(copy: Path, task: SweTask) -> dict[str, str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(copy / ".tripod" / "home"),
           "TMPDIR": str(copy / ".tripod" / "tmp"), "LANG": "C.UTF-8", "NO_COLOR": "1",
           "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    env.update({k: v for k, v in task.workspace.env.items()
                if not k.startswith(("PYTHON", "PYTEST"))})
    return env

