"""Reference pages generated from the code at every `mkdocs build` (mkdocs-gen-files).

- `reference/configuration.md`: every recipe key of `tripod.core.config.TrainConfig`, once,
  with its type, default and the field's own docstring (the schema is the single source).
- `reference/cli.md`: every `tripod` subcommand from `tripod.cli.build_parser`.
- `reference/api/*.md`: one page per package, rendered by mkdocstrings from the docstrings.

Nothing here is retyped from the code, so a renamed key or flag changes the pages with it.
"""

from __future__ import annotations

import argparse
import types
import typing
from pathlib import Path

import mkdocs_gen_files
from pydantic import BaseModel

import tripod
from tripod.cli import build_parser
from tripod.core.config import TrainConfig

SRC = Path(tripod.__file__).resolve().parent


# -- configuration -----------------------------------------------------------------------------
def type_name(annotation: object) -> str:
    """A field's type as a reader writes it in YAML terms: `float | None`, `list[str]`, one
    of `a`, `b`."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return "one of " + ", ".join(f"`{a}`" for a in args)
    if origin in (types.UnionType, typing.Union):
        return " | ".join(type_name(a) for a in args)
    if origin is not None:
        inner = ", ".join(type_name(a) for a in args)
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]"
    if annotation is type(None):
        return "None"
    if annotation is typing.Any:
        return "any"
    return getattr(annotation, "__name__", str(annotation))


def default_text(field) -> str:
    value = field.get_default(call_default_factory=True)
    if isinstance(value, str):
        return f"`{value!r}`" if value else "`''`"
    return f"`{value!r}`"


def cell(text: str | None) -> str:
    """One table cell: the docstring's lines joined, pipes escaped."""
    return " ".join((text or "").split()).replace("|", "\\|")


def is_section(annotation: object) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def config_sections(model: type[BaseModel], prefix: str = "") -> list[tuple[str, str, list]]:
    """(dotted section name, section meaning, [(key, field)]) for the model and every nested
    section, depth first, in the schema's order."""
    found = []
    for name, field in model.model_fields.items():
        if not is_section(field.annotation):
            continue
        dotted = f"{prefix}{name}"
        section = field.annotation
        keys = [(k, f) for k, f in section.model_fields.items() if not is_section(f.annotation)]
        found.append((dotted, field.description or "", keys))
        found += config_sections(section, f"{dotted}.")
    return found


def config_keys() -> list[str]:
    """Every dotted recipe key (what tests/test_docs_site.py checks the page against)."""
    return [f"{s}.{k}" for s, _, keys in config_sections(TrainConfig) for k, _ in keys]


def configuration_page() -> str:
    lines = ["# Configuration reference", "",
             "Every key of a recipe, generated from the typed schema "
             "(`src/tripod/core/config.py`) at each docs build: type, default, meaning. "
             "A recipe sets any of them in YAML; the command line overrides one with "
             "`section.key=value` (see [Recipes](../recipes.md)). Unknown keys, wrong "
             "types and impossible settings fail before any work, with the key named.", ""]
    for dotted, meaning, keys in config_sections(TrainConfig):
        lines += [f"## `{dotted}`", "", cell(meaning), ""]
        if not keys:
            continue
        lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
        for key, field in keys:
            lines.append(f"| `{dotted}.{key}` | {cell(type_name(field.annotation))} | "
                         f"{cell(default_text(field))} | {cell(field.description)} |")
        lines.append("")
    return "\n".join(lines)


# -- command line ------------------------------------------------------------------------------
def subcommands(parser: argparse.ArgumentParser) -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """{name: (help line, parser)} of the parser's subcommands, in registration order."""
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help for c in action._choices_actions}
    return {name: (helps.get(name) or "", p) for name, p in action.choices.items()}


def argument_row(action: argparse.Action) -> str | None:
    if isinstance(action, argparse._HelpAction):
        return None
    name = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.dest}`"
    if action.nargs in ("*", "+"):
        name += " ..."
    if action.choices:
        kind = "one of " + ", ".join(f"`{c}`" for c in action.choices)
    elif action.nargs == 0:
        kind = "flag"
    else:
        kind = getattr(action.type, "__name__", "str")
    default = "" if action.default in (None, False) or action.required else f"`{action.default}`"
    if action.required or not action.option_strings and action.nargs not in ("*", "?"):
        default = "required"
    return f"| {name} | {kind} | {default} | {cell(action.help)} |"


def cli_page() -> str:
    parser = build_parser()
    lines = ["# Command-line reference", "",
             "Every `tripod` subcommand and its arguments, generated from the command's "
             "argparse parser (`src/tripod/cli.py`) at each docs build. "
             "`tripod COMMAND --help` prints the same.", ""]
    for name, (hlp, sub) in subcommands(parser).items():
        usage = " ".join(sub.format_usage().split())
        usage = usage.removeprefix("usage: ")
        lines += [f"## `tripod {name}`", "", cell(hlp).capitalize() + ".", "",
                  "```", usage, "```", ""]
        rows = [r for r in map(argument_row, sub._actions) if r]
        if rows:
            lines += ["| argument | type | default | meaning |", "|---|---|---|---|", *rows, ""]
    return "\n".join(lines)


# -- API ---------------------------------------------------------------------------------------
def packages() -> dict[str, list[str]]:
    """{package: [its modules]} for every package of tripod, read from the source tree (not
    imported: most packages import torch). Private modules are listed too: their docstrings
    say what they guard."""
    out: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = ("tripod", *path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            out.setdefault(".".join(parts[:-1]), [])
        else:
            out.setdefault(".".join(parts[:-1]), []).append(".".join(parts))
    return {k: sorted(v) for k, v in sorted(out.items()) if v}


def api_pages() -> dict[str, str]:
    pages = {}
    for package, modules in packages().items():
        body = [f"# `{package}`", ""]
        for module in modules:
            body += [f"::: {module}", ""]
        pages[f"reference/api/{package.removeprefix('tripod.').replace('.', '-')}.md"] = \
            "\n".join(body)
    return pages


def write(path: str, text: str) -> None:
    with mkdocs_gen_files.open(path, "w") as f:
        f.write(text)


write("reference/configuration.md", configuration_page())
write("reference/cli.md", cli_page())
api = api_pages()
for path, text in api.items():
    write(path, text)
write("reference/api/index.md", "\n".join(
    ["# API reference", "",
     "Generated by mkdocstrings from the docstrings of every module, one page per package.",
     "", *(f"- [`{p.removeprefix('reference/api/').removesuffix('.md')}`]"
           f"({p.removeprefix('reference/api/')})" for p in sorted(api))]))
