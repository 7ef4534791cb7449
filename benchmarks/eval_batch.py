"""An evaluation's wall time by how many episodes it plays at once (`eval.batch_size`).

    python benchmarks/eval_batch.py --model PATH [--env textworld/w2-o3-q4] [--split test]
        [--games 20] [--batch-sizes 16 20] [--rounds 2] [--threads 2] [--json] [--tiny]

Each round runs `tripod.eval.evaluate` (what `tripod train`'s evaluations and `tripod eval`
run: greedy, one episode per game, the checkpoint's recipe for prompt, turn cap and
sampling) once per batch size, in alternating order (A B, then B A, ...), each with a fresh
rollout engine and env processes (their start-up included, as in an evaluation). Printed per
run: wall seconds, the engine's own collection seconds, games won, mean turns, the decode
steps and rows the sampler ran, and the load average before and after; then each batch
size's median and its ratio to the first batch size's. Greedy episodes do not depend on
their batch neighbours (tests/policy/test_sampler.py), so every batch size should win the
same games; the script reports whether they did. `--tiny` is a reduced run for tests (tiny
model, `toy/letters-2`); its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from _common import ArenaCountingEngine, command_line, emit, loadavg, output_flags, progress

from tripod.cli import eval_settings
from tripod.eval.evaluate import evaluate
from tripod.policy.models import load_policy


def one_run(policy, args: argparse.Namespace, batch_size: int) -> dict:
    settings = argparse.Namespace(checkpoint=args.model, env=args.env, temperature=None,
                                  max_new_tokens=None, max_turns=None, batch_size=batch_size)
    sampling, rcfg = eval_settings(settings)
    engine = ArenaCountingEngine(policy, rcfg)
    load_before = loadavg()
    start = time.perf_counter()
    try:
        res, trajs = evaluate(policy, args.env, args.split, args.games, sampling, rcfg,
                              engine=engine)
    finally:
        engine.close()
    wall = time.perf_counter() - start
    stats = engine.arena_stats()
    return {"batch_size": batch_size, "wall_s": wall, "collect_s": res.seconds,
            "won": res.won, "episodes": res.episodes, "mean_turns": res.mean_turns,
            "won_games": sorted(g["game"] for g in res.per_game if g.get("won")),
            "decode_steps": stats.decode_steps, "decode_rows": stats.decode_rows,
            "loadavg_before": load_before, "loadavg_after": loadavg()}


def run(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    policy = load_policy(args.model)
    runs: list[dict] = []
    for r in range(args.rounds):
        for b in (args.batch_sizes if r % 2 == 0 else args.batch_sizes[::-1]):
            runs.append({"round": r + 1, **one_run(policy, args, b)})
            x = runs[-1]
            progress(f"round {r + 1}, batch {b}: {x['wall_s']:.1f} s, won {x['won']}")
    summary = {}
    for b in args.batch_sizes:
        mine = [x for x in runs if x["batch_size"] == b]
        summary[str(b)] = {"median_wall_s": statistics.median(x["wall_s"] for x in mine),
                           "median_collect_s": statistics.median(x["collect_s"] for x in mine)}
    base = summary[str(args.batch_sizes[0])]["median_wall_s"]
    for s in summary.values():
        s["ratio"] = s["median_wall_s"] / base
    return {"command": command_line(), "env": args.env, "split": args.split,
            "games": args.games, "runs": runs, "summary": summary,
            "same_games_won": len({tuple(x["won_games"]) for x in runs}) == 1}


def _print(report: dict) -> None:
    print(f"command: {report['command']}")
    print(f"{report['env']} {report['split']}, {report['games']} games, greedy")
    for x in report["runs"]:
        print(f"  round {x['round']} batch {x['batch_size']:>3}: {x['wall_s']:7.1f} s "
              f"(collect {x['collect_s']:.1f} s), won {x['won']}/{x['episodes']}, "
              f"{x['mean_turns']:.2f} turns, {x['decode_steps']} decode steps "
              f"({x['decode_rows']} rows), load {x['loadavg_before'][0]} -> "
              f"{x['loadavg_after'][0]}")
    for b, s in report["summary"].items():
        print(f"  batch {b:>3}: median {s['median_wall_s']:.1f} s, x{s['ratio']:.2f}")
    print(f"  same games won by every run: {report['same_games_won']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="runs/quickstart/sft")
    parser.add_argument("--env", default="textworld/w2-o3-q4")
    parser.add_argument("--split", default="test")
    parser.add_argument("--games", type=int, default=20)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 20])
    parser.add_argument("--rounds", type=int, default=2)
    output_flags(parser)
    args = parser.parse_args()
    if args.tiny:
        args.model, args.env, args.games, args.batch_sizes, args.rounds = (
            "tiny", "toy/letters-2", 3, [2, 3], 1)
    emit(run(args), args.json, _print)


if __name__ == "__main__":
    main()
