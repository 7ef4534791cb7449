"""Shared test setup: an on-disk cache outside the repo, offline Hugging Face, small models."""

from __future__ import annotations

import os

os.environ.setdefault("TRIPOD_CACHE", "/tmp/tripod-test-cache")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Under pytest-xdist (`make test` runs 2 workers), each worker gets its share of the cores:
# 2 workers x 2 torch threads on 2 cores would oversubscribe them. Set before torch loads;
# subprocesses (torchrun, the CLI) inherit it.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _share = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ.setdefault("OMP_NUM_THREADS", str(_share))

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
