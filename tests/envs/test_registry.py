"""The env registry under concurrent first use."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from tripod.envs import registry

SLOW_FAMILY = '''import time

from tripod.envs.registry import register

time.sleep(0.5)  # a family module whose import takes a while (the SWE family's does)
register("slow/.*", lambda env_id, split="train": None, ("slow/x",), "a slow family")
'''


def test_two_threads_making_envs_at_first_use(tmp_path: Path, monkeypatch) -> None:
    """A thread that looks an id up while another is still importing the family modules
    waits for them instead of finding the registry empty (`UnknownEnvError`)."""
    (tmp_path / "tripod_slow_family.py").write_text(SLOW_FAMILY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "FAMILY_MODULES", ("tripod_slow_family",))
    monkeypatch.setattr(registry, "_FAMILIES", [])
    monkeypatch.setattr(registry, "_IMPORT_ERRORS", {})
    monkeypatch.setattr(registry, "_loaded", False)
    monkeypatch.delitem(sys.modules, "tripod_slow_family", raising=False)
    found: dict[str, object] = {}

    def look_up(name: str) -> None:
        try:
            found[name] = registry.family_of("slow/x").pattern
        except KeyError as exc:
            found[name] = exc

    first = threading.Thread(target=look_up, args=("first",))
    first.start()
    deadline = time.monotonic() + 10
    while "tripod_slow_family" not in sys.modules and time.monotonic() < deadline:
        time.sleep(0.001)  # the first thread is now inside the family module's import
    second = threading.Thread(target=look_up, args=("second",))
    second.start()
    first.join(10)
    second.join(10)
    assert found == {"first": "slow/.*", "second": "slow/.*"}
