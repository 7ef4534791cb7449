"""How fast one decode step can be on this machine: the step's matmuls at the BLAS's own
speed for their shapes, against the big-matmul peak and against the model's whole forward.

    python benchmarks/decode_matmuls.py [--model smollm2-135m|tiny|PATH] [--rows 1 4 16 64]
        [--threads 2] [--json] [--tiny]

A decode step runs every projection of every layer and the LM head on one token per row: a
matmul [rows, in] x [in, out] per linear layer. With few rows these are skinny matmuls, and
their speed, not the machine's big-matmul peak, bounds the step. For each row count the
script times, best of several repeats:
- each distinct linear shape of one decoder layer (`torch.nn.functional.linear` on the
  model's own weights), summed over the layers;
- the LM head (vocabulary x hidden);
- the model's forward on one new token per row without a cache (every matmul of a step, the
  norms, activations and rotary embeddings; attention over one key, so the KV-cache reads of
  a long context are left out: the arithmetic floor of a step);
and prints each one's GFLOP/s, the share of the step's FLOPs the peak would allow in that
time (`of peak`), and the share of the forward spent in matmuls. A step's "FLOP limit"
(its FLOPs / the peak, as `rollout_throughput.py` counts it) is reachable only as far as the
matmuls' own speed allows: `of peak` for the matmuls alone is the ceiling for decoding.

The matmul peak (fp32 `torch.mm`, best of a few shapes) is measured at the start and end;
the load average is printed before and after. `--tiny` is a reduced run for tests.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from _common import command_line, loadavg, matmul_peak, output_flags, print_json, progress

from tripod.policy.models import load_policy


def best_time(fn, min_reps: int = 5, min_s: float = 0.3) -> float:
    """Best wall time of `fn` over at least `min_reps` calls and `min_s` seconds."""
    fn()
    best, reps, start = float("inf"), 0, time.perf_counter()
    while reps < min_reps or time.perf_counter() - start < min_s:
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
        reps += 1
    return best


def layer_shapes(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The weights of one decoder layer's linear layers, by name (e.g. `self_attn.q_proj`)."""
    layer = model.get_decoder().layers[0]
    return [(name, m.weight) for name, m in layer.named_modules()
            if isinstance(m, torch.nn.Linear)]


def measure(model: torch.nn.Module, rows_list: list[int], min_s: float) -> dict:
    cfg = model.config.get_text_config()
    layers = cfg.num_hidden_layers
    head = model.get_output_embeddings().weight                                # [V, H]
    shapes = layer_shapes(model)
    out = []
    for rows in rows_list:
        progress(f"{rows} rows")
        per_layer, layer_flops = 0.0, 0.0
        linears = {}
        for name, w in shapes:
            x = torch.randn(rows, w.shape[1])
            t = best_time(lambda x=x, w=w: F.linear(x, w), min_s=min_s)
            flops = 2 * rows * w.shape[0] * w.shape[1]
            linears[name] = {"ms": t * 1e3, "gflops": flops / t / 1e9}
            per_layer += t
            layer_flops += flops
        x = torch.randn(rows, head.shape[1])
        t_head = best_time(lambda x=x: F.linear(x, head), min_s=min_s)
        head_flops = 2 * rows * head.shape[0] * head.shape[1]
        ids = torch.randint(0, head.shape[0], (rows, 1))
        with torch.no_grad():
            t_fwd = best_time(lambda ids=ids: model(input_ids=ids, use_cache=False),
                              min_s=min_s)
        out.append({
            "rows": rows, "linears": linears,
            "layers_ms": per_layer * layers * 1e3,
            "layers_gflops": layer_flops / per_layer / 1e9,
            "head_ms": t_head * 1e3, "head_gflops": head_flops / t_head / 1e9,
            "step_flops": layer_flops * layers + head_flops,
            "matmuls_ms": (per_layer * layers + t_head) * 1e3,
            "forward_ms": t_fwd * 1e3,
        })
    return {"layers": layers, "rows": out}


def report(r: dict) -> str:
    peak = r["peak_gflops"]
    lines = [
        f"command: {r['command']}",
        f"machine: torch_threads={r['threads']} matmul peak {r['peak_start']:.0f} / "
        f"{r['peak_end']:.0f} GFLOP/s (start / end) loadavg before={r['load_before']} "
        f"after={r['load_after']}",
        f"model: {r['model']} ({r['layers']} layers); one decode step = one token per row",
        "",
        "| rows | layers' matmuls | LM head | all matmuls (of peak) | forward, no cache (of peak) "
        "| matmuls' share of the forward |",
        "|---|---|---|---|---|---|",
    ]
    for x in r["rows"]:
        gf = x["step_flops"] / 1e9
        lines.append(
            f"| {x['rows']} | {x['layers_ms']:.1f} ms ({x['layers_gflops']:.0f} GFLOP/s) "
            f"| {x['head_ms']:.1f} ms ({x['head_gflops']:.0f} GFLOP/s) "
            f"| {x['matmuls_ms']:.1f} ms ({gf / (x['matmuls_ms'] / 1e3) / peak:.0%}) "
            f"| {x['forward_ms']:.1f} ms ({gf / (x['forward_ms'] / 1e3) / peak:.0%}) "
            f"| {x['matmuls_ms'] / x['forward_ms']:.0%} |")
    lines.append("")
    lines.append("per linear layer (ms, GFLOP/s) at each row count:")
    for x in r["rows"]:
        parts = [f"{n.split('.')[-1]} {v['ms']:.3f} ({v['gflops']:.0f})"
                 for n, v in x["linears"].items()]
        lines.append(f"  {x['rows']} rows: " + ", ".join(parts))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 4, 16, 64])
    output_flags(parser)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model_name = "tiny" if args.tiny else args.model
    rows = [1, 4] if args.tiny else args.rows
    min_s = 0.02 if args.tiny else 0.3
    load_before = loadavg()
    peak_start = matmul_peak()
    model = load_policy(model_name).model.eval()
    result = measure(model, rows, min_s)
    peak_end = matmul_peak()
    result.update(command=command_line(), threads=torch.get_num_threads(), model=model_name,
                  peak_start=peak_start, peak_end=peak_end,
                  peak_gflops=(peak_start + peak_end) / 2,
                  load_before=load_before, load_after=loadavg())
    print_json(result) if args.json else print(report(result))


if __name__ == "__main__":
    main()
