"""The converted SmolLM2 folder is built once when several processes or threads ask for it
at the same moment (two test workers on a fresh machine): the others wait, then read it;
a complete folder is never removed under a reader."""

from __future__ import annotations

import threading
import time

from tripod.policy import models


def test_concurrent_first_use_converts_once(tmp_path, monkeypatch):
    monkeypatch.setenv("TRIPOD_CACHE", str(tmp_path))
    conversions: list[int] = []

    def fake_convert(target):
        conversions.append(threading.get_ident())
        time.sleep(0.3)                       # the others arrive while this one converts
        partial = target.with_name(".convert-x")
        partial.mkdir()
        (partial / "config.json").write_text("{}")
        (partial / "model.safetensors").write_bytes(b"weights")
        partial.rename(target)

    monkeypatch.setattr(models, "_convert_smollm2", fake_convert)
    folders, errors = [], []

    def ask():
        try:
            folders.append(models.smollm2_dir())
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(conversions) == 1
    assert len(set(folders)) == 1 and (folders[0] / "model.safetensors").read_bytes() == b"weights"
