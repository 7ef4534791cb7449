"""Unified diffs: what `make_patch` writes, `apply_file_patch` must undo exactly."""

from __future__ import annotations

import random

import pytest

from tripod.envs.swe.patches import (
    PatchError,
    apply_patch_to_texts,
    make_patch,
    parse_patch,
    patched_paths,
    split_lines,
)


def _random_edit(rng: random.Random) -> tuple[str, str]:
    old = [f"line {rng.randint(0, 5)}\n" for _ in range(rng.randint(0, 25))]
    new = list(old)
    for _ in range(rng.randint(1, 4)):
        pos = rng.randint(0, len(new))
        if rng.random() < 0.4 or not new or pos == len(new):
            new.insert(pos, f"added {rng.randint(0, 9)}\n")
        elif rng.random() < 0.5:
            del new[pos]
        else:
            new[pos] = "changed\n"
    a, b = "".join(old), "".join(new)
    if a and rng.random() < 0.3:
        a = a.rstrip("\n")  # no newline at end of file
    if b and rng.random() < 0.3:
        b = b.rstrip("\n")
    return a, b


def test_round_trip_on_random_edits() -> None:
    rng = random.Random(0)
    for _ in range(1500):
        a, b = _random_edit(rng)
        for old, new in ((a, b), (b, a), (None, b), (a, None)):
            patch = make_patch("pkg/mod.py", old, new)
            if patch:
                assert apply_patch_to_texts({"pkg/mod.py": old}, patch)["pkg/mod.py"] == new


def test_hunks_found_when_lines_shifted() -> None:
    old = "".join(f"{i}\n" for i in range(40))
    new = old.replace("30\n", "thirty\n")
    patch = make_patch("f.txt", old, new)
    shifted = "extra\nextra\n" + old
    assert apply_patch_to_texts({"f.txt": shifted}, patch)["f.txt"] == "extra\nextra\n" + new


def test_mismatch_raises() -> None:
    patch = make_patch("f.txt", "a\nb\nc\n", "a\nB\nc\n")
    with pytest.raises(PatchError):
        apply_patch_to_texts({"f.txt": "x\ny\nz\n"}, patch)


def test_git_style_multi_file_patch() -> None:
    text = make_patch("a.py", "x = 1\n", "x = 2\n") + make_patch("b/new.py", None, "y\n")
    assert patched_paths(text) == ["a.py", "b/new.py"]
    assert [p.old_path for p in parse_patch(text)] == ["a.py", None]


def test_split_lines_only_on_newline() -> None:
    assert split_lines("a\n\x0cb\r\nc") == ["a\n", "\x0cb\r\n", "c"]
