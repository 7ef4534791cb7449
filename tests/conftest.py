"""Shared test setup: an on-disk cache outside the repo, offline Hugging Face, small models."""

from __future__ import annotations

import os

os.environ.setdefault("TRIPOD_CACHE", "/tmp/tripod-test-cache")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny_policy_factory():
    """Fresh tiny policies (random Llama, SmolLM2 tokenizer), identical for equal seeds."""
    from tripod.policy import load_policy

    return lambda seed=0: load_policy("tiny", seed=seed)


@pytest.fixture(scope="session")
def smollm2():
    from tripod.policy import load_policy

    return load_policy("smollm2-135m")


def pytest_collection_modifyitems(config, items):
    """`gpu` tests run only where CUDA is available (CI machines have none)."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
