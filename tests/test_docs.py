"""Every `tripod ...` command shown in README.md and docs/ parses, and its recipe overrides
validate: a user copying a command from the docs must not meet `unknown key`."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tripod.cli import _recipe, build_parser
from tripod.core.config import load_config
from tripod.studies.sweep import parse_grid

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def doc_commands() -> list[tuple[str, str]]:
    """(file name, command) for each `tripod ...` line of a code block and each inline
    `tripod ...` code span."""
    found = []
    for path in DOCS:
        fenced = False
        for line in path.read_text().splitlines():
            if line.strip().startswith("```"):
                fenced = not fenced
                continue
            if fenced and line.strip().startswith("tripod "):
                found.append((path.name, re.split(r" #| \| ", line)[0].strip()))
            elif not fenced:
                found += [(path.name, c.strip()) for c in re.findall(r"`(tripod [^`]+)`", line)
                          if _is_full_command(c)]
    return found


def _is_full_command(span: str) -> bool:
    """Inline spans in prose often name a command with placeholders (`tripod report`,
    `tripod rollout --out`); those with a recipe or an override are meant to be run."""
    return ".yaml" in span or "=" in span or "--checkpoint" in span


COMMANDS = doc_commands()


def test_the_docs_show_commands():
    assert any(cmd.startswith("tripod train ") for _, cmd in COMMANDS)
    assert any(cmd.startswith("tripod eval ") for _, cmd in COMMANDS)


@pytest.mark.parametrize(("where", "command"), COMMANDS, ids=[c for _, c in COMMANDS])
def test_doc_command_parses_and_validates(where, command):
    argv = shlex.split(command)[1:]
    args = build_parser().parse_args(argv)
    if args.command in ("train", "sft"):
        load_config(_recipe(args.recipe), args.overrides)
    elif args.command == "quickstart":
        load_config(_recipe("quickstart.yaml"), args.overrides)
    elif args.command == "sweep":
        keys, values = parse_grid(args.grid)
        for key, options in zip(keys, values):
            for value in options:
                load_config(_recipe(args.recipe), [f"{key}={value}"])


def test_a_wrong_key_in_a_doc_command_would_fail():
    """The check above is not vacuous: the README's old example fails validation."""
    from tripod.core.config import ConfigError

    with pytest.raises(ConfigError, match="algo.group_size: unknown key"):
        load_config(_recipe("recipes/textworld-ppo-sparse.yaml"), ["algo.group_size=8"])


def test_every_command_named_in_prose_exists():
    choices = build_parser()._subparsers._group_actions[0].choices
    for path in DOCS:
        for span in re.findall(r"`tripod ([a-z]+)", path.read_text()):
            assert span in choices, f"{path.name} names `tripod {span}`"


ENV_TEMPLATE = ["Ids", "Observation", "Action format", "Reward and progress", "Episode end",
                "Options", "Expert", "Cost"]


@pytest.mark.parametrize("page", ["textworld.md", "alfworld.md", "swe.md"])
def test_env_pages_follow_one_template(page):
    """docs/envs.md promises one template for every family's page: the template's sections
    in order (the family's own may come between them), the version history last."""
    text = re.sub(r"(?ms)^```.*?^```", "", (ROOT / "docs" / page).read_text())
    headings = re.findall(r"(?m)^## (.+)$", text)
    assert [h for h in headings if h in ENV_TEMPLATE] == ENV_TEMPLATE, headings
    assert headings[-1] == "Version history"
