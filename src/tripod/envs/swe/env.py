"""`SweEnv`: a SWE task as a text episode of tool calls, scored by the task's tests.

Mapping to the Env protocol:
- objective: the problem statement plus the tool reference card; first observation
  (`observe.py`): the failing tests' short tracebacks and the function under test with line
  numbers, or the repository's file list (`SweEnvConfig.observation`).
- action: the model's reply holding one tool call (`tools.parse_tool_call`; prose around it
  is ignored); observation: the tool's output, capped at `max_observation_chars`.
- progress: a measure of the instance's tests (`SweEnvConfig.progress`: the share of all of
  them passing, the share of FAIL_TO_PASS tests passing cancelled by any broken
  PASS_TO_PASS test, or 1 only when all pass), as the trusted scorer finds them
  (`verify.py`: a fresh copy of the base with only the agent's source changes), plus the
  optional patch-similarity shaping. It starts at the base's value (by definition every
  FAIL_TO_PASS test fails there and every PASS_TO_PASS test passes), is measured again by
  every ``run_tests`` without arguments and at the end; the last step's progress is the
  final verified score. Rewards are the reward pillar's business (`rewards/per_turn.py`
  reads `won`, `lost`, `progress`); `Step.reward` is the change of progress, for
  information.
- won: every test passes at submit. lost: submitted with a test failing, or ended by the
  sandbox or by tampering (progress 0). `terminated` means won or lost.
- truncated: the tool-call budget ran out; the files are scored (SWE-bench scores whatever
  patch an agent leaves) and progress set, but the episode is neither won nor lost.
- info.extra: status ("running", "submitted", "budget_exhausted", "tampering", or the
  sandbox status that ended the episode: "timeout", "output_limit", "cpu_limit", "killed",
  "sandbox_violation", "sandbox_error"), the last scored results, `resolved` (the raw
  outcome of the last scoring: every target test passes, whatever the progress measure
  and shaping), `similarity` (when shaping is on) and the tool used.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tripod.envs.base import EnvError, Step, StepInfo
from tripod.envs.swe.expert import ExpertState, expert_action
from tripod.envs.swe.observe import FirstView, first_view
from tripod.envs.swe.patches import apply_patch_to_texts, patched_paths
from tripod.envs.swe.safefs import UnsafePathError
from tripod.envs.swe.sandbox import (
    ABNORMAL_STATUSES,
    STATUS_VIOLATION,
    RunResult,
    SandboxLimits,
    detect_violations,
)
from tripod.envs.swe.scoring import PROGRESS_MEASURES, TargetScore, parse_pytest_report
from tripod.envs.swe.task import SweTask
from tripod.envs.swe.tools import (
    BRIEF_HELP,
    TOOL_HELP,
    ToolCall,
    ToolCallError,
    checked_edit,
    edit_summary,
    parse_tool_call,
    tool_list,
    tool_search,
    tool_view,
)
from tripod.envs.swe.verify import VerifiedRun
from tripod.envs.swe.workspace import Workspace, make_workspace

OBSERVATIONS = ("traceback", "issue")
"""First observations of an episode (`SweEnvConfig.observation`)."""
OBJECTIVES = ("full", "brief")
"""Objectives of an episode (`SweEnvConfig.objective`)."""


@dataclass
class SweEnvConfig:
    """Options of SWE envs (pass as keyword overrides to `make`). Rewards are not set
    here: a recipe's ``reward`` section shapes them from `won`, `lost` and `progress`;
    `progress` and `similarity_weight` choose what `progress` measures."""

    observation: Literal["traceback", "issue"] = "traceback"
    """First observation. `traceback`: the failing target tests' short tracebacks (from
    the trusted scorer's run of the buggy tree with the hidden tests, trimmed to the frames
    inside the repository and the error lines) and the function under test with line
    numbers. `issue`: the repository's file list, so that the problem statement in the
    objective is all the agent knows of the bug (the paper's setting)."""
    objective: Literal["full", "brief"] = "full"
    """`full`: the problem statement, the whole tool card and the rules. `brief` (with the
    `traceback` observation only): the issue's title, the calls a one-bug fix needs (`view`,
    a line-range `edit`, `run_tests`, `submit`) and the budget: a fraction of the full objective's tokens,
    since the tracebacks already show what the statement's examples show and a
    small model's training cost grows with every prompt token. Every tool works either
    way."""
    progress: Literal["all_tests", "fail_to_pass", "binary"] = "all_tests"
    """What `info.progress` measures (`reward.kind: final_score` pays its last value,
    `dense` its gains). `all_tests`: the share of the instance's tests (FAIL_TO_PASS +
    PASS_TO_PASS) passing, the paper's "ratio verified" reward (186/187 at the base of a
    one-test toolz task). `fail_to_pass`: the share of the FAIL_TO_PASS tests passing, 0
    if any PASS_TO_PASS test fails (0 at the base). `binary`: 1 only when every test
    passes (resolved), else 0."""
    similarity_weight: float = 0.0
    """Patch-similarity shaping (SWE-RL): while no FAIL_TO_PASS test passes, progress adds
    this weight times difflib's ratio between the agent's diff of the source files and the
    gold patch (0 for no change; capped at 1 in all). 0 turns it off. Keep it small (e.g.
    0.1): it pays for looking like the fix, which tests cannot check. `info.extra` keeps
    the raw outcome (`resolved`) for group filtering."""
    hidden_checks: int = 64
    """Hidden checks per task (`verify.HiddenCheck`): calls of the package's functions on
    inputs no test shows, which count as extra FAIL_TO_PASS targets, so a change that
    special-cases the tests' inputs is not resolved. 0 turns them off."""
    max_tool_calls: int = 40
    """Tool-call budget per episode (40 was the best budget in the paper's SWE-Gym study)."""
    max_observation_chars: int = 6000
    """Longer tool outputs keep their head and tail around a cut marker."""
    end_on_violation: bool = True
    """End the episode when a test run shows a blocked network access or outside write."""
    workspace_dir: str = ""
    """Parent folder of episode copies (default: the system temporary folder)."""
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    """Sandbox limits of every test run."""

    def __post_init__(self) -> None:
        if isinstance(self.limits, dict):
            self.limits = SandboxLimits(**self.limits)
        if self.max_tool_calls < 1:
            raise ValueError(f"max_tool_calls must be >= 1, got {self.max_tool_calls}")
        if self.observation not in OBSERVATIONS:
            raise ValueError(f"observation must be one of {', '.join(OBSERVATIONS)}, got "
                             f"{self.observation!r}")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got "
                             f"{self.objective!r}")
        if self.objective == "brief" and self.observation != "traceback":
            raise ValueError("objective='brief' keeps only the issue's title, so it needs "
                             "observation='traceback' (the failing tests' tracebacks)")
        if self.progress not in PROGRESS_MEASURES:
            raise ValueError(f"progress must be one of {', '.join(PROGRESS_MEASURES)}, got "
                             f"{self.progress!r}")
        if not 0.0 <= self.similarity_weight <= 1.0:
            raise ValueError(f"similarity_weight must be in [0, 1], got "
                             f"{self.similarity_weight}")


@dataclass
class _Episode:
    task: SweTask
    ws: Workspace
    expert: ExpertState
    progress: float
    tool_calls: int = 0
    done: bool = False
    status: str = "running"
    results: dict[str, str] = field(default_factory=dict)
    passed: set[str] = field(default_factory=set)
    """Target tests that pass in the last scored run (`VerifiedRun.passes`)."""
    resolved: bool = False
    """Every target test passes in the last scored run (the raw outcome)."""
    similarity: float | None = None
    """The last scored change's similarity to the gold patch (when shaping is on)."""


@dataclass
class _Outcome:
    observation: str
    terminated: bool = False
    truncated: bool = False
    invalid: bool = False
    won: bool = False
    lost: bool = False


def _cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head, tail = int(limit * 0.4), int(limit * 0.6)
    cut = len(text) - head - tail
    return f"{text[:head]}\n... [{cut} characters cut] ...\n{text[-tail:]}"


def objective_text(task: SweTask, config: SweEnvConfig, label: str = "/workspace") -> str:
    """What the agent is asked to do (problem statement + tool card + rules; with the brief
    objective the statement's title and the short card)."""
    if config.objective == "brief":
        title = (task.problem_statement.strip().splitlines() or ["a failing test"])[0].rstrip(".")
        return (f"Fix the bug in {task.repo or task.instance_id} ({label}): {title}. The "
                f"tests are right; change the library code. One tool call per turn, "
                f"{config.max_tool_calls} in all:\n{BRIEF_HELP}")
    return (f"Fix the issue below in the repository {task.repo or task.instance_id}, "
            f"checked out at {label}.\n\nIssue:\n{task.problem_statement.strip()}\n\n"
            f"Answer each turn with exactly one tool call. Tools:\n{TOOL_HELP}\n\n"
            f"You have {config.max_tool_calls} tool calls. Change the library code, not the "
            "tests: only your changes to the package's existing source files are scored, "
            "with the original tests.")


class SweEnv:
    """Episodes over a fixed list of SWE tasks; `reset(game_index)` plays task
    `game_index % len(tasks of the split)`."""

    def __init__(self, env_id: str, split: str, tasks: list[SweTask],
                 config: SweEnvConfig | None = None) -> None:
        self.env_id = env_id
        self.split = split
        self.config = config or SweEnvConfig()
        self.tasks = _split_pool(tasks, split)
        if not self.tasks:
            raise EnvError(f"{env_id}: no tasks for split {split!r}")
        self._episode: _Episode | None = None

    # --- protocol -----------------------------------------------------------------------

    def reset(self, game_index: int) -> tuple[str, StepInfo]:
        self.close()
        task = self.tasks[game_index % len(self.tasks)]
        root = Path(self.config.workspace_dir or tempfile.gettempdir()) / "tripod-swe"
        try:
            ws = make_workspace(task, self.config.limits, root)
        except (OSError, ValueError) as exc:
            raise EnvError(f"cannot build the workspace of {task.instance_id}: {exc}") from exc
        try:
            hidden = _hidden_checks(ws, self.config)
            self._episode = _start_episode(task, ws, self.config.progress, hidden)
            view = first_view(task, ws, self.config.limits, self.config.observation)
        except (OSError, ValueError) as exc:  # a gold or test patch that does not apply
            ws.close()
            self._episode = None
            raise EnvError(f"task {task.instance_id} is inconsistent: {exc}") from exc
        except EnvError:
            ws.close()
            self._episode = None
            raise
        _show_to_expert(self._episode.expert, view)
        return _cap(view.text, self.config.max_observation_chars), \
            self._info(_Outcome(""), tool="", progress_before=self._episode.progress)

    def step(self, action: str) -> Step:
        """One tool call. Never raises for anything the action or the workspace holds:
        errors of the tools are invalid actions; a failure of the env itself (a scoring
        copy that cannot be made) is an `EnvError`."""
        ep = self._episode
        if ep is None:
            raise EnvError("step() called before reset()")
        before = ep.progress
        if ep.done:
            return Step("The episode is over; call reset().", 0.0, True, False,
                        self._info(_Outcome("", invalid=True), "", before))
        ep.tool_calls += 1
        tool, outcome = self._act(ep, action)
        if not (outcome.terminated or outcome.truncated) and \
                ep.tool_calls >= self.config.max_tool_calls:
            tool, outcome = self._guarded(ep, tool, lambda: self._finish(
                ep, outcome.observation, "budget_exhausted", invalid=outcome.invalid))
        observation = _cap(outcome.observation, self.config.max_observation_chars)
        info = self._info(outcome, tool, before)
        return Step(observation, ep.progress - before, outcome.terminated, outcome.truncated,
                    info)

    def close(self) -> None:
        if self._episode is not None:
            self._episode.ws.close()
            self._episode = None

    # --- tools --------------------------------------------------------------------------

    def _act(self, ep: _Episode, action: str) -> tuple[str, _Outcome]:
        try:
            call = parse_tool_call(action)
        except ToolCallError as exc:
            return "", _Outcome(exc.observation(), invalid=True)
        return self._guarded(ep, call.name, lambda: self._run_tool(ep, call))

    def _guarded(self, ep: _Episode, tool: str, fn: Any) -> tuple[str, _Outcome]:
        """Run a tool; what the workspace does to it becomes an invalid action."""
        try:
            return tool, fn()
        except ToolCallError as exc:
            return tool, _Outcome(exc.observation(), invalid=True)
        except (OSError, ValueError) as exc:  # a link, FIFO, folder or huge file planted
            return tool, _Outcome(f"Tool error: {exc}", invalid=True)
        except EnvError:
            raise
        except Exception as exc:  # noqa: BLE001 - never an unexplained crash out of step()
            raise EnvError(f"{self.env_id}: internal error in {tool or 'step'}: "
                           f"{type(exc).__name__}: {exc}") from exc

    def _run_tool(self, ep: _Episode, call: ToolCall) -> _Outcome:
        if call.name == "list":
            return _Outcome(tool_list(ep.ws, call))
        if call.name == "view":
            ep.expert.viewed.add(call.path)
            return _Outcome(tool_view(ep.ws, call))
        if call.name == "search":
            return _Outcome(tool_search(ep.ws, call))
        if call.name == "edit":
            return _Outcome(self._edit(ep, call))
        if call.name == "run_tests":
            return self._run_tests(ep, call)
        return self._finish(ep, "", status="submitted")

    def _edit(self, ep: _Episode, call: ToolCall) -> str:
        # Edits to test files are allowed but pointless: scoring uses the pristine tests.
        try:
            before = ep.ws.read_text(call.path)
        except UnsafePathError:
            if call.old != "":
                raise
            before = None  # creating the file over a link or FIFO replaces it
        after = checked_edit(before, call)
        if call.path not in ep.expert.targets and call.path not in ep.task.test_files():
            ep.expert.targets[call.path] = before  # the expert reverts stray edits
        try:
            ep.ws.write_text(call.path, after)
        except (OSError, ValueError) as exc:
            raise ToolCallError(f"cannot write {call.path}: {exc}", "edit") from exc
        ep.expert.tests_current = False
        if (before or "").count("\n") != after.count("\n"):  # its line numbers moved
            ep.expert.shown.pop(call.path, None)
        return edit_summary(call.path, before, after)

    def _run_tests(self, ep: _Episode, call: ToolCall) -> _Outcome:
        """Without arguments: the scored run (pristine tests on the agent's source changes,
        in a fresh copy), which sets progress. With test files or ids: a run in the agent's
        own workspace, as it is, for feedback only."""
        if not call.tests:
            ep.expert.tests_current = True
            verified = ep.ws.score(self.config.limits)
            abort = self._verified_abort(verified)
            if abort:
                return self._abort(ep, abort, verified)
            self._record(ep, verified)
            # The hidden checks' count is not shown here: within an episode it would be an
            # oracle to tune a fitted change against (widen a threshold until all pass).
            return _Outcome(_format_run(verified.run, verified.results, "the task's tests")
                            or verified.output)
        result = ep.ws.run_tests(list(call.tests), self.config.limits)
        abort = self._abort_reason(result)
        if abort:
            return self._abort(ep, abort, VerifiedRun(abort, output=result.output, run=result))
        return _Outcome(_format_run(result, parse_pytest_report(result.output),
                                    " ".join(call.tests)) +
                        "\n(Not scored: only run_tests without arguments measures progress.)")

    # --- scoring ------------------------------------------------------------------------

    def _abort_reason(self, result: RunResult | None) -> str | None:
        if result is None:
            return None
        if result.status in ABNORMAL_STATUSES:
            return result.status
        if self.config.end_on_violation and detect_violations(result.output):
            return STATUS_VIOLATION
        return None

    def _verified_abort(self, verified: VerifiedRun) -> str | None:
        if verified.status != "ok":
            return verified.status
        if self.config.end_on_violation and verified.violations:
            verified.reason = ", ".join(verified.violations)
            return STATUS_VIOLATION
        return self._abort_reason(verified.run)

    def _abort(self, ep: _Episode, status: str, verified: VerifiedRun) -> _Outcome:
        """A run the sandbox had to stop, that tried to escape, or whose results were
        tampered with ends the episode with progress 0."""
        ep.done, ep.status, ep.progress, ep.results = True, status, 0.0, {}
        run = verified.run
        why = verified.reason or (", ".join(detect_violations(run.output)) if run else "")
        what = _ABORT_TEXT.get(status, "the test run was stopped by the sandbox")
        text = f"Episode ended: {what} ({status}: {why or status})."
        if run is not None:
            text += "\n" + _format_run(run, {}, "the task's tests")
        return _Outcome(text, terminated=True, lost=True)

    def _record(self, ep: _Episode, verified: VerifiedRun) -> None:
        ep.results = {**verified.results, **verified.hidden}
        task = ep.task
        targets = task.FAIL_TO_PASS + sorted(verified.hidden)  # hidden checks are targets
        ep.passed = {t for t in targets + task.PASS_TO_PASS if verified.passes(t)}
        score = TargetScore(sum(t in ep.passed for t in targets), len(targets),
                            sum(t not in ep.passed for t in task.PASS_TO_PASS),
                            len(task.PASS_TO_PASS))
        ep.resolved = score.binary == 1.0
        ep.progress = score.progress(self.config.progress)
        if self.config.similarity_weight > 0:
            ep.similarity = verified.similarity()
            if score.f2p_passed == 0:  # shaping only until a target test passes
                ep.progress = min(1.0, ep.progress +
                                  self.config.similarity_weight * ep.similarity)

    def _finish(self, ep: _Episode, observation: str, status: str,
                invalid: bool = False) -> _Outcome:
        """Score the files on the pristine tests: the final verified score."""
        verified = ep.ws.score(self.config.limits)
        abort = self._verified_abort(verified)
        if abort:
            outcome = self._abort(ep, abort, verified)
            outcome.observation = (f"{observation}\n" if observation else "") + \
                outcome.observation
            outcome.invalid = invalid
            return outcome
        self._record(ep, verified)
        ep.done, ep.status = True, status
        task = ep.task
        f2p = sum(t in ep.passed for t in task.FAIL_TO_PASS)
        p2p = sum(t not in ep.passed for t in task.PASS_TO_PASS)
        won = status == "submitted" and ep.resolved
        text = (f"{observation}\n" if observation else "") + (
            f"{'Submitted' if status == 'submitted' else 'Tool-call budget exhausted'}. "
            f"Target tests fixed: {f2p}/{len(task.FAIL_TO_PASS)}; other tests broken: "
            f"{p2p}/{len(task.PASS_TO_PASS)}.{_hidden_line(verified)} "
            f"Score: {ep.progress:.3f} "
            f"({_MEASURE_TEXT[self.config.progress]}"
            f"{', with similarity shaping' if self.config.similarity_weight else ''}).")
        if status == "submitted":
            return _Outcome(text, terminated=True, won=won, lost=not won, invalid=invalid)
        return _Outcome(text, truncated=True, invalid=invalid)

    # --- info ---------------------------------------------------------------------------

    def _info(self, outcome: _Outcome, tool: str, progress_before: float) -> StepInfo:
        ep = self._episode
        assert ep is not None
        extra: dict[str, Any] = {"status": ep.status, "tool": tool,
                                 "tool_calls": ep.tool_calls, "test_results": dict(ep.results),
                                 "progress_before": progress_before,
                                 "resolved": ep.resolved}
        if ep.similarity is not None:
            extra["similarity"] = ep.similarity
        return StepInfo(objective=objective_text(ep.task, self.config, ep.ws.label),
                        won=outcome.won, lost=outcome.lost, score=ep.progress, max_score=1.0,
                        progress=ep.progress, expert_action=self._expert(ep),
                        invalid_action=outcome.invalid, game_id=ep.task.instance_id,
                        extra=extra)

    def _expert(self, ep: _Episode) -> str | None:
        """The expert's next call; None once the episode is over (or if the workspace
        holds something the expert cannot read past, which its own tools then report)."""
        if ep.done:
            return None
        try:
            return expert_action(ep.ws, ep.expert)
        except (OSError, ValueError):
            return None


_ABORT_TEXT = {"tampering": "the scored run shows tampering with the test runner or its "
                            "results"}
_MEASURE_TEXT = {"all_tests": "the share of the tests passing",
                 "fail_to_pass": "the share of the target tests fixed, 0 if another test broke",
                 "binary": "1 only when every test passes"}


def _split_pool(tasks: list[SweTask], split: str) -> list[SweTask]:
    """Tasks of `split` (the sft split draws on train tasks); unassigned tasks serve all."""
    wanted = "train" if split == "sft" else split
    return [t for t in tasks if not t.split or t.split == wanted]


def base_progress(task: SweTask, measure: str = "all_tests", hidden: int = 0) -> float:
    """Progress at the task's base: by the definition of the lists, every PASS_TO_PASS
    test passes there and every FAIL_TO_PASS test and each of the `hidden` checks fails
    (and nothing is changed, so no similarity either)."""
    return TargetScore(0, len(task.FAIL_TO_PASS) + hidden, 0,
                       len(task.PASS_TO_PASS)).progress(measure)


def _hidden_checks(ws: Workspace, config: SweEnvConfig) -> int:
    """Make the task's hidden checks (local workspaces; once per task in the process) and
    return how many there are."""
    verifier = getattr(ws, "verifier", None)
    if verifier is None:
        return 0
    verifier.max_checks = config.hidden_checks
    return len(verifier.hidden_checks(config.limits))


def _start_episode(task: SweTask, ws: Workspace, measure: str, hidden: int = 0) -> _Episode:
    """Record the expert's targets (the gold files) of a fresh workspace."""
    current = {p: ws.read_text(p) for p in patched_paths(task.patch)} if task.patch else {}
    targets = apply_patch_to_texts(current, task.patch) if task.patch else {}
    return _Episode(task=task, ws=ws, expert=ExpertState(targets=dict(targets)),
                    progress=base_progress(task, measure, hidden))


def _show_to_expert(state: ExpertState, view: FirstView) -> None:
    """The lines the first observation showed: the expert edits them without a view."""
    for shown in view.shown:
        state.shown.setdefault(shown.path, []).extend(shown.ranges)


def _hidden_line(verified: VerifiedRun) -> str:
    """How many hidden checks pass (never their inputs or outputs)."""
    if not verified.hidden:
        return ""
    passed = sum(verified.passes(name) for name in verified.hidden)
    return (f"\nHidden checks (the package's functions called on inputs not shown): "
            f"{passed}/{len(verified.hidden)} pass.")


def _format_run(result: RunResult | None, results: dict[str, str], target: str) -> str:
    """A test run for the agent: status and counts, then pytest's output without the
    per-test PASSED lines (they add length, not information)."""
    if result is None:
        return ""
    counts: dict[str, int] = {}
    for status in results.values():
        counts[status] = counts.get(status, 0) + 1
    summary = ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items())) or "no results"
    body = "\n".join(ln for ln in result.output.splitlines() if not ln.startswith("PASSED "))
    return (f"Ran tests ({target}): {result.status}, exit code {result.exit_code}, "
            f"{result.elapsed_s:.1f}s; {summary}.\n{body.strip()}")
