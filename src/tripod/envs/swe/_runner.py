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
        if event in ("object.__setattr__", "object.__delattr__"):
            return len(args) > 1 and args[1] in ("__code__", "__class__", "__dict__")
        if event == "object.__getattr__":
            return len(args) > 1 and args[1] in frame_attrs
        if event == "open":
            path = str(args[0]) if args else ""
            return path.startswith(("/proc", "/dev/fd", "/dev/stdout"))
        return event in ("sys._getframe", "import") and (
            event != "import" or str(args[0]).split(".")[0] in ("ctypes", "_ctypes", "gc"))

    return violation, suspicious


_CODE_RUNNERS = ("/code.py", "/codeop.py", "/runpy.py", "/pdb.py", "/bdb.py", "/timeit.py")
"""Standard-library modules that compile and run code handed to them: their exec and
compile count against the caller that handed it over. (Not `ast`: `inspect.signature`
parses builtins' signatures with it for honest code, and a parsed tree does not run.
Imports also exec, in frozen importlib, for every module: an import hook is caught by the
`sys.meta_path` check.)"""


def _untrusted(watched, root, initial):
    """Whether a code file is the agent's: a changed file, a file created in the copy at
    run time, or code compiled under a made-up name ("<string>" is this runner's own)."""

    def check(name):
        if name is None:
            return False
        if name in watched or (name.startswith(root + "/") and name not in initial):
            return True
        return name.startswith("<") and not name.startswith(("<frozen", "<string>"))

    return check


def _make_guard(report_fd, nonce, untrusted, write, root):
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
            # Direct calls, or calls through modules that run code or walk frames on the
            # caller's behalf: the standard library also calls these for library code
            # (namedtuple, dataclasses, typing), which is not flagged.
            via = _CODE_RUNNERS if event != "sys._getframe" else ("inspect.py",
                                                                  "traceback.py")
            hit = untrusted(immediate) or (untrusted(nearest) and immediate.endswith(via))
        else:
            hit = untrusted(nearest) or untrusted(immediate)
        if hit:
            flagged.append(event)
            write(report_fd, f"{nonce} FLAG {event}\n".encode())
            raise PermissionError(f"{event} is not allowed in library code under test")

    return hook, flagged


_WATCHED_MODULES = ("pytest", "_pytest.runner", "_pytest.reports", "_pytest.python",
                    "_pytest.main", "_pytest.skipping", "_pytest.outcomes", "_pytest.unittest",
                    "_pytest.nodes", "_pytest.fixtures", "_pytest.assertion.rewrite",
                    "pluggy._callers", "pluggy._hooks", "pluggy._manager", "builtins",
                    "__main__", "unittest", "unittest.case", "unittest.suite",
                    "unittest.result", "unittest.loader")
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


def _import_hooks_changed(baseline, untrusted):
    """Finders or path hooks added since start-up by the agent's code (a finder could
    rewrite test modules as they load): their class or function comes from an untrusted
    file. pytest's assertion rewriter and the project's own finders are allowed."""
    allowed_meta, allowed_hooks = baseline
    for where, now, allowed in (("sys.meta_path", sys.meta_path, allowed_meta),
                                ("sys.path_hooks", sys.path_hooks, allowed_hooks)):
        for hook in now:
            if id(hook) in allowed:
                continue
            owner = hook if callable(hook) and not isinstance(hook, type) and \
                hasattr(hook, "__code__") else type(hook)
            module = sys.modules.get(getattr(owner, "__module__", "") or "")
            if module is None or untrusted(getattr(module, "__file__", None) or "<?>"):
                return [where]
    return []


def _foreign_hooks(pluginmanager, own):
    """Hook implementations that are neither pytest's, pluggy's, a conftest's nor this
    runner's: a plugin registered by the code under test."""
    out = []
    for name, caller in list(vars(pluginmanager.hook).items()):
        impls = getattr(caller, "get_hookimpls", None)
        for impl in impls() if impls else ():
            module = getattr(impl.function, "__module__", None) or ""
            if id(impl.function) in own or module.startswith(("_pytest.", "pluggy.")) or \
                    module in ("pytest", "_pytest") or module.rsplit(".", 1)[-1] == "conftest":
                continue
            out.append(f"plugin:{name}")
    return out[:5]


def _code_of(item):
    """The code object a test item runs (a function, or a unittest method)."""
    obj = getattr(item, "obj", None)
    obj = getattr(obj, "__func__", obj)
    return getattr(obj, "__code__", None)


class _Hooks:
    """The plugin pytest sees: hook functions only. The outcomes, the baselines and the
    "already reported" state live in the closures of `_recorder`, not on this object, so
    the plugin manager's listing leads to nothing that switches the checks off."""


def _recorder(report, check_every, import_hooks, untrusted):
    """(the plugin, a function that checks everything once more and returns the
    outcomes). Every check reports TAMPER with what changed; the trainer then scores 0."""
    fingerprint, outcomes, state = _fingerprint, {}, {"count": 0}
    baseline, codes, own, reported = {}, {}, set(), []

    def tamper(what):
        if what and not reported:
            reported.extend(what)
            report("TAMPER " + " ".join(map(str, what[:5])))

    def check(session=None):
        if "fingerprint" in baseline:
            now = fingerprint()
            tamper([".".join(map(str, k)) for k, v in baseline["fingerprint"].items()
                    if now.get(k) != v])
        tamper(_import_hooks_changed(import_hooks, untrusted))
        if "pm" in baseline:
            tamper(_foreign_hooks(baseline["pm"], own))
        tamper([nodeid for nodeid, (item, code) in codes.items() if _code_of(item) is not code])

    def pytest_sessionstart(session):
        baseline["fingerprint"] = fingerprint()
        baseline["pm"] = session.config.pluginmanager

    def pytest_collectreport(report):
        if report.failed:
            outcomes[report.nodeid] = "ERROR"
        check()

    def pytest_collection_finish(session):
        for item in session.items:
            codes[item.nodeid] = (item, _code_of(item))
        check()

    def pytest_runtest_logreport(report):
        status = _status(report, outcomes.get(report.nodeid))
        if outcomes.get(report.nodeid) not in ("FAILED", "ERROR"):
            outcomes[report.nodeid] = status
        if report.when == "teardown":
            state["count"] += 1
            if state["count"] % check_every == 0:
                check()

    def pytest_sessionfinish(session, exitstatus):
        check()

    def finish():
        check()
        return dict(outcomes)

    hooks = _Hooks()
    for fn in (pytest_sessionstart, pytest_collectreport, pytest_collection_finish,
               pytest_runtest_logreport, pytest_sessionfinish):
        setattr(hooks, fn.__name__, fn)
        own.add(id(fn))
    return hooks, finish


def _status(report, old):
    if report.when == "call":
        if hasattr(report, "wasxfail"):
            return "XPASS" if report.passed else "XFAIL"
        return {"passed": "PASSED", "failed": "FAILED"}.get(report.outcome, "SKIPPED")
    if report.failed:
        return "ERROR"
    if report.skipped:
        return "XFAIL" if hasattr(report, "wasxfail") else "SKIPPED"
    return old or "PASSED"


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
    import unittest  # noqa: F401 - fingerprinted from the start (its TestCase runs tests)

    import_hooks = (frozenset(map(id, sys.meta_path)), frozenset(map(id, sys.path_hooks)))
    sys.path[:0] = spec["paths"]
    root = os.getcwd()
    initial = frozenset(os.path.join(d, f) for d, _, files in os.walk(root) for f in files)
    untrusted = _untrusted(frozenset(spec["watched"]), root, initial)
    hook, flagged = _make_guard(report_fd, nonce, untrusted, write, root)
    sys.addaudithook(hook)

    def report(text):
        write(report_fd, f"{nonce} {text}\n".encode())

    import pytest

    hooks, finish = _recorder(report, spec.get("check_every", 25), import_hooks, untrusted)
    code = int(pytest.main(spec["args"], plugins=[hooks]))
    outcomes = finish()
    sys.stdout.flush()
    sys.stderr.flush()
    lines = [f"{nonce} R {status} {nodeid}\n" for nodeid, status in outcomes.items()]
    lines.append(f"{nonce} END {code} {len(outcomes)} {len(flagged)}\n")
    payload = "".join(lines).encode()
    while payload:
        payload = payload[write(report_fd, payload):]
    exit_now(code)


main()
