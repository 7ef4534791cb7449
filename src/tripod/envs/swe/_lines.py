"""pytest plugin that records which lines of the project's own files a test run executes.

Loaded by the task generator (``-p _lines``, copied into the workspace's private site
folder) for one run of a pristine suite, in the sandbox like every other run. Lines run at
import, during collection and in any test all count; the set is written as JSON, ``{file
relative to the workspace root: [line, ...]}``, to ``$TMPDIR/lines.json`` when pytest
finishes. Code run in a subprocess is not seen (its lines read as never run).
"""

import json
import os
import sys
import threading

_ROOT = os.getcwd() + os.sep
_HITS = {}


def _tracer(frame, event, arg):
    path = frame.f_code.co_filename
    if not path.startswith(_ROOT):
        return None
    lines = _HITS.setdefault(path, set())
    lines.add(frame.f_lineno)

    def local(frame, event, arg):
        if event == "line":
            lines.add(frame.f_lineno)
        return local

    return local


sys.settrace(_tracer)
threading.settrace(_tracer)


def pytest_unconfigure(config):
    sys.settrace(None)
    out = {path[len(_ROOT):]: sorted(lines) for path, lines in _HITS.items()}
    with open(os.path.join(os.environ["TMPDIR"], "lines.json"), "w") as fh:
        json.dump(out, fh)
