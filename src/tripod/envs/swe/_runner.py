"""Trusted pytest runner of the verified reward (runs inside the sandbox, in a fresh copy).

Executed as ``python -s -B -c <this file's text> SPEC_JSON`` by `tripod.envs.swe.verify`,
with an environment the trainer builds alone (no user site, no bytecode written, a fixed hash
seed); only the standard library and pytest are used, and nothing is imported from the copy
before the guards below are in place. pytest's plugin autoload is off, so only pytest's own
plugins and the pristine project's conftest files load.

The code under test runs in this process, so nothing here is out of its reach in principle;
what this runner does is make tampering visible (docs/swe.md, threat model):

- results leave through a pipe the trainer drains (not stdout), as lines carrying a per-run
  nonce read from a second pipe before any untrusted import: printed or blindly written
  result lines do not count, and any line without the nonce marks the run as tampered;
- an audit hook (`sys.addaudithook`, which cannot be removed) refuses, and reports at once,
  the operations that reach the runner's objects (frames, ``gc`` walks, tracing, ``ctypes``,
  ``/proc`` and ``/dev/fd``, ``exec``/``compile``) when called from the files the agent changed;
- the functions and classes of pytest, pluggy and ``builtins`` are fingerprinted before
  collection and checked again during and after the session; a change is reported;
- a trailer with pytest's exit status ends the report; the process then exits with that
  status at once (``os._exit``), so nothing runs after the trailer.
"""

import json
import os
import sys


def _stdlib_dirs():
    import sysconfig

    return tuple({sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib")})


def _rules(root):
    """(violation, suspicious): which audit events are blocked attempts the sandbox stops
    anyway, and which reach the runner's objects. Closures, not module globals, so that
    code under test cannot swap them through ``__main__``."""
    frame_attrs = {"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"}
    always = {"gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames",
              "sys.settrace", "sys.setprofile", "sys.addaudithook", "ctypes.dlopen",
              "ctypes.dlsym", "ctypes.addressof", "ctypes.cdata", "exec", "compile"}
    abspath, write_flags = os.path.abspath, os.O_WRONLY | os.O_RDWR | os.O_CREAT

    def violation(event, args):
        if event in ("socket.connect", "socket.getaddrinfo", "socket.sendto"):
            return "network"
        if event != "open" or len(args) < 3 or not isinstance(args[0], str):
            return None
        mode, flags = args[1], args[2] if isinstance(args[2], int) else 0
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            flags & write_flags)
        inside = abspath(args[0]).startswith((root + "/", "/dev/"))
        return "write_outside" if writes and not inside else None

    def suspicious(event, args):
        if event in always:
            return True
        if event == "object.__getattr__":
            return len(args) > 1 and args[1] in frame_attrs
        if event == "open":
            path = str(args[0]) if args else ""
            return path.startswith(("/proc", "/dev/fd", "/dev/stdout"))
        return event in ("sys._getframe", "import") and (
            event != "import" or str(args[0]).split(".")[0] in ("ctypes", "_ctypes", "gc"))

    return violation, suspicious


def _make_guard(report_fd, nonce, watched, write, root):
    """The audit hook, and the list of what it flagged. It also reports network and
    outside-write attempts (blocked by the sandbox) as VIOLATION lines, so they are seen
    even when the code swallows the error."""
    stdlib = _stdlib_dirs()
    flagged = []
    busy = []
    violation, suspicious = _rules(root)
    getframe = sys._getframe

    def culprit():
        """(the immediate Python caller's file, the nearest caller outside the stdlib)."""
        frame = getframe(2)
        immediate = frame.f_code.co_filename if frame is not None else ""
        for _ in range(40):
            if frame is None:
                break
            name = frame.f_code.co_filename
            if not name.startswith(stdlib) and not name.startswith("<frozen"):
                return immediate, name
            frame = frame.f_back
        return immediate, None

    def hook(event, args):
        if busy:
            return
        blocked = violation(event, args)
        if blocked:  # the sandbox stops it anyway; say so whether or not it is caught
            write(report_fd, f"{nonce} VIOLATION {blocked}\n".encode())
        if not suspicious(event, args):
            return
        busy.append(1)
        try:
            immediate, nearest = culprit()
        finally:
            busy.clear()
        if event in ("exec", "compile", "sys._getframe"):
            # Only direct calls: the standard library calls these for library code too
            # (namedtuple, dataclasses, typing), but not to walk frames on its behalf,
            # except through inspect and traceback.
            hit = immediate in watched or (event == "sys._getframe" and nearest in watched
                                           and immediate.endswith(("inspect.py",
                                                                   "traceback.py")))
        else:
            hit = nearest in watched or immediate in watched
        if hit:
            flagged.append(event)
            write(report_fd, f"{nonce} FLAG {event}\n".encode())
            raise PermissionError(f"{event} is not allowed in library code under test")

    return hook, flagged


_WATCHED_MODULES = ("pytest", "_pytest.runner", "_pytest.reports", "_pytest.python",
                    "_pytest.main", "_pytest.skipping", "_pytest.outcomes", "_pytest.unittest",
                    "_pytest.nodes", "_pytest.fixtures", "_pytest.assertion.rewrite",
                    "pluggy._callers", "pluggy._hooks", "pluggy._manager", "builtins",
                    "__main__")
"""Where a test's outcome is decided and reported (pytest's own modules also set some
attributes lazily, e.g. in config and the cache plugin, so those are not fingerprinted)."""


def _fingerprint():
    """ids of the functions and classes (and their methods) of the modules that decide and
    report outcomes, and which module objects sys.modules holds for them."""
    seen = {}
    for modname in _WATCHED_MODULES:
        module = sys.modules.get(modname)
        seen[("sys.modules", modname)] = id(module)
        if module is None:
            continue
        for name, value in list(vars(module).items()):
            if callable(value) or isinstance(value, type):
                seen[(modname, name)] = id(value)
            if isinstance(value, type) and value.__module__ == modname:
                for attr, member in list(vars(value).items()):
                    if callable(member) or isinstance(member, (staticmethod, classmethod)):
                        seen[(modname, name, attr)] = id(member)
    seen[("sys", "trace")] = (id(sys.gettrace()), id(sys.getprofile()))
    return seen


class _Recorder:
    """The in-process pytest plugin: collects outcomes and checks the fingerprint."""

    def __init__(self, report, check_every):
        self.fingerprint = _fingerprint  # held here: __main__'s globals can be swapped
        self.outcomes = {}
        self.report = report
        self.baseline = None
        self.changed = []
        self.check_every = check_every
        self.count = 0

    def check(self):
        if self.baseline is None or self.changed:
            return
        now = self.fingerprint()
        diff = [k for k, v in self.baseline.items() if now.get(k) != v]
        if diff:
            self.changed = [".".join(map(str, k)) for k in diff[:5]]
            self.report("TAMPER " + " ".join(self.changed))

    def pytest_sessionstart(self, session):
        self.baseline = self.fingerprint()

    def pytest_collectreport(self, report):
        if report.failed:
            self.outcomes[report.nodeid] = "ERROR"
        self.check()

    def pytest_runtest_logreport(self, report):
        nodeid, old = report.nodeid, self.outcomes.get(report.nodeid)
        if report.when == "call":
            if hasattr(report, "wasxfail"):
                status = "XPASS" if report.passed else "XFAIL"
            else:
                status = {"passed": "PASSED", "failed": "FAILED"}.get(report.outcome,
                                                                        "SKIPPED")
        elif report.failed:
            status = "ERROR"
        elif report.skipped:
            status = "XFAIL" if hasattr(report, "wasxfail") else "SKIPPED"
        else:
            status = old or "PASSED"
        if old not in ("FAILED", "ERROR"):
            self.outcomes[nodeid] = status
        if report.when == "teardown":
            self.count += 1
            if self.count % self.check_every == 0:
                self.check()

    def pytest_sessionfinish(self, session, exitstatus):
        self.check()


def main():
    spec = json.loads(sys.argv[1])
    write, exit_now, read = os.write, os._exit, os.read
    report_fd, nonce_fd = spec["report_fd"], spec["nonce_fd"]
    nonce = b""
    while chunk := read(nonce_fd, 256):
        nonce += chunk
    os.close(nonce_fd)
    nonce = nonce.decode().strip()
    for key in ("PYTEST_PLUGINS", "PYTEST_ADDOPTS"):
        os.environ.pop(key, None)
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    import random

    random.seed(0)  # outcomes that depend on `random` are the same in every run
    sys.path[:0] = spec["paths"]
    hook, flagged = _make_guard(report_fd, nonce, frozenset(spec["watched"]), write,
                                os.getcwd())
    sys.addaudithook(hook)

    def report(text):
        write(report_fd, f"{nonce} {text}\n".encode())

    import pytest

    recorder = _Recorder(report, spec.get("check_every", 25))
    code = int(pytest.main(spec["args"], plugins=[recorder]))
    recorder.check()
    sys.stdout.flush()
    sys.stderr.flush()
    lines = [f"{nonce} R {status} {nodeid}\n" for nodeid, status in recorder.outcomes.items()]
    lines.append(f"{nonce} END {code} {len(recorder.outcomes)} {len(flagged)}\n")
    payload = "".join(lines).encode()
    while payload:
        payload = payload[write(report_fd, payload):]
    exit_now(code)


main()
