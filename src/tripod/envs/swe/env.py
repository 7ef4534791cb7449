"""`SweEnv`: a SWE task as a text episode of tool calls with verified test rewards.

Mapping to the Env protocol:
- objective: the problem statement plus the tool reference card; first observation: the
  repository's file list.
- action: model text holding one tool call (`tools.parse_tool_call`); observation: the tool's
  output, capped at `max_observation_chars`.
- reward: `binary` (all FAIL_TO_PASS pass, no PASS_TO_PASS broken) or `ratio` (see
  `scoring.TargetScore.ratio`), paid at submit; with `dense`, each test run pays the change of
  the pass ratio and submit pays the rest, so an episode's rewards sum to its final score.
- progress: the current pass ratio (always measured on the pristine tests).
- won: binary success when the episode ends; truncated: the tool-call budget ran out (the
  files are scored then too, as SWE-bench scores whatever patch an agent leaves).
- info.extra: status ("running", "submitted", "budget_exhausted", or the sandbox status
  that ended the episode: "timeout", "output_limit", "cpu_limit", "killed",
  "sandbox_violation", "sandbox_error"), the last test results and the tool used.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tripod.envs.base import EnvError, Step, StepInfo
from tripod.envs.swe.expert import ExpertState, expert_action
from tripod.envs.swe.patches import apply_patch_to_texts, patched_paths
from tripod.envs.swe.sandbox import (
    ABNORMAL_STATUSES,
    STATUS_VIOLATION,
    RunResult,
    SandboxLimits,
    detect_violations,
)
from tripod.envs.swe.scoring import TargetScore, parse_pytest_report, score_results, zero_score
from tripod.envs.swe.task import SweTask
from tripod.envs.swe.tools import (
    TOOL_HELP,
    ToolCall,
    ToolCallError,
    edit_summary,
    edited_text,
    parse_tool_call,
    tool_list,
    tool_search,
    tool_view,
)
from tripod.envs.swe.workspace import Workspace, make_workspace


@dataclass
class SweEnvConfig:
    """Options of SWE envs (pass as keyword overrides to `make`)."""

    reward: str = "ratio"
    """"ratio" (share of target tests fixed, minus the share of others broken) or "binary"."""
    dense: bool = True
    """Pay the change of the pass ratio after every test run (rewards still sum to the
    final score)."""
    broken_penalty: float = 1.0
    """Weight of the share of broken PASS_TO_PASS tests in the ratio reward."""
    max_tool_calls: int = 40
    """Tool-call budget per episode (40 was the best budget in the paper's SWE-Gym study)."""
    max_observation_chars: int = 6000
    """Longer tool outputs keep their head and tail around a cut marker."""
    end_on_violation: bool = True
    """End the episode when a test run shows a blocked network access or outside write."""
    score_on_truncation: bool = True
    """Score the files when the budget runs out (otherwise the truncated episode gets 0)."""
    workspace_dir: str = ""
    """Parent folder of episode copies (default: the system temporary folder)."""
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    """Sandbox limits of every test run."""

    def __post_init__(self) -> None:
        if self.reward not in ("ratio", "binary"):
            raise ValueError(f"reward must be 'ratio' or 'binary', got {self.reward!r}")
        if isinstance(self.limits, dict):
            self.limits = SandboxLimits(**self.limits)


@dataclass
class _Episode:
    task: SweTask
    ws: Workspace
    pristine_tests: dict[str, str | None]
    expert: ExpertState
    tool_calls: int = 0
    progress: float = 0.0
    done: bool = False
    status: str = "running"
    score: TargetScore | None = None
    results: dict[str, str] = field(default_factory=dict)


@dataclass
class _Outcome:
    observation: str
    reward: float = 0.0
    terminated: bool = False
    invalid: bool = False
    lost: bool = False


def _cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head, tail = int(limit * 0.4), int(limit * 0.6)
    cut = len(text) - head - tail
    return f"{text[:head]}\n... [{cut} characters cut] ...\n{text[-tail:]}"


def objective_text(task: SweTask, config: SweEnvConfig, label: str = "/workspace") -> str:
    """What the agent is asked to do (problem statement + tool card + rules)."""
    return (f"Fix the issue below in the repository {task.repo or task.instance_id}, "
            f"checked out at {label}.\n\nIssue:\n{task.problem_statement.strip()}\n\n"
            f"Answer each turn with exactly one tool call. Tools:\n{TOOL_HELP}\n\n"
            f"You have {config.max_tool_calls} tool calls. Change the library code, not the "
            "tests: the original tests are restored before your work is scored.")


class SweEnv:
    """Episodes over a fixed list of SWE tasks; `reset(seed)` plays task `seed % len`."""

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

    def reset(self, seed: int) -> tuple[str, StepInfo]:
        self.close()
        task = self.tasks[seed % len(self.tasks)]
        root = Path(self.config.workspace_dir or tempfile.gettempdir()) / "tripod-swe"
        try:
            ws = make_workspace(task, self.config.limits, root)
        except (OSError, ValueError) as exc:
            raise EnvError(f"cannot build the workspace of {task.instance_id}: {exc}") from exc
        try:
            self._episode = _start_episode(task, ws)
        except ValueError as exc:  # a gold or test patch that does not apply
            ws.close()
            raise EnvError(f"task {task.instance_id} is inconsistent: {exc}") from exc
        listing = tool_list(ws, ToolCall("list"))
        return f"Repository files:\n{_cap(listing, self.config.max_observation_chars)}", \
            self._info(invalid=False, tool="")

    def step(self, action: str) -> Step:
        ep = self._episode
        if ep is None:
            raise EnvError("step() called before reset()")
        if ep.done:
            return Step("The episode is over; call reset().", 0.0, True, False,
                        self._info(invalid=True, tool=""))
        ep.tool_calls += 1
        tool = ""
        try:
            call = parse_tool_call(action)
            tool = call.name
            outcome = self._run_tool(ep, call)
        except ToolCallError as exc:
            outcome = _Outcome(exc.observation(), invalid=True)
        except (OSError, ValueError) as exc:  # e.g. a symlink out of the repository
            outcome = _Outcome(f"Tool error: {exc}", invalid=True)
        truncated = False
        if not outcome.terminated and ep.tool_calls >= self.config.max_tool_calls:
            truncated = True
            outcome = self._finish(ep, outcome, status="budget_exhausted")
        observation = _cap(outcome.observation, self.config.max_observation_chars)
        info = self._info(invalid=outcome.invalid, tool=tool, lost=outcome.lost)
        return Step(observation, outcome.reward, outcome.terminated, truncated, info)

    def close(self) -> None:
        if self._episode is not None:
            self._episode.ws.close()
            self._episode = None

    # --- tools --------------------------------------------------------------------------

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
        return self._finish(ep, _Outcome(""), status="submitted")

    def _edit(self, ep: _Episode, call: ToolCall) -> str:
        # Edits to the instance's test files are allowed but pointless: scoring restores them.
        before = ep.ws.read_text(call.path)
        after = edited_text(before, call)
        if call.path not in ep.expert.targets and call.path not in ep.pristine_tests:
            ep.expert.targets[call.path] = before  # the expert reverts stray edits
        try:
            ep.ws.write_text(call.path, after)
        except (OSError, ValueError) as exc:
            raise ToolCallError(f"cannot write {call.path}: {exc}", "edit") from exc
        ep.expert.tests_current = False
        return edit_summary(call.path, before, after)

    def _run_tests(self, ep: _Episode, call: ToolCall) -> _Outcome:
        tests = list(call.tests) or ep.task.test_files()
        result = ep.ws.run_tests(tests, self.config.limits)
        abort = self._abort_reason(result)
        if abort:
            return self._abort(ep, abort, result)
        ep.expert.tests_current = True
        reuse = not call.tests and self._tests_pristine(ep)
        score = self._score_run(ep, result) if reuse else self._score_pristine(ep)
        if isinstance(score, _Outcome):
            return score
        reward = self._progress_to(ep, score.ratio(self.config.broken_penalty))
        return _Outcome(_format_run(result, tests), reward=reward)

    # --- scoring ------------------------------------------------------------------------

    def _abort_reason(self, result: RunResult) -> str | None:
        if result.status in ABNORMAL_STATUSES:
            return result.status
        if self.config.end_on_violation and detect_violations(result.output):
            return STATUS_VIOLATION
        return None

    def _abort(self, ep: _Episode, status: str, result: RunResult) -> _Outcome:
        """A run the sandbox had to stop (or that tried to escape) ends the episode at 0."""
        ep.done, ep.status = True, status
        ep.score = zero_score(ep.task.FAIL_TO_PASS, ep.task.PASS_TO_PASS)
        reward = -ep.progress if self.config.dense else 0.0
        ep.progress = 0.0
        why = ", ".join(detect_violations(result.output)) or result.status
        text = (f"Episode ended: the test run was stopped by the sandbox ({status}: {why}).\n"
                + _format_run(result, []))
        return _Outcome(text, reward=reward, terminated=True, lost=True)

    def _tests_pristine(self, ep: _Episode) -> bool:
        return all(ep.ws.read_text(p) == text for p, text in ep.pristine_tests.items())

    def _score_run(self, ep: _Episode, result: RunResult) -> TargetScore:
        ep.results = parse_pytest_report(result.output)
        score = score_results(ep.results, ep.task.FAIL_TO_PASS, ep.task.PASS_TO_PASS)
        ep.score = score
        return score

    def _score_pristine(self, ep: _Episode, keep: bool = False) -> TargetScore | _Outcome:
        """Run the target tests with the instance's test files restored; put the agent's
        versions back afterwards unless `keep` (the final scoring)."""
        saved = {p: ep.ws.read_text(p) for p in ep.pristine_tests}
        for path, text in ep.pristine_tests.items():
            ep.ws.write_text(path, text)
        try:
            result = ep.ws.run_tests(ep.task.test_files(), self.config.limits)
        finally:
            if not keep:
                for path, text in saved.items():
                    ep.ws.write_text(path, text)
        abort = self._abort_reason(result)
        if abort:
            return self._abort(ep, abort, result)
        return self._score_run(ep, result)

    def _progress_to(self, ep: _Episode, ratio: float) -> float:
        reward = ratio - ep.progress if self.config.dense else 0.0
        ep.progress = ratio
        return reward

    def _finish(self, ep: _Episode, outcome: _Outcome, status: str) -> _Outcome:
        """Score the files on the pristine tests; pay the final reward."""
        if status == "budget_exhausted" and not self.config.score_on_truncation:
            ep.done, ep.status = True, status
            ep.score = zero_score(ep.task.FAIL_TO_PASS, ep.task.PASS_TO_PASS)
            reward = outcome.reward - (ep.progress if self.config.dense else 0.0)
            ep.progress = 0.0
            return _Outcome(outcome.observation + "\nTool-call budget exhausted.", reward)
        score = self._score_pristine(ep, keep=True)
        if isinstance(score, _Outcome):
            score.reward += outcome.reward
            return score
        ep.done, ep.status = True, status
        final = score.binary if self.config.reward == "binary" else score.ratio(
            self.config.broken_penalty)
        reward = outcome.reward + (final - ep.progress if self.config.dense else final)
        ep.progress = score.ratio(self.config.broken_penalty)
        text = (f"{outcome.observation}\n" if outcome.observation else "") + (
            f"{'Submitted' if status == 'submitted' else 'Tool-call budget exhausted'}. "
            f"Target tests fixed: {score.f2p_passed}/{score.f2p_total}; other tests broken: "
            f"{score.p2p_failed}/{score.p2p_total}. Score: {final:.3f}")
        return _Outcome(text, reward=reward, terminated=status == "submitted")

    # --- info ---------------------------------------------------------------------------

    def _info(self, invalid: bool, tool: str, lost: bool = False) -> StepInfo:
        ep = self._episode
        assert ep is not None
        won = ep.done and ep.score is not None and ep.score.binary == 1.0 and not lost
        expert = None if ep.done else expert_action(ep.ws, ep.expert)
        final = (ep.score.binary if self.config.reward == "binary" else ep.progress) \
            if ep.done and ep.score is not None else ep.progress
        extra: dict[str, Any] = {"status": ep.status, "tool": tool,
                                 "tool_calls": ep.tool_calls, "test_results": dict(ep.results)}
        if ep.score is not None:
            extra["target_score"] = ep.score
        return StepInfo(objective=objective_text(ep.task, self.config, ep.ws.label), won=won,
                        lost=lost, score=final, max_score=1.0, progress=ep.progress,
                        expert_action=expert, invalid_action=invalid,
                        game_id=ep.task.instance_id, extra=extra)


def _split_pool(tasks: list[SweTask], split: str) -> list[SweTask]:
    """Tasks of `split` (the sft split draws on train tasks); unassigned tasks serve all."""
    wanted = "train" if split == "sft" else split
    return [t for t in tasks if not t.split or t.split == wanted]


def _start_episode(task: SweTask, ws: Workspace) -> _Episode:
    """Record the pristine test files and the expert's targets of a fresh workspace."""
    test_files = task.test_files()
    current = {p: ws.read_text(p) for p in set(test_files) | set(patched_paths(task.patch))}
    pristine = {p: current[p] for p in test_files}
    if task.test_patch:
        pristine.update(apply_patch_to_texts(current, task.test_patch))
    targets = apply_patch_to_texts(current, task.patch) if task.patch else {}
    return _Episode(task=task, ws=ws, pristine_tests=pristine,
                    expert=ExpertState(targets=dict(targets)))


def _format_run(result: RunResult, tests: list[str]) -> str:
    """A test run for the agent: status and counts, then pytest's output without the
    per-test PASSED lines (they add length, not information)."""
    counts: dict[str, int] = {}
    for status in parse_pytest_report(result.output).values():
        counts[status] = counts.get(status, 0) + 1
    summary = ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items())) or "no results"
    body = "\n".join(ln for ln in result.output.splitlines() if not ln.startswith("PASSED "))
    target = " ".join(tests) if len(tests) <= 5 else f"{len(tests)} test files"
    return (f"Ran tests ({target}): {result.status}, exit code {result.exit_code}, "
            f"{result.elapsed_s:.1f}s; {summary}.\n{body.strip()}")
