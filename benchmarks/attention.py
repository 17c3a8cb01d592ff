"""Relative attention alone: time and peak memory against memory length M, plain vs memory-efficient path.

Two modes, each comparing the plain path with the memory-efficient one (``model.attn_chunk = block``: keys
streamed ``--block`` at a time with an online softmax, recomputed block by block in the backward pass):

- ``eval``: forward without gradients;
- ``train``: forward and backward (gradients of the weights and of the segment's states).

Each (mode, M, path) cell runs in a fresh subprocess, so its peak resident memory (``ru_maxrss``) is its
own. A warm-up call with no memory first loads the libraries and kernels, then the figure printed is the
peak minus the resident memory just before the measured call (inputs, weights and one-time set-up
excluded). The subprocesses run with ``MALLOC_MMAP_THRESHOLD_=65536`` so that every large tensor is its own
mapping, returned to the system when freed: the resident peak is then the peak of live tensors rather than
of allocator caching (this slows both paths; times are taken in the same setting for both). Also prints
model FLOPs utilisation: FLOPs of the plain computation (3x forward for ``train``) per second, divided by
the fp32 and the bf16 matmul throughput measured right before and after each timed call (median over the
calls). ``--precision bf16`` runs the attention under CPU autocast.

    python benchmarks/attention.py --mem-lens 128 512 1024 2048 4096
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import MatmulReference, current_rss_bytes, markdown_table, peak_rss_bytes, run_json, table_row


def attention_flops(b: int, qlen: int, mlen: int, d: int, h: int, dh: int) -> float:
    """FLOPs of one forward of the relative attention block (projections, scores, values, output)."""
    k = mlen + qlen
    hd = h * dh
    macs = qlen * d * hd + 2 * k * d * hd + (k + 1) * d * hd  # q, k/v, position keys
    macs += qlen * k * hd + qlen * (k + 1) * hd + qlen * k * hd  # content scores, position scores, values
    macs += qlen * hd * d  # output projection
    return 2.0 * b * macs


def run_cell(mode: str, mlen: int, efficient: bool, args) -> dict:
    from transformer_xl.model.attention import RelativeAttention, segment_visibility, sinusoid_table

    torch.manual_seed(0)
    dh = args.d_model // args.n_head
    attn = RelativeAttention(args.n_head, args.d_model, dh, 0.0, 0.0, False)
    attn.train(mode == "train")
    u, v = torch.randn(args.n_head, dh), torch.randn(args.n_head, dh)
    if efficient:
        attn.set_backend("streamed", args.block)

    def inputs(m: int):
        h = torch.randn(args.batch, args.qlen, args.d_model, requires_grad=mode == "train")
        mems = torch.randn(args.batch, m, args.d_model)
        pos = sinusoid_table(torch.arange(m + args.qlen, -1, -1.0), args.d_model)
        return h, mems, pos, segment_visibility(args.qlen, m, "cpu")  # the future is hidden

    def call(h, mems, pos, vis):
        bf16 = args.precision == "bf16"
        with torch.set_grad_enabled(mode == "train"), torch.autocast("cpu", torch.bfloat16, enabled=bf16):
            out = attn(h, (pos, u, v), vis, mems)
        if mode == "train":
            out.sum().backward()

    call(*inputs(0))  # warm-up: libraries, thread pools, kernels
    args_ = inputs(mlen)
    before = current_rss_bytes()
    call(*args_)
    peak = peak_rss_bytes() - before
    refs = {"fp32": MatmulReference(torch.float32), "bf16": MatmulReference(torch.bfloat16)}
    flops = attention_flops(args.batch, args.qlen, mlen, args.d_model, args.n_head, dh) * (3 if mode == "train" else 1)
    times, mfu = [], {key: [] for key in refs}
    for _ in range(args.repeat):
        rates = {key: ref() for key, ref in refs.items()}
        start = time.perf_counter()
        call(*args_)
        times.append(time.perf_counter() - start)
        for key, ref in refs.items():
            mfu[key].append(flops / times[-1] / ((rates[key] + ref()) / 2))
    return {"seconds": statistics.median(times), "peak_bytes": peak,
            "mfu": {key: statistics.median(values) for key, values in mfu.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mem-lens", type=int, nargs="+", default=[128, 512, 1024, 2048, 4096])
    parser.add_argument("--modes", nargs="+", default=["eval", "train"], choices=["eval", "train"])
    parser.add_argument("--qlen", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--n-head", type=int, default=8)
    parser.add_argument("--block", type=int, default=256, help="keys per block of the memory-efficient path")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"], help="bf16: under CPU autocast")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cell", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cell:
        mode, mlen, efficient = args.cell.split(",")
        print(json.dumps(run_cell(mode, int(mlen), efficient == "1", args)))
        return
    print(f"B {args.batch}, L {args.qlen}, d_model {args.d_model}, {args.n_head} heads; "
          f"{torch.get_num_threads()} threads; memory-efficient path: keys in blocks of {args.block}; "
          f"{args.precision}; MFU against the fp32 / bf16 matmul "
          f"throughput measured around each call")
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    for mode in args.modes:
        print(f"\n{mode}: plain vs streamed keys" + (" (recomputed in backward)" if mode == "train" else ""))
        print(markdown_table(["M", "plain ms", "plain peak MiB", "plain MFU", "streamed ms", "streamed peak MiB",
                              "streamed MFU", "memory ratio"]))
        for mlen in args.mem_lens:
            cells = []
            for efficient in ("0", "1"):
                cells.append(run_json([sys.executable, __file__, "--cell", f"{mode},{mlen},{efficient}"] + sys.argv[1:],
                                      check=True, env=env))
            mib = [c["peak_bytes"] / 2 ** 20 for c in cells]
            ms = [1e3 * c["seconds"] for c in cells]
            mfu = [f"{c['mfu']['fp32']:.0%} / {c['mfu']['bf16']:.0%}" for c in cells]
            print(table_row([mlen, f"{ms[0]:.1f}", f"{mib[0]:.0f}", mfu[0], f"{ms[1]:.1f}", f"{mib[1]:.0f}", mfu[1],
                             f"{mib[0] / max(mib[1], 1e-9):.1f}x"]), flush=True)


if __name__ == "__main__":
    main()
