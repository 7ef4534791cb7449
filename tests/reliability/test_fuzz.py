"""Fuzzing with hypothesis: every input gets a defined result or the documented error type,
never a crash of another type or a hang (each test has a time limit).

Targets: the text-game action parsers (`envs/base.py`), the SWE tool-call parser
(`envs/swe/tools.py`), dotted overrides and recipe files (`core/config.py`), env ids
(`envs/registry.py`, and `make` for the toy family) and trajectory files
(`report/records.py`). Cases are derandomized (a fixed seed; hypothesis still varies a few
inputs between runs); each test prints how many cases it ran (`pytest -s`), the figures in
docs/reliability.md.

The first runs found four gaps (a YAML error or undecodable recipe escaping as a raw
`yaml.YAMLError` / `UnicodeDecodeError`, an `OverflowError` / `RecursionError` escaping the
trajectory reader, toy ids past the alphabet); they are fixed, and the cases that found them
stay at the end as regression tests.
"""

from __future__ import annotations

import gzip
import json
import string
from collections import Counter
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tripod.core.config import ConfigError, TrainConfig, load_config
from tripod.core.types import EpisodeEnd, EpisodeJob, Trajectory, Turn, TurnStatus
from tripod.envs.base import clean_action, last_line_action, whole_reply_action
from tripod.envs.registry import EnvFamily, UnknownEnvError, check_options, family_of, make
from tripod.envs.swe.tools import TOOLS, ToolCall, ToolCallError, parse_tool_call
from tripod.report.records import RecordError, iter_trajectories, write_trajectories

CASES = 1000
"""Examples per fuzz test."""

FUZZ = settings(max_examples=CASES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                       HealthCheck.function_scoped_fixture])

pytestmark = pytest.mark.timeout(300)  # a hang fails the test instead of stalling the suite

ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=400)
"""Any code point, lone surrogates (invalid UTF-8 read with surrogateescape) included."""

ran: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def _report_counts():
    yield
    print(f"\nfuzz cases run: {dict(ran)}")


# -- action parsing -------------------------------------------------------------------------
@FUZZ
@given(ANY_TEXT)
def test_text_action_parsers(reply):
    ran["action parsers"] += 1
    action = last_line_action(reply)
    assert isinstance(action, str) and "\n" not in action and action == action.strip()
    assert whole_reply_action(reply) == reply.strip()
    cleaned = clean_action(reply)
    assert len(cleaned) <= 200 and cleaned.isprintable()
    cleaned.encode("utf-8")  # no lone surrogates reach a game


# -- SWE tool calls -------------------------------------------------------------------------
_WORD = st.text(string.ascii_letters + string.digits + "_./-:'\" *", max_size=20)
_LINE = st.builds(lambda tool, args: f"{tool} {' '.join(args)}",
                  st.sampled_from([*TOOLS, "cat", "ls", "grep", "pytest", "finish", "rm"]),
                  st.lists(_WORD, max_size=4))
_BLOCK = st.lists(st.sampled_from(["<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE",
                                   "<<<<<<< LINES", ">>>>>>> LINES", "```", "```python",
                                   "<think>", "</think>", "Action:", "$ "]) | _WORD | _LINE,
                  max_size=8).map("\n".join)


@FUZZ
@given(st.one_of(ANY_TEXT, _LINE, _BLOCK))
def test_swe_tool_call_parser(text):
    ran["SWE tool calls"] += 1
    try:
        call = parse_tool_call(text)
    except ToolCallError as exc:
        assert str(exc) and isinstance(exc.observation(), str)
        return
    assert isinstance(call, ToolCall) and call.name in TOOLS


# -- recipes and dotted overrides ------------------------------------------------------------
def _dotted_keys(model: type, prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        sub = field.annotation
        if isinstance(sub, type) and hasattr(sub, "model_fields"):
            keys += _dotted_keys(sub, f"{prefix}{name}.")
        else:
            keys.append(f"{prefix}{name}")
    return keys


KEYS = _dotted_keys(TrainConfig)
_VALUE = st.one_of(st.integers(-10**6, 10**6), st.floats(allow_nan=True), st.booleans(),
                   st.none(), st.text(max_size=12), st.lists(st.integers(), max_size=3))
_OVERRIDE = st.one_of(
    st.builds(lambda k, v: f"{k}={yaml.safe_dump(v).strip()}", st.sampled_from(KEYS), _VALUE),
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(KEYS) | _WORD, ANY_TEXT),
    ANY_TEXT)


def _config_or_error(what: str, load) -> None:
    try:
        assert isinstance(load(), TrainConfig)
    except ConfigError as exc:
        assert str(exc), what


@FUZZ
@given(st.lists(_OVERRIDE, max_size=4))
def test_dotted_overrides(overrides):
    ran["dotted overrides"] += 1
    _config_or_error("overrides", lambda: load_config(overrides=overrides))


_SECTION = st.dictionaries(st.sampled_from([k.split(".")[-1] for k in KEYS]) | _WORD, _VALUE,
                           max_size=4)
_RECIPE = st.dictionaries(st.sampled_from(sorted(TrainConfig.model_fields)) | _WORD,
                          _SECTION | _VALUE, max_size=5)


@FUZZ
@given(st.one_of(_RECIPE.map(lambda d: yaml.safe_dump(d).encode()),
                 ANY_TEXT.map(lambda t: t.encode("utf-8", "surrogatepass")),
                 st.binary(max_size=200)))
def test_recipe_files(tmp_path_factory, data):
    ran["recipe files"] += 1
    path = tmp_path_factory.getbasetemp() / "fuzz-recipe.yaml"
    path.write_bytes(data)
    _config_or_error("recipe", lambda: load_config(path))


# -- env ids -----------------------------------------------------------------------------------
_FAMILY_LIKE = st.builds(lambda head, n, tail: f"{head}{n}{tail}",
                         st.sampled_from(["toy/letters-", "textworld/w", "alfworld/", "swe/",
                                          "swe/file:", "swe/generated-", "tw-", ""]),
                         st.integers(-5, 10**9), ANY_TEXT.map(lambda t: t[:10]))


@FUZZ
@given(st.one_of(ANY_TEXT, _FAMILY_LIKE), st.dictionaries(_WORD, _VALUE, max_size=2))
def test_env_ids(env_id, options):
    ran["env ids"] += 1
    try:
        family = family_of(env_id)
    except UnknownEnvError as exc:
        assert "Valid ids" in exc.args[0]
        return
    assert isinstance(family, EnvFamily)
    try:
        check_options(env_id, options)
    except ValueError as exc:
        assert "unknown key" in str(exc)


@FUZZ
@given(st.integers(1, 26), st.sampled_from(["train", "sft", "valid", "test", "dev"]),
       st.integers(-3, 10**8), st.lists(ANY_TEXT, max_size=3))
def test_toy_env_ids_build_and_play(turns, split, game, actions):
    """`make` on the one family cheap enough to build per case: an env or a ValueError."""
    ran["toy env make"] += 1
    try:
        env = make(f"toy/letters-{turns}", split=split)
        env.reset(game)
    except ValueError:
        return
    for action in actions:
        step = env.step(action)
        assert isinstance(step.observation, str)


# -- trajectory files ----------------------------------------------------------------------
class _Pieces:
    """A tokenizer stand-in: token id k is the text ``<k>``."""

    def batch_decode(self, sequences, **kwargs):
        return [f"<{s[0]}>" for s in sequences]


def _valid_lines(tmp: Path) -> list[str]:
    job = EpisodeJob("toy/letters-2", "train", 0, 0, 0, 1)
    turn = Turn([1, 2], [3, 4], [-0.5, -0.25], "apple", "Correct.", 1.0, TurnStatus.OK)
    traj = Trajectory(job, "objective", "first", [turn], won=True, end=EpisodeEnd.WON)
    path = write_trajectories(tmp / "valid.jsonl", [traj, traj], _Pieces(), 1)
    return path.read_text().splitlines()


def _mutate(node, path: list[int], value):
    """`node` with the element reached by following `path` (indices into keys / items)
    replaced by `value`."""
    if not path or not isinstance(node, dict | list) or not node:
        return value
    if isinstance(node, dict):
        key = sorted(node)[path[0] % len(node)]
        return {**node, key: _mutate(node[key], path[1:], value)}
    i = path[0] % len(node)
    return [*node[:i], _mutate(node[i], path[1:], value), *node[i + 1:]]


_JSON = st.recursive(st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=8),
                     lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c,
                                                                         max_size=3),
                     max_leaves=8)


def _read(path: Path) -> None:
    try:
        records = list(iter_trajectories(path))
    except RecordError as exc:
        assert str(path) in str(exc)
        return
    assert all(isinstance(r.turns, list) for r in records)


@FUZZ
@given(st.sampled_from(["mutate", "truncate", "bytes"]), st.lists(st.integers(0, 50), max_size=6),
       _JSON, st.booleans(), st.data())
def test_trajectory_files(tmp_path_factory, how, where, value, gz, data):
    ran["trajectory files"] += 1
    tmp = tmp_path_factory.getbasetemp()
    lines = _valid_lines(tmp)
    if how == "mutate":
        k = where[0] % len(lines) if where else 1
        lines[k] = json.dumps(_mutate(json.loads(lines[k]), where[1:], value))
        blob = "\n".join(lines).encode()
    elif how == "truncate":
        blob = "\n".join(lines).encode()
        blob = blob[:data.draw(st.integers(0, len(blob)))]
    else:
        blob = data.draw(st.binary(max_size=400))
    path = tmp / ("fuzz.jsonl.gz" if gz else "fuzz.jsonl")
    path.write_bytes(gzip.compress(blob) if gz and how != "bytes" else blob)
    _read(path)


# -- gaps the fuzzing found (fixed; each case stays as a regression test) -------------------
@pytest.mark.parametrize("override", ["algo.lr=[", "run.name=\x07"])
def test_gap_override_that_is_not_yaml(override):
    with pytest.raises(ConfigError):
        load_config(overrides=[override])


@pytest.mark.parametrize("content", [b"run: [", b"\xff\xfe"])
def test_gap_recipe_that_is_not_yaml(tmp_path, content):
    (tmp_path / "r.yaml").write_bytes(content)
    with pytest.raises(ConfigError):
        load_config(tmp_path / "r.yaml")


@pytest.mark.parametrize("line", ['{"format": "tripod-trajectories", "version": 1e999}',
                                  "[" * 100_000 + "]" * 100_000],
                         ids=["version 1e999", "nested 100000 deep"])
def test_gap_trajectory_numbers_and_nesting(tmp_path, line):
    (tmp_path / "t.jsonl").write_text(line + "\n")
    with pytest.raises(RecordError):
        list(iter_trajectories(tmp_path / "t.jsonl"))


@pytest.mark.parametrize("turns", [0, 27])
def test_gap_toy_id_outside_the_alphabet(turns):
    with pytest.raises(ValueError):
        env = make(f"toy/letters-{turns}")
        env.reset(0)
        for _ in range(turns):
            env.step("apple")
