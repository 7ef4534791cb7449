"""The verified reward: score only the agent's change to the package's source files.

Scoring never runs in the agent's workspace, where anything the agent left (a conftest, a
plugin, a ``sitecustomize``, a module shadowing the standard library, a fake ``*.dist-info``,
stale bytecode) would run with the tests. Instead, for each scoring:

1. a fresh copy is made of the task's repository at its base (source + setup patch + the
   pristine test files, test patch applied), built once per episode outside the agent's view;
2. only the agent's versions of the *existing, non-test Python source files* are carried
   over (`source_files`); every other file the agent created or changed is left behind;
3. the changed files pass a static allowlist policy (`gate.py`) in the trainer, before
   anything runs: a change that uses what a bug fix does not need is tampering;
4. pytest runs in the sandbox through the trusted runner (`_runner.py`): plugin autoload
   off, a fixed invocation, results through a nonce-tagged pipe, an audit hook and a
   fingerprint of pytest's own functions; every ``.py`` file of the copy is read-only
   there, and so is an empty ``__pycache__`` beside it (`run_sandboxed`'s
   ``readonly_suffixes``): no test, conftest or source file can be rewritten, and no
   bytecode planted for a later import or for pytest's assertion rewriter to load;
5. the report is checked (`parse_report`): only nonce lines, a FAILED or ERROR kept once
   reported, a trailer whose exit status and count agree with the process and the records;
   then every ``.py`` file of the copy must still be what the trainer wrote. Any evidence
   of tampering scores 0 with the status ``tampering``.

What this does not guarantee is written down in docs/swe.md (threat model).
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import json
import logging
import math
import os
import secrets
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from tripod.envs.swe import _runner, safefs
from tripod.envs.swe.gate import Gate, Refusal
from tripod.envs.swe.patches import PatchError, apply_patch_to_texts, make_patch
from tripod.envs.swe.sandbox import ABNORMAL_STATUSES, RunResult, SandboxLimits, run_sandboxed
from tripod.envs.swe.scoring import counts_as_passing
from tripod.envs.swe.task import SweTask

log = logging.getLogger(__name__)
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


# --- which files are the package's -----------------------------------------------------------


def _module_name(rel: str, roots: list[str]) -> str | None:
    """The dotted name `rel` imports as under one of the PYTHONPATH `roots`."""
    path = PurePosixPath(rel).with_suffix("")
    for root in roots:
        base = PurePosixPath(root)
        parts = path.parts if str(base) == "." else (
            path.relative_to(base).parts if path.is_relative_to(base) else None)
        if parts:
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            return ".".join(parts) or None
    return None


def _imported(data: bytes, module: str, package: bool) -> set[str]:
    """Modules (and possible submodules, as "module.name") a file imports, relative
    imports resolved; a whole-module import also adds "module.*"."""
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return set()
    out: set[str] = set()
    here = module.split(".") if package else module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
            out.update(f"{alias.name}.*" for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = here[:len(here) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            out.add(target)
            out.update(f"{target}.{alias.name}" for alias in node.names)
    return out


@dataclass
class HelperCode:
    """What of the package's source files is test code."""

    modules: set[str]
    """Modules imported by the tests but by no module of the package."""
    names: dict[str, set[str]]
    """Per other module: the names the tests import from it and the package never does
    (e.g. ``raises`` in ``toolz/utils.py``, whose ``no_default`` the package uses)."""


def find_helpers(texts: dict[str, bytes], candidates: list[str], roots: list[str],
              gold: set[str]) -> HelperCode:
    """Source-looking modules and definitions that are test code. A package's ``__init__``
    and the files the gold patch changes are always the package's."""
    names = {r: _module_name(r, roots) or _module_name(r, ["."]) for r in texts}
    package: set[str] = set()
    tests: set[str] = set()
    for rel, data in texts.items():
        if names[rel] is None:
            continue
        found = _imported(data, names[rel], rel.endswith("__init__.py"))
        (package if rel in candidates else tests).update(found - {names[rel]})
    out = HelperCode(set(), {})
    for rel in candidates:
        module = names[rel]
        if not module or rel.endswith("__init__.py") or rel in gold or module not in tests:
            continue
        if module not in package:
            out.modules.add(rel)
        elif f"{module}.*" not in package:
            prefix = module + "."
            only = {t[len(prefix):] for t in tests - package if t.startswith(prefix)}
            if only - {"*"}:
                out.names[rel] = only - {"*"}
    return out


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
    refusals: tuple[Refusal, ...] = ()
    """What the gate refused (the change did not run)."""
    reference: dict[str, str] = field(default_factory=dict)
    """Reference outcomes (the gold tree's) of the tests this run reports as XFAIL."""
    patch: str = ""
    """The scored change as a unified diff (`source_diff`; empty for no change)."""
    gold_patch: str = ""
    """The gold patch written the same way (never shown to the agent)."""
    hidden: dict[str, str] = field(default_factory=dict)
    """Hidden check name -> PASSED / FAILED (`HiddenCheck`; extra FAIL_TO_PASS targets)."""
    check_calls: dict[int, str] = field(default_factory=dict)
    """Inputs the runner derived, as JSON ``[module, qualname, call, from a test]`` (a
    recording run on the gold tree only)."""
    check_outcomes: dict[int, str] = field(default_factory=dict)
    """Encoded outcome of each hidden check, by index (from the process of checks)."""
    process_outcomes: list[dict[int, str]] = field(default_factory=list)
    """The same, as each process of hidden checks reported it (`CHECK_PROCESSES`)."""

    def similarity(self) -> float:
        """How like the gold patch the scored change is (`patch_similarity`)."""
        return patch_similarity(self.patch, self.gold_patch)

    def passes(self, test: str) -> bool:
        """`test` passed: PASSED, or XFAIL where its reference outcome is XFAIL too (a
        hidden check: its output is the gold one)."""
        if test in self.hidden:
            return self.status == "ok" and self.hidden[test] == "PASSED"
        status = self.results.get(test)
        return status is not None and counts_as_passing(status, self.reference.get(test))

    def share(self, tests: list[str]) -> float:
        """Share of `tests` passing in this run (0 unless "ok")."""
        if self.status != "ok" or not tests:
            return 0.0
        return sum(self.passes(t) for t in tests) / len(tests)


def _tampered(reason: str, run: RunResult | None,
              refusals: tuple[Refusal, ...] = ()) -> VerifiedRun:
    return VerifiedRun(STATUS_TAMPERING, output=run.output if run else "", reason=reason,
                       run=run, refusals=refusals)


def parse_report(run: RunResult, nonce: str) -> VerifiedRun:
    """Check the runner's report for consistency; its results, or why it is not trusted."""
    text = run.channel.decode("utf-8", errors="replace")
    results: dict[str, str] = {}
    calls: dict[int, str] = {}
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
        if kind == "R":  # sent as pytest reports; a failure, once reported, stays
            status, _, test_id = rest.partition(" ")
            if results.get(test_id) not in ("FAILED", "ERROR"):
                results[test_id] = status
        elif kind == "HCALL":  # a recording run on the gold tree: the derived inputs
            index, _, form = rest.partition(" ")
            if not index.isdigit():
                return _tampered("a malformed hidden-check line", run)
            calls[int(index)] = form
        elif kind == "VIOLATION":
            violations.add(rest.strip())
        elif kind == "END":
            end = rest.split()
        else:
            return _tampered(f"a line of a kind the runner does not write ({kind})", run)
    verified = _check_trailer(run, results, end)
    verified.violations = tuple(sorted(violations))
    verified.check_calls = calls
    return verified


def parse_checks(run: RunResult, nonce: str, count: int) -> dict[int, str] | None:
    """The outcomes a process of hidden checks reported, by index (a check it did not
    report fails); None when the report shows tampering: a line without the nonce, an
    index that was not sent or sent twice, a flagged operation."""
    text = run.channel.decode("utf-8", errors="replace")
    outcomes: dict[int, str] = {}
    for line in text.splitlines():
        head, _, rest = line.partition(" ")
        kind, _, rest = rest.partition(" ")
        if head != nonce or kind in ("FLAG", "TAMPER"):
            return None
        if kind == "HC":
            index, _, form = rest.partition(" ")
            if not index.isdigit() or int(index) >= count or int(index) in outcomes:
                return None
            outcomes[int(index)] = form
    return outcomes


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


# --- hidden checks ------------------------------------------------------------------------

MAX_HIDDEN_CHECKS = 64
"""Hidden checks per task (`SweEnvConfig.hidden_checks` sets fewer; 0 turns them off)."""
_MAX_CALL_CHARS = 1000
_MAX_CANDIDATES = 400
"""Inputs tried at most: as many as fit `_CANDIDATE_CHARS`. Where few kinds of derived
input show the bug (only a colour name in another case is still a name), 40 inputs held
one or two of each kind and often none that showed it."""
_CANDIDATE_CHARS = 160_000
"""The inputs tried, encoded together, fit in this many characters (objects' states take
room: 56,000 held about 100 of semver's `Version` calls, with few inputs of other types)."""
_FLOAT_TOLERANCE = 1e-9


@dataclass(frozen=True)
class HiddenCheck:
    """A call of one of the package's functions on an input no test shows, with the gold
    tree's output for it. Inputs are the target tests' own calls (of the package's
    functions, or of a function the gold patch changes) with arguments changed by random
    offsets; only inputs on which the buggy tree gives another output are kept, so each
    check fails before the fix, as a FAIL_TO_PASS test does, and a change fitted to the
    tests' inputs still fails it."""

    module: str
    qualname: str
    call: str
    """The encoded (args, kwargs) (`_runner._encode`)."""
    expected: str
    """The encoded outcome on the gold tree."""
    direct: bool = True
    """The call was made by a test (else: a call of a changed function from the package)."""


CHECK_PROCESSES = 4
"""Processes that run a scored run's hidden checks, one after another, each with its own
hash seed and its own address layout. A check counts only where all of them give the gold
output; where they disagree, the change's outputs depend on the process (an address, a set's
order), a coin that could be tossed until one scored run came out right, and the run scores
as tampering (the gold tree's checks are kept only where they agree)."""
CHECKS_HASH_SEEDS = tuple(str(seed) for seed in secrets.SystemRandom().sample(
    range(1, 2 ** 32), CHECK_PROCESSES))
"""The hash seeds of the hidden checks' processes, drawn in each trainer process (the gold
outcomes and every scored run's checks in that process share them). pytest runs with seed
0, as when the task was made, so a change that keys on ``hash`` or on set order to tell a
scored run from real use (where the seed is random) meets seeds it cannot know in the
checks."""
CHECKS_ENVIRONMENTS = (
    {},
    {"PYTHONINTMAXSTRDIGITS": "0", "PYTHONOPTIMIZE": "2", "TZ": "America/St_Johns"},
    {"PYTHONINTMAXSTRDIGITS": "640", "TZ": "Asia/Kathmandu", "PYTHONMALLOC": "malloc"},
    {"TZ": "Pacific/Chatham"},
)
"""What else differs between the hidden checks' processes: the interpreter's limit on
int-to-str digits (unlimited, the least allowed, the default), `python -OO` (no asserts, no
docstrings), the time zone (UTC, then offsets of half and three quarters of an hour), the
allocator (the C library's ``malloc`` puts small objects on the heap, far below the
addresses of pymalloc's arenas). Code that branches on one of these (``str(10 ** 5000)``
raising ValueError, an `assert`, a docstring, the local time, ``id(obj)`` above some
address) gives the processes different outputs and scores as tampering, whichever value it
expects in real use; the gold tree's checks are kept only where its own processes agree."""
UNSTABLE = '["unstable"]'
"""A check's outcome where the processes of `CHECK_PROCESSES` disagree."""
OTHER_VERSION_PROCESSES = (1, 2, 3)
"""The processes of hidden checks that run on interpreters of other minor versions
(`other_interpreters`: the newest, the oldest, then one more the machine has), each where
the machine has one and the task's gold code gives the same outputs on it. A change that picks the fix
on the trainer's interpreter and keeps the bug on others (a branch on a float sum that
compensated summation changed in 3.12, on the Unicode tables, on an exception's message,
on a method that a version lacks) then gives such a process the bug's outputs, which
disagree with the other processes and score as tampering, without a rule of the gate
naming the probe. Process 0 always runs on the task's interpreter."""
CHECK_PYTHON_ENV = "TRIPOD_SWE_CHECK_PYTHON"
"""Names the interpreters of `OTHER_VERSION_PROCESSES` (paths separated by ":"), or
switches them off ("off"); unset, `other_interpreters` looks for them."""
_MIN_CHECK_VERSION = (3, 10)
"""The oldest interpreter the runner's check mode runs on."""


_TIMEOUT = '["timeout"]'
_INTERPRETERS: dict[tuple[str, str], tuple[str, ...]] = {}


def _version_of(python: str) -> tuple[str, tuple[int, int]] | None:
    """The real executable and (major, minor) version of the interpreter `python`, or
    None where it does not run (a pyenv shim that needs its shell set-up, a broken link)."""
    probe = "import json, sys; print(json.dumps([sys.executable, list(sys.version_info[:2])]))"
    try:
        with open(os.path.realpath(python), "rb") as f:
            if f.read(4) != b"\x7fELF":  # a script (a shim) would run some other Python
                return None
        done = subprocess.run([python, "-s", "-B", "-c", probe], capture_output=True,
                              text=True, timeout=30, env={"PATH": "/usr/bin:/bin"})
        executable, version = json.loads(done.stdout)
        return executable, (int(version[0]), int(version[1]))
    except (OSError, ValueError, TypeError, IndexError, subprocess.SubprocessError):
        return None


def _candidates() -> list[str]:
    """Interpreters this machine may have besides the trainer's: ``pythonX.Y`` on PATH and
    in the usual prefixes, and pyenv's installed versions."""
    found = []
    folders = [*os.environ.get("PATH", "").split(os.pathsep), "/usr/bin", "/usr/local/bin"]
    for minor in range(20, _MIN_CHECK_VERSION[1] - 1, -1):
        found += [str(Path(d) / f"python3.{minor}") for d in folders if d]
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    found += [str(p) for p in sorted(root.glob("versions/3.*/bin/python3"), reverse=True)]
    return [c for c in dict.fromkeys(found) if os.path.isfile(c)]


def other_interpreters(python: str) -> tuple[str, ...]:
    """Interpreters of other minor versions than `python`, one for each process of
    `OTHER_VERSION_PROCESSES` at most: the newest and the oldest this machine has (at
    least `_MIN_CHECK_VERSION`), then the others from the newest down (3.13, 3.10, 3.12
    beside 3.11: a probe must then keep the bug on a version no check runs on), or those
    `CHECK_PYTHON_ENV` names; () where there is none or it says "off". Looked up once
    per process."""
    named = os.environ.get(CHECK_PYTHON_ENV, "")
    if (python, named) in _INTERPRETERS:
        return _INTERPRETERS[python, named]
    own = _version_of(python)
    chosen: tuple[str, ...] = ()
    if own is not None and named.lower() != "off":
        if named:
            for path in named.split(":")[:len(OTHER_VERSION_PROCESSES)]:
                other = _version_of(path)
                if other is None or other[1] == own[1]:
                    raise ValueError(f"{CHECK_PYTHON_ENV}: {path} is not an interpreter of "
                                     f"another version than {python} "
                                     f"({own[1][0]}.{own[1][1]})")
                chosen += (other[0],)
        else:
            found = {v[1]: v[0] for c in _candidates() if (v := _version_of(c)) is not None
                     and v[1] != own[1] and v[1] >= _MIN_CHECK_VERSION}
            versions = sorted(found, reverse=True)
            order = dict.fromkeys(versions[:1] + versions[-1:] + versions)
            chosen = tuple(found[v] for v in order)[:len(OTHER_VERSION_PROCESSES)]
    _INTERPRETERS[python, named] = chosen
    return chosen


def _agreed(outcomes: list[str | None]) -> str | None:
    """One check's outcome from the processes' `outcomes` (None: not reported): `UNSTABLE`
    where two reported answers differ; else a timeout or a missing report where there is
    one (a loaded machine can stop one process, which fails the check but is no coin);
    else the answer they share."""
    answers = {o for o in outcomes if o is not None and o != _TIMEOUT}
    if len(answers) > 1:
        return UNSTABLE
    if None in outcomes:
        return None
    return _TIMEOUT if _TIMEOUT in outcomes else answers.pop()


_NOT_CHECKED_RAISES = frozenset({"RecursionError", "MemoryError", "SystemExit",
                                 "KeyboardInterrupt", "_CheckTimeout", "GeneratorExit"})


def _checkable(outcome: str) -> bool:
    """Whether a gold outcome can be a hidden check's: a value, an iterator's items, or an
    exception the code raises on purpose (a fix that validates its input must reject what
    the gold rejects: a check of a too-long colour string raises ValueError), not one that
    the process's limits raise."""
    if outcome.startswith(('["value"', '["iter"')):
        return True
    try:
        kind, name = json.loads(outcome)
    except ValueError:
        return False
    return kind == "raise" and name not in _NOT_CHECKED_RAISES


def new_salt() -> str:
    """The seed of a task's derived inputs: drawn afresh in each process, so that neither
    the tests nor this code tell which inputs a check uses (tests may fix it)."""
    return secrets.token_hex(8)


def check_targets(pristine: dict[str, bytes], gold: dict[str, bytes | None],
                  roots: list[str]) -> list[tuple[str, str, str]]:
    """(file, module, qualified name) of each module-level function and each method of a
    module-level class that the gold patch changes."""
    def functions(data: bytes) -> dict[str, str]:
        out = {}
        for node in ast.parse(data).body:
            if isinstance(node, ast.FunctionDef):
                out[node.name] = ast.dump(node)
            elif isinstance(node, ast.ClassDef):
                out.update({f"{node.name}.{n.name}": ast.dump(n) for n in node.body
                            if isinstance(n, ast.FunctionDef)})
        return out

    out = []
    for rel, data in sorted(gold.items()):
        module = _module_name(rel, roots)
        if data is None or module is None or rel not in pristine:
            continue
        try:
            before, after = functions(pristine[rel]), functions(data)
        except (SyntaxError, ValueError):
            continue
        out += [(rel, module, name) for name, dump in after.items() if before.get(name) != dump]
    return out


def _public(qualname: str) -> bool:
    """Whether a function or method is part of the package's public interface (no part of
    its name private; a constructor or another special method counts as its class's): a
    fix in its callers that leaves it wrong (`Version(2)` still `2.1.0`) is not a fix."""
    parts = qualname.split(".")
    return not any(p.startswith("_") and not (p.startswith("__") and p.endswith("__"))
                   for p in parts)


def same_outcome(got: str, expected: str) -> bool:
    """Whether an encoded outcome is the gold one, as a caller would see it: values of
    the same type (an int is not a float or a bool, a list is not a tuple: ``255.0``
    breaks ``"{:02x}"`` where ``255`` does not, and ``[1] == (1,)`` is false), floats
    within 1e-9 (relative), an iterator's items as a sequence's, dicts and sets regardless
    of order, objects by class name and attributes. A `str` subclass was never encoded as
    a `str`."""
    try:
        a, b = json.loads(got), json.loads(expected)
    except ValueError:
        return False
    if a[0] not in ("value", "iter") or b[0] not in ("value", "iter"):
        return a == b
    if a[0] != b[0] and a[1][0] in _SEQUENCES and b[1][0] in _SEQUENCES:
        # an iterator's first items are encoded as a list: compare them as one
        return _same(["list", a[1][1]], ["list", b[1][1]])
    return _same(a[1], b[1])


_SEQUENCES = {"list", "tuple"}


def _same(a: list, b: list) -> bool:
    if a[0] != b[0]:
        return False
    if a[0] == "float":
        return math.isclose(float(a[1]), float(b[1]), rel_tol=_FLOAT_TOLERANCE,
                            abs_tol=_FLOAT_TOLERANCE)
    if a[0] in _SEQUENCES:
        return len(a[1]) == len(b[1]) and all(map(_same, a[1], b[1]))
    if a[0] in ("set", "frozenset", "dict"):
        return _unordered(a[1], b[1])
    if a[0] == "object":
        return a[1] == b[1] and len(a[2]) == len(b[2]) and all(
            ka == kb and _same(va, vb) for (ka, va), (kb, vb) in zip(a[2], b[2]))
    return a == b


def _unordered(xs: list, ys: list) -> bool:
    """Same items in any order (a few hundred at most: quadratic matching is fine)."""
    left = list(ys)
    for x in xs:
        match = next((i for i, y in enumerate(left) if _same_item(x, y)), None)
        if match is None:
            return False
        left.pop(match)
    return not left


def _same_item(x: list, y: list) -> bool:
    if isinstance(x[0], list):  # a dict entry: [key, value]
        return _same(x[0], y[0]) and _same(x[1], y[1])
    return _same(x, y)


class Verifier:
    """Scores the source files of one episode's workspace in fresh copies of its base."""

    def __init__(self, task: SweTask, base: Path, python: str,
                 max_checks: int = MAX_HIDDEN_CHECKS) -> None:
        self.task = task
        self.max_checks = max_checks
        """Hidden checks per scored run (`HiddenCheck`; 0: none)."""
        self.base = base
        """The pristine tree (built by the workspace; never written after)."""
        self.python = python
        files = sorted(safefs.walk_files(base))
        candidates = [r for r in files if is_source_file(r)]
        texts = {r: (safefs.read_bytes(base, r) or b"") for r in files if r.endswith(".py")}
        gold = _gold_texts(task, {r: texts[r] for r in candidates})
        tests = find_helpers(texts, candidates, task.workspace.python_path, set(gold))
        self.sources = [r for r in candidates if r not in tests.modules]
        self.pristine = {r: texts[r] for r in self.sources}
        self.test_code = sorted(set(texts) - set(self.sources))
        """The Python files that are not source: tests, conftest files, test helpers (a
        call from their code is a test's call, for hidden checks)."""
        self.digests = {r: hashlib.sha256(d).digest() for r, d in texts.items()
                        if not any(p.startswith(".") for p in r.split("/"))}
        """The Python files of the base (tests, conftest files, sources; not in hidden
        folders), by digest: the files the sandbox keeps read-only during a scored run."""
        failing = {t.split("::")[0] for t in task.FAIL_TO_PASS}
        self.gate = Gate(self.pristine, gold, tests.names,
                         {r: texts[r] for r in self.test_code if r in failing})
        self.gold_diff = source_diff(self.pristine, gold)
        """The gold patch as the agent's change is written (`source_diff`), for similarity."""
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
        checks = self.hidden_checks(limits)
        refusals, broken = self.gate.check(changed)
        if refusals:
            what = "; ".join(map(str, refusals[:5]))
            result = _tampered(f"the gate refused the change ({what})", None, tuple(refusals))
        elif broken:
            what = "; ".join(map(str, broken))
            result = VerifiedRun("ok", {}, f"Not run: {what}; every test counts as failing.",
                                 what)
        else:
            result = self._with_reference(self._run(changed, limits, checks=checks), limits)
            unstable = [i + 1 for i, o in sorted(result.check_outcomes.items())
                        if o == UNSTABLE]
            if result.status == "ok" and unstable:
                result = _tampered(f"hidden check {unstable[0]} gave different outputs in "
                                   "processes that differ only in hash seed, address layout, "
                                   "interpreter settings and version (the gold tree gives one)",
                                   result.run)
        result.hidden = {f"hidden check {i + 1}": "PASSED" if result.status == "ok" and
                         same_outcome(result.check_outcomes.get(i, ""), check.expected)
                         else "FAILED" for i, check in enumerate(checks)}
        result.patch, result.gold_patch = source_diff(self.pristine, changed), self.gold_diff
        self._last = (key, result)
        return result

    def _with_reference(self, result: VerifiedRun, limits: SandboxLimits) -> VerifiedRun:
        """Attach the reference outcomes of the target tests the run reports as XFAIL
        (measured once, only when needed: most runs report none)."""
        targets = self.task.FAIL_TO_PASS + self.task.PASS_TO_PASS
        xfails = [t for t in targets if result.results.get(t) == "XFAIL"]
        if result.status == "ok" and xfails:
            reference = self.reference(limits)
            result.reference = {t: reference.get(t, "") for t in xfails}
        return result

    def reference(self, limits: SandboxLimits) -> dict[str, str]:
        """Every test's outcome on the gold tree (the base with the gold patch), through
        the trusted runner; cached per task in the process."""
        key = task_key(self.task)
        if key not in _REFERENCES:
            gold = _gold_texts(self.task, self.pristine)
            run = self._run(gold, limits)
            _REFERENCES[key] = dict(run.results) if run.status == "ok" else {}
        return _REFERENCES[key]

    # --- hidden checks ----------------------------------------------------------------

    def hidden_checks(self, limits: SandboxLimits) -> list[HiddenCheck]:
        """This task's hidden checks: made on first use, then cached in the process (a
        making that failed, e.g. a gold run stopped by a loaded machine, is tried once
        more at the next scoring)."""
        if self.max_checks <= 0:
            return []
        key = task_key(self.task)
        if key not in _HIDDEN:
            checks = self._make_checks(limits)
            _FAILED_MAKES[key] = _FAILED_MAKES.get(key, 0) + (checks is None)
            if checks is None and _FAILED_MAKES[key] < 2:
                return []
            _HIDDEN[key] = checks or []
        return _HIDDEN[key][:self.max_checks]

    def _make_checks(self, limits: SandboxLimits) -> list[HiddenCheck] | None:
        """Record the target tests' calls on the gold tree and derive inputs from them (a
        fresh random salt), keep those whose gold output is a value and the same twice,
        then those on which the buggy tree's output differs; calls made by the tests come
        first, a changed function's calls from inside the package only where no test's
        call shows the bug (a fix may sit at another layer than the gold one). None when a
        run failed."""
        tests = list(self.task.FAIL_TO_PASS)
        gold = _gold_texts(self.task, self.pristine)
        targets = check_targets(self.pristine, gold, self.task.workspace.python_path)
        if not tests or not gold:
            return []
        record = {"salt": new_salt(), "sources": self.sources, "limit": _MAX_CANDIDATES,
                  "max_call_chars": _MAX_CALL_CHARS, "budget_chars": _CANDIDATE_CHARS,
                  "targets": [[rel, name] for rel, _, name in targets],
                  "tests": self.test_code}
        run = self._run(gold, limits, tests=tests, record=record)
        if run.status != "ok":
            log.warning("%s: no hidden checks yet: the gold run was %s (%s)",
                        self.task.instance_id, run.status, run.reason)
            return None
        calls = [json.loads(c) for _, c in sorted(run.check_calls.items())]
        calls = _within_budget([c for c in calls if len(c[2]) <= _MAX_CALL_CHARS])
        if not calls:
            return []
        items = [c[:3] for c in calls]
        pythons = self._pythons(other_interpreters(self.python))
        golden = self._run(gold, limits, checks=items, repeat=2, tests=[], pythons=pythons)
        if golden.status == "ok" and (differ := _versions_that_differ(golden, pythons)):
            # The gold code gives other outputs on those interpreters (a dependency they
            # lack, a feature of the trainer's version): their checks would be dropped.
            log.info("%s: the gold code's hidden checks differ on %s; those processes run "
                     "on %s", self.task.instance_id, ", ".join(pythons[i] for i in differ),
                     self.python)
            pythons = tuple(self.python if i in differ else p for i, p in enumerate(pythons))
            golden = self._run(gold, limits, checks=items, repeat=2, tests=[],
                               pythons=pythons)
        # the buggy tree's outputs need only differ from the gold's: one process
        buggy = self._run({}, limits, checks=items, tests=[], processes=1)
        if golden.status != "ok" or buggy.status != "ok":
            log.warning("%s: no hidden checks yet: a run of the checks was %s",
                        self.task.instance_id, golden.status if golden.status != "ok"
                        else buggy.status)
            return None
        found = []
        for i, (module, qualname, call, direct, *kind) in enumerate(calls):
            expected = golden.check_outcomes.get(i, "")
            if not _checkable(expected) or \
                    i not in buggy.check_outcomes or \
                    same_outcome(buggy.check_outcomes[i], expected):
                continue
            found.append((kind[0] if kind else "", kind[1] if len(kind) > 1 else "",
                          HiddenCheck(module, qualname, call, expected, bool(direct))))
        direct_found = [f for f in found if f[2].direct]
        if direct_found:  # and the public functions the gold patch changes, called inside
            found = direct_found + [f for f in found if not f[2].direct
                                    and _public(f[2].qualname)]
        # Every argument, and for each every kind of derived input, in turn: a change keyed
        # on a property that one kind keeps (a string's characters, a list's length) meets
        # the kinds that do not, and one keyed on one argument's tested value meets checks
        # that vary it, however many kinds another argument's type has.
        # Each function in turn first: a public function the gold patch changes, called
        # inside the package, gets its share beside a tested function called 100 times.
        shuffle = secrets.SystemRandom().shuffle
        # Within a function, each recorded call's arguments in turn (a call that shows the
        # bug among many that do not still gets its share), then the kinds of change.
        order = [_runner.spread_by_slot(group, shuffle, slot=lambda f: f[1],
                                        kind=lambda f: f[0])[::-1]
                 for group in _runner.grouped(found, lambda f: f[2].qualname)]
        shuffle(order)
        spread = _runner.interleave(order)
        _PYTHONS[task_key(self.task)] = pythons
        return [check for _, _, check in spread[:MAX_HIDDEN_CHECKS]]

    def _pythons(self, others: tuple[str, ...]) -> tuple[str, ...]:
        """The interpreter of each process of hidden checks: `others` in the processes of
        `OTHER_VERSION_PROCESSES` (in order, as far as they go), the task's elsewhere."""
        pythons = [self.python] * CHECK_PROCESSES
        for i, other in zip(OTHER_VERSION_PROCESSES, others):
            pythons[i] = other
        return tuple(pythons)

    def check_pythons(self) -> tuple[str, ...]:
        """The interpreters this task's hidden checks run on (once they are made)."""
        return _PYTHONS.get(task_key(self.task)) or self._pythons(())

    # --- runs -------------------------------------------------------------------------

    def _run(self, changed: dict[str, bytes | None], limits: SandboxLimits,
             tests: list[str] | None = None, record: dict | None = None,
             checks: list | None = None, repeat: int = 1,
             processes: int = CHECK_PROCESSES,
             pythons: tuple[str, ...] | None = None) -> VerifiedRun:
        """pytest on a fresh copy with `changed` written (`tests`: these ids instead of the
        task's test files; []: no pytest run), then, with `checks` (HiddenCheck or
        [module, qualname, call]), a process of hidden checks on the same copy."""
        scratch = Path(tempfile.mkdtemp(prefix="score-", dir=self.base.parent))
        try:
            copy = scratch / "repo"
            shutil.copytree(self.base, copy, symlinks=True)
            for rel, data in changed.items():
                safefs.write_bytes(copy, rel, data)
            for sub in ("home", "tmp"):
                (copy / ".tripod" / sub).mkdir(parents=True, exist_ok=True)
            if tests == []:
                result = VerifiedRun("ok")
            else:
                result = self._sandboxed(copy, sorted(changed), limits, tests, record)
            altered = self._altered(copy, changed) if result.status == "ok" else []
            if altered:
                return _tampered(f"the run changed {', '.join(altered[:3])} (files of the "
                                 "scored copy are read-only during the run)", result.run)
            if checks and result.status == "ok":
                items = [[c.module, c.qualname, c.call] if isinstance(c, HiddenCheck) else c
                         for c in checks]
                found = self._check_process(copy, sorted(changed), limits, items, repeat,
                                            processes, pythons or self.check_pythons())
                if found is None:
                    return _tampered("the process of hidden checks reached the runner",
                                     result.run)
                result.process_outcomes = found
                result.check_outcomes = {
                    i: outcome for i in sorted(set().union(*found))
                    if (outcome := _agreed([o.get(i) for o in found])) is not None}
            return result
        finally:  # not shutil.rmtree: it recurses, and a run can leave a deep folder chain
            safefs.remove_tree(scratch)

    def _altered(self, copy: Path, changed: dict[str, bytes | None]) -> list[str]:
        """Python files of the copy that are not what was written before the run (the
        sandbox makes them read-only; this also holds where it cannot)."""
        expected = dict(self.digests)
        expected.update({r: None if d is None else hashlib.sha256(d).digest()
                         for r, d in changed.items()})
        out = []
        for rel, digest in sorted(expected.items()):
            try:
                data = safefs.read_bytes(copy, rel)
            except (OSError, ValueError):
                data = None
            if (None if data is None else hashlib.sha256(data).digest()) != digest:
                out.append(rel)
        return out

    def _spawn(self, copy: Path, changed: list[str], limits: SandboxLimits, spec: dict,
               items: list | None = None, hash_seed: str = "",
               extra_env: dict[str, str] | None = None,
               python: str = "") -> tuple[RunResult, str]:
        """The trusted runner in the sandbox on `copy`, with `spec` added to its own; the
        run and its nonce. `items` (hidden checks' inputs) go through the nonce pipe, not
        argv or a file (the checked code could read those), written with their size first
        by a thread while the runner reads them, so the pipe's buffer does not bound them
        and the runner stops at the size, not at EOF."""
        env = _runner_env(copy, self.task)
        if hash_seed:
            env["PYTHONHASHSEED"] = hash_seed
        env.update(extra_env or {})
        runner = _RUNNER.read_text()
        nonce = secrets.token_hex(16)
        payload = (nonce + ("\n" + json.dumps(items) if items else "")).encode()
        report_r, report_w = os.pipe()
        nonce_r, nonce_w = os.pipe()
        try:
            threading.Thread(target=_write_and_close, daemon=True,
                             args=(nonce_w, b"%d\n" % len(payload) + payload)).start()
        except BaseException:
            for fd in (report_r, report_w, nonce_r, nonce_w):
                os.close(fd)
            raise
        spec = {"paths": [str(copy / p) for p in self.task.workspace.python_path],
                "report_fd": report_w, "nonce_fd": nonce_r,
                "watched": [str(copy / rel) for rel in changed], **spec}
        # Not -I: that would also drop PYTHONHASHSEED, and outcomes that depend on set
        # order must be the same as when the task was made. The environment is ours alone.
        argv = [python or self.python, "-s", "-B", "-c", runner, json.dumps(spec)]
        try:  # run_sandboxed closes report_w and nonce_r, which it passes on
            run = run_sandboxed(argv, copy, env=env, limits=limits,
                                pass_fds=(report_w, nonce_r), drain=report_r,
                                readonly_suffixes=(".py",))
        finally:
            os.close(report_r)
        return run, nonce

    def _sandboxed(self, copy: Path, changed: list[str], limits: SandboxLimits,
                   tests: list[str] | None, record: dict | None) -> VerifiedRun:
        spec: dict = {"tests": self.task.test_files(),
                      "args": [*_PYTEST_ARGS, *(tests or self.task.test_files())]}
        if record:
            spec["record"] = {**record,
                              "sources": [str(copy / r) for r in record["sources"]],
                              "tests": [str(copy / r) for r in record["tests"]],
                              "targets": [[str(copy / r), n] for r, n in record["targets"]]}
        run, nonce = self._spawn(copy, changed, limits, spec)
        if run.status in ABNORMAL_STATUSES:
            return VerifiedRun(run.status, output=run.output, reason=run.status, run=run)
        return parse_report(run, nonce)

    def _check_process(self, copy: Path, changed: list[str], limits: SandboxLimits,
                       items: list, repeat: int, processes: int,
                       pythons: tuple[str, ...]) -> list[dict[int, str]] | None:
        """The outcomes of the hidden checks `items` in each of `processes` processes that
        run nothing else (their output is never shown; a stopped process fails what it did
        not report), the i-th on interpreter ``pythons[i]``; None when one shows
        tampering."""
        found = []
        for seed, extra, python in zip(CHECKS_HASH_SEEDS[:processes], CHECKS_ENVIRONMENTS,
                                       pythons):
            run, nonce = self._spawn(copy, changed, limits, {"mode": "checks",
                                     "repeat": repeat}, items, seed, extra, python)
            outcomes = parse_checks(run, nonce, len(items))
            if outcomes is None:
                return None
            found.append(outcomes)
        return found


def _within_budget(calls: list[list]) -> list[list]:
    """The first of `calls` (as the runner reports them) that fit `_MAX_CANDIDATES` and,
    as the items the checks' processes read, `_CANDIDATE_CHARS`."""
    kept, size = [], 0
    for call in calls[:_MAX_CANDIDATES]:
        size += len(json.dumps(call[:3])) + 2
        if size > _CANDIDATE_CHARS:
            break
        kept.append(call)
    return kept


def _versions_that_differ(golden: VerifiedRun, pythons: tuple[str, ...]) -> list[int]:
    """The processes on another interpreter than process 0's that give the gold tree's
    outputs on fewer than three quarters of the checks process 0 gives a checkable
    output for."""
    found = golden.process_outcomes
    if not found:
        return []
    reference = {i: o for i, o in found[0].items() if _checkable(o)}
    return [i for i, outcomes in enumerate(found[1:], 1)
            if i < len(pythons) and pythons[i] != pythons[0]
            and sum(outcomes.get(c) == o for c, o in reference.items()) * 4
            < len(reference) * 3]


_REFERENCES: dict[str, dict[str, str]] = {}
_HIDDEN: dict[str, list[HiddenCheck]] = {}
_PYTHONS: dict[str, tuple[str, ...]] = {}
"""The interpreter of each process of hidden checks, per task (set with `_HIDDEN`)."""
_FAILED_MAKES: dict[str, int] = {}
SIMILARITY_MAX_CHARS = 6_000
"""Diffs longer than this together are compared line by line, not character by character
(difflib's cost grows with the product of the lengths: about 0.3 s at this size; a one-bug
fix's diff is a few hundred characters)."""


def source_diff(pristine: dict[str, bytes], changed: dict[str, bytes | None]) -> str:
    """The change to the source files as one unified diff, file by file in path order."""
    def text(data: bytes | None) -> str | None:
        return None if data is None else data.decode("utf-8", errors="replace")

    return "".join(make_patch(rel, text(pristine.get(rel)), text(data))
                   for rel, data in sorted(changed.items()))


def patch_similarity(patch: str, gold: str) -> float:
    """difflib's ratio between the agent's diff and the gold diff, in [0, 1] (SWE-RL's
    reward, arXiv 2502.18449), character by character (no "junk" heuristic: it would
    discard every common character of code); 0 for no change. Past `SIMILARITY_MAX_CHARS`
    the diffs are compared line by line."""
    if not patch or not gold:
        return 0.0
    if len(patch) + len(gold) > SIMILARITY_MAX_CHARS:
        a: str | list[str] = patch.splitlines()
        b: str | list[str] = gold.splitlines()
    else:
        a, b = patch, gold
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def task_key(task: SweTask) -> str:
    """A digest of everything a task is (per-task caches in the process use it)."""
    return hashlib.sha256(json.dumps(task.to_dict(), sort_keys=True).encode()).hexdigest()


def _gold_texts(task: SweTask, pristine: dict[str, bytes]) -> dict[str, bytes | None]:
    """The source files the gold patch changes, as it leaves them (trusted: the task's)."""
    if not task.patch:
        return {}
    texts = {r: d.decode("utf-8", errors="surrogateescape") for r, d in pristine.items()}
    try:
        patched = apply_patch_to_texts(texts, task.patch)  # type: ignore[arg-type]
    except PatchError:
        return {}
    return {r: None if t is None else t.encode("utf-8", errors="surrogateescape")
            for r, t in patched.items() if r in pristine}


def _write_and_close(fd: int, data: bytes) -> None:
    """Write `data` to the pipe `fd`, then close it; a reader that ended early (a runner
    stopped at its limits) ends the writing."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError:
        pass
    finally:
        os.close(fd)


def _runner_env(copy: Path, task: SweTask) -> dict[str, str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(copy / ".tripod" / "home"),
           "TMPDIR": str(copy / ".tripod" / "tmp"), "LANG": "C.UTF-8", "NO_COLOR": "1",
           "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    env.update({k: v for k, v in task.workspace.env.items()
                if not k.startswith(("PYTHON", "PYTEST"))})
    return env

