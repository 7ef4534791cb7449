"""The RL update on one real batch, timed with the trainer's forward pass of an earlier commit
and with the working tree's, alternating in one process.

    python benchmarks/update_ab.py --model PATH [--baseline REV] [--repeats 3]
        [--recipe recipes/quickstart.yaml] [--threads 2] [--json] [--tiny]

One rollout of the recipe's iteration 0 (the quickstart: 16 episodes) is collected with
`--model`, turned into a training batch with its advantages, and the learner's `update` runs
on it `--repeats` times with each version of `tripod.train.batch.decoder_hidden` (the
trainer's forward pass: shared prefixes, rows' own tokens), baseline first, in turns. The
baseline is `src/tripod/train/batch.py` as of `--baseline` (read with `git show`, imported
beside the working tree's). Weights change with every update, the shapes do not: both
versions run the same rows. Alternating in one process keeps the two on the same machine
state; compare the two columns, not the times of other runs. Prints each update's wall time,
the load average after it, the batch's tokens and positions, and the command.

`--tiny` is a reduced run for tests (tiny model, `toy/letters-2`, one repeat).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from _common import command_line, loadavg, progress

from tripod.core.config import load_config
from tripod.policy.models import load_policy
from tripod.policy.rollout import RolloutEngine
from tripod.train import batch as batch_module
from tripod.train.common import rollout_config
from tripod.train.learner import build_learner, update
from tripod.train.rl import advantage, collect, make_batch

ROOT = Path(__file__).resolve().parents[1]


def baseline_module(rev: str, into: Path):
    """`src/tripod/train/batch.py` as of `rev`, imported as its own module."""
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:src/tripod/train/batch.py"],
                          check=True, capture_output=True, text=True).stdout
    path = into / "baseline_batch.py"
    path.write_text(text)
    # The packed attention moved from tripod.train to tripod.policy (the sampler's prefill
    # uses it too); a baseline from before the move imports it from its old place.
    import tripod.train
    from tripod.policy import packed
    sys.modules.setdefault("tripod.train.packed", packed)
    tripod.train.packed = packed
    spec = importlib.util.spec_from_file_location("baseline_batch", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["baseline_batch"] = module          # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*", help="recipe overrides, section.key=value")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--baseline", default="HEAD", help="git revision of the baseline")
    parser.add_argument("--recipe", default=str(ROOT / "recipes" / "quickstart.yaml"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument("--tiny", action="store_true", help="reduced run for tests")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    overrides = list(args.overrides)
    if args.tiny:
        args.model, args.repeats = "tiny", 1
        overrides += ["env.id=toy/letters-2", "env.max_turns=3"]
    with tempfile.TemporaryDirectory() as tmp:
        baseline = baseline_module(args.baseline, Path(tmp))
        cfg = load_config(args.recipe, overrides=[
            f"model.name={args.model}", "train.tensorboard=false", f"run.out_dir={tmp}",
            *overrides])
        policy = load_policy(cfg.model.name, seed=cfg.run.seed)
        progress("collecting one iteration's episodes")
        engine = RolloutEngine(policy, rollout_config(cfg))
        try:
            trajs, _ = collect(engine, cfg, 0)
        finally:
            engine.close()
        batch, _ = make_batch(trajs, cfg, policy.pad_token_id)
        advantage(batch, cfg.algo)
        learner = build_learner(cfg, policy)
        current = batch_module.decoder_hidden
        times: dict[str, list[float]] = {"baseline": [], "working tree": []}
        loads: list[float] = []
        try:
            for rep in range(args.repeats):
                for name, fn in (("baseline", baseline.decoder_hidden),
                                 ("working tree", current)):
                    batch_module.decoder_hidden = fn
                    start = time.perf_counter()
                    update(learner, batch, 0)
                    times[name].append(time.perf_counter() - start)
                    loads.append(loadavg()[0])
                    progress(f"repeat {rep}, {name}: {times[name][-1]:.1f} s")
        finally:
            batch_module.decoder_hidden = current
    result = {"command": command_line(), "model": args.model, "baseline": args.baseline,
              "rows": batch.num_rows, "tokens": int(batch.attention_mask.sum()),
              "positions": batch.attention_mask.numel(), "update_s": times, "loadavg": loads,
              "threads": torch.get_num_threads()}
    if args.json:
        print(json.dumps(result))
        return
    print(f"command: {result['command']}")
    print(f"machine: nproc={os.cpu_count()} torch_threads={result['threads']} "
          f"loadavg after each update {loads}")
    print(f"batch: {result['rows']} rows, {result['tokens']} tokens in {result['positions']} "
          f"positions; model {args.model}")
    for name, ts in times.items():
        label = f"baseline ({args.baseline})" if name == "baseline" else name
        print(f"update, {label}: " + ", ".join(f"{t:.1f} s" for t in ts))


if __name__ == "__main__":
    main()
