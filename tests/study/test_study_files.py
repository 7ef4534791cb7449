"""Every study file under recipes/studies/ validates and expands (real size and smoke size)
into recipes that validate, with env ids and options the registry knows; every `tripod study`
and `tripod budget` command shown in the docs parses and names a valid study."""

from __future__ import annotations

import re
import shlex

import pytest
import yaml

from tripod.cli import build_parser, main
from tripod.studies.study import STUDIES, check_study, load_study, resolve_runs

FILES = sorted(STUDIES.glob("*.yaml"))
ROOT = STUDIES.parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_there_is_a_study_file_per_question():
    names = {load_study(p)[0].name for p in FILES}
    assert {"complexity", "generalisation", "exploration-budget", "reward-density",
            "algorithms", "sft-rl-budget-240", "swe-reward", "recovery-demos"} <= names


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
@pytest.mark.parametrize("smoke", [False, True], ids=["real", "smoke"])
def test_study_file_expands_into_valid_runs(tmp_path, path, smoke):
    study, spath = load_study(path)
    runs = resolve_runs(study, spath, tmp_path, smoke=smoke)
    check_study(study, runs)
    seeds = {r.seed for r in runs}
    if not smoke:
        assert len(seeds) >= 2, "a real study needs at least 2 seeds"
    else:
        assert all(r.cfg.model.name == "tiny" or r.arm.name != "sft" and study.shared_sft
                   for r in runs)
    for a, b in study.compare:   # compared arms are evaluated on the same games
        ca = next(r.cfg for r in runs if r.arm.name == a)
        cb = next(r.cfg for r in runs if r.arm.name == b)
        assert (ca.eval.split, ca.eval.games) == (cb.eval.split, cb.eval.games)


def test_dry_run_from_the_command_line(capsys):
    assert main(["study", "05-algorithms", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "study algorithms: 18 runs (0 finished)" in out
    assert out.count("would run") == 18


def test_the_budget_study_is_what_tripod_budget_writes(tmp_path):
    """recipes/studies/06-sft-rl-budget.yaml is the output of its header's command."""
    shipped = STUDIES / "06-sft-rl-budget.yaml"
    command = re.search(r"`(tripod budget [^`]+)`", shipped.read_text()).group(1)
    out = tmp_path / "06-sft-rl-budget.yaml"
    assert main([*shlex.split(command)[1:], "--out", str(out)]) == 0
    assert yaml.safe_load(out.read_text()) == yaml.safe_load(shipped.read_text())


def doc_commands() -> list[str]:
    found = []
    for path in DOCS:
        for line in path.read_text().splitlines():
            found += re.findall(r"(tripod (?:study|budget) [^`|#\n]+)", line)
    return [c.strip() for c in found]


@pytest.mark.parametrize("command", doc_commands())
def test_study_commands_in_the_docs_are_valid(command, tmp_path):
    args = build_parser().parse_args(shlex.split(command)[1:])
    if args.command == "study":
        path = ROOT / args.study if (ROOT / args.study).is_file() else args.study
        study, spath = load_study(path)
        check_study(study, resolve_runs(study, spath, tmp_path, smoke=args.smoke))


def test_docs_show_study_commands():
    assert any(c.startswith("tripod study recipes/studies/") for c in doc_commands())
    assert any(c.startswith("tripod budget ") for c in doc_commands())
