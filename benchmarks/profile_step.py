"""Where a step's time goes, by op group: this package and (with ``--original DIR``) the original code.

``torch.profiler`` records ``--steps`` steps after two untimed ones; each ATen op's self CPU time is put in
one group (matmuls, softmax and log-softmax, layer norm, dropout, element-wise, copies and layout, reductions,
the optimiser, other), and the table gives ms per step and share of each group, per model and mode. The model
and the steps are those of ``benchmarks/vs_original.py`` (same weights, same tokens).

    python benchmarks/profile_step.py --modes eval train --original ~/transformer-xl/pytorch
    python benchmarks/profile_step.py --modes eval --top 25          # also the 25 costliest ops of ours
    python benchmarks/profile_step.py --modes eval eval-bf16 --top 15  # evaluation, fp32 and bf16 weights
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from pathlib import Path

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
    step = runner.eval_step if mode.startswith("eval") else runner.train_step
    for s in range(2):
        step(rows[:, s * L:(s + 1) * L], rows[:, s * L + 1:(s + 1) * L + 1])
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for s in range(2, 2 + steps):
            step(rows[:, s * L:(s + 1) * L], rows[:, s * L + 1:(s + 1) * L + 1])
    events = [e for e in prof.key_averages() if e.key.startswith("aten::")]
    by_group = collections.Counter()
    for e in events:
        by_group[group_of(e.key)] += e.self_cpu_time_total / 1e3 / steps  # ms per step
    wall = sum(e.self_cpu_time_total for e in prof.key_averages()) / 1e3 / steps
    return by_group, wall, sorted(events, key=lambda e: -e.self_cpu_time_total)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--original", default=os.environ.get("TXL_ORIGINAL_DIR"))
    parser.add_argument("--modes", nargs="+", default=["eval", "train"], choices=["eval", "train", "bf16", "eval-bf16"])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--top", type=int, default=0, help="also list the N costliest ops of ours")
    parser.add_argument("--threads", type=int, default=0)
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
                by_group, wall, _ = results[n]
                cells += [f"{by_group[g]:.1f}", f"{by_group[g] / wall:.0%}"]
            print(table_row([g, *cells]))
        print(table_row(["**total**", *(cell for n in names for cell in (f"**{results[n][1]:.1f}**", "100%"))]))
        if args.top:
            print(f"\ncostliest ops of ours ({mode}):")
            for e in results["ours"][2][:args.top]:
                print(f"  {e.self_cpu_time_total / 1e3 / args.steps:8.2f} ms  {e.count // args.steps:4d}x  "
                      f"[{group_of(e.key)}] {e.key}")


if __name__ == "__main__":
    main()
