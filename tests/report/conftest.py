"""Fixtures of the report tests (the helpers they use are in helpers.py)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from .helpers import CHROMIUM_NAMES, Browser, TinyRun, make_tiny_run


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> TinyRun:
    return make_tiny_run(tmp_path_factory.mktemp("report-run"))


@pytest.fixture
def run_copy(tiny_run, tmp_path) -> Path:
    """A private copy of the tiny run directory (tests may add or damage files)."""
    return Path(shutil.copytree(tiny_run.run_dir, tmp_path / "run"))


@pytest.fixture(scope="session")
def tokenizer():
    from transformers import AutoTokenizer

    from tripod.policy.models import smollm2_dir

    return AutoTokenizer.from_pretrained(str(smollm2_dir()))


@pytest.fixture(scope="session")
def browser(tmp_path_factory) -> Browser:
    exe = next((shutil.which(n) for n in CHROMIUM_NAMES if shutil.which(n)), None)
    if exe is None:
        pytest.skip("chromium is not installed (CI installs it: apt-get install -y chromium)")
    return Browser(exe, tmp_path_factory.mktemp("chromium"))


@pytest.fixture(scope="session")
def artifact_dir(tmp_path_factory) -> Path:
    """Where screenshots go: $TRIPOD_TEST_ARTIFACTS if set (CI keeps it), else a tmp dir."""
    root = os.environ.get("TRIPOD_TEST_ARTIFACTS")
    path = Path(root) if root else tmp_path_factory.mktemp("artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path
