"""`TRIPOD_ALLOCATOR=jemalloc tripod ...` re-executes the command once with jemalloc preloaded."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tripod.core import allocator


def test_reexec_preloads_jemalloc_once(monkeypatch):
    lib = allocator.find_jemalloc()
    if lib is None:
        pytest.skip("no jemalloc library on this machine")
    calls = []
    monkeypatch.setattr(allocator.os, "execve", lambda *a: calls.append(a))
    monkeypatch.setenv(allocator.ENV, "jemalloc")
    monkeypatch.setenv("LD_PRELOAD", "")
    monkeypatch.delenv("MALLOC_CONF", raising=False)
    allocator.reexec_if_asked(["envs", "list"])
    (exe, argv, env), = calls
    assert exe == sys.executable and argv[1:] == ["-m", "tripod.cli", "envs", "list"]
    assert env["LD_PRELOAD"] == lib and env[allocator.ENV] == "jemalloc"
    assert env["MALLOC_CONF"] == "background_thread:true"   # purging off the hot path
    monkeypatch.delenv(allocator._MARK, raising=False)
    monkeypatch.setenv("LD_PRELOAD", lib)     # the re-executed process: runs as is
    allocator.reexec_if_asked(["envs", "list"])
    assert len(calls) == 1


def test_a_users_malloc_conf_is_kept(monkeypatch):
    if allocator.find_jemalloc() is None:
        pytest.skip("no jemalloc library on this machine")
    calls = []
    monkeypatch.setattr(allocator.os, "execve", lambda *a: calls.append(a))
    monkeypatch.setenv(allocator.ENV, "jemalloc")
    monkeypatch.setenv("LD_PRELOAD", "")
    monkeypatch.setenv("MALLOC_CONF", "dirty_decay_ms:0")
    allocator.reexec_if_asked(["envs"])
    assert calls[0][2]["MALLOC_CONF"] == "dirty_decay_ms:0"


def test_default_and_unknown_choices(monkeypatch):
    monkeypatch.setattr(allocator.os, "execve", lambda *a: pytest.fail("must not re-exec"))
    monkeypatch.delenv(allocator.ENV, raising=False)
    allocator.reexec_if_asked(["envs"])
    monkeypatch.setenv(allocator.ENV, "glibc")
    allocator.reexec_if_asked(["envs"])
    monkeypatch.setenv(allocator.ENV, "tcmalloc")
    with pytest.raises(SystemExit, match="choose one of jemalloc, glibc"):
        allocator.reexec_if_asked(["envs"])


def test_the_command_runs_under_jemalloc():
    """The real thing: the re-executed command maps jemalloc and does its job."""
    if allocator.find_jemalloc() is None:
        pytest.skip("no jemalloc library on this machine")
    code = "import sys; from tripod.cli import main; sys.argv = ['tripod', 'envs', 'list']; main()"
    env = {**os.environ, allocator.ENV: "jemalloc", "LD_PRELOAD": ""}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "textworld/" in out.stdout                       # the command did its job
    assert "tripod: allocator jemalloc (loaded:" in out.stderr   # in a process that maps it
