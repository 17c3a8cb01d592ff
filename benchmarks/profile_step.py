"""Where a step's time goes, by op group: this package and (with ``--original DIR``) the original code.

``torch.profiler`` records ``--steps`` steps after two untimed ones; each ATen op's self CPU time is put in
one group (matmuls, softmax and log-softmax, layer norm, dropout, element-wise, copies and layout, reductions,
the optimiser, other), and the table gives ms per step and share of each group, per model and mode. The model
and the steps are those of ``benchmarks/vs_original.py`` (same weights, same tokens).

    python benchmarks/profile_step.py --modes eval train --original ~/transformer-xl/pytorch
    python benchmarks/profile_step.py --modes eval --top 25          # also the 25 costliest ops of ours
    python benchmarks/profile_step.py --modes eval eval-bf16 --top 15  # evaluation, fp32 and bf16 weights

Under each table, the matrix products' rate: their FLOPs per step (the profiler's count for ``mm``, ``addmm``,
``bmm``; ``4 B H L K D`` for a fused attention call, from its shapes) over their time, beside the rate of one
large square product in the step's dtype on the same threads (``--square N``, the CPU's reachable rate at
such shapes), and the share of the step outside matrix products. That is what bounds a speed-up: a step can go
no faster than its products at the square rate plus what is left outside them.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
from pathlib import Path
from typing import List

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).parent))
from common import add_model_args, cpu_description, markdown_table, table_row
from train_step import token_stream
from vs_original import Ours, Theirs, build_ours, build_pair, load_original

GROUPS = (  # matched as substrings of the op name, in this order
    ("fused attention", ("scaled_dot_product",)),
    ("matmul", ("mm", "bmm", "addmm", "baddbmm", "matmul", "linear", "einsum", "_mkl", "mkldnn")),
    ("softmax", ("softmax", "log_softmax", "_softmax", "logsumexp")),
    ("layer norm", ("layer_norm",)),
    ("dropout", ("dropout", "bernoulli", "native_dropout", "Dropout")),
    ("optimiser", ("adam", "_foreach", "_fused", "lerp", "addcdiv", "addcmul", "sqrt")),
    ("copies and layout", ("copy_", "cat", "clone", "contiguous", "empty_strided", "as_strided", "index",
                           "gather", "scatter", "masked_fill", "fill_", "zero_", "zeros", "triu", "tril", "pad",
                           "embedding", "stack", "flip", "repeat", "_to_copy")),
    ("reductions", ("sum", "mean", "amax", "norm", "max")),
)
ELEMENTWISE = {"add", "mul", "sub", "div", "relu", "threshold", "neg", "where", "exp", "clamp", "sin", "cos", "rsub",
               "ne", "eq", "lt", "gt", "ge", "le", "pow", "expand"}  # matched as the op's first word


def group_of(name: str) -> str:
    short = name.split("::")[-1].lower()
    for group, keys in GROUPS:
        if any(k.lower() in short for k in keys):
            return group
    if short.strip("_").split("_")[0] in ELEMENTWISE:
        return "element-wise"
    return "other"


def profile_runner(runner, mode, rows, L, steps):
    """``(ms per step by group, ms per step, ops by self time, matrix-product GFLOP per step)``."""
    step = runner.eval_step if mode.startswith("eval") else runner.train_step
    for s in range(2):
        step(rows[:, s * L:(s + 1) * L], rows[:, s * L + 1:(s + 1) * L + 1])
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True) as prof:
        for s in range(2, 2 + steps):
            step(rows[:, s * L:(s + 1) * L], rows[:, s * L + 1:(s + 1) * L + 1])
    events = [e for e in prof.key_averages() if e.key.startswith("aten::")]
    by_group = collections.Counter()
    for e in events:
        by_group[group_of(e.key)] += e.self_cpu_time_total / 1e3 / steps  # ms per step
    wall = sum(e.self_cpu_time_total for e in prof.key_averages()) / 1e3 / steps
    flops = sum(e.flops for e in events if group_of(e.key) == "matmul")
    for e in prof.key_averages(group_by_input_shape=True):
        if "scaled_dot_product" in e.key and e.input_shapes and len(e.input_shapes[0]) == 4:
            (b, h, q_len, d), k_len = e.input_shapes[0], e.input_shapes[1][2]
            flops += 4 * b * h * q_len * k_len * d * e.count  # q.k and p.v, 2 FLOPs a multiply-add
    return by_group, wall, sorted(events, key=lambda e: -e.self_cpu_time_total), flops / 1e9 / steps


def square_rate(n: int, dtype: torch.dtype, repeats: int = 10) -> float:
    """GFLOP/s of an ``n x n`` by ``n x n`` product in ``dtype`` (best of ``repeats``): the CPU's rate at
    shapes the libraries tile well."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2 * n ** 3 / best / 1e9


def rate_lines(results, mode: str, square: int) -> List[str]:
    """The matrix products' rate of each model against the square product's, and the time outside them."""
    dtype = torch.bfloat16 if mode in ("bf16", "eval-bf16") else torch.float32
    peak = square_rate(square, dtype)
    lines = [f"a {square}x{square} product in {str(dtype).split('.')[-1]}: {peak:.0f} GFLOP/s"]
    for name, (by_group, wall, _, gflop) in results.items():
        mm_ms = by_group["matmul"] + by_group["fused attention"]
        rate = gflop / mm_ms * 1e3 if mm_ms else 0.0
        floor = gflop / peak * 1e3  # ms the products would take at the square rate
        lines.append(f"{name}: matrix products {gflop:.2f} GFLOP per step in {mm_ms:.1f} ms = {rate:.0f} GFLOP/s "
                     f"({rate / peak:.0%} of the square rate); outside them {wall - mm_ms:.1f} ms "
                     f"({(wall - mm_ms) / wall:.0%} of the step); at the square rate the products would take "
                     f"{floor:.1f} ms, the step {wall - mm_ms + floor:.1f}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--original", default=os.environ.get("TXL_ORIGINAL_DIR"))
    parser.add_argument("--modes", nargs="+", default=["eval", "train"], choices=["eval", "train", "bf16", "eval-bf16"])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--top", type=int, default=0, help="also list the N costliest ops of ours")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--square", type=int, default=2048, help="side of the square product the rates are set "
                        "against (0: no rates)")
    add_model_args(parser)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from transformer_xl.training.allocator import keep_cpu_memory

    keep_cpu_memory()
    print(cpu_description())
    original = load_original(Path(args.original).expanduser()) if args.original else None
    rows = token_stream(args.vocab, args.batch * (12 * args.tgt_len + 1)).view(args.batch, -1)
    for mode in args.modes:
        ours_model, theirs_model = build_pair(original, args) if original else (build_ours(args), None)
        if mode == "eval-bf16":
            ours_model = ours_model.to(torch.bfloat16)  # the weights cast once (txl eval --precision bf16)
        runners = {"ours": Ours(ours_model, args, "bf16" if mode == "bf16" else "fp32")}
        if original:
            runners["original"] = Theirs(theirs_model, args)
        results = {name: profile_runner(r, "train" if mode in ("train", "bf16") else "eval", rows, args.tgt_len,
                                        args.steps)
                   for name, r in runners.items()}
        print(f"\n### {mode}: ms per step by op group (self CPU time, {args.steps} steps)\n")
        names = list(results)
        print(markdown_table(["op group", *(f"{n} {what}" for n in names for what in ("ms", "share"))]))
        groups = [g for g, _ in GROUPS] + ["element-wise", "other"]
        for g in groups:
            cells = []
            for n in names:
                by_group, wall, _, _ = results[n]
                cells += [f"{by_group[g]:.1f}", f"{by_group[g] / wall:.0%}"]
            print(table_row([g, *cells]))
        print(table_row(["**total**", *(cell for n in names for cell in (f"**{results[n][1]:.1f}**", "100%"))]))
        if args.square:
            print()
            print("\n".join(rate_lines(results, mode, args.square)))
        if args.top:
            print(f"\ncostliest ops of ours ({mode}):")
            for e in results["ours"][2][:args.top]:
                print(f"  {e.self_cpu_time_total / 1e3 / args.steps:8.2f} ms  {e.count // args.steps:4d}x  "
                      f"[{group_of(e.key)}] {e.key}")


if __name__ == "__main__":
    main()
