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
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    _share = max(1, (_cores or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
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


@pytest.hookimpl(tryfirst=True)   # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """`gpu` tests run only where CUDA is available (CI machines have none). Under
    pytest-xdist, tests that share a costly fixture run on one worker (`_xdist_group`)."""
    for item in items:
        group = _xdist_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    if os.environ.get("PYTEST_XDIST_WORKER_COUNT") or config.getoption("numprocesses", None):
        _long_work_first(items)
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _xdist_group(item) -> str | None:
    """One worker per shared fixture: a test using a session fixture of a sub-folder's
    conftest (a local Ray, the report's tiny run) joins that folder's group; one using a
    module fixture (a training run, generated games) joins its module's group. Otherwise
    each worker would build the fixture again, or start a second Ray. An explicit
    `xdist_group` mark wins; the root conftest's session fixtures (models) are cheap."""
    if item.get_closest_marker("xdist_group") is not None:
        return None
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    module_scoped = False
    for name in info.names_closure:
        for fixturedef in info.name2fixturedefs.get(name, ()):
            where = fixturedef.baseid
            if fixturedef.scope == "session" and where not in ("", "tests"):
                return where
            module_scoped = module_scoped or fixturedef.scope == "module"
    return item.module.__name__ if module_scoped and item.module is not None else None


def _long_work_first(items) -> None:
    """Under pytest-xdist, hand out the long units first, so that no minute-long group starts
    last while the other worker runs out of work (the learning tests came last in collection
    order). Measured once each, quiet: 842 s without, 829 s with (README "Tests"), so the
    tail was not where the time went. Whole modules move, so a module's fixtures are still
    built once: modules whose slow tests form one group (an xdist group) first, then modules
    with slow tests, then the rest, each in collection order."""
    rank: dict[str, int] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        slow = item.get_closest_marker("slow") is not None
        grouped = item.get_closest_marker("xdist_group") is not None
        rank[module] = min(rank.get(module, 2), 0 if slow and grouped else 1 if slow else 2)
    first = {}
    for i, item in enumerate(items):
        first.setdefault(item.nodeid.split("::", 1)[0], i)
    items.sort(key=lambda it: (rank[it.nodeid.split("::", 1)[0]],
                               first[it.nodeid.split("::", 1)[0]]))
