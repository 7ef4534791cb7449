"""`tripod report` and `tripod inspect` without a browser: content, escaping, study mode, CLI."""

from __future__ import annotations

import argparse
import io
import json
import re
import shutil

import pytest
from rich.console import Console

from tripod.report.commands import add_inspect_parser, add_report_parser
from tripod.report.html import build_report, metric_series, svg_line_chart
from tripod.report.inspect import browse, inspect_file, render_episode
from tripod.report.records import iteration_path, read_trajectories, write_trajectories

from .helpers import HOSTILE, hostile_stats, hostile_trajectories


def _cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="tripod")
    sub = parser.add_subparsers(dest="command", required=True)
    add_report_parser(sub)
    add_inspect_parser(sub)
    args = parser.parse_args(list(argv))
    return args.fn(args)


def _payload(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="trajectory-data">(.*?)</script>', page,
                  re.S)
    assert m, "no trajectory data block"
    return json.loads(m.group(1))


def test_report_of_a_tiny_run(run_copy, capsys):
    assert _cli("report", str(run_copy)) == 0
    out = run_copy / "report.html"
    assert str(out) in capsys.readouterr().out
    page = out.read_text(encoding="ascii")
    for key in ("success_rate", "return", "episode_length", "invalid_action_rate", "entropy",
                "clip_fraction", "zero_variance_groups"):
        assert f"<title>{key}</title>" in page, f"no {key} curve"
    assert "held-out success, 95% CI" in page and "0%-49%" in page  # results.json, 0/4 games
    assert "algo.estimator" in page and "estimator: gae" in page     # config
    # Self-contained: nothing is fetched (the SVG namespace URI is a name, not a request).
    assert not re.search(r'(src|href)\s*=\s*["\']?(https?:)?//', page)
    assert "@import" not in page and "<link" not in page
    sets = _payload(page)["sets"]
    assert [s["label"] for s in sets] == ["eval/base \u00b7 iteration 0",
                                          "eval/final \u00b7 iteration 0",
                                          "train \u00b7 iteration 1", "train \u00b7 iteration 2"]
    assert _payload(page)["initial"] == 3  # opens on the latest training iteration
    tokens = sets[3]["episodes"][0]["turns"][0]["tokens"]
    assert set(tokens) == {"ids", "text", "logprobs", "loss_mask", "trainer_logprobs",
                           "advantages"}


def test_hostile_text_is_escaped_in_the_file(tmp_path, tokenizer):
    run = tmp_path / "run"
    trajs = hostile_trajectories(tokenizer)
    write_trajectories(iteration_path(run, 1), trajs, tokenizer, 1, hostile_stats(trajs))
    (run / "config.yaml").write_text("note: \"</pre><script>alert(1)</script>\"\n")
    page = build_report(run).read_text(encoding="ascii")  # ASCII: surrogates are escaped
    for payload in HOSTILE:
        assert payload not in page
    assert "<script>document" not in page and "<img src=x" not in page
    assert page.count("<script") == 2  # the data block and the viewer, nothing else
    assert "&lt;/pre&gt;&lt;script&gt;alert(1)" in page
    data = _payload(page)
    shown = data["sets"][0]["episodes"][3]["turns"][1]["action"]
    assert shown == HOSTILE[4].replace("\udcff", "\ufffd")  # the DOM gets well-formed text


def test_damaged_inputs_become_warnings(run_copy):
    with (run_copy / "metrics.jsonl").open("a") as f:
        f.write('{"step": 3, "success_rate": 0.')  # a run killed mid-write
    bad = run_copy / "trajectories" / "iter_000003.jsonl"
    bad.write_text('{"format": "tripod-trajectories", "version": 1}\n{"iteration": 3\n')
    page = build_report(run_copy).read_text()
    assert "metrics.jsonl: line 3 skipped" in page
    assert "iter_000003.jsonl: line 2:" in page
    assert len(_payload(page)["sets"]) == 4  # the readable files are still shown


def test_study_directory_lists_runs_tables_and_plots(run_copy, tmp_path):
    study = tmp_path / "study"
    study.mkdir()
    for name in ("arm-a", "arm-b"):
        shutil.copytree(run_copy, study / name)
    (study / "table.csv").write_text("arm,success\narm-a,0.5\n<b>arm-b</b>,0.25\n")
    png = b"\x89PNG\r\n\x1a\n" + b"\0" * 64
    (study / "success.png").write_bytes(png)
    (study / "evil.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg">'
                                    "<script>alert(1)</script></svg>")
    assert _cli("report", str(study), "--out", str(tmp_path / "s.html")) == 0
    page = (tmp_path / "s.html").read_text()
    assert "tripod study: study" in page and "Runs (2)" in page
    assert "arm-a" in page and "arm-b" in page and "&lt;b&gt;arm-b&lt;/b&gt;" in page
    assert "data:image/png;base64," in page and "data:image/svg+xml;base64," in page
    assert "<script>alert" not in page  # the SVG is an image, its script never inline
    assert page.count("<polyline") >= 2  # overlaid curves of both runs


def test_tripod_study_layout_shows_summary_runs_and_plots(run_copy, tmp_path):
    """`tripod study` writes STUDY/ARM/seedN, results.csv, summary.md and plots/ (PNG + SVG)."""
    study = tmp_path / "study"
    for arm in ("rloo", "grpo"):
        for seed in (0, 1):
            shutil.copytree(run_copy, study / arm / f"seed{seed}")
    (study / "results.csv").write_text("arm,seed,env,successes,episodes\nrloo,0,toy,1,4\n")
    (study / "summary.md").write_text("| arm | success |\n|---|---|\n| rloo | 25% <i>x</i> |\n")
    (study / "plots").mkdir()
    (study / "plots" / "curves.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 64)
    (study / "plots" / "curves.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg"/>')
    (study / "plots" / "bars.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 64)
    page = build_report(study).read_text()
    assert "Runs (4)" in page and "rloo/seed1" in page and "grpo/seed0" in page
    assert "| rloo | 25% &lt;i&gt;x&lt;/i&gt; |" in page
    assert "results.csv" in page
    assert page.count("<figcaption>") == 2  # curves once (its SVG), bars as PNG
    assert "curves.svg" in page and "bars.png" in page and "curves.png" not in page


def test_max_episodes_keeps_whole_groups(tmp_path, tokenizer):
    run = tmp_path / "run"
    trajs = hostile_trajectories(tokenizer)  # two groups of four
    write_trajectories(iteration_path(run, 1), trajs, tokenizer, 1)
    for limit, shown in ((None, 8), (5, 4), (2, 4), (8, 8)):
        assert _cli("report", str(run), *(["--max-episodes", str(limit)] if limit else [])) == 0
        (only,) = _payload((run / "report.html").read_text())["sets"]
        assert len(only["episodes"]) == shown
        assert only["label"].endswith(f"first {shown} of 8") == (shown < 8)


def test_report_cli_errors(tmp_path, capsys):
    assert _cli("report", str(tmp_path / "nope")) == 2
    assert "not a directory" in capsys.readouterr().err


def test_line_chart_ticks_tell_close_values_apart():
    series = metric_series([{"step": 1, "time": 5.0, "entropy": 10.7764},
                            {"step": 2, "time": 6.0, "entropy": 10.7766, "note": "text"}])
    assert series == {"entropy": [(1.0, 10.7764), (2.0, 10.7766)]}
    svg = svg_line_chart("entropy", series)
    labels = re.findall(r'text-anchor="end" fill="#656d76">([^<]+)<', svg)
    assert len(set(labels)) == 3


def _console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=100, color_system=None, highlight=False), buf


def test_inspect_prints_one_episode(tiny_run, capsys):
    path = iteration_path(tiny_run.run_dir, 2)
    assert _cli("inspect", str(path), "--episode", "1", "--tokens") == 0
    out = capsys.readouterr().out
    episode = read_trajectories(path)[1]
    assert "episode 1 of 4" in out and f"episode id {episode.episode_id}" in out
    assert episode.turns[0].observation in out
    assert "advantage" in out and "trainer" in out
    assert _cli("inspect", str(path), "--episode", "9") == 2


def test_inspect_shows_hostile_text_literally(tmp_path, tokenizer):
    trajs = hostile_trajectories(tokenizer)
    path = write_trajectories(tmp_path / "h.jsonl", trajs, tokenizer, 1, hostile_stats(trajs))
    console, buf = _console()
    assert inspect_file(str(path), episode=3, console=console) == 0
    out = buf.getvalue()
    assert "[bold red]rich markup[/]" in out         # rich markup is not interpreted
    assert "\x1b" not in out and "\\x1b[31mANSI" in out  # escape sequences are shown, inert
    assert "lone \\udcff surrogate" in out
    out.encode("utf-8")  # printable: no lone surrogate reaches the terminal


def test_inspect_keys_browse_episodes(tiny_run):
    episodes = read_trajectories(iteration_path(tiny_run.run_dir, 1))
    keys = iter(["n", "n", "p", "x", "n", "n", "n", "q"])
    console, buf = _console()
    browse(episodes, console, key=lambda: next(keys))
    shown = re.findall(r"episode (\d) of 4", buf.getvalue())
    assert shown == ["0", "1", "2", "1", "1", "2", "3", "3"]


def test_inspect_damaged_file_names_the_line(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "tripod-trajectories", "version": 1}\nnot json\n')
    assert _cli("inspect", str(bad)) == 2
    assert "bad.jsonl: line 2:" in capsys.readouterr().err


@pytest.mark.parametrize("with_tokens", [False, True])
def test_render_episode_marks_masked_tokens(tmp_path, tokenizer, with_tokens):
    trajs = hostile_trajectories(tokenizer)
    path = write_trajectories(tmp_path / "h.jsonl", trajs, tokenizer, 1, hostile_stats(trajs))
    episode = read_trajectories(path)[1]  # its first turn is not trainable
    console = Console(file=io.StringIO(), width=100, force_terminal=True, color_system="truecolor")
    with console.capture() as cap:
        console.print(render_episode(episode, 1, 8, with_tokens))
    assert "\x1b[2;9" in cap.get()  # dim + strike-through on masked tokens


def test_inspect_in_a_terminal_reads_single_keys(tiny_run):
    """`tripod inspect` on a real (pseudo-)terminal: keys without Enter, n / p / q."""
    import os
    import pty
    import select
    import sys
    import time

    path = iteration_path(tiny_run.run_dir, 1)
    code = ("import argparse, sys; from tripod.report.commands import add_inspect_parser; "
            "p = argparse.ArgumentParser(); add_inspect_parser(p.add_subparsers()); "
            "a = p.parse_args(['inspect', sys.argv[1]]); sys.exit(a.fn(a))")
    pid, fd = pty.fork()
    if pid == 0:  # the child: the command, on the pty
        os.execv(sys.executable, [sys.executable, "-c", code, str(path)])
    seen = b""

    def wait_for(pattern: bytes, timeout: float = 60.0) -> bool:
        nonlocal seen
        end = time.monotonic() + timeout
        while pattern not in seen and time.monotonic() < end:
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    seen += os.read(fd, 65536)
                except OSError:  # the child closed the terminal
                    break
        found = pattern in seen
        seen = seen.split(pattern)[-1]
        return found

    for shown, key in ((b"episode 0 of 4", b"n"), (b"episode 1 of 4", b"n"),
                       (b"episode 2 of 4", b"p"), (b"episode 1 of 4", b"q")):
        assert wait_for(shown), f"{shown!r} not shown; the terminal got {seen[-500:]!r}"
        os.write(fd, key)
    deadline = time.monotonic() + 30
    done, status = 0, 0
    while not done and time.monotonic() < deadline:
        wait_for(b"\x00never", timeout=0.5)  # keep draining the terminal
        done, status = os.waitpid(pid, os.WNOHANG)
    if not done:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    assert done, "q did not quit"
    assert os.waitstatus_to_exitcode(status) == 0
