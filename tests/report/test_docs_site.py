"""The documentation site (mkdocs.yml): it builds with --strict (a broken link or an
unresolved API reference fails), its generated configuration reference holds every recipe
key once, the metrics and run-directory pages name everything a run writes, and the built
pages show their content in headless Chromium (Debian's `chromium`; skipped if missing).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from tripod.core.config import TrainConfig

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site built from this checkout, as `make docs` builds it."""
    pytest.importorskip("mkdocs", reason="the docs extra is not installed: pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                           "--site-dir", str(out)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stderr[-4000:]}"
    return out


def recipe_keys(model: type[BaseModel] = TrainConfig, prefix: str = "") -> list[str]:
    """Every dotted recipe key, read from the schema here (not from the page's generator)."""
    keys = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys += recipe_keys(annotation, f"{prefix}{name}.")
        else:
            keys.append(f"{prefix}{name}")
    return keys


@pytest.mark.slow   # builds the whole site (about 15 s)
def test_every_recipe_key_is_in_the_configuration_reference_once(site):
    html = (site / "reference" / "configuration" / "index.html").read_text()
    keys = recipe_keys()
    assert len(keys) > 80 and "algo.estimator" in keys and "model.lora.r" in keys
    for key in keys:
        rows = re.findall(rf"<tr>\s*<td><code>{re.escape(key)}</code></td>", html)
        assert len(rows) == 1, f"{key}: {len(rows)} rows in the configuration reference"


@pytest.mark.slow   # builds the whole site (about 15 s)
def test_every_subcommand_is_in_the_cli_reference(site):
    from tripod.cli import build_parser

    html = (site / "reference" / "cli" / "index.html").read_text()
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.dest == "command"]
    for name in sub.choices:
        assert f"<code>tripod {name}</code>" in html, f"tripod {name} is missing"
    assert "<code>--checkpoint</code>" in html and "<code>--resume</code>" in html


def documented(page: str) -> set[str]:
    """The `code spans` of a hand-kept reference page."""
    return set(re.findall(r"`([^`]+)`", (REFERENCE / page).read_text()))


def test_every_metric_a_run_logs_is_documented(tiny_run):
    names = documented("metrics.md")
    logged = set()
    for line in (tiny_run.run_dir / "metrics.jsonl").read_text().splitlines():
        logged |= set(json.loads(line))
    assert {"success_rate", "grad_norm", "entropy"} <= logged
    generic = {re.sub(r"^skipped_(?!updates).*", "skipped_REASON",
                      re.sub(r"^success_rate/.*", "success_rate/ENV_ID", key)) for key in logged}
    missing = sorted(generic - names)
    assert not missing, f"docs/reference/metrics.md does not list {missing}"


def test_everything_a_run_writes_is_in_the_run_directory_page(tiny_run):
    names = documented("run-directory.md")
    written = {p.name + ("/" if p.is_dir() else "") for p in tiny_run.run_dir.iterdir()}
    assert {"config.yaml", "metrics.jsonl", "checkpoints/", "trajectories/"} <= written
    missing = sorted(w for w in written
                     if w not in names and not any(n.startswith(w) for n in names))
    assert not missing, f"docs/reference/run-directory.md does not list {missing}"


@pytest.mark.slow   # builds the whole site (about 15 s)
def test_home_and_reference_pages_render_in_chromium(site, browser, artifact_dir):
    home = browser.load(site / "index.html")
    assert "Multi-turn agentic RL for LLM agents" in home.dom
    assert "193/200 = 96.5%" in home.dom                       # the headline result
    assert re.search(r'<nav[^>]*class="md-nav', home.dom)        # the theme built the nav
    nav = set(re.findall(r'<a href="([^"]+)" class="md-nav__link[^"]*">\s*'
                         r'<span class="md-ellipsis">\s*([^<]+?)\s*</span>', home.dom))
    for entry in (("getting-started/", "Getting started"), ("textworld/", "TextWorld"),
                  ("algorithms/", "Algorithms"), ("reference/configuration/", "Configuration"),
                  ("reference/cli/", "Command line"), ("reference/api/", "API")):
        assert entry in nav, f"the navigation lacks {entry}"

    config = browser.load(site / "reference" / "configuration" / "index.html")
    assert "Configuration reference" in config.dom
    rows = re.findall(r"<tr>\s*<td><code>([a-z_.]+)</code></td>", config.dom)
    assert "algo.estimator" in rows and "rollout.group_size" in rows and len(rows) > 80
    browser.screenshot(site / "index.html", artifact_dir / "docs-home.png", height=1600)
