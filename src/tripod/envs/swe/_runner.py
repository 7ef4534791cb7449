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
  each outcome is written the moment pytest reports it, and the trainer keeps a FAILED or
  ERROR once seen, so changing the recorder's state afterwards changes nothing;
- an audit hook (`sys.addaudithook`, which cannot be removed) refuses, and reports at once,
  the operations that reach the runner's objects (frames, ``gc`` walks, tracing, ``ctypes``,
  ``/proc`` and ``/dev/fd``, ``exec``/``compile``) when called from the files the agent changed;
- the functions and classes of pytest, pluggy and ``builtins`` are fingerprinted before
  collection and checked again during and after the session; a change is reported;
- what is judged by where it comes from is judged by its code's file
  (``__code__.co_filename``), which code cannot set without ``code.replace`` (refused by
  the audit hook), never by ``__module__`` or ``__name__``, which it can: hook
  implementations, finders and path hooks, test functions;
- after each test, its code object and its module's functions and classes must be the
  ones collected, and the names the test file imports (``from m import f``) must still be
  what ``m`` holds; ``PYTEST_CURRENT_TEST`` is never set (library code cannot tell a test
  run from a real call by it);
- a trailer with pytest's exit status ends the report; the process then exits with that
  status at once (``os._exit``), so nothing runs after the trailer.
"""

import abc
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
              "ctypes.dlsym", "ctypes.addressof", "ctypes.cdata", "exec", "compile",
              "code.__new__"}
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
        if event == "object.__setattr__" and len(args) > 2 and args[1] == "__code__":
            # The standard library swaps a function's code for a variant of itself
            # (types.coroutine, on importing asyncio); code from another file is a swap.
            old = getattr(args[0], "__code__", None)
            return getattr(old, "co_filename", None) != getattr(args[2], "co_filename", "")
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
        """(the immediate Python caller's file, the nearest caller outside the stdlib;
        None when the whole stack is the standard library's). The whole stack is walked:
        nested imports alone can stack dozens of stdlib and importlib frames."""
        frame = getframe(2)
        immediate = frame.f_code.co_filename if frame is not None else ""
        while frame is not None:
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
        if event in ("exec", "compile", "sys._getframe", "code.__new__"):
            # Direct calls, or calls through modules that run code or walk frames on the
            # caller's behalf: the standard library also calls these for library code
            # (namedtuple, dataclasses, typing, types.coroutine), which is not flagged.
            via = _CODE_RUNNERS if event != "sys._getframe" else ("inspect.py",
                                                                  "traceback.py")
            hit = untrusted(immediate) or (untrusted(nearest) and immediate.endswith(via))
        elif event in ("object.__setattr__", "object.__delattr__"):
            # A thread started on a builtin or stdlib callable (threading.Timer(0, setattr,
            # ...)) has no frame of the agent's on its stack: no code outside the standard
            # library asked for it, and the standard library never swaps these.
            hit = nearest is None or untrusted(nearest) or untrusted(immediate)
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


class _Probe:
    def method(self):
        return self


_FUNCTION, _BOUND = type(_stdlib_dirs), type(_Probe().method)


def _code_files(obj, depth=4, top=True):
    """The files of the Python code an object runs: a function's (and what its closure
    holds), a bound method's function's, a class's methods' along its MRO, a container's
    items'; for the object itself (`top`), also its class's and its attributes' of those
    kinds (a finder's loader classes). Types are compared exactly, so nothing the object
    defines (``__getattr__``, properties, ``__class__``) runs or misleads."""
    kind = type(obj)
    if kind is _FUNCTION:
        yield obj.__code__.co_filename
        for cell in (obj.__closure__ or ()) if depth else ():
            try:
                yield from _code_files(cell.cell_contents, depth - 1, False)
            except ValueError:  # an empty cell
                continue
    elif kind is _BOUND or kind in (staticmethod, classmethod):
        yield from _code_files(obj.__func__, depth, False)
    elif kind is property:
        for part in (obj.fget, obj.fset, obj.fdel):
            yield from _code_files(part, depth, False)
    elif type in kind.__mro__:  # a class (a metaclass's instance included)
        for klass in type.__getattribute__(obj, "__mro__") if depth else ():
            if klass is not object:
                for member in list(type.__getattribute__(klass, "__dict__").values()):
                    yield from _code_files(member, depth - 1, False)
    elif kind in (list, tuple):
        for item in obj if depth else ():
            yield from _code_files(item, depth - 1, False)
    elif top:
        yield from _code_files(kind, depth, False)
        try:
            members = list(object.__getattribute__(obj, "__dict__").values())
        except (AttributeError, TypeError):
            members = []
        for member in members:
            yield from _code_files(member, depth - 1, False)


def _import_hooks_changed(baseline, untrusted):
    """Finders or path hooks added since start-up whose code (or the code they hold:
    loader classes, closures) comes from the agent's files: a finder could rewrite test
    modules as they load. pytest's assertion rewriter and the project's own finders are
    allowed; a class's `__module__` is not consulted (code can set it)."""
    allowed_meta, allowed_hooks = baseline
    for where, now, allowed in (("sys.meta_path", sys.meta_path, allowed_meta),
                                ("sys.path_hooks", sys.path_hooks, allowed_hooks)):
        for hook in now:
            if id(hook) not in allowed and any(map(untrusted, _code_files(hook))):
                return [where]
    return []


def _plugin_dirs():
    """Folders of pytest's and pluggy's own code."""
    import _pytest
    import pluggy
    import pytest

    return tuple(os.path.dirname(m.__file__) + "/" for m in (_pytest, pluggy, pytest))


def _foreign_hooks(pluginmanager, own, trusted):
    """Hook implementations that are neither pytest's, pluggy's, a conftest's nor this
    runner's: a plugin registered by the code under test (judged by its code's file)."""
    out = []
    for name, caller in list(vars(pluginmanager.hook).items()):
        impls = getattr(caller, "get_hookimpls", None)
        for impl in impls() if impls else ():
            if id(impl.function) in own or trusted(impl.function, name):
                continue
            out.append(f"plugin:{name}")
    return out[:5]


def _hook_owner(untrusted):
    """Whether a hook implementation is trusted: code in pytest's or pluggy's folders, a
    conftest file of the pristine tree, or an installed plugin's function of the hook's
    own name (a pristine conftest may load one through ``pytest_plugins``). A builtin, a
    ``partial`` or any callable without code of its own is not."""
    plugin_dirs = _plugin_dirs()

    def trusted(function, hook_name):
        if type(function) is _BOUND:
            function = function.__func__
        if type(function) is not _FUNCTION:
            return False
        code = function.__code__
        path = code.co_filename
        if untrusted(path) or path.startswith("<"):
            return False
        if path.startswith(plugin_dirs) or os.path.basename(path) == "conftest.py":
            return True
        return code.co_name == hook_name

    return trusted


def _code_of(item):
    """The code object a test item runs (a function, or a unittest method)."""
    obj = getattr(item, "obj", None)
    obj = getattr(obj, "__func__", obj)
    return getattr(obj, "__code__", None)


class _Hooks:
    """The plugin pytest sees: hook functions only. The outcomes, the baselines and the
    "already reported" state live in the closures of `_recorder`, not on this object, so
    the plugin manager's listing leads to nothing that switches the checks off."""


def _module_of(item):
    """The Python module a test item comes from (None for other kinds of items)."""
    try:
        return getattr(item, "module", None)
    except Exception:  # noqa: BLE001 - an item kind whose module cannot be had
        return None


def _module_bindings(module):
    """ids of a test module's functions, classes and modules, by name."""
    kinds = (_FUNCTION, type, type(sys), type(len))
    return {name: id(value) for name, value in list(vars(module).items())
            if isinstance(value, kinds)}


def _imports_of(path, package):
    """(name, module, attribute) for each ``from module import attribute as name`` at the
    top level of a test file (its text is the pristine one: read-only in the sandbox),
    leaving out names the file binds in any other way (a test module may wrap what it
    imports). A thread can rebind a test module's name before any snapshot of the module
    is taken; it cannot make the name's value what the import gave."""
    import ast

    with open(path, "rb") as fh:
        tree = ast.parse(fh.read())
    imported, other = [], set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            base = (package or "").split(".")
            base = base[:len(base) - node.level + 1] if node.level else []
            source = ".".join([p for p in base if p] + ([node.module] if node.module else []))
            imported += [(a.asname or a.name, source, a.name) for a in node.names
                         if a.name != "*"]
        else:
            other.update(n.id for n in ast.walk(node) if isinstance(n, ast.Name)
                         and not isinstance(n.ctx, ast.Load))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                other.add(node.name)
            if isinstance(node, ast.Import):
                other.update((a.asname or a.name).split(".")[0] for a in node.names)
    names = [name for name, _, _ in imported]
    return [i for i in imported if i[0] not in other and names.count(i[0]) == 1]


def _imports_differ(module, imports):
    """Names of a test module that are no longer what its imports bound."""
    missing = object()
    out = []
    namespace = vars(module)
    for name, source, attribute in imports:
        origin = sys.modules.get(source)
        if origin is None or name not in namespace:
            continue
        expected = getattr(origin, attribute, missing)
        if expected is missing:
            expected = sys.modules.get(f"{source}.{attribute}", missing)
        if expected is not missing and namespace[name] is not expected:
            out.append(name)
    return out


def _recorder(report, check_every, import_hooks, untrusted):
    """(the plugin, a function that checks everything once more and returns the
    outcomes). Every check reports TAMPER with what changed; the trainer then scores 0.
    Each outcome is reported as soon as pytest reports it."""
    fingerprint, outcomes, state = _fingerprint, {}, {"count": 0}
    baseline, codes, own, reported, sent, modules = {}, {}, set(), [], {}, {}

    def tamper(what):
        if what and not reported:
            reported.extend(what)
            report("TAMPER " + " ".join(map(str, what[:5])))

    def record(nodeid, status):
        outcomes[nodeid] = status
        if sent.get(nodeid) != status:
            sent[nodeid] = status
            report(f"R {status} {nodeid}")

    def item_changed(nodeid, with_module=True):
        """A test's code replaced (or from the agent's files), or its module's functions
        or classes rebound since collection."""
        item, code = codes[nodeid]
        now = _code_of(item)
        if now is not code or (now is not None and untrusted(now.co_filename)):
            return [nodeid]
        module = _module_of(item) if with_module else None
        if module is not None and id(module) in modules:
            return module_changed(module)
        return []

    def module_changed(module):
        _, bindings, imports = modules[id(module)]
        if _module_bindings(module) != bindings or _imports_differ(module, imports):
            return [f"globals:{getattr(module, '__name__', '?')}"]
        return []

    def check(session=None):
        try:
            if "fingerprint" in baseline:
                now = fingerprint()
                tamper([".".join(map(str, k)) for k, v in baseline["fingerprint"].items()
                        if now.get(k) != v])
            tamper(_import_hooks_changed(import_hooks, untrusted))
            if "pm" in baseline:
                tamper(_foreign_hooks(baseline["pm"], own, baseline["trusted"]))
            tamper([what for nodeid in codes for what in item_changed(nodeid, False)])
            tamper([what for module, *_ in modules.values() for what in module_changed(module)])
        except Exception as exc:  # noqa: BLE001 - a check that cannot finish is no pass
            tamper([f"check:{type(exc).__name__}"])

    def pytest_sessionstart(session):
        baseline["fingerprint"] = fingerprint()
        baseline["pm"] = session.config.pluginmanager
        baseline["trusted"] = _hook_owner(untrusted)

    def pytest_collectreport(report):
        if report.failed:
            record(report.nodeid, "ERROR")
        check()

    def pytest_collection_finish(session):
        for item in session.items:
            codes[item.nodeid] = (item, _code_of(item))
            module = _module_of(item)
            path = str(getattr(item, "path", ""))
            if module is not None and id(module) not in modules and path.endswith(".py") \
                    and not untrusted(path):
                imports = _imports_of(path, getattr(item.module, "__package__", None))
                modules[id(module)] = (module, _module_bindings(module), imports)
        check()

    def pytest_runtest_logreport(report):
        old = outcomes.get(report.nodeid)
        if old not in ("FAILED", "ERROR"):
            record(report.nodeid, _status(report, old))
        if report.when == "teardown":
            state["count"] += 1
            if report.nodeid in codes:
                try:
                    tamper(item_changed(report.nodeid))
                except Exception as exc:  # noqa: BLE001 - as in check()
                    tamper([f"check:{type(exc).__name__}"])
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


# --- hidden checks (docs/swe.md, "Hidden checks") -----------------------------------------
#
# The trainer judges a fix also by calls of the package's functions on inputs the agent
# never sees. In a pytest run on the gold tree (trusted code), the runner records the
# plain-data arguments of the calls the target tests make of the package's module-level
# functions (and of the functions the gold patch changes). Inputs derived from them are
# then called in a separate process that imports the package and runs nothing else
# (`_checks_main`): on the gold tree, on the buggy tree, and in every scored run on the
# agent's tree. Outputs leave as typed JSON, compared by the trainer outside the sandbox, so
# code under test that shapes an output must compute it; a fresh process carries no state
# from the tests, holds no pytest object and no output channel the agent reads.

_MAX_ITEMS, _MAX_TEXT, _MAX_DEPTH = 2000, 10_000, 20


def _std_values():
    """{type: its exact text} for the standard library's value types a result may hold:
    dates, times and durations (ISO text; a duration's days, seconds and microseconds),
    decimals and fractions (their ``str``). Only the types themselves, never a subclass,
    and only those of modules already imported (nothing is imported here)."""
    out = {}
    dt, decimal, fractions = (sys.modules.get(n) for n in ("datetime", "decimal", "fractions"))
    if dt is not None:
        for kind in (dt.datetime, dt.date, dt.time):
            out[kind] = kind.isoformat
        out[dt.timedelta] = lambda d: f"{d.days} {d.seconds} {d.microseconds}"
    if decimal is not None:
        out[decimal.Decimal] = decimal.Decimal.__str__
    if fractions is not None:
        out[fractions.Fraction] = fractions.Fraction.__str__
    return out


def _std_value(name, text):
    """The standard library's value `_std_values` wrote as (`name`, `text`)."""
    if name in ("datetime", "date", "time"):
        import datetime

        return getattr(datetime, name).fromisoformat(text)
    if name == "timedelta":
        import datetime

        days, seconds, micro = (int(x) for x in text.split())
        return datetime.timedelta(days=days, seconds=seconds, microseconds=micro)
    if name == "Decimal":
        import decimal

        return decimal.Decimal(text)
    if name == "Fraction":
        import fractions

        return fractions.Fraction(text)
    raise ValueError(f"not a standard value: {name}")


def _std_variants(form, rng):
    """Changed versions of a standard library value (`_std_value`): a date or time moved
    by random days, hours, minutes or seconds (within the type's range), one with a UTC
    offset given others, a duration and a decimal or fraction scaled, negated and moved by
    random offsets of 1 to 9 digits (a decimal or fraction also by 1 to 11)."""
    import datetime

    name, text = form[1], form[2]
    value = _std_value(name, text)
    out = []
    if name in ("datetime", "date"):
        for days in (rng.randint(1, 40), -rng.randint(1, 40), rng.randint(100, 20000),
                     -rng.randint(100, 20000)):
            try:  # noqa: SIM105 - the runner imports only what it must
                out.append(value + datetime.timedelta(days=days))
            except OverflowError:
                pass
        if name == "datetime":
            out += [value + datetime.timedelta(seconds=rng.randint(1, 86399)),
                    value.replace(microsecond=rng.randint(1, 999999))]
    elif name == "time":
        out += [value.replace(hour=rng.randrange(24)), value.replace(minute=rng.randrange(60)),
                value.replace(second=rng.randrange(60)),
                value.replace(microsecond=rng.randint(1, 999999))]
    elif name == "timedelta":
        out += [value * rng.randint(2, 9), -value, value + datetime.timedelta(
            seconds=_offset(rng) % 10 ** 8), value + datetime.timedelta(days=rng.randint(1, 400))]
    else:
        kind = type(value)
        out += [value * rng.randint(2, 9), -value, value + _offset(rng),
                value + kind(rng.randint(1, 9)) / kind(10 ** rng.randint(1, 4)),
                value + rng.randint(1, 11), value - rng.randint(1, 11)]
    if name in ("datetime", "time") and value.tzinfo is not None:
        # other UTC offsets: whole hours, quarter hours and any minute, east and west (a
        # change keyed on the tested offsets' range meets the others)
        for minutes in (60 * rng.randint(-12, 14), 15 * rng.randint(-48, 56),
                        rng.randint(-1439, 1439), -rng.randint(1, 300)):
            out.append(value.replace(tzinfo=datetime.timezone(
                datetime.timedelta(minutes=minutes))))
    std = _std_values()
    return [["std", name, std[type(v)](v)] for v in out if v != value and type(v) in std]


def _class_name(kind):
    """A class's qualified name in an outcome; for the stand-in of a test's bare subclass
    (`_subclass`, found by identity: nothing of the class runs), its base's name marked
    as such, since the stand-in's own name is drawn per process."""
    for base, stand_in in list(_SUBCLASSES.items()):
        if stand_in is kind:
            return f"<bare subclass of {type.__getattribute__(base, '__qualname__')}>"
    return type.__getattribute__(kind, "__qualname__")


def _encode(value, objects=False, values=False):
    """An exactly typed JSON-able form of plain data (None, bool, int, float, str, bytes,
    and lists, tuples, sets and dicts of them), with `values` or `objects` of the standard
    library's value types (`_std_values`, which `_decode` rebuilds), and with `objects` of
    instances of Python classes by their class name and attributes (an outcome's form,
    compared, never rebuilt); ValueError for anything else. Types are
    compared exactly: a subclass (a str whose ``__eq__`` always holds) is not plain."""
    budget = [_MAX_ITEMS]
    std = _std_values() if objects or values else {}

    def enc(v, depth):
        budget[0] -= 1
        if budget[0] < 0 or depth > _MAX_DEPTH:
            raise ValueError("too large")
        kind = type(v)
        if v is None:
            return ["none"]
        if v is NotImplemented or v is Ellipsis:  # what a comparison returns to decline
            return ["const", "NotImplemented" if v is NotImplemented else "Ellipsis"]
        if kind is bool:
            return ["bool", v]
        if kind is int:
            return ["int", str(v)]  # a string: JSON numbers lose digits past 2**53
        if kind is float:
            return ["float", float.__repr__(v)]
        if kind is str or kind is bytes:
            if len(v) > _MAX_TEXT:
                raise ValueError("too large")
            return ["str", v] if kind is str else ["bytes", bytes.hex(v)]
        if kind is list or kind is tuple:
            return ["list" if kind is list else "tuple", [enc(x, depth + 1) for x in v]]
        if kind is set or kind is frozenset:
            items = sorted((enc(x, depth + 1) for x in v), key=json.dumps)
            return ["set" if kind is set else "frozenset", items]
        if kind is dict:
            return ["dict", [[enc(k, depth + 1), enc(x, depth + 1)]
                             for k, x in dict.items(v)]]
        if kind is slice:  # `seq[1:3]` calls __getitem__ with one
            return ["slice", [enc(v.start, depth + 1), enc(v.stop, depth + 1),
                              enc(v.step, depth + 1)]]
        if kind in std:
            # A value of the standard library (a date, a duration, a decimal): its type's
            # name and its own exact text, read with the type's own method.
            return ["std", kind.__qualname__, std[kind](v)]
        if objects and kind.__module__ != "builtins" and tuple in kind.__mro__:
            # A named tuple (a result record): its class's name and its items by field,
            # read with tuple's own methods (nothing of the object's runs).
            size = tuple.__len__(v)
            if size > _MAX_ITEMS:
                raise ValueError("too large")
            fields = type.__getattribute__(kind, "_fields") if "_fields" in dir(kind) else ()
            if type(fields) is not tuple or len(fields) != size or \
                    any(type(f) is not str for f in fields):
                fields = tuple(str(i) for i in range(size))
            name = _class_name(kind)
            return ["object", name if type(name) is str else "?",
                    [[f, enc(tuple.__getitem__(v, i), depth + 1)]
                     for i, f in enumerate(fields)]]
        if objects and kind.__module__ != "builtins":
            # An instance of a class of Python code (a result object): its class's name and
            # its attributes, read from its __dict__ and slots (`_state`).
            fields = _state(v)
            name = _class_name(kind)
            return ["object", name if type(name) is str else "?",
                    [[k, enc(x, depth + 1)] for k, x in sorted(dict.items(fields))
                     if type(k) is str]]
        raise ValueError("not plain data")

    return enc(value, 0)


def _decode(form):
    """The value `_encode` wrote `form` for (a fresh object on every call)."""
    tag = form[0]
    if tag == "none":
        return None
    if tag == "const":
        return NotImplemented if form[1] == "NotImplemented" else Ellipsis
    if tag in ("bool", "str"):
        return form[1]
    if tag == "int":
        return int(form[1])
    if tag == "float":
        return float(form[1])
    if tag == "bytes":
        return bytes.fromhex(form[1])
    if tag == "std":
        return _std_value(form[1], form[2])
    if tag == "inst":  # an object of the package's: a fresh one holding the state
        owner = _target(form[1], form[2])
        obj = object.__new__(_subclass(owner) if form[4:] == ["sub"] else owner)
        for name, item in _decode(form[3]).items():
            object.__setattr__(obj, name, item)
        return obj
    items = [_decode(x) for x in form[1]] if tag != "dict" else None
    if tag == "list":
        return items
    if tag == "tuple":
        return tuple(items)
    if tag == "set":
        return set(items)
    if tag == "frozenset":
        return frozenset(items)
    if tag == "slice":
        return slice(*items)
    return {_decode(k): _decode(v) for k, v in form[1]}


class _CheckTimeout(BaseException):
    """Raised by the timer in a hidden check that runs too long (BaseException, so
    ``except Exception`` in the code under test does not swallow it)."""


def _target(module, qualname):
    import importlib

    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _at_random_depth(function, args, kwargs):
    """``function(*args, **kwargs)`` called with a random room to the recursion limit:
    850 to 1100 frames, which spans what a call has under pytest (about 960) and from a
    script (about 997). Code that measures its room (recursing until RecursionError) or
    its depth cannot tell a check's call from a test's or a user's."""
    import random

    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + random.SystemRandom().randint(850, 1100))
    try:
        return function(*args, **kwargs)
    finally:
        sys.setrecursionlimit(limit)


def _outcome(function, call, seconds, owner=None, name=None):
    """The exactly typed outcome of ``function(*args, **kwargs)`` for the encoded `call`:
    ["value", form], ["iter", form] (an iterator's first items), ["raise", exception
    class name], ["timeout"] or ["opaque"] (a result that is not plain data). A method's
    call (its first argument ``["self", state]``) runs on a fresh instance of `owner`
    holding that state, and its outcome is the pair (result, the instance's state after
    the call), so a method that changes its object is judged by the change. A class
    method's call (``["cls"]`` first) runs on `owner`, or on a bare subclass of it
    (``["cls", "sub"]``: its attribute `name`); a property's (`function` is the property
    object) calls its getter, or its setter where the call passes a value."""
    import signal

    def alarm(signum, frame):
        raise _CheckTimeout()

    args, kwargs = call
    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        receiver = None
        if args[1] and args[1][0][0] == "new":  # a constructor: judged by the new object
            made = _at_random_depth(owner, _decode(["list", args[1][1:]]), _decode(kwargs))
            signal.setitimer(signal.ITIMER_REAL, 0)
            try:
                return ["value", _encode(_state(made), objects=True)]
            except (ValueError, RecursionError, TypeError):
                return ["opaque"]
        if args[1] and args[1][0][0] == "cls":  # a class method, on the class or a subclass
            if args[1][0][1:] == ["sub"]:
                function = getattr(_subclass(owner), name)
            values = _decode(["list", args[1][1:]])
        elif args[1] and args[1][0][0] == "self":
            receiver = _holding(_subclass(owner) if args[1][0][2:] == ["sub"] else owner,
                                args[1][0][1])
            values = [receiver, *_decode(["list", args[1][1:]])] \
                if args[1][-1][0] != "hashref" else [receiver]
        else:
            values = _decode(args)
        if type(function) is property:  # a property's getter (its setter with a value)
            function = function.fget if len(values) == 1 else function.fset
        value = _at_random_depth(function, values, _decode(kwargs))
        operator = _OPERATORS.get(getattr(function, "__name__", None)) \
            if value is NotImplemented and len(values) == 2 else None
        if operator is not None:
            # what a caller of `a == b` or `a + b` gets: the other operand's reflected method,
            # then the default (identity, or TypeError), so a fix that returns False where
            # the gold code declines with NotImplemented is judged the same
            value = _at_random_depth(operator, values, {})
        if args[1] and args[1][-1][0] == "hashref":
            # A hash's value follows the process's hash seed; whether it equals the hash of
            # the object the test hashed does not (semver's hash leaves the build out)
            value = value == _at_random_depth(function, [_holding(owner, args[1][-1][1])], {})
        kind = "value"
        if hasattr(type(value), "__next__") and type(value) not in (str, bytes):
            items, kind = [], "iter"
            for item in value:
                items.append(item)
                if len(items) > _MAX_ITEMS // 2:
                    break
            value = items
        signal.setitimer(signal.ITIMER_REAL, 0)
        if receiver is not None:
            value = (value, _state(receiver))
        try:
            return [kind, _encode(value, objects=True)]
        except (ValueError, RecursionError, TypeError):
            return ["opaque"]
    except _CheckTimeout:
        return ["timeout"]
    except BaseException as exc:  # noqa: BLE001 - an exception is an outcome like any other
        return ["raise", type(exc).__name__]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _holding(owner, state):
    """A fresh instance of `owner` holding the encoded attribute `state`, made without
    calling its constructor."""
    obj = object.__new__(owner)
    for name, item in _decode(state).items():
        object.__setattr__(obj, name, item)
    return obj


def _state(obj):
    """An object's attributes: its ``__dict__`` and the slots its classes declare (read
    with object's own lookup), as a new dict; ValueError where neither is plain."""
    kind, state, slotted = type(obj), {}, False
    for base in type.__getattribute__(kind, "__mro__")[:-1]:
        slots = type.__getattribute__(base, "__dict__").get("__slots__", ())
        for name in (slots,) if type(slots) is str else slots:
            slotted = True
            if type(name) is not str:
                raise ValueError("not plain data")
            if name not in ("__dict__", "__weakref__"):
                try:  # noqa: SIM105 - the runner imports only what it must
                    state[name] = object.__getattribute__(obj, name)
                except AttributeError:
                    pass  # a slot never set
    try:
        fields = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        if not slotted:
            raise ValueError("not plain data") from None
        fields = {}
    if type(fields) is not dict:
        raise ValueError("not plain data")
    state.update(fields)
    return state


_BARE_CLASS_KEYS = frozenset({"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__",
                               "__firstlineno__", "__static_attributes__"})


def _bare_base(kind, sources):
    """The one base of `kind` where `kind` is a class outside the package's `sources` that
    only names it (a test's ``class Sub(Version): pass``, which asks how the package treats
    a subclass), else None."""
    bases = type.__getattribute__(kind, "__bases__")
    if type(kind) not in _PLAIN_TYPES or len(bases) != 1 or \
            type(bases[0]) not in _PLAIN_TYPES or \
            not set(type.__getattribute__(kind, "__dict__")) <= _BARE_CLASS_KEYS:
        return None
    module = sys.modules.get(type.__getattribute__(kind, "__module__"))
    return None if getattr(module, "__file__", None) in sources else bases[0]


_SUBCLASSES = {}
_PLAIN_TYPES = (type, abc.ABCMeta)
"""The types of the classes whose methods are checked: `type`, and `abc.ABCMeta`, the type
of every class derived from an abstract base class of the standard library
(`collections.abc.MutableMapping`, `abc.ABC`); its own code is the standard library's, and a
project's metaclass, whose code could tell a check from real use, is neither."""


def _subclass(base):
    """A class of this process that only names `base`, standing for a test's bare subclass
    (`_bare_base`): the same for every check, as the test's is for its calls. Its name is
    drawn afresh in each process (a project's `__repr__` shows it): a fixed one would let a
    change keep the bug for every subclass but those of that name."""
    if base not in _SUBCLASSES:
        name = "".join(chr(97 + b % 26) for b in os.urandom(10)).capitalize()
        _SUBCLASSES[base] = type(name, (base,), {})
    return _SUBCLASSES[base]


def _instance(obj, sources):
    """``["inst", module, qualname, state]`` for an argument that is an object of a class
    of the package (defined in one of its `sources`), rebuilt in a check as a method's
    object is (`_receiver`): semver's ``is_compatible(self, other)`` takes a `Version`.
    An object of a test's bare subclass of such a class (`_bare_base`) is the same with
    ``"sub"`` appended, rebuilt as an object of a bare subclass. ValueError for anything
    else."""
    kind = type(obj)
    sub = _bare_base(kind, sources)
    kind = sub or kind
    module = type.__getattribute__(kind, "__module__")
    qualname = type.__getattribute__(kind, "__qualname__")
    if type(module) is not str or type(qualname) is not str or "<" in qualname or \
            getattr(sys.modules.get(module), "__file__", None) not in sources:
        raise ValueError("not a class of the package")
    try:
        if _target(module, qualname) is not kind:
            raise ValueError("not reachable by its name")
    except (ImportError, AttributeError):
        raise ValueError("not reachable by its name") from None
    _receiver(obj, module, qualname + ".method", sources)
    form = ["inst", module, qualname, _encode(_state(obj), values=True)]
    return form + ["sub"] if sub else form


def _receiver(obj, module, qualname, sources):
    """``["self", state]`` for the object a method of class ``qualname``'s owner was called
    on, where a fresh instance can hold that state: an instance of exactly that class of
    `module`, every class of its lineage Python code without its own ``__new__``, its
    attributes (`_state`) plain data; an object of a test's bare subclass of that class
    (`_bare_base`) as ``["self", state, "sub"]``. ValueError otherwise."""
    sub = _bare_base(type(obj), sources)
    kind = sub or type(obj)
    if type.__getattribute__(kind, "__qualname__") != qualname.rsplit(".", 1)[0] or \
            type.__getattribute__(kind, "__module__") != module:
        raise ValueError("another class")
    for base in type.__getattribute__(kind, "__mro__")[:-1]:
        if type.__getattribute__(base, "__module__") == "builtins" or \
                "__new__" in type.__getattribute__(base, "__dict__"):
            raise ValueError("not a plain class")
    form = ["self", _encode(_state(obj), values=True)]
    return form + ["sub"] if sub else form


def _member_kind(module, qualname):
    """The type of what the class of ``qualname``'s owner holds under its name in its own
    namespace (`staticmethod`, `classmethod`, `property`, or a function's type). Read
    without running anything of the class: the recording runs on the gold tree only, but
    a descriptor's ``__get__`` would hide what kind of method it is."""
    owner_name, _, name = qualname.rpartition(".")
    owner = _target(module, owner_name)
    if type(owner) not in _PLAIN_TYPES:
        raise ValueError("not a plain class")
    return type(type.__getattribute__(owner, "__dict__").get(name))


def _class_receiver(cls, module, qualname, sources):
    """``["cls"]`` for the class a class method of ``qualname``'s owner was called on where
    it is that class, ``["cls", "sub"]`` where it is a test's bare subclass of it
    (`_bare_base`); ValueError for any other class (a subclass of the package's own)."""
    owner = _target(module, qualname.rpartition(".")[0])
    if type(cls) not in _PLAIN_TYPES:
        raise ValueError("not a class")
    if cls is owner:
        return ["cls"]
    if _bare_base(cls, sources) is owner:
        return ["cls", "sub"]
    raise ValueError("another class")


def _recording(sources, targets, tests, calls, limit=40):
    """A profile function that keeps the encoded arguments of calls of module-level
    functions and methods of the package's `sources` made directly from `tests` files, and
    of calls of the `targets` ((file, qualname) of the functions and methods the gold patch
    changes) from anywhere, as ``[module, qualname, encoded call, from a test]`` (at most
    `limit` different calls per function). Arguments that are their parameter's default
    are left out of the call (a default is often a sentinel object), except a string, a
    number, a bool or None (`_SCALARS`), passed by keyword instead, so that a check varies
    a parameter no test passes (a change keyed on ``gender == "male"``, the default, meets
    other values); a method's object is its state (`_receiver`), and a method called on an
    object that is not plain data is not kept."""
    seen, counts, found, bound, kinds = set(), {}, {}, {}, {}

    def arguments(frame, code, module, qualname):
        if code not in found:
            found[code] = _defaults(module, code, qualname)
        defaults, kwdefaults = found[code]
        names, values = code.co_varnames, frame.f_locals
        positional = code.co_argcount
        keyword = positional + code.co_kwonlyargcount
        args = [values[n] for n in names[:positional]]
        kwargs = {n: values[n] for n in names[positional:keyword]
                  if not (n in kwdefaults and values[n] is kwdefaults[n]
                          and type(values[n]) not in _SCALARS)}
        varargs = list(values[names[keyword]]) if code.co_flags & 0x04 else []
        if not varargs:  # trailing arguments equal to their defaults are left out...
            first = positional - len(defaults)
            while args and len(args) > first and args[-1] is defaults[len(args) - 1 - first]:
                value = args.pop()
                if type(value) in _SCALARS and len(args) >= code.co_posonlyargcount:
                    kwargs[names[len(args)]] = value   # ...but for plain ones, by keyword
        args += varargs
        if code.co_flags & 0x08:  # **kwargs
            kwargs.update(values[names[keyword + bool(code.co_flags & 0x04)]])
        if "." in qualname and (module, qualname) not in kinds:
            kinds[module, qualname] = _member_kind(module, qualname)
        kind = kinds[module, qualname] if "." in qualname else None
        if kind is None or kind is staticmethod:  # a function: its arguments alone
            return json.dumps([encoded(args), _encode(kwargs, values=True)])
        if kind is classmethod:  # called on the class (or a test's bare subclass of it)
            return json.dumps([["list", [_class_receiver(args[0], module, qualname, sources),
                                         *encoded(args[1:])[1]]],
                               _encode(kwargs, values=True)])
        receiver = _receiver(args[0], module, qualname, sources)
        if qualname.endswith(".__init__"):  # a new object: the check makes its own
            receiver = ["new"]
        if qualname.endswith(".__hash__"):  # judged against the object the test hashed
            return json.dumps([["list", [receiver, ["hashref", receiver[1]]]],
                               _encode(kwargs, values=True)])
        return json.dumps([["list", [receiver, *encoded(args[1:])[1]]],
                           _encode(kwargs, values=True)])

    def encoded(values):
        """Positional arguments: plain data, or objects of the package (`_instance`)."""
        forms = []
        for value in values:
            try:
                forms.append(_encode(value, values=True))
            except ValueError:
                forms.append(_instance(value, sources))
        if len(json.dumps(forms)) > 20 * _MAX_TEXT:
            raise ValueError("too large")
        return ["list", forms]

    def profile(frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        path, qualname = code.co_filename, code.co_qualname
        if path not in sources:
            return
        module = frame.f_globals.get("__name__", "")
        enclosing = qualname
        if ".<locals>." in qualname:  # a decorator's wrapper: called by the name it is bound to
            if code.co_name.startswith("<"):  # a lambda, a comprehension
                return
            enclosing = qualname.split(".<locals>.", 1)[0]
            try:
                first = _first_argument(frame, code)
                key = (code, type(first), *(id(frame.f_locals[n]) for n in code.co_freevars))
                if key not in bound:
                    bound[key] = _bound_name(frame, code, first)
                module, qualname = bound[key]
            except Exception:  # noqa: BLE001 - a profile function that raises is switched off
                return
        if "<" in qualname or qualname.count(".") > 1:
            return
        name = qualname.rsplit(".", 1)[-1]
        if "." in qualname and (name in _UNCHECKED_SPECIAL
                                or name.startswith("__") and not name.endswith("__")
                                or not (code.co_argcount or code.co_flags & 0x04)):
            return  # special methods a check cannot call as a test does, private names
        caller = frame.f_back
        direct = caller is not None and caller.f_code.co_filename in tests
        if not direct and (path, qualname) not in targets and (path, enclosing) not in targets:
            return
        if code.co_flags & 0x20 and not set(frame.f_locals) <= set(
                code.co_varnames[:code.co_argcount + code.co_kwonlyargcount + 2]
                + code.co_freevars):
            return  # a generator resumed (its locals hold more than its arguments)
        key = (module, qualname)
        if counts.get(key, 0) >= limit:
            return
        try:
            text = arguments(frame, code, module, qualname)
        except (KeyError, ValueError, TypeError, RecursionError, IndexError,
                AttributeError, ImportError):
            return
        if (key, text) not in seen:
            seen.add((key, text))
            counts[key] = counts.get(key, 0) + 1
            calls.append([module, qualname, text, direct])

    return profile


_NO_ARGUMENT = object()


def _first_argument(frame, code):
    """The first positional argument of the call running in `frame` (a method's object),
    also where the function takes ``*args`` only (``def wrapper(*args, **kwargs)``)."""
    if code.co_argcount:
        return frame.f_locals[code.co_varnames[0]]
    if code.co_flags & 0x04:
        rest = frame.f_locals[code.co_varnames[code.co_kwonlyargcount]]
        return rest[0] if type(rest) is tuple and rest else _NO_ARGUMENT
    return _NO_ARGUMENT


def _bound_name(frame, code, first):
    """(module, qualname) under which the package binds the local function running in
    `frame` (the ``wrapper`` a decorator returns): the method of `first`'s class (or a
    base class) or the function of the frame's module whose code and closure are the
    frame's; ``<unbound>`` where there is none (a closure kept elsewhere, a function
    decorated in another module than its decorator's). Only plain functions (and those
    inside static and class methods) are looked at: nothing of the package runs."""
    free = [frame.f_locals[name] for name in code.co_freevars]

    def runs_here(value):
        if type(value) in (staticmethod, classmethod):
            value = value.__func__
        if type(value) is not type(_bound_name):
            return False
        cells = value.__closure__ or ()
        return value.__code__ is code and len(cells) == len(free) and all(
            cell.cell_contents is item for cell, item in zip(cells, free))

    if first is not _NO_ARGUMENT:
        for kind in type(first).__mro__[:-1]:
            for name, value in type.__getattribute__(kind, "__dict__").items():
                if type(name) is str and runs_here(value):
                    return kind.__module__, f"{type.__getattribute__(kind, '__qualname__')}.{name}"
    for name, value in list(frame.f_globals.items()):
        if type(name) is str and runs_here(value):
            return frame.f_globals["__name__"], name
    return None, "<unbound>"


_OPERATORS = {
    "__eq__": lambda a, b: a == b, "__ne__": lambda a, b: a != b,
    "__lt__": lambda a, b: a < b, "__le__": lambda a, b: a <= b,
    "__gt__": lambda a, b: a > b, "__ge__": lambda a, b: a >= b,
    "__add__": lambda a, b: a + b, "__radd__": lambda a, b: b + a,
    "__sub__": lambda a, b: a - b, "__rsub__": lambda a, b: b - a,
    "__mul__": lambda a, b: a * b, "__rmul__": lambda a, b: b * a,
    "__truediv__": lambda a, b: a / b, "__rtruediv__": lambda a, b: b / a,
    "__floordiv__": lambda a, b: a // b, "__mod__": lambda a, b: a % b,
    "__rfloordiv__": lambda a, b: b // a, "__rmod__": lambda a, b: b % a,
    "__pow__": lambda a, b: a ** b, "__rpow__": lambda a, b: b ** a,
    "__matmul__": lambda a, b: a @ b, "__rmatmul__": lambda a, b: b @ a,
    "__and__": lambda a, b: a & b, "__rand__": lambda a, b: b & a,
    "__or__": lambda a, b: a | b, "__ror__": lambda a, b: b | a,
    "__xor__": lambda a, b: a ^ b, "__rxor__": lambda a, b: b ^ a,
    "__lshift__": lambda a, b: a << b, "__rlshift__": lambda a, b: b << a,
    "__rshift__": lambda a, b: a >> b, "__rrshift__": lambda a, b: b >> a,
    "__divmod__": lambda a, b: divmod(a, b), "__rdivmod__": lambda a, b: divmod(b, a),
}
"""The expression each binary special method serves, for an outcome of NotImplemented."""

_UNCHECKED_SPECIAL = frozenset({
    "__new__", "__del__", "__init_subclass__", "__set_name__", "__class_getitem__",
    "__getattribute__", "__getattr__", "__setattr__", "__delattr__", "__dir__", "__get__",
    "__set__", "__delete__", "__instancecheck__", "__subclasscheck__", "__subclasshook__",
    "__reduce__", "__reduce_ex__", "__getstate__", "__setstate__", "__copy__",
    "__deepcopy__", "__sizeof__", "__enter__", "__exit__", "__next__", "__await__",
    "__aiter__", "__anext__", "__aenter__", "__aexit__", "__post_init__"})
"""Special methods that are not recorded: the interpreter calls them on its own (attribute
access, pickling, copying, class creation, collection) or they act on a state a fresh
object holding the recorded attributes does not have (a context entered, an iterator
part way through). Every other special method a test calls (`v[1:3]` calls
`__getitem__`, `x in v` `__contains__`, a test's ``assert a == b`` `__eq__`, `date -
duration` `__rsub__`, `str(v)` `__str__`, `reversed(v)` `__reversed__`, `v[k] = x`
`__setitem__`, `v(x)` `__call__`) or the gold patch changes is recorded and checked like
other methods: each is a function of its object's state and its arguments. A constructor
is called on its arguments and judged by the new object's state (`Version(2)`). A
`__repr__` that shows an address gives each process another output, and a check whose
gold outputs differ between processes is dropped. `__hash__` is judged by whether the
varied object's hash equals that of the object the test hashed (its value follows the
hash seed, which differs between processes; that equality does not)."""

_SCALARS = (str, int, float, bool, type(None))
"""Defaults kept in a recorded call (by keyword): plain values a check can vary (None by the
call's other plain arguments: `clamp(x, ceil=None)` gets ``ceil=x``; a bool by its other
value). Kept exactly as the gold tree's default is, so a change that makes a default
``True`` into ``1`` and branches on ``type(flag) is int`` meets the ``True`` a caller
passes."""


def _defaults(module, code, qualname):
    """(positional defaults, keyword-only defaults) of the function or method `qualname` of
    `module` whose code is `code` (through ``__wrapped__`` for decorated functions)."""
    try:
        function = sys.modules[module]
        for part in qualname.split("."):
            function = getattr(function, part)
        for _ in range(8):
            if getattr(function, "__code__", None) is code:
                return function.__defaults__ or (), function.__kwdefaults__ or {}
            function = function.__wrapped__
    except (AttributeError, KeyError):
        pass
    return (), {}


def _offset(rng):
    """A random offset of 2 to 9 digits: a threshold of any size up to a billion is
    crossed by some draw."""
    digits = rng.randint(2, 9)
    return rng.randint(10 ** digits, 10 ** (digits + 1) - 1)


def _variants(form, rng, twice=False):
    """Changed versions of one encoded argument: integers moved by random offsets of 2 to
    9 digits and by 1 to 3 (the sign kept), negated, drawn between the value and its
    negation, given new leading digits, or None in their place; floats scaled, negated or
    shrunk; a number written as a string negated or given new leading digits; strings
    doubled,
    extended by random letters, repeated to 60-600 characters, with one character
    changed within its class or to another class (`_one_changed`), in the other case, or
    with a punctuation or non-ASCII character inserted, lengthened by 1 to 12 characters
    of its own characters' classes or shortened by one; sequences reversed, doubled,
    shortened or lengthened by one item (an odd length where the tests' was even), or as
    the other kind of sequence (a tuple for a list)."""
    tag = form[0]
    if tag == "std":
        try:
            return _std_variants(form, rng)
        except (ValueError, OverflowError, ArithmeticError):
            return []
    if tag == "int":
        value = int(form[1])
        sign = -1 if value < 0 else 1
        return [["int", str(value + sign * _offset(rng))] for _ in range(2)] + [
            ["int", str(value + sign * rng.randint(1, 3))], ["none"],
            ["int", str(-value or -rng.randint(1, 9))],
            ["int", str(rng.randint(-abs(value), abs(value)))],
            # the same last digits under new leading ones (12 -> 3712): a change keyed on
            # the whole tested number meets others that end like it
            ["int", str(value + sign * rng.randint(1, 99) * 10 ** len(str(abs(value))))],
            ["int", str(value + sign * rng.randint(1, 10 ** rng.randint(2, 7))
                        * 10 ** len(str(abs(value))))]]
    if tag == "float":
        value = float(form[1])
        # scaled by 10**2 to 10**9 and moved by a 2- to 9-digit offset as well: a change
        # keyed on a float threshold of any size up to a billion meets values past it
        return [["float", repr(value * rng.choice((2.0, 3.5, 10.0)))],
                ["float", repr(-value or -rng.uniform(0.1, 9.0))],
                ["float", repr(value * rng.uniform(-1.0, 1.0))],
                ["float", repr((value or 1.0) * 10.0 ** rng.randint(2, 9))],
                ["float", repr(value + (-1 if value < 0 else 1) * _offset(rng))]]
    if tag == "str" and form[1]:
        text = form[1]
        word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz")
                       for _ in range(rng.randint(1, 12)))
        long = text * (rng.randint(60, 600) // len(text) + 1)
        spot = rng.randint(0, len(text))
        cased = text.upper() if text != text.upper() else text.lower()
        # a number written out: negated, and with new leading digits ("12" -> "3712")
        negated = [["str", "-" + text.lstrip("+")], ["str", str(rng.randint(1, 99)) + text]] \
            if text.lstrip("+").replace(".", "", 1).isdigit() else []
        # longer or shorter in its own characters' classes: a hex colour of 8 or 10 digits
        # (a check of a length the tests never pass must not meet a character the code
        # rejects first)
        classed = [c for c in text if any(c in chars for chars in _CLASSES)] or list(text)
        # a character outside ASCII replaced by another of its Unicode category nearby (a
        # Han character by another): a change keyed on the tested character meets others
        foreign = [i for i, c in enumerate(text) if ord(c) > 127]
        if foreign:
            negated += [["str", _other_nearby(text, rng.choice(foreign), rng)]
                        for _ in range(2)]
            # and by a letter of its script anywhere (a Katakana letter of the phonetic
            # extensions, a Han character of extension A): a fix kept to the block the
            # tests' characters sit in meets the rest of the script
            negated += [["str", _same_script(text, rng.choice(foreign), rng)],
                        ["str", _script_renamed(text, rng)]]
            # and by a character of the same Unicode properties in any script (a Bengali
            # virama for a Devanagari one): a rule kept to the tested script meets others
            negated += [["str", _same_properties(text, rng.choice(foreign), rng)]
                        for _ in range(2)]
        longer = text + "".join(_like(rng.choice(classed), rng)
                                for _ in range(rng.randint(1, 12)))
        # shorter by one to three characters: a length check kept to one side of the tested
        # length (``len(v) > 7`` for ``len(v) != 7``) meets a string two short
        negated += [["str", longer]] + [["str", text[:-k]] for k in (1, 2, 3)
                                        if len(text) > k]
        if any(c.isalpha() for c in text) and len(text) > 1:   # as a snake_case name
            cut = rng.randint(1, len(text) - 1)
            negated.append(["str", (text[:cut] + "_" + text[cut:]).lower()])
        if not twice:   # two changes at once (lower case and a "_" inserted): a change keyed
            singles = _variants(form, rng, twice=True)   # on two properties meets them
            negated += [["str", rng.choice(_variants(rng.choice(singles), rng, twice=True))[1]]
                        for _ in range(2) if singles]
        return [["str", text * 2], ["str", text + word], ["str", long[:600]],
                *(["str", _one_changed(text, rng)] for _ in range(2)),
                ["str", _one_changed(text, rng, other_class=True)], ["str", cased],
                ["str", text[:spot] + rng.choice("_- .éßЖ") + text[spot:]], *negated]
    if tag == "slice":  # each bound moved as an int is, or a missing one given
        out = []
        for i, part in enumerate(form[1]):
            news = _variants(part, rng, twice) if part[0] == "int" else [
                ["int", str(rng.randint(-6, 6))], ["int", str(rng.randint(1, 12))]]
            for new in news:
                if new[0] in ("int", "none") and (i < 2 or new != ["int", "0"]):
                    out.append(["slice", [*form[1][:i], new, *form[1][i + 1:]]])
        return out
    if tag in ("list", "tuple") and form[1]:
        items, other = form[1], "tuple" if tag == "list" else "list"
        # the other kind of sequence too: a change keyed on `isinstance(x, list)` meets a
        # tuple, which the tests never pass
        # lengths the tests never pass, in its own items: a change keyed on
        # ``4 < len(items) < 12`` meets them
        sizes = {rng.randint(len(items) + 2, 2 * len(items) + 9) for _ in range(2)}
        longer = [[tag, [items[i % len(items)] for i in range(n)]] for n in sorted(sizes)]
        return [[other, items]] + ([[tag, items[::-1]], [tag, items * 2], [tag, items[:-1]],
                                    [tag, items + items[:1]]] if len(items) > 1 else []) \
            + longer
    return []


_CLASSES = ("0123456789", "abcdef", "ghijklmnopqrstuvwxyz", "ABCDEF", "GHIJKLMNOPQRSTUVWXYZ")
"""Character classes a changed character stays in: digits stay digits, hex letters stay hex
letters, case is kept; other characters are kept as they are."""


def _like(char, rng):
    """A random character of `char`'s class (`_CLASSES`), a letter outside ASCII by another
    of its Unicode category nearby (`_other_nearby`: a Han character by another) or of its
    script anywhere (`_same_script`), each half the time, or `char` itself."""
    for chars in _CLASSES:
        if char in chars:
            return rng.choice(chars)
    if ord(char) > 127 and char.isalpha():
        return (_other_nearby if rng.random() < 0.5 else _same_script)(char, 0, rng)
    return char


def _other_nearby(text, i, rng):
    """`text` with its character at `i` replaced by another assigned one of the same
    Unicode category within 200 code points (itself if none is found)."""
    import unicodedata

    char = text[i]
    category = unicodedata.category(char)
    for _ in range(50):
        code = ord(char) + rng.choice((-1, 1)) * rng.randint(1, 200)
        if 128 <= code < 0x110000 and code != ord(char) and \
                unicodedata.category(chr(code)) == category:
            return text[:i] + chr(code) + text[i + 1:]
    return text


_SCRIPTS = {}
"""Per first word of a Unicode character name (its script for most letters: "KATAKANA",
"CJK", "GREEK"), the code points of planes 0 to 3 whose name has that word."""


def _same_script(text, i, rng):
    """`text` with its character at `i` replaced by another of the same Unicode category
    whose name has the first word of its name (itself where none is found)."""
    import unicodedata

    char = text[i]
    word = unicodedata.name(char, " ").split(" ")[0]
    if not word:
        return text
    if word not in _SCRIPTS:
        _SCRIPTS[word] = [code for code in range(128, 0x40000)
                          if word in unicodedata.name(chr(code), "").split(" ")]
    category = unicodedata.category(char)
    pool = _SCRIPTS[word]
    for _ in range(50):
        if not pool:
            break
        code = rng.choice(pool)
        if code != ord(char) and unicodedata.category(chr(code)) == category:
            return text[:i] + chr(code) + text[i + 1:]
    return text


_PROPERTIES = {}
"""Per (category, combining class, bidirectional class), the code points of planes 0 and 1
outside ASCII that have them."""


def _same_properties(text, i, rng):
    """`text` with its character at `i` replaced by another of the same general category,
    combining class and bidirectional class, from any script (itself where none is
    found)."""
    import unicodedata

    def key(char):
        return (unicodedata.category(char), unicodedata.combining(char),
                unicodedata.bidirectional(char))

    if not _PROPERTIES:
        for code in range(128, 0x20000):
            if unicodedata.category(chr(code)) not in ("Cn", "Co", "Cs"):
                _PROPERTIES.setdefault(key(chr(code)), []).append(code)
    pool = [c for c in _PROPERTIES.get(key(text[i]), ()) if c != ord(text[i])]
    return text[:i] + chr(rng.choice(pool)) + text[i + 1:] if pool else text


def _script_renamed(text, rng):
    """`text` with each distinct letter outside ASCII replaced by one letter of its script
    (`_same_script`), the same one wherever it occurs: a rule on the label's scripts (a
    Katakana middle dot needs a Katakana, Hiragana or Han letter beside it) meets a label
    with none of the tested block's letters left."""
    table = {}
    out = []
    for char in text:
        if ord(char) > 127 and char.isalpha():
            if char not in table:
                table[char] = _same_script(char, 0, rng)
            char = table[char]
        out.append(char)
    return "".join(out)


def _one_changed(text, rng, other_class=False):
    """`text` with one letter or digit replaced by another of its class (a date stays a
    date, a hex colour a hex colour), or with `other_class` a letter by a digit and a digit
    by a letter, or `text` reversed when it has no letter or digit."""
    spots = [i for i, c in enumerate(text) if any(c in chars for chars in _CLASSES)]
    if not spots:
        return text[::-1]
    i = rng.choice(spots)
    if other_class:  # a letter becomes a digit, a digit a letter
        pool = "abcdefghijklmnopqrstuvwxyz" if text[i].isdigit() else "0123456789"
        return text[:i] + rng.choice(pool) + text[i + 1:]
    new = text[i]
    for _ in range(20):
        new = _like(text[i], rng)
        if new != text[i]:
            break
    return text[:i] + new + text[i + 1:]


_LONG_CHARS = 500
"""The most characters a long sequence's encoding takes (`_reshaped`): with the call's
other arguments it stays under the trainer's cap on an encoded call (1000 characters)."""


_FOREIGN = (["none"], ["int", "5"], ["float", "1.5"], ["str", "x"], ["bytes", "78"],
            ["list", [["int", "1"]]], ["tuple", [["int", "1"], ["int", "2"]]],
            ["dict", [[["str", "k"], ["int", "1"]]]], ["set", [["int", "1"]]])
"""Values of the plain types, one each: an argument of another type than the tests pass
(None, bytes, a set) meets a validation kept to the types the tests pass (``TypeError`` for
a str, a dict and a list only, where the gold code rejects anything but a `Version`)."""


def _foreign(form, rng):
    """Three of `_FOREIGN` whose types are not `form`'s (none for a method's object, a class
    method's class or a new object; an object of the package gets one: semver's comparison declines what is not a
    `Version`)."""
    if form[0] in ("self", "new", "hashref", "cls"):
        return []
    return rng.sample([f for f in _FOREIGN if f[0] != form[0]], 3)


def _reshaped(form, rng):
    """Variants of one encoded argument that change a property `_variants` keeps, each as
    ``(kind, form)``: its type where a caller plausibly passes the other one ("type
    changed": `_retyped`), a bool's other value ("bool flipped"), a sequence 3 to 5 times
    as long, 12 to 20 items at least, in its own items ("long sequence": a change keyed on
    ``len(items) < 9`` meets more), a string's letters in mixed case ("mixed case": title
    case and a random mix, where `_variants` has the whole string upper or lower only)."""
    tag = form[0]
    if tag == "bool":
        return [("bool flipped", ["bool", not form[1]])]
    if tag in ("int", "float", "str"):
        out = [("type changed", f) for f in _retyped(form)]
        if tag == "str":
            out += [("mixed case", ["str", t]) for t in _mixed_case(form[1], rng)]
        return out
    if tag in ("list", "tuple") and form[1]:
        items = form[1]
        if 2 * len(json.dumps(items)) >= _LONG_CHARS:
            return []  # no sequence over twice its length fits: skip the (quadratic) trim
        size = max(rng.randint(12, 20), len(items) * rng.randint(3, 5))
        longer = [items[i % len(items)] for i in range(size)]
        while len(longer) > 2 * len(items) and len(json.dumps(longer)) > _LONG_CHARS:
            longer.pop()
        # a sequence no longer than twice the tests' is one `_variants` has already
        return [("long sequence", [tag, longer])] if len(longer) > 2 * len(items) else []
    return []


def _retyped(form):
    """The same number in another type a caller passes for it: a numeral string as the
    int (and as the float where it has a point, and the int where that float is whole),
    an int as its numeral string and as a float, a whole float as the int."""
    tag, text = form
    if tag == "int":
        value = int(text)
        return [["str", text]] + ([["float", repr(float(value))]] if abs(value) < 2 ** 53
                                  else [])
    if tag == "float":
        value = float(text)
        return [["int", str(int(value))]] if value.is_integer() else []
    digits = text.lstrip("+-")
    if not (0 < len(digits) <= 30 and digits.isascii() and len(text) - len(digits) <= 1):
        return []
    if digits.isdigit():
        return [["int", str(int(text))]]
    whole, point, fraction = digits.partition(".")
    if not point or not (whole + fraction).isdigit():
        return []
    value = float(text)
    return [["float", repr(value)]] + ([["int", str(int(value))]] if value.is_integer()
                                       else [])


def _mixed_case(text, rng):
    """`text` in title case and with each letter's case drawn at random (both cases
    present), where it has two letters or more and each differs from `text`."""
    spots = [i for i, c in enumerate(text) if c.upper() != c.lower()
             and len(c.upper()) == len(c.lower()) == 1]
    if len(spots) < 2:
        return []
    upper = [rng.random() < 0.5 for _ in spots]
    if len(set(upper)) == 1:  # one letter in the other case: mixed, not all upper or lower
        upper[rng.randrange(len(upper))] ^= True
    chars = list(text)
    for i, up in zip(spots, upper):
        chars[i] = chars[i].upper() if up else chars[i].lower()
    return [t for t in dict.fromkeys((text.title(), "".join(chars))) if t != text]


def _renamed(call, rng, strings, ints):
    """The encoded `call` with every non-empty string (`strings`), or every integer inside
    a container and every date, time or duration (`ints`, with `_std_variants`), replaced
    consistently across all its arguments: each distinct
    value by one new value (strings character by character within each character's class,
    `_like`; integers moved by 1 to 9, the sign kept), different values by different ones. The call's structure (which
    keys lead where, which items repeat, how long each sequence is) is kept while no tested
    value is, so a change keyed on the tested values is seen where the random offsets of
    `_variants` only reach error paths."""
    table, used = {}, set()

    def fresh(key, make):
        if key not in table:
            for _ in range(100):
                new = make()
                if new not in used and new != key[1]:
                    break
            used.add(new)
            table[key] = new
        return table[key]

    def like(text):
        return "".join(_like(c, rng) for c in text)

    def walk(form, top):
        tag = form[0]
        if tag == "str" and strings and form[1]:
            return ["str", fresh(("str", form[1]), lambda: like(form[1]))]
        if tag == "int" and ints and not top:
            value = int(form[1])
            sign = -1 if value < 0 else 1
            return ["int", str(fresh(("int", value), lambda: value + sign * rng.randint(1, 9)))]
        if tag == "std" and ints and form[1] not in ("Decimal", "Fraction"):
            # each distinct date, time or duration to one new one (numbers stay, as ints at
            # the top do: a zero that selects a branch is kept)
            def moved():
                try:
                    return rng.choice(_std_variants(form, rng) or [form])[2]
                except (ValueError, OverflowError, ArithmeticError):
                    return form[2]
            return ["std", form[1], fresh(("std " + form[1], form[2]), moved)]
        if tag in ("list", "tuple", "set", "frozenset", "slice"):
            return [tag, [walk(x, False) for x in form[1]]]
        if tag == "dict":
            return ["dict", [[walk(k, False), walk(v, False)] for k, v in form[1]]]
        if tag == "self":  # a method's object: its attributes' values, not their names
            return ["self", ["dict", [[k, walk(v, True)] for k, v in form[1][1]]], *form[2:]]
        if tag == "inst":  # an object argument: the same
            return ["inst", form[1], form[2],
                    ["dict", [[k, walk(v, True)] for k, v in form[3][1]]], *form[4:]]
        return form

    args, kwargs = call
    return [["list", [walk(a, True) for a in args[1]]],
            ["dict", [[k, walk(v, True)] for k, v in kwargs[1]]]]


def _candidates(calls, salt, limit=40):
    """Calls that differ from a recorded one: its values renamed consistently
    (`_renamed`), or one argument, two, or every argument that has variants at once
    changed by `_variants` and `_reshaped` (so that a change keyed on one argument's tested
    value while another varies is seen); a method's object's attribute values count as
    arguments (its attribute names stay). Calls from the tests first, and within each part
    the kinds of change taken in turn (`_spread`), as ``[module, qualname, encoded call,
    from a test, kind]``."""
    import random

    rng = random.Random(salt)
    out, seen = {True: [], False: []}, {json.dumps(c[:3]) for c in calls}
    for call_no, (module, qualname, text, direct) in enumerate(calls):
        for strings, ints in ((True, False), (False, True), (True, True)):
            key = json.dumps([module, qualname, json.dumps(
                _renamed(json.loads(text), rng, strings, ints))])
            if key not in seen:
                seen.add(key)
                kind = "renamed " + ("strings" if not ints else "ints" if not strings
                                     else "both")
                out[direct].append([*json.loads(key), direct, kind, f"{call_no} several"])
        args, kwargs = json.loads(text)
        slots = [(args[1], i) for i in range(len(args[1]))] + \
            [(kwargs[1][i], 1) for i in range(len(kwargs[1]))]
        if args[1] and args[1][0][0] == "self":  # a method's object: each attribute's value
            slots += [(pair, 1) for pair in args[1][0][1][1]]
        for form in args[1]:  # an object argument: the same
            if form[0] == "inst":
                slots += [(pair, 1) for pair in form[3][1]]
        # None (a parameter left at its default, often) takes the call's other plain
        # values and their variants: a parameter no test passes is given one
        plain = [holder[i] for holder, i in slots if holder[i][0] in ("int", "float", "str")]
        given = [*plain, *(v for form in plain for v in _variants(form, rng)[:2])]
        options, changes = [], []
        for n, (holder, i) in enumerate(slots):
            forms = given if holder[i] == ["none"] else _variants(holder[i], rng)
            reshaped = _reshaped(holder[i], rng)
            changes += [(f"{holder[i][0]} variant {k}", [(holder, i, v)], f"{call_no} slot {n}")
                        for k, v in enumerate(forms)]
            changes += [(kind, [(holder, i, v)], f"{call_no} slot {n}") for kind, v in reshaped]
            if holder is args[1] or any(holder is pair for pair in kwargs[1]):
                # an argument (not an object's attribute) of another type than the tests pass
                # (each type a kind of its own, so a cut keeps more than one: a validation
                # kept to the tested types lets some other types through and not others)
                changes += [(f"other type {v[0]}", [(holder, i, v)], f"{call_no} slot {n}")
                            for v in _foreign(holder[i], rng)]
            if forms or reshaped:
                options.append((holder, i, forms + [v for _, v in reshaped]))
        # two attributes of one object with their values swapped (a prerelease moved to
        # the build, years to months): a fix kept to the attribute the tests set meets
        # the same value in the other
        for form in args[1]:
            pairs = form[1][1] if form[0] == "self" else form[3][1] if form[0] == "inst" \
                else []
            for a, p in enumerate(pairs):
                for q in pairs[a + 1:]:
                    if p[1] != q[1] and _swappable(p[1], q[1]):
                        changes.append(("swapped attributes", [(p, 1, q[1]), (q, 1, p[1])],
                                        f"{call_no} swap"))
        if len(options) > 2:  # pairs of arguments, twice each
            changes += [("two arguments", [(h1, i1, rng.choice(v1)), (h2, i2, rng.choice(v2))],
                         f"{call_no} several") for a, (h1, i1, v1) in enumerate(options)
                        for h2, i2, v2 in options[a + 1:] for _ in range(2)]
        if len(options) > 1:  # every argument at once
            changes += [("every argument", [(holder, i, rng.choice(vs))
                                            for holder, i, vs in options], f"{call_no} several")
                        for _ in range(8)]
        for j in range(len(kwargs[1])):  # a keyword left out: the parameter's own default
            kept = [pair for k, pair in enumerate(kwargs[1]) if k != j]
            key = json.dumps([module, qualname, json.dumps([args, ["dict", kept]])])
            if key not in seen:
                seen.add(key)
                out[direct].append([*json.loads(key), direct, "keyword left out",
                                    f"{call_no} slot kw{j}"])
        for kind, change, slot in changes:
            saved = [(holder, i, holder[i]) for holder, i, _ in change]
            for holder, i, value in change:
                holder[i] = value
            key = json.dumps([module, qualname, json.dumps([args, kwargs])])
            for holder, i, value in saved:
                holder[i] = value
            if key not in seen:
                seen.add(key)
                out[direct].append([*json.loads(key), direct, kind, slot])
    # calls from the tests first, with a quarter kept for the changed functions' calls
    # from inside the package (a fix in a caller that leaves a public function wrong)
    direct = _by_function(out[True], rng.shuffle)
    inside = _by_function(out[False], rng.shuffle)
    share = min(len(inside), limit // 4)
    kept = direct[:limit - share]
    return kept + inside[:limit - len(kept)]


def _swappable(x, y):
    """Whether two encoded attribute values can trade places: both numbers (ints, floats),
    both strings, both values of the same standard type, or a string and None (an
    optional field)."""
    numbers = ("int", "float")
    if x[0] in numbers and y[0] in numbers or x[0] == y[0] == "str":
        return True
    if x[0] == y[0] == "std":
        return x[1] == y[1]
    return {x[0], y[0]} == {"str", "none"}


def grouped(items, key):
    """`items` in lists by `key`, in the order each key first occurs."""
    groups = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return list(groups.values())


def interleave(order):
    """One item from the end of each list of `order` in turn, until all are empty."""
    out = []
    while any(order):
        for group in order:
            if group:
                out.append(group.pop())
    return out


def _by_function(items, shuffle):
    """`items` with their functions taken in turn, each function's spread by call and slot
    (`spread_by_slot`): a cut keeps each function's share, however many calls of another
    the tests make (isodate's tests build forty durations at import, and the one call of
    `Duration.__add__` they test had kept a few of 160 inputs)."""
    order = [spread_by_slot(group, shuffle)[::-1]
             for group in grouped(items, lambda item: (item[0], item[1]))]
    shuffle(order)
    return interleave(order)


def spread_by_slot(items, shuffle, slot=lambda item: item[5], kind=lambda item: item[4]):
    """`items` with the recorded call and the argument they vary (`slot`: the call's number,
    then one argument, keyword or attribute, or "several") taken in turn, and within each
    the kinds of change (`_spread`): a cut keeps every call's and every argument's share,
    however many kinds of change one argument's type has (a defaulted string has about 14,
    an int 7: spread by kind alone, a forgery keyed on the tested int met checks that
    varied the string only) and however many calls of another kind the tests make."""
    order = [_spread(group, shuffle, kind)[::-1] for group in grouped(items, slot)]
    shuffle(order)
    return interleave(order)


def _spread(items, shuffle, kind=lambda item: item[-1]):
    """`items` with their kinds taken in turn (one of each kind, then a second of each...),
    each kind's items and the kinds' order shuffled by `shuffle`: a cut keeps every kind."""
    order = grouped(items, kind)
    shuffle(order)
    for group in order:
        shuffle(group)
    return interleave(order)


def _quiet():
    """Send fds 1 and 2 to /dev/null: what hidden checks print is never shown."""
    sys.stdout.flush()
    sys.stderr.flush()
    null = os.open("/dev/null", os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)


def _run_checks(items, report, repeat, seconds=2.0, budget=30.0):
    """Report the outcome of each (module, qualname, encoded call) of `items` as
    ``HC <index> <outcome>`` (the gold tree's run calls each `repeat` times and keeps only
    outcomes that do not change); stop when `budget` seconds are spent (calls left
    unreported count as failed)."""
    import time

    start, targets = time.monotonic(), {}
    for index, (module, qualname, text) in enumerate(items):
        if time.monotonic() - start > budget:
            break
        if (module, qualname) not in targets:
            try:
                owner = _target(module, qualname.rsplit(".", 1)[0]) if "." in qualname \
                    else None
                if owner is not None and type(owner) not in _PLAIN_TYPES:
                    raise TypeError("a method's owner is not a plain class")
                function = _target(module, qualname)
                if owner is not None:  # a property is called through its getter
                    member = type.__getattribute__(owner, "__dict__").get(
                        qualname.rsplit(".", 1)[1])
                    function = member if type(member) is property else function
                targets[module, qualname] = (function, owner, None)
            except BaseException as exc:  # noqa: BLE001 - a missing target is an outcome
                targets[module, qualname] = (None, None, ["raise", type(exc).__name__])
        function, owner, missing = targets[module, qualname]
        call = json.loads(text)
        outcomes = [_outcome(function, call, seconds, owner, qualname.rsplit(".", 1)[-1])
                    if function is not None
                    else missing for _ in range(repeat)]
        if all(o == outcomes[0] for o in outcomes):
            report(f"HC {index} {json.dumps(outcomes[0])}")


def _guarded(spec, nonce, write):
    """Put the copy on the path and the audit hook in place (before anything of the
    package is imported); (the report writer, the hook's flagged list, the untrusted-file
    test)."""
    report_fd = spec["report_fd"]
    sys.path[:0] = spec["paths"]
    root = os.getcwd()
    initial = frozenset(os.path.join(d, f) for d, _, files in os.walk(root) for f in files)
    untrusted = _untrusted(frozenset(spec["watched"]), root, initial)
    hook, flagged = _make_guard(report_fd, nonce, untrusted, write, root)
    sys.addaudithook(hook)

    def report(text):
        write(report_fd, f"{nonce} {text}\n".encode())

    return report, flagged, untrusted


def _checks_main(spec, nonce, items, write, exit_now):
    """A process of hidden checks only: no pytest, its output discarded, the audit hook of
    a scored run in place before anything of the package is imported."""
    report_fd = spec["report_fd"]
    _quiet()
    import random

    random.seed(0)
    report, flagged, _ = _guarded(spec, nonce, write)
    _run_checks(items, report, repeat=spec.get("repeat", 1))
    write(report_fd, f"{nonce} END 0 {len(items)} {len(flagged)}\n".encode())
    exit_now(0)


def main():
    spec = json.loads(sys.argv[1])
    write, exit_now, read = os.write, os._exit, os.read
    report_fd, nonce_fd = spec["report_fd"], spec["nonce_fd"]
    # "SIZE\n", then SIZE bytes: the nonce, then (in a run of hidden checks) their functions
    # and inputs, read from a pipe, not argv, so code under test cannot learn the hidden
    # inputs from argv. Read to its size, not to EOF: a process the trainer forks meanwhile
    # may hold the pipe's write end open.
    head = b""
    while not head.endswith(b"\n") and (chunk := read(nonce_fd, 1)):
        head += chunk
    size, data = int(head or b"0"), bytearray()
    while len(data) < size and (chunk := read(nonce_fd, min(1 << 16, size - len(data)))):
        data += chunk
    os.close(nonce_fd)
    nonce, _, items = bytes(data).decode().partition("\n")
    nonce = nonce.strip()
    if spec.get("mode") == "checks":
        _checks_main(spec, nonce, json.loads(items), write, exit_now)
    for key in ("PYTEST_PLUGINS", "PYTEST_ADDOPTS"):
        os.environ.pop(key, None)
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    import random

    random.seed(0)  # outcomes that depend on `random` are the same in every run
    import unittest  # noqa: F401 - fingerprinted from the start (its TestCase runs tests)

    import_hooks = (frozenset(map(id, sys.meta_path)), frozenset(map(id, sys.path_hooks)))
    report, flagged, untrusted = _guarded(spec, nonce, write)

    import _pytest.runner
    import pytest

    # pytest would publish the running test's id in os.environ; library code could read
    # it to behave one way under test and another in use.
    _pytest.runner._update_current_test_var = lambda item, when: None
    hooks, finish = _recorder(report, spec.get("check_every", 25), import_hooks, untrusted)
    record, calls = spec.get("record"), []
    if record:  # only on the gold tree: trusted code
        sys.setprofile(_recording(frozenset(record["sources"]),
                                  frozenset(map(tuple, record["targets"])),
                                  frozenset(record["tests"]), calls))
    code = int(pytest.main(spec["args"], plugins=[hooks]))
    outcomes = finish()
    if record:
        sys.setprofile(None)
        # only what the trainer keeps (a call of at most `max_call_chars`, all of them in
        # `budget_chars`): 400 inputs of long non-ASCII strings, escaped twice, passed
        # the run's output cap
        index, size = 0, 0
        for item in _candidates(calls, record["salt"], record.get("limit", 40)):
            if len(item[2]) > record.get("max_call_chars", 1000):
                continue
            size += len(json.dumps(item[:3])) + 2
            if size > record.get("budget_chars", 160_000):
                break
            report(f"HCALL {index} {json.dumps(item)}")
            index += 1
    sys.stdout.flush()
    sys.stderr.flush()
    payload = f"{nonce} END {code} {len(outcomes)} {len(flagged)}\n".encode()
    while payload:
        payload = payload[write(report_fd, payload):]
    exit_now(code)


if __name__ == "__main__":  # always so under ``python -c``; tests import the helpers
    main()
