"""A local Ray of 2 CPUs, started once for the Ray tests (env workers, rollout workers)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def local_ray():
    """Ray's own memory monitor is off: it kills workers when the whole machine passes 95% of
    its memory, so another job's memory (a CI run sharing the machine with a training run)
    failed these tests. A real out-of-memory is still the kernel's to handle."""
    ray = pytest.importorskip("ray")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RAY_memory_monitor_refresh_ms", "0")
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
