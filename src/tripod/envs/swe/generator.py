"""Offline SWE task generator: seeded bugs in real projects, verified by their own tests.

For each project of `sources.PROJECTS` (fetched once from PyPI as an sdist):

1. run the pristine test suite in the sandbox; its passing tests are the reference; a second
   run, traced line by line (`_lines.py`), records which lines of the project any of it
   executes;
2. enumerate AST mutations (`mutations.py`) on lines that run (a mutant of code no test
   runs cannot fail a test, so it is skipped without a run of its own), shuffle them with
   the seed and try them in that order: a mutant is kept when some reference tests fail
   (at most `max_failing`, so the bug is specific), every other reference test still
   passes and is still collected, and a second run gives every test the same outcome
   (flaky targets would make noisy rewards; local workspaces also seed `random` at
   interpreter start);
3. group kept mutants into tasks of one, two or three bugs (several bugs make larger gold
   patches, often across files: the medium and hard tiers);
4. write the problem statement from what fails (the failing test line and its error), keep
   the inverse diff as the gold patch, and check the task through the same workspace code
   the env uses: FAIL_TO_PASS fail before the gold patch, and with it every target passes.

Everything is deterministic for a seed: candidates are evaluated in parallel but accepted in
their shuffled order.
"""

from __future__ import annotations

import ast
import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import random
import re
import shutil
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tripod.core.paths import cache_dir
from tripod.envs.base import EnvError
from tripod.envs.swe.mutations import (
    Mutation,
    apply_mutations,
    enclosing_functions,
    find_mutations,
)
from tripod.envs.swe.patches import make_patch
from tripod.envs.swe.sandbox import (
    ABNORMAL_STATUSES,
    RunResult,
    SandboxLimits,
    detect_violations,
)
from tripod.envs.swe.scoring import PASSING, parse_pytest_report, score_results
from tripod.envs.swe.sources import LARGE_PROJECTS, PROJECTS, ProjectSpec, sdist_tree
from tripod.envs.swe.task import SweTask, WorkspaceSpec, difficulty_of, load_tasks, save_tasks
from tripod.envs.swe.workspace import PRIVATE_DIR, LocalWorkspace, apply_patch

GENERATOR_VERSION = 1
"""Bumped whenever generation changes, so cached suites are rebuilt rather than reused."""

log = logging.getLogger(__name__)


class GenerationError(EnvError):
    """A project's tasks cannot be generated (its pristine suite does not run), or a suite
    came out empty."""


@dataclass(frozen=True)
class GeneratorConfig:
    """How many tasks of each size to make per project, and what counts as a good bug."""

    seed: int = 0
    singles: int = 8
    """Tasks with one injected bug per project."""
    pairs: int = 3
    """Tasks with two bugs per project."""
    triples: int = 3
    """Tasks with three bugs per project."""
    max_failing: int = 25
    """A mutant failing more tests than this is too blunt to make a good issue."""
    workers: int = max(os.cpu_count() or 1, 1)
    """Candidates evaluated in parallel (each in its own sandboxed workspace)."""
    limits: SandboxLimits = field(default_factory=lambda: SandboxLimits(wall_s=30, cpu_s=30))
    """Per suite run. The suites take 1-2 s; a mutant that makes a loop endless would
    otherwise hold a worker for the env's default two minutes."""
    skip_unreached: bool = False
    """Trace one pristine run and skip, unrun, the mutants of lines it never executes
    (none of semver's, 51 of pathspec's 220, 65 of tabulate's 664). Off for the default
    suite, whose task ids are pinned; on for the large one."""


@dataclass
class _Candidate:
    mutations: list[Mutation]
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    output: str


def _base_task(spec: ProjectSpec) -> SweTask:
    return SweTask(instance_id=f"{spec.name}__pristine", repo=f"pypi/{spec.name}",
                   base_commit=f"{spec.name}-{spec.version}", problem_statement="", patch="",
                   test_patch="", FAIL_TO_PASS=[], PASS_TO_PASS=[],
                   workspace=WorkspaceSpec(kind="local", source=spec.source,
                                           python_path=list(spec.python_path)))


def _texts(spec: ProjectSpec, mutations: list[Mutation]) -> dict[str, tuple[str, str]]:
    """{path: (pristine text, mutated text)} of the files the mutations touch."""
    root = sdist_tree(spec.name, spec.version)
    out = {}
    for path in sorted({m.path for m in mutations}):
        text = (root / path).read_text(encoding="utf-8")
        out[path] = (text, apply_mutations(text, [m for m in mutations if m.path == path]))
    return out


def bug_patch(spec: ProjectSpec, mutations: list[Mutation]) -> tuple[str, str]:
    """(setup patch that injects the bugs, gold patch that removes them)."""
    texts = _texts(spec, mutations)
    setup = "".join(make_patch(p, a, b) for p, (a, b) in texts.items())
    gold = "".join(make_patch(p, b, a) for p, (a, b) in texts.items())
    return setup, gold


def run_suite(spec: ProjectSpec, setup_patch: str, limits: SandboxLimits) -> RunResult:
    """The run of the project's suite with `setup_patch` applied."""
    suite = _SuiteRun(spec, setup_patch, limits)
    try:
        return suite.run_result()
    finally:
        suite.ws.close()


def executed_lines(spec: ProjectSpec, limits: SandboxLimits) -> dict[str, set[int]] | None:
    """{module path: line numbers} that one run of the pristine suite executes (imports,
    collection and tests), traced in the sandbox by the `_lines` plugin; None when the
    traced run fails (then no mutant is skipped for being unreached)."""
    traced = dataclasses.replace(limits, wall_s=limits.wall_s * 10, cpu_s=limits.cpu_s * 10)
    suite = _SuiteRun(spec, "", traced)
    try:
        private = suite.ws.root / PRIVATE_DIR
        shutil.copy(Path(__file__).with_name("_lines.py"), private / "site" / "_lines.py")
        run = suite.ws.run_tests([*spec.tests, "-p", "_lines"], traced)
        found = private / "tmp" / "lines.json"
        if run.status in ABNORMAL_STATUSES or not found.is_file():
            log.warning("%s: the traced run of the pristine suite failed (%s); no mutant "
                        "is skipped as unreached", spec.name, run.status or "no lines file")
            return None
        data = json.loads(found.read_text())
    finally:
        suite.ws.close()
    return {path: set(lines) for path, lines in data.items()}


def reached(mutation: Mutation, lines: dict[str, set[int]]) -> bool:
    """Whether the pristine suite runs the code `mutation` changes: its line, or for a
    dropped branch the branch's body (a condition that is tested but never true drops
    nothing any test sees). A mutant no test reaches cannot fail one, so it is not run."""
    hit = lines.get(mutation.path, set())
    first = mutation.first + 1 if mutation.last > mutation.first else mutation.first
    return any(line in hit for line in range(first, mutation.last + 1))


class _SuiteRun:
    """One workspace of a project: run the suite, optionally patch it and run again."""

    def __init__(self, spec: ProjectSpec, setup_patch: str, limits: SandboxLimits) -> None:
        task = _base_task(spec)
        task.workspace.setup_patch = setup_patch
        self.spec, self.limits = spec, limits
        self.ws = LocalWorkspace.create(task, scored=False)

    def run_result(self) -> RunResult:
        return self.ws.run_tests(list(self.spec.tests), self.limits)

    def run(self) -> str | None:
        """The output, or None if the sandbox had to stop the run."""
        result = self.run_result()
        return None if result.status in ABNORMAL_STATUSES else result.output


def _evaluate(spec: ProjectSpec, mutations: list[Mutation], reference: dict[str, str],
              config: GeneratorConfig) -> _Candidate | str:
    """Keep the mutant iff it breaks a few reference tests, leaves the rest passing, and
    its gold patch makes every reference test pass again (checked only for survivors of
    the first run, which most mutants are not). A rejected mutant gives the reason."""
    setup, gold = bug_patch(spec, mutations)
    suite = _SuiteRun(spec, setup, config.limits)
    try:
        before_run = suite.run_result()
        if before_run.status in ABNORMAL_STATUSES:
            return f"run stopped ({before_run.status})"
        before_out = before_run.output
        if detect_violations(before_out):
            return "sandbox violation"
        before = parse_pytest_report(before_out)
        passing = [t for t, s in reference.items() if s in PASSING]
        if len(before) < len(reference):
            return "tests no longer collected"
        f2p = [t for t in passing if before.get(t) not in PASSING]
        p2p = [t for t in passing if before.get(t) in PASSING]
        if not f2p:
            return "no test fails"
        if len(f2p) > config.max_failing:
            return f"more than {config.max_failing} tests fail"
        again = suite.run()  # flaky outcomes (timing, threads) would make noisy rewards
        if again is None or parse_pytest_report(again) != before:
            return "flaky"
        apply_patch(suite.ws, gold)
        after_out = suite.run()
    finally:
        suite.ws.close()
    if after_out is None or score_results(parse_pytest_report(after_out), f2p, p2p).binary != 1:
        return "the fix does not pass every test"
    return _Candidate(mutations, f2p, p2p, before_out)


_SECTION = re.compile(r"^_{3,} (.+?) _{3,}$")
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_NOISE_CALLS = {"list", "tuple", "set", "dict", "len", "sorted", "str", "repr", "iter",
                "next", "isinstance", "type", "raises", "assertEqual", "assertTrue",
                "assertFalse", "assertRaises", "assertIs", "assertIn", "equal", "eq"}


def _failure_sections(output: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in output.splitlines():
        match = _SECTION.match(line)
        if match:
            current = sections.setdefault(match.group(1), [])
        elif line.startswith("=") and current is not None:
            current = None
        elif current is not None:
            current.append(line)
    return sections


def _example(test_id: str, sections: dict[str, list[str]]) -> tuple[str, list[str]] | None:
    """(the failing line of the test, the error lines) of one failing test."""
    key = test_id.split("::", 1)[-1].replace("::", ".")
    lines = sections.get(key)
    if not lines:
        return None
    code = next((ln.strip() for ln in lines if ln.startswith("    ") and ln.strip()), "")
    # Object addresses differ from run to run; they are noise in an issue text.
    errors = [_ADDRESS.sub("", ln[1:].strip()) for ln in lines if ln.startswith("E ")][:6]
    return (code, errors) if code and errors else None


def _subject(code: str) -> str | None:
    """The library function a failing line exercises (the first call that is not a
    builtin or an assertion helper)."""
    try:
        tree = ast.parse(code.removeprefix("assert ").rstrip(":"), mode="exec")
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else (
                func.attr if isinstance(func, ast.Attribute) else None)
            if name and name not in _NOISE_CALLS and not name.startswith("_"):
                return name
    return None


def problem_statement(spec: ProjectSpec, cand: _Candidate, rng: random.Random) -> str:
    """An issue written from the failing behaviour: the code that fails and its error."""
    sections = _failure_sections(cand.output)
    examples = []
    for test_id in cand.fail_to_pass:
        found = _example(test_id, sections)
        if found and all(found[0] != e[1][0] for e in examples):
            examples.append((test_id, found))
        if len(examples) == 3:
            break
    subjects = [s for _, (code, _) in examples if (s := _subject(code))]
    title = (f"`{subjects[0]}` gives wrong results" if subjects
             else "Regression: results differ from the documented behaviour")
    opener = rng.choice([
        f"Something in {spec.name} {spec.version} is broken.",
        f"After installing {spec.name} {spec.version} some calls misbehave.",
        f"I am seeing wrong behaviour in {spec.name} {spec.version}.",
    ])
    parts = [title, "", opener, ""]
    for test_id, (code, errors) in examples:
        parts += ["This check from the project's tests:", "", f"    {code}", "",
                  "fails with:", "", *[f"    {e}" for e in errors], "",
                  f"(from `{test_id}`)", ""]
    if not examples:
        parts += ["These tests fail: " + ", ".join(cand.fail_to_pass[:5]), ""]
    total = len(cand.fail_to_pass)
    verb = "tests of the suite fail" if total > 1 else "test of the suite fails"
    parts.append(f"In total {total} {verb}; the rest pass. The tests are right; the "
                 "library code is not.")
    return "\n".join(parts)


def _split_of(instance_id: str) -> str:
    """A stable split per task: 70% train, 10% valid, 20% test."""
    bucket = int(hashlib.sha256(instance_id.encode()).hexdigest()[:8], 16) % 10
    return "train" if bucket < 7 else ("valid" if bucket == 7 else "test")


def make_task(spec: ProjectSpec, cand: _Candidate, rng: random.Random) -> SweTask:
    setup, gold = bug_patch(spec, cand.mutations)
    digest = hashlib.sha256(setup.encode()).hexdigest()[:10]
    instance_id = f"{spec.name}__mut-{digest}"
    task = _base_task(spec)
    task.instance_id = instance_id
    task.problem_statement = problem_statement(spec, cand, rng)
    task.patch = gold
    task.workspace.setup_patch = setup
    task.FAIL_TO_PASS = cand.fail_to_pass
    task.PASS_TO_PASS = cand.pass_to_pass
    task.difficulty = difficulty_of(gold)
    task.split = _split_of(instance_id)
    task.metadata = {"project": spec.name, "version": spec.version,
                     "operators": [m.operator for m in cand.mutations],
                     "bugs": [m.description for m in cand.mutations],
                     "lines": [[m.path, m.first] for m in cand.mutations],
                     "files": sorted({m.path for m in cand.mutations})}
    return task


def _groups(pool: list[_Candidate], size: int, count: int) -> list[list[Mutation]]:
    """Up to `count` disjoint groups of `size` kept mutants, taken out of `pool`; bugs in
    different files are preferred and lines never overlap."""
    groups = []
    for _ in range(count):
        group: list[_Candidate] = []
        for cand in sorted(pool, key=lambda c: any(c.mutations[0].path == g.mutations[0].path
                                                   for g in group)):
            if len(group) == size:
                break
            if not any(m.overlaps(g.mutations[0]) for g in group for m in cand.mutations):
                group.append(cand)
        if len(group) < size:
            break
        for g in group:
            pool.remove(g)
        groups.append([m for g in group for m in g.mutations])
    return groups


def _accept_singles(spec: ProjectSpec, mutations: list[Mutation], reference: dict[str, str],
                    config: GeneratorConfig, wanted: int, pool: ThreadPoolExecutor,
                    rejected: Counter[str]) -> list[_Candidate]:
    """Evaluate mutants in seeded order, a batch at a time, until `wanted` are kept;
    count the others in `rejected` by reason."""
    accepted: list[_Candidate] = []
    for start in range(0, len(mutations), config.workers * 2):
        batch = mutations[start:start + config.workers * 2]
        for result in pool.map(lambda m: _evaluate(spec, [m], reference, config), batch):
            if isinstance(result, str):
                rejected[result] += 1
            else:
                accepted.append(result)
        if len(accepted) >= wanted:
            break
    return accepted


def generate_project(spec: ProjectSpec, config: GeneratorConfig) -> list[SweTask]:
    """The tasks of one project (see the module docstring for the procedure). Fewer
    tasks than asked is logged as a warning with the reasons mutants were rejected."""
    rng = random.Random(f"{config.seed}:{spec.name}")
    reference = pristine_reference(spec, config.limits)
    root = sdist_tree(spec.name, spec.version)
    mutations = [m for path in spec.modules
                 for m in find_mutations(path, (root / path).read_text(encoding="utf-8"))]
    rng.shuffle(mutations)
    rejected: Counter[str] = Counter()
    lines = executed_lines(spec, config.limits) if config.skip_unreached else None
    if lines is not None:
        kept = [m for m in mutations if reached(m, lines)]
        rejected["never run by the tests"] = len(mutations) - len(kept)
        mutations = kept
    in_groups = 2 * config.pairs + 3 * config.triples
    # Spares for spare groups: bugs that interact (break too much together) are dropped.
    wanted = config.singles + in_groups + in_groups // 2
    with ThreadPoolExecutor(max_workers=config.workers) as pool:
        accepted = _accept_singles(spec, mutations, reference, config, wanted, pool,
                                   rejected)
        left = accepted[config.singles:]
        plan = [(2, g) for g in _groups(left, 2, config.pairs)]
        plan += [(3, g) for g in _groups(left, 3, config.triples)]
        plan += [(2, g) for g in _groups(left, 2, config.pairs)]  # spare groups
        plan += [(3, g) for g in _groups(left, 3, config.triples)]
        combined = list(pool.map(lambda g: _evaluate(spec, g[1], reference, config), plan))
    multi = []
    for size, count in ((2, config.pairs), (3, config.triples)):
        ok = [c for (n, _), c in zip(plan, combined) if n == size and not isinstance(c, str)]
        multi.extend(ok[:count])
    groups_rejected = Counter(c for c in combined if isinstance(c, str))
    cands = accepted[:config.singles] + multi
    tried = len(accepted) + sum(rejected.values())
    _report_shortfall(spec, config, len(accepted[:config.singles]), multi,
                      (len(mutations), tried, rejected), (len(plan), groups_rejected))
    return [make_task(spec, c, rng) for c in cands]


def pristine_reference(spec: ProjectSpec, limits: SandboxLimits) -> dict[str, str]:
    """{test id: outcome} of the pristine suite; `GenerationError` with the run's exit
    status and the end of its output when it does not run in the sandbox (no mutant could
    be judged against it)."""
    run = run_suite(spec, "", limits)
    reference = parse_pytest_report(run.output)
    if run.status in ABNORMAL_STATUSES or not any(s in PASSING for s in reference.values()):
        raise GenerationError(
            f"the pristine test suite of {spec.name} {spec.version} does not run in the "
            f"sandbox (`tripod doctor` checks the sandbox): {_describe(run, reference)}")
    return reference


def _describe(run: RunResult, outcomes: dict[str, str]) -> str:
    """A failed run for a message: its status, exit code, outcomes and output's end."""
    tail = "\n".join(run.output.strip().splitlines()[-15:])
    return (f"status {run.status}, exit code {run.exit_code}, {len(outcomes)} test "
            f"outcomes; its output ends with:\n{tail}")


_PROBE_FILES = {"probe/__init__.py": "def add(a, b):\n    return a + b\n",
                "tests/test_probe.py": "from probe import add\n\n\n"
                                       "def test_add():\n    assert add(2, 3) == 5\n"}


def pristine_run_problem(limits: SandboxLimits | None = None) -> str:
    """Why a project's pristine suite cannot run in the sandbox here ("" when it can).

    A one-test project is run the way the generator runs a pristine suite (a local
    workspace, the default pytest command, the trainer's interpreter), so this catches
    what the sandbox probe alone may not: the test command, PYTHONPATH, pytest's start."""
    with tempfile.TemporaryDirectory(prefix="tripod-pristine-") as tmp:
        for rel, text in _PROBE_FILES.items():
            (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / rel).write_text(text)
        task = SweTask(instance_id="probe__pristine", repo="", base_commit="",
                       problem_statement="", patch="", test_patch="", FAIL_TO_PASS=[],
                       PASS_TO_PASS=[], workspace=WorkspaceSpec(kind="local", source=tmp))
        ws = LocalWorkspace.create(task, scored=False)
        try:
            run = ws.run_tests(["tests"], limits or SandboxLimits(wall_s=60))
        finally:
            ws.close()
    outcomes = parse_pytest_report(run.output)
    if run.status not in ABNORMAL_STATUSES and outcomes == {
            "tests/test_probe.py::test_add": "PASSED"}:
        return ""
    return f"a one-test suite does not pass in the sandbox: {_describe(run, outcomes)}"


def _report_shortfall(spec: ProjectSpec, config: GeneratorConfig, singles: int,
                      multi: list[_Candidate], mutants: tuple[int, int, Counter[str]],
                      groups: tuple[int, Counter[str]]) -> None:
    """Say so when a project yields fewer tasks than asked, and why. `mutants` is (found,
    evaluated, rejected by reason); `groups` is (groups of bugs tried, rejected by
    reason)."""
    pairs = sum(len(c.mutations) == 2 for c in multi)
    triples = len(multi) - pairs
    got, asked = (singles, pairs, triples), (config.singles, config.pairs, config.triples)
    if got == asked:
        return
    (found, tried, rejected), (planned, groups_rejected) = mutants, groups
    log.warning("%s: %d of %d tasks (singles %d/%d, pairs %d/%d, triples %d/%d); "
                "mutations: %d found, %d tried, %d kept, rejected: %s; groups of bugs: "
                "%d tried, rejected: %s", spec.name, sum(got), sum(asked), singles,
                config.singles, pairs, config.pairs, triples, config.triples, found, tried,
                tried - sum(rejected.values()), _reasons(rejected), planned,
                _reasons(groups_rejected))


def _reasons(counts: Counter[str]) -> str:
    """"12 no test fails, 3 flaky" (most frequent first), or "none"."""
    return ", ".join(f"{n} {why}" for why, n in counts.most_common()) or "none"


def generate_suite(config: GeneratorConfig = GeneratorConfig(),
                   projects: tuple[str, ...] = tuple(PROJECTS)) -> list[SweTask]:
    """Tasks from every project, in a fixed order."""
    return [t for name in projects for t in generate_project(PROJECTS[name], config)]


def suite_path(seed: int = 0) -> Path:
    return cache_dir("swe", "suites") / f"generated-v{GENERATOR_VERSION}-seed{seed}.jsonl"


def prepare_suite(seed: int = 0, config: GeneratorConfig | None = None) -> list[SweTask]:
    """The default `swe/generated` suite: generated once per seed, then read from cache.

    A file lock keeps concurrent processes from generating the same suite twice. A suite
    with no tasks is never written; a cached one that is empty or unreadable is generated
    again."""
    config = config or GeneratorConfig(seed=seed)
    return _cached(suite_path(seed), f"the SWE suite (seed {seed})",
                   lambda: generate_suite(config))


def _cached(path: Path, what: str, make) -> list[SweTask]:  # noqa: ANN001 - a callable
    """The tasks cached at `path`, made by `make()` and written there first if missing,
    empty or unreadable; a file lock keeps concurrent processes from making them twice."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.with_suffix(".lock")
    with lock.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        cached, problem = _read_cached(path)
        if cached:
            return cached
        if problem:
            log.warning("cached %s at %s %s; generating it again", what, path, problem)
        log.info("generating %s into %s", what, path)
        tasks = make()
        if not tasks:
            raise GenerationError(f"generating {what} made no tasks; nothing cached")
        tmp = path.with_suffix(".tmp")
        save_tasks(tasks, tmp)
        tmp.replace(path)
    return load_tasks(path)


LARGE_TRAIN = GeneratorConfig(singles=120, pairs=5, triples=5, skip_unreached=True)
"""Tasks per training project of the large suite (fewer where a project has fewer bugs)."""
LARGE_HELD_OUT = GeneratorConfig(singles=30, pairs=3, triples=3, skip_unreached=True)
"""Tasks per held-out project of the large suite."""


def large_suite_dir(seed: int = 0) -> Path:
    return cache_dir("swe", "suites") / f"large-v{GENERATOR_VERSION}-seed{seed}"


def prepare_large_suite(seed: int = 0, projects: tuple[str, ...] | None = None,
                        train: GeneratorConfig = LARGE_TRAIN,
                        held_out: GeneratorConfig = LARGE_HELD_OUT) -> list[SweTask]:
    """The `swe/large` suite: tasks of every project of `LARGE_PROJECTS` (or of
    `projects`), each project generated once per seed and cached in its own file, so an
    interrupted generation keeps the projects it finished.

    Splits: a held-out project's tasks are all test tasks (``metadata["held_out"] ==
    "project"``); a training project's tasks are split by the functions their bugs are in
    (80% train, 10% valid, 10% test with ``held_out == "function"``; a task whose bugs are
    in functions of different splits is left out), so no function of a test task appears in
    a training task."""
    out = []
    for name in projects or tuple(LARGE_PROJECTS):
        spec = LARGE_PROJECTS[name]
        config = dataclasses.replace(held_out if spec.held_out else train, seed=seed)
        path = large_suite_dir(seed) / f"{name}.jsonl"
        out += _cached(path, f"the large SWE suite's {name} tasks (seed {seed})",
                       lambda spec=spec, config=config: _large_splits(
                           spec, generate_project(spec, config)))
    return out


def _large_splits(spec: ProjectSpec, tasks: list[SweTask]) -> list[SweTask]:
    """Set the large suite's splits (see `prepare_large_suite`) and record each task's
    functions in ``metadata["functions"]``; a task with bugs in functions of different
    splits is left out."""
    root = sdist_tree(spec.name, spec.version)
    kept = []
    where = {path: enclosing_functions((root / path).read_text(encoding="utf-8"))
             for path in spec.modules}
    for task in tasks:
        functions = sorted({f"{path}::{where[path].get(line, '<module>')}"
                            for path, line in task.metadata["lines"]})
        task.metadata["functions"] = functions
        if spec.held_out:
            task.split, task.metadata["held_out"] = "test", "project"
            kept.append(task)
            continue
        splits = {_function_split(f"{spec.name}:{f}") for f in functions}
        if len(splits) > 1:
            continue
        task.split = splits.pop()
        if task.split == "test":
            task.metadata["held_out"] = "function"
        kept.append(task)
    return kept


def _function_split(key: str) -> str:
    """80% train, 10% valid, 10% test, stable per function."""
    bucket = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % 10
    return "train" if bucket < 8 else "valid" if bucket == 8 else "test"


def _read_cached(path: Path) -> tuple[list[SweTask], str]:
    """(the tasks cached at `path`, "") or ([], why they cannot be used): "" too when
    there is no file yet. `load_tasks` refuses a file with no tasks."""
    if not path.exists():
        return [], ""
    try:
        return load_tasks(path), ""
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [], f"cannot be read ({exc})"


def cached_suite_state(seed: int = 0) -> str:
    """One line on the cached default suite of `seed`, for `tripod doctor`."""
    path = suite_path(seed)
    tasks, problem = _read_cached(path)
    if tasks:
        return f"{path}: {len(tasks)} tasks"
    if problem:
        return f"{path} {problem}; it is generated again on next use"
    return f"{path}: not generated yet (on first use of swe/generated)"
