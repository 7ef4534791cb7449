"""Source trees of real Python projects, fetched once from PyPI as sdists and cached.

`sdist_tree("toolz", "1.2.0")` downloads ``toolz-1.2.0.tar.gz`` with
``pip download --no-deps --no-binary :all:`` the first time (the only network access of the
SWE family) and unpacks it under ``cache_dir("swe", "sources")``; later calls are offline.
The projects in `PROJECTS` were chosen because their sdists ship their tests, need nothing
but pytest, and run their whole suite in about a second.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tripod.core.paths import cache_dir
from tripod.envs.base import EnvError


@dataclass(frozen=True)
class ProjectSpec:
    """A project the task generator mutates."""

    name: str
    version: str
    modules: tuple[str, ...]
    """Source files (relative to the sdist root) where bugs are injected."""
    tests: tuple[str, ...]
    """Test paths that make up the project's suite."""
    python_path: tuple[str, ...] = (".",)
    """PYTHONPATH entries (relative to the sdist root) that make the package importable."""
    held_out: bool = False
    """In the large suite, a project no training task comes from: its tasks are test tasks."""

    @property
    def source(self) -> str:
        return f"sdist:{self.name}=={self.version}"


PROJECTS: dict[str, ProjectSpec] = {
    spec.name: spec for spec in (
        ProjectSpec("toolz", "1.2.0",
                    ("toolz/itertoolz.py", "toolz/functoolz.py", "toolz/dicttoolz.py",
                     "toolz/recipes.py"), ("toolz/tests",)),
        ProjectSpec("inflection", "0.5.1", ("inflection/__init__.py",),
                    ("test_inflection.py",)),
        ProjectSpec("cachetools", "8.0.2",
                    ("src/cachetools/__init__.py", "src/cachetools/_cached.py",
                     "src/cachetools/_cachedmethod.py", "src/cachetools/func.py",
                     "src/cachetools/keys.py"), ("tests",), python_path=("src",)),
        ProjectSpec("parse", "1.22.4", ("parse/__init__.py",), ("tests",)),
    )
}
"""The default suite's projects. Pinned versions, so that a seed always yields the same
suite."""


def _src(name: str, version: str, modules: tuple[str, ...], tests: tuple[str, ...] = ("tests",),
         held_out: bool = False) -> ProjectSpec:
    """A project of the ``src/`` layout."""
    return ProjectSpec(name, version, tuple(f"src/{m}" for m in modules), tests,
                       python_path=("src",), held_out=held_out)


LARGE_PROJECTS: dict[str, ProjectSpec] = {
    **PROJECTS,
    **{spec.name: spec for spec in (
        ProjectSpec("more-itertools", "10.8.0", ("more_itertools/more.py",),
                    ("tests/test_more.py",)),
        _src("semver", "3.0.4", ("semver/version.py", "semver/_deprecated.py")),
        ProjectSpec("simplejson", "3.20.1",
                    ("simplejson/__init__.py", "simplejson/decoder.py", "simplejson/encoder.py",
                     "simplejson/scanner.py"), ("simplejson/tests",)),
        ProjectSpec("sqlparse", "0.5.3",
                    ("sqlparse/sql.py", "sqlparse/lexer.py", "sqlparse/utils.py",
                     "sqlparse/formatter.py", "sqlparse/engine/grouping.py",
                     "sqlparse/engine/statement_splitter.py", "sqlparse/filters/others.py",
                     "sqlparse/filters/reindent.py", "sqlparse/filters/aligned_indent.py",
                     "sqlparse/filters/right_margin.py"), ("tests",)),
        ProjectSpec("pathspec", "0.12.1",
                    ("pathspec/pathspec.py", "pathspec/pattern.py", "pathspec/gitignore.py",
                     "pathspec/util.py", "pathspec/patterns/gitwildmatch.py"), ("tests",)),
        ProjectSpec("tabulate", "0.9.0", ("tabulate/__init__.py",),
                    tuple(f"test/test_{t}.py" for t in ("api", "input", "internal", "output",
                                                        "regression", "textwrapper"))),
        ProjectSpec("pyasn1", "0.6.1",
                    ("pyasn1/codec/ber/encoder.py", "pyasn1/codec/ber/decoder.py",
                     "pyasn1/codec/cer/encoder.py", "pyasn1/type/univ.py",
                     "pyasn1/type/constraint.py", "pyasn1/type/char.py"), ("tests",)),
        # Held out: test tasks from projects never trained on.
        _src("webcolors", "24.11.1",
             ("webcolors/_conversion.py", "webcolors/_html5.py",
              "webcolors/_normalization.py"), held_out=True),
        _src("humanize", "4.12.3", ("humanize/filesize.py", "humanize/number.py",
                                    "humanize/lists.py"),
             ("tests/test_filesize.py", "tests/test_lists.py", "tests/test_number.py"),
             held_out=True),
        _src("isodate", "0.7.2",
             ("isodate/duration.py", "isodate/isodates.py", "isodate/isodatetime.py",
              "isodate/isoduration.py", "isodate/isostrf.py", "isodate/isotime.py",
              "isodate/isotzinfo.py", "isodate/tzinfo.py"),
             tuple(f"tests/test_{t}.py" for t in ("datetime", "duration", "pickle", "strf",
                                                  "time")), held_out=True),
        ProjectSpec("idna", "3.10", ("idna/core.py", "idna/codec.py", "idna/intranges.py"),
                    ("tests",), held_out=True),
    )},
}
"""The large suite's projects: the default suite's and eleven more, of which four
(`held_out`) give only test tasks. Each was checked to run its whole suite, with nothing
but pytest, in the sandbox; test files that need more (a network, a locale, the CLI
installed) are left out of `tests`."""


def _download(name: str, version: str, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
           "--disable-pip-version-check", "-q", "-d", str(dest), f"{name}=={version}"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    archives = [p for p in dest.iterdir() if p.suffix in (".gz", ".zip", ".bz2")]
    if done.returncode != 0 or not archives:
        raise EnvError(f"cannot download the sdist of {name}=={version} (needs PyPI once): "
                       f"{done.stderr.strip()[-500:]}")
    return archives[0]


def _unpack(archive: Path, dest: Path) -> Path:
    """Extract safely (no absolute paths, links or devices) and return the top folder."""
    if archive.suffix == ".zip":
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(dest)
    else:
        with tarfile.open(archive) as tar:
            tar.extractall(dest, filter="data")
    tops = [p for p in dest.iterdir() if p.is_dir()]
    if len(tops) != 1:
        raise EnvError(f"unexpected layout in {archive.name}: {[p.name for p in tops]}")
    return tops[0]


def sdist_tree(name: str, version: str) -> Path:
    """The unpacked source tree of `name==version` (downloaded on first use)."""
    if not version:
        raise EnvError(f"sdist source of {name!r} needs a pinned version (NAME==VERSION)")
    root = cache_dir("swe", "sources")
    final = root / f"{name}-{version}"
    if final.is_dir():
        return final
    with tempfile.TemporaryDirectory(dir=root, prefix=".fetch-") as tmp:
        archive = _download(name, version, Path(tmp) / "dl")
        top = _unpack(archive, Path(tmp) / "src")
        try:
            top.rename(final)  # atomic: concurrent fetchers keep whichever landed first
        except OSError:
            if not final.is_dir():
                raise
    return final
