"""Per-test outcomes read from a pytest run's text output, and their counts.

Outcomes come from pytest's ``-rA`` short summary (one ``PASSED id`` / ``FAILED id - msg``
line per test), the same lines SWE-bench's log parser reads, so SWE-Gym test ids match.
A target test missing from the report (not collected, crashed run) counts as failing.

Text output can be forged by the code under test, so the text parser serves only runs that
are not scored against an agent: the agent's own feedback runs, the task generator (pristine
and mutated trees it made itself) and Docker workspaces. The outcomes of local workspaces'
scored runs come from `verify.py`; `TargetScore` counts them and turns the counts into the
episode's progress measure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SUMMARY = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS) (.+)$")
PASSING = ("PASSED", "XFAIL")
"""Statuses counted as passing in text reports of trusted trees (SWE-bench counts an
expected failure as a pass). Scored runs use `counts_as_passing` instead."""


def counts_as_passing(status: str, reference: str | None) -> bool:
    """A scored test passes if PASSED, or if XFAIL where the test's reference outcome (the
    gold tree's) is XFAIL too: otherwise library code could call pytest's public
    ``xfail()`` and turn any failure into a pass."""
    return status == "PASSED" or (status == "XFAIL" and reference == "XFAIL")


def parse_pytest_report(output: str) -> dict[str, str]:
    """{test id: status} from the ``-rA`` summary lines of a pytest run."""
    results: dict[str, str] = {}
    for line in output.splitlines():
        match = _SUMMARY.match(line.rstrip())
        if not match:
            continue
        status, rest = match.groups()
        test_id = rest.split(" - ", 1)[0].strip() if status != "PASSED" else rest.strip()
        # A test reported twice (e.g. passed, then an error in teardown) keeps the worst.
        is_test = "::" in test_id or test_id.endswith(".py")
        if is_test and results.get(test_id) not in ("FAILED", "ERROR"):
            results[test_id] = status
    return results


PROGRESS_MEASURES = ("all_tests", "fail_to_pass", "binary")
"""What an SWE episode's progress measures (`SweEnvConfig.progress`)."""


@dataclass(frozen=True)
class TargetScore:
    """How the instance's target tests fared in one run."""

    f2p_passed: int
    f2p_total: int
    p2p_failed: int
    """PASS_TO_PASS tests that no longer pass (broken by the patch)."""
    p2p_total: int

    @property
    def binary(self) -> float:
        """1 iff every FAIL_TO_PASS test passes and no PASS_TO_PASS test broke."""
        return float(self.f2p_passed == self.f2p_total and self.p2p_failed == 0)

    @property
    def all_tests(self) -> float:
        """Share of all the target tests (FAIL_TO_PASS + PASS_TO_PASS) passing: the
        paper's "ratio verified" reward."""
        total = self.f2p_total + self.p2p_total
        passed = self.f2p_passed + self.p2p_total - self.p2p_failed
        return passed / total if total else 0.0

    @property
    def fail_to_pass(self) -> float:
        """Share of the FAIL_TO_PASS tests passing, cancelled to 0 by any broken
        PASS_TO_PASS test: 0 at the base, so doing nothing earns nothing."""
        if self.p2p_failed:
            return 0.0
        return self.f2p_passed / self.f2p_total if self.f2p_total else 1.0

    def progress(self, measure: str) -> float:
        """The named measure: `all_tests`, `fail_to_pass` or `binary`."""
        if measure not in PROGRESS_MEASURES:
            raise ValueError(f"unknown progress measure {measure!r}; use one of "
                             f"{', '.join(PROGRESS_MEASURES)}")
        return float(getattr(self, measure))

    def ratio(self, broken_penalty: float = 1.0) -> float:
        """Share of FAIL_TO_PASS tests passing, minus `broken_penalty` times the share of
        PASS_TO_PASS tests broken, floored at 0. An empty or useless patch fixes no target
        and so earns 0 (counting the still-passing PASS_TO_PASS tests would pay it for
        doing nothing); a fix that breaks other tests earns less than a clean one."""
        fixed = self.f2p_passed / self.f2p_total if self.f2p_total else 1.0
        broken = self.p2p_failed / self.p2p_total if self.p2p_total else 0.0
        return max(0.0, fixed - broken_penalty * broken)


def score_results(results: dict[str, str], fail_to_pass: list[str],
                  pass_to_pass: list[str]) -> TargetScore:
    """Count target outcomes; absent tests count as failing."""
    f2p = sum(results.get(t) in PASSING for t in fail_to_pass)
    p2p_failed = sum(results.get(t) not in PASSING for t in pass_to_pass)
    return TargetScore(f2p_passed=f2p, f2p_total=len(fail_to_pass), p2p_failed=p2p_failed,
                     p2p_total=len(pass_to_pass))


def zero_score(fail_to_pass: list[str], pass_to_pass: list[str]) -> TargetScore:
    """The score of a run that produced no results (everything counts as failing)."""
    return TargetScore(0, len(fail_to_pass), len(pass_to_pass), len(pass_to_pass))
