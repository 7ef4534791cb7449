"""ALFWorld's contact with textworld internals, its options and its import: each in one place.

- textworld's private PddlEnv attributes are read in `textworld_adapter.py` only, and only
  for the pinned textworld (a different version fails loudly, naming what to check);
- no class in the family inherits from a textworld or alfworld class (composition);
- importing the family sets no environment variable and imports nothing from the wheel;
- every factory option is an explicit keyword argument (the registry validates names).
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("TRIPOD_CACHE", "/tmp/tripod-test-cache")
# The adapter imports the alfworld wheel here, whose import creates ALFWORLD_DATA's folder.
os.environ.setdefault("ALFWORLD_DATA", os.path.join(os.environ["TRIPOD_CACHE"], "alfworld", "data"))
pytest.importorskip("alfworld")

import tripod  # noqa: E402
from tripod.envs.alfworld import env as alf_env  # noqa: E402
from tripod.envs.alfworld import game as alf_game  # noqa: E402
from tripod.envs.alfworld import textworld_adapter as adapter  # noqa: E402

PACKAGE = Path(tripod.__file__).parent / "envs" / "alfworld"
PYPROJECT = Path(tripod.__file__).parents[2] / "pyproject.toml"
PRIVATE = ("_pddl_state", "_entity_infos", "_logic", "_gather_infos", '"_facts"', "_moves",
           "_last_action")


def test_installed_textworld_is_the_version_the_adapter_was_written_for():
    import textworld

    pinned = re.search(r'"textworld==([^"]+)"', PYPROJECT.read_text())
    assert pinned, "pyproject.toml no longer pins textworld"
    assert pinned.group(1) == adapter.PINNED_TEXTWORLD, (
        f"pyproject.toml pins textworld {pinned.group(1)} but the ALFWorld adapter was written "
        f"for {adapter.PINNED_TEXTWORLD}: check src/tripod/envs/alfworld/textworld_adapter.py "
        "against the new version, then update PINNED_TEXTWORLD")
    assert textworld.__version__ == adapter.PINNED_TEXTWORLD, (
        f"textworld {textworld.__version__} is installed, the ALFWorld adapter reads private "
        f"parts of textworld {adapter.PINNED_TEXTWORLD}: install the pinned version")
    adapter.check_textworld_version()  # the installed one passes


def test_another_textworld_version_is_refused_with_a_clear_message(monkeypatch):
    with pytest.raises(adapter.TextWorldVersionError) as raised:
        adapter.check_textworld_version("1.7.1")
    message = str(raised.value)
    assert "1.7.1" in message and adapter.PINNED_TEXTWORLD in message
    assert "textworld_adapter.py" in message and "_pddl_state" in message
    import textworld

    monkeypatch.setattr(textworld, "__version__", "1.8.0")
    with pytest.raises(adapter.TextWorldVersionError, match="1.8.0"):
        adapter.new_pddl_env()  # an engine cannot start on an unknown layout


def test_textworld_private_attributes_are_read_in_the_adapter_only():
    offenders = {path.name: [name for name in PRIVATE if name in path.read_text()]
                 for path in PACKAGE.glob("*.py") if path.name != "textworld_adapter.py"}
    assert not {k: v for k, v in offenders.items() if v}, offenders
    adapter_text = (PACKAGE / "textworld_adapter.py").read_text()
    assert all(name in adapter_text for name in ("_pddl_state", "_entity_infos", '"_facts"'))


def _third_party_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in (
                "textworld", "alfworld", "fast_downward"):
            names |= {alias.asname or alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names
                      if a.name.split(".")[0] in ("textworld", "alfworld", "fast_downward")}
    return names


def test_no_class_inherits_from_textworld_or_alfworld():
    for path in PACKAGE.glob("*.py"):
        tree = ast.parse(path.read_text())
        third_party = _third_party_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = {ast.unparse(b).split(".")[0] for b in node.bases}
                assert not bases & third_party, f"{path.name}: class {node.name} subclasses {bases}"


def test_import_sets_no_environment_variable_and_leaves_the_wheel_alone(tmp_path):
    """In a fresh interpreter with ALFWORLD_DATA unset and an empty HOME: importing the family
    and building an env (no reset) changes no variable, imports no alfworld/textworld module,
    and creates no ~/.cache/alfworld."""
    code = (
        "import json, os, sys\n"
        "before = dict(os.environ)\n"
        "import tripod.envs.alfworld\n"
        "from tripod.envs import make\n"
        "env = make('alfworld/generated', 'test')\n"
        "print(json.dumps({'changed': sorted(k for k in set(os.environ) | set(before)\n"
        "                                 if os.environ.get(k) != before.get(k)),\n"
        "                  'modules': sorted(m for m in sys.modules\n"
        "                                 if m.split('.')[0] in ('alfworld', 'textworld'))}))\n")
    environ = {k: v for k, v in os.environ.items() if k != "ALFWORLD_DATA"}
    environ.update(HOME=str(tmp_path), TRIPOD_CACHE=str(tmp_path / "cache"),
                   PYTHONPATH=os.pathsep.join([str(PACKAGE.parents[2]),
                                               environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True,
                         text=True, timeout=120, check=True)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report == {"changed": [], "modules": []}
    assert not (tmp_path / ".cache" / "alfworld").exists()


@pytest.mark.parametrize("factory", [alf_env.make_generated, alf_env.make_real])
def test_every_factory_option_is_an_explicit_keyword(factory):
    params = inspect.signature(factory).parameters
    assert not any(p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) for p in params.values())
    options = {n for n, p in params.items() if p.kind is p.KEYWORD_ONLY}
    assert {"expert", "max_turns", "task_types"} <= options
    assert not options & {"reward", "dense", "sparse", "max_steps"}  # the reward pillar's


@pytest.mark.parametrize("cls", [alf_env.AlfworldEnv, alf_game.AlfworldGame])
def test_reset_takes_a_game_index(cls):
    assert list(inspect.signature(cls.reset).parameters) == ["self", "game_index"]
