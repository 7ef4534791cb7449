"""Unified diffs: make them, read them, apply them, in pure Python.

Patches are applied file by file to text we already hold, so the same code serves local
folders and Docker containers (read a file, patch it, write it back), computes the expert's
target file contents, and needs no `git` or `patch` binary. Hunks must match their context
exactly; a hunk that does not match at its stated line is searched for nearby, like `patch`
does with zero fuzz.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_NO_NEWLINE = "\\ No newline at end of file"
_LINE = re.compile(r"[^\n]*\n|[^\n]+$")


def split_lines(text: str) -> list[str]:
    """Lines with their endings, split on "\\n" only (unlike `str.splitlines`, which also
    splits on form feeds and other separators that git treats as ordinary characters)."""
    return _LINE.findall(text)


class PatchError(ValueError):
    """A patch is malformed or does not apply to the given text."""


@dataclass
class Hunk:
    old_start: int
    lines: list[str] = field(default_factory=list)
    """Body lines with their prefix (' ', '-', '+'), each ending with a newline unless the
    file's last line has none."""

    def old_lines(self) -> list[str]:
        return [line[1:] for line in self.lines if line[0] in " -"]

    def new_lines(self) -> list[str]:
        return [line[1:] for line in self.lines if line[0] in " +"]


@dataclass
class FilePatch:
    old_path: str | None
    """Path before the change (None when the file is created)."""
    new_path: str | None
    """Path after the change (None when the file is deleted)."""
    hunks: list[Hunk] = field(default_factory=list)

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or ""


def _strip_prefix(name: str) -> str | None:
    name = name.split("\t")[0].strip()
    if name == "/dev/null":
        return None
    return name[2:] if name[:2] in ("a/", "b/") else name


def _mark_no_newline(body: list[str]) -> None:
    if body:
        body[-1] = body[-1].rstrip("\n")


def parse_patch(text: str) -> list[FilePatch]:
    """Split a unified (or git) diff into per-file patches."""
    patches: list[FilePatch] = []
    lines = split_lines(text)
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            patches.append(FilePatch(_strip_prefix(line[4:]), _strip_prefix(lines[i + 1][4:])))
            i += 2
            continue
        match = _HUNK.match(line)
        if match:
            if not patches:
                raise PatchError("hunk before any file header")
            hunk = Hunk(old_start=int(match.group(1)))
            old_len = int(match.group(2) or 1)
            new_len = int(match.group(4) or 1)
            i += 1
            while i < len(lines) and (old_len > 0 or new_len > 0 or
                                      lines[i].startswith(_NO_NEWLINE)):
                body = lines[i]
                if body.startswith(_NO_NEWLINE):
                    _mark_no_newline(hunk.lines)
                elif body[:1] in (" ", "-", "+") or body in ("\n", ""):
                    body = body if body[:1] in (" ", "-", "+") else " " + body
                    hunk.lines.append(body if body.endswith("\n") else body + "\n")
                    old_len -= body[0] in " -"
                    new_len -= body[0] in " +"
                else:
                    raise PatchError(f"unexpected line in hunk: {body!r}")
                i += 1
            if i < len(lines) and lines[i].startswith(_NO_NEWLINE):
                _mark_no_newline(hunk.lines)
                i += 1
            patches[-1].hunks.append(hunk)
            continue
        if line.startswith("Binary files") or line.startswith("GIT binary patch"):
            raise PatchError("binary patches are not supported")
        i += 1
    return patches


def _find(haystack: list[str], needle: list[str], start: int) -> int:
    """Index of `needle` in `haystack`, searching outward from `start`; -1 if absent."""
    if not needle:
        return min(max(start, 0), len(haystack))
    for delta in range(len(haystack) + 1):
        for pos in (start - delta, start + delta) if delta else (start,):
            if 0 <= pos <= len(haystack) - len(needle) and haystack[pos:pos + len(needle)] == needle:
                return pos
    return -1


def apply_file_patch(old_text: str | None, patch: FilePatch) -> str | None:
    """The text after `patch` (None if it deletes the file). Raises `PatchError`."""
    if patch.new_path is None:
        return None
    lines = split_lines(old_text or "")
    delta = 0  # how far the file has shifted relative to the hunks' stated line numbers
    for hunk in patch.hunks:
        old, new = hunk.old_lines(), hunk.new_lines()
        # A pure insertion names the line *after which* it goes; others their first line.
        stated = max(hunk.old_start - 1, 0) if old else hunk.old_start
        pos = _find(lines, old, stated + delta)
        if pos < 0:
            raise PatchError(f"{patch.path}: hunk at line {hunk.old_start} does not apply")
        lines[pos:pos + len(old)] = new
        delta = pos - stated + len(new) - len(old)
    return "".join(lines)


def patched_paths(text: str) -> list[str]:
    """Paths a patch touches (its new path, or old path for deletions)."""
    return [p.path for p in parse_patch(text)]


def make_patch(path: str, old: str | None, new: str | None, context: int = 3) -> str:
    """A git-style unified diff turning `old` into `new` (None = file absent)."""
    if old == new:
        return ""
    a = split_lines(old or "")
    b = split_lines(new or "")
    out = [f"diff --git a/{path} b/{path}\n",
           f"--- {'/dev/null' if old is None else 'a/' + path}\n",
           f"+++ {'/dev/null' if new is None else 'b/' + path}\n"]
    # A last line without a newline differs from the same text with one (as in git), and
    # is followed by the "\\ No newline" marker.
    for line in list(difflib.unified_diff(a, b, n=context))[2:]:
        out.append(line if line.endswith("\n") else line + "\n" + _NO_NEWLINE + "\n")
    return "".join(out)


def apply_patch_to_texts(texts: dict[str, str | None], patch_text: str) -> dict[str, str | None]:
    """Apply a multi-file patch to {path: text or None}; returns the changed paths' texts."""
    result: dict[str, str | None] = {}
    for file_patch in parse_patch(patch_text):
        source = file_patch.old_path
        base = result.get(source, texts.get(source)) if source else None
        result[file_patch.path] = apply_file_patch(base, file_patch)
    return result
