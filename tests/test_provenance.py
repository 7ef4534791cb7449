"""Provenance records: what they hold, and that they survive a write and a read."""

from __future__ import annotations

from tripod.core import provenance


def test_record_names_commit_versions_machine_and_command(tmp_path):
    record = provenance.collect("tripod train recipes/quickstart.yaml")
    assert record.commit   # the test runs in the git checkout
    assert record.versions["tripod"] and record.versions["torch"]
    m = record.machine
    assert m.cores > 0 and m.torch_threads > 0 and len(m.loadavg) == 3
    assert m.matmul_peak_gflops is not None and m.matmul_peak_gflops > 0
    assert record.command == "tripod train recipes/quickstart.yaml"
    provenance.write(tmp_path, record)
    assert provenance.read(tmp_path) == record


def test_unmeasured_machine_and_missing_record(tmp_path):
    record = provenance.collect("x", measure=False)
    assert record.machine.matmul_peak_gflops is None
    assert provenance.read(tmp_path) is None
    assert record.short().startswith(record.commit)


def test_outside_a_checkout_the_commit_is_empty(tmp_path):
    assert provenance.git_describe(tmp_path) == ""
