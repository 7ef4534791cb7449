"""`tripod results`: the results pages and the README's block come from the records alone."""

from __future__ import annotations

import argparse
import json

import pytest

from tripod.core import provenance
from tripod.report.results import BEGIN, END, REPO, build, cmd_results

HEADER = "study,arm,seed,stage,eval_env,split,successes,episodes\n"


def _result(root, name, rows, record):
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "results.csv").write_text(HEADER + "".join(f"{name},{r}\n" for r in rows))
    if record is not None:
        provenance.write(folder, record)


def _args(root, readme, check=False):
    return argparse.Namespace(root=str(root), readme=str(readme), no_readme=False, check=check)


def test_pages_pool_seeds_and_name_the_provenance(tmp_path):
    record = provenance.Provenance(commit="abc1234", command="tripod study x.yaml")
    _result(tmp_path / "results", "toy", ["rl,0,final,textworld/w2-o3-q4,test,3,4",
                                          "rl,1,final,textworld/w2-o3-q4,test,2,4"], record)
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{BEGIN}\nretyped 99%\n{END}\nrest\n")
    files = build(tmp_path / "results", readme)
    index, text = files[tmp_path / "results" / "index.md"], files[readme]
    assert "| rl | final | w2-o3-q4 | 2 | 5/8 = 62.5% (31%-86%) |" in index
    assert "abc1234" in index and "`tripod study x.yaml`" in index
    assert "retyped" not in text and text.startswith("intro\n") and text.endswith(f"{END}\nrest\n")
    assert "5/8 = 62.5%" in text and "at abc1234 (recorded)" in text


def test_check_fails_until_written_and_a_result_needs_a_record(tmp_path):
    root, readme = tmp_path / "results", tmp_path / "README.md"
    readme.write_text(f"{BEGIN}\n{END}\n")
    _result(root, "toy", ["a,0,final,e,test,1,2"], provenance.Provenance(commit="x"))
    assert cmd_results(_args(root, readme, check=True)) == 1
    assert cmd_results(_args(root, readme)) == 0
    assert cmd_results(_args(root, readme, check=True)) == 0
    _result(root, "bare", ["a,0,final,e,test,1,2"], None)
    with pytest.raises(FileNotFoundError, match="provenance.json"):
        build(root, readme)


def test_the_repository_pages_are_what_the_records_give():
    """docs/results/index.md and README.md's results block are `tripod results`'s output:
    a number edited by hand in either fails here."""
    root = REPO / "docs" / "results"
    for path, text in build(root, REPO / "README.md").items():
        assert path.read_text() == text, f"{path} is not what `tripod results` writes"
    for folder in root.glob("*/results.csv"):
        data = json.loads((folder.parent / provenance.PROVENANCE_FILE).read_text())
        assert data["commit"] and data["command"]
