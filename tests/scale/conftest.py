"""A local Ray of 2 CPUs, started once for the Ray tests (env workers, rollout workers)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def local_ray():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
