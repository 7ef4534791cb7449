"""The `tripod report` and `tripod inspect` subcommands, for `tripod.cli.build_parser`.

Each `add_*_parser` registers its subcommand on the parser's subparsers and sets `fn`, the
handler `tripod.cli.main` calls with the parsed arguments.
"""

from __future__ import annotations

import argparse
import sys


def cmd_report(args: argparse.Namespace) -> int:
    from tripod.report.html import build_report

    try:
        path = build_report(args.run_dir, args.out, args.max_episodes)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"report written to {path} ({path.stat().st_size / 1e6:.2f} MB)")
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from tripod.report.inspect import inspect_file
    from tripod.report.records import RecordError

    try:
        return inspect_file(args.file, episode=args.episode, with_tokens=args.tokens)
    except RecordError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def add_report_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`tripod report RUN_DIR [--out FILE] [--max-episodes N]`: one self-contained HTML report."""
    p = subparsers.add_parser(
        "report", help="write a self-contained HTML report of a run (or study) directory")
    p.add_argument("run_dir", help="a run directory, or a directory of run directories")
    p.add_argument("--out", help="output file (default: RUN_DIR/report.html)")
    p.add_argument("--max-episodes", type=int, default=None,
                   help="show at most N episodes per iteration (whole groups; default: all)")
    p.set_defaults(fn=cmd_report)
    return p


def add_inspect_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`tripod inspect FILE [--episode K] [--tokens]`: trajectories in the terminal."""
    p = subparsers.add_parser("inspect", help="browse trajectory records in the terminal")
    p.add_argument("file", help="a trajectory file (.jsonl or .jsonl.gz)")
    p.add_argument("--episode", type=int, default=None,
                   help="print episode K (0-based, in file order) and exit")
    p.add_argument("--tokens", action="store_true",
                   help="add a table of every agent token (id, logprobs, advantage, mask)")
    p.set_defaults(fn=cmd_inspect)
    return p
