"""Task files: SWE-Gym / SWE-bench rows load, tripod rows round-trip, env ids resolve."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tripod.envs import make
from tripod.envs.swe.task import (
    SweTask,
    difficulty_of,
    docker_image_for,
    load_tasks,
    save_tasks,
)

SWE_GYM_ROW = {
    "instance_id": "getmoto__moto-5752", "repo": "getmoto/moto", "base_commit": "b2300f1",
    "problem_statement": "SSM get_parameters_by_path ignores the Recursive flag",
    "patch": "diff --git a/moto/ssm/models.py b/moto/ssm/models.py\n--- a/moto/ssm/models.py\n"
             "+++ b/moto/ssm/models.py\n@@ -1,1 +1,1 @@\n-a\n+b\n",
    "test_patch": "diff --git a/tests/test_ssm.py b/tests/test_ssm.py\n--- a/tests/test_ssm.py\n"
                  "+++ b/tests/test_ssm.py\n@@ -1,1 +1,2 @@\n x\n+y\n",
    "FAIL_TO_PASS": json.dumps(["tests/test_ssm.py::test_recursive"]),
    "PASS_TO_PASS": ["tests/test_ssm.py::test_plain", "tests/other.py::test_o"],
    "hints_text": "", "created_at": "2022-12-10", "version": "4.0",
}


def test_swe_gym_row_gets_a_docker_workspace(tmp_path: Path) -> None:
    path = tmp_path / "gym.jsonl"
    path.write_text(json.dumps(SWE_GYM_ROW) + "\n")
    [task] = load_tasks(path)
    assert task.FAIL_TO_PASS == ["tests/test_ssm.py::test_recursive"]
    assert task.workspace.kind == "docker"
    assert task.workspace.image == docker_image_for("getmoto__moto-5752")
    assert task.workspace.image == "xingyaoww/sweb.eval.x86_64.getmoto_s_moto-5752"
    assert task.test_files() == ["tests/other.py", "tests/test_ssm.py"]


def test_round_trip(tmp_path: Path, calc_task: SweTask) -> None:
    path = save_tasks([calc_task], tmp_path / "tasks.jsonl")
    [loaded] = load_tasks(path)
    assert loaded == calc_task


def test_relative_sources_resolve_against_the_task_file(tmp_path: Path,
                                                        calc_task: SweTask) -> None:
    row = calc_task.to_dict()
    row["workspace"]["source"] = "calc-src"
    (tmp_path / "calc-src").mkdir()
    (tmp_path / "t.json").write_text(json.dumps([row]))
    [task] = load_tasks(tmp_path / "t.json")
    assert task.workspace.source == str((tmp_path / "calc-src").resolve())


def test_parquet_tasks(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet", reason="parquet support needs pyarrow")
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist([SWE_GYM_ROW]), tmp_path / "gym.parquet")
    [task] = load_tasks(tmp_path / "gym.parquet")
    assert task.instance_id == "getmoto__moto-5752"


def test_rows_without_required_fields_are_rejected(tmp_path: Path) -> None:
    (tmp_path / "bad.jsonl").write_text(json.dumps({"instance_id": "x"}) + "\n")
    with pytest.raises(ValueError, match="problem_statement"):
        load_tasks(tmp_path / "bad.jsonl")


def test_difficulty_tiers() -> None:
    from tripod.envs.swe.patches import make_patch

    one = make_patch("a.py", "x = 1\n", "x = 2\n")
    block = make_patch("a.py", "a\nb\nc\n", "a\nB\nC\nD\n")
    body = "".join(f"line{i}\n" for i in range(60))
    three = make_patch("a.py", body, body.replace("line5\n", "5\n").replace(
        "line30\n", "30\n").replace("line55\n", "55\n"))
    two_files = one + make_patch("b.py", "y\n", "z\n")
    assert [difficulty_of(p) for p in (one, block, three, two_files)] == [
        "easy", "medium", "hard", "hard"]


def test_file_env_id(tmp_path: Path, calc_task: SweTask) -> None:
    path = save_tasks([calc_task], tmp_path / "calc.jsonl")
    env = make(f"swe/file:{path}", split="valid", max_tool_calls=5)
    try:
        _, info = env.reset(7)
        assert info.game_id == "calc__clamp-1"
    finally:
        env.close()
    with pytest.raises(TypeError):
        make(f"swe/file:{path}", no_such_option=1)
