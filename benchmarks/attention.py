"""Relative attention alone: time and peak memory against memory length M, plain vs memory-efficient paths.

Two modes, each comparing the plain path with the memory-efficient one (``model.attn_chunk``):

- ``eval``: forward without gradients; the efficient path streams keys ``--key-block`` at a time.
- ``train``: forward and backward; the efficient path computes ``--chunk`` query rows at a time and
  recomputes them in the backward pass.

Each (mode, M, path) cell runs in a fresh subprocess, so its peak resident memory (``ru_maxrss``) is its
own; the figure printed is that peak minus the resident memory just before the call (inputs and weights
excluded). The subprocesses run with ``MALLOC_MMAP_THRESHOLD_=65536`` so that every large tensor is its
own mapping, returned to the system when freed: the resident peak is then the peak of live tensors
rather than of allocator caching. Also prints model FLOPs utilisation: FLOPs of the plain computation
(3x forward for ``train``) per second, divided by the fp32 matmul throughput measured in the same run.

    python benchmarks/attention.py --mem-lens 128 512 1024 2048 4096
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import current_rss_bytes, matmul_flops_per_s, peak_rss_bytes, timed  # noqa: E402


def attention_flops(b: int, qlen: int, mlen: int, d: int, h: int, dh: int) -> float:
    """FLOPs of one forward of the relative attention block (projections, scores, values, output)."""
    k = mlen + qlen
    hd = h * dh
    macs = qlen * d * hd + 2 * k * d * hd + (k + 1) * d * hd  # q, k/v, position keys
    macs += qlen * k * hd + qlen * (k + 1) * hd + qlen * k * hd  # content scores, position scores, values
    macs += qlen * hd * d  # output projection
    return 2.0 * b * macs


def run_cell(mode: str, mlen: int, efficient: bool, args) -> dict:
    from transformer_xl.model.attention import RelPartialLearnableMultiHeadAttn, sinusoid_table

    torch.manual_seed(0)
    dh = args.d_model // args.n_head
    attn = RelPartialLearnableMultiHeadAttn(args.n_head, args.d_model, dh, 0.0, 0.0, False)
    attn.train(mode == "train")
    h = torch.randn(args.batch, args.qlen, args.d_model, requires_grad=mode == "train")
    mems = torch.randn(args.batch, mlen, args.d_model)
    klen = mlen + args.qlen
    pos = sinusoid_table(torch.arange(klen, -1, -1.0), args.d_model)
    u, v = torch.randn(args.n_head, dh), torch.randn(args.n_head, dh)
    mask = torch.triu(torch.ones(args.qlen, klen, dtype=torch.bool), 1 + mlen)
    chunk = args.chunk if efficient else 0

    def call():
        if mode == "train":
            out = attn(h, pos, u, v, attn_mask=mask, mems=mems, chunk=chunk)
            out.sum().backward()
        else:
            with torch.no_grad():
                attn(h, pos, u, v, attn_mask=mask, mems=mems, chunk=chunk, key_block=args.key_block)

    before = current_rss_bytes()
    call()
    peak = peak_rss_bytes() - before
    seconds = timed(call, repeat=args.repeat)
    flops = attention_flops(args.batch, args.qlen, mlen, args.d_model, args.n_head, dh) * (3 if mode == "train" else 1)
    return {"seconds": seconds, "peak_bytes": peak, "flops": flops}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mem-lens", type=int, nargs="+", default=[128, 512, 1024, 2048, 4096])
    parser.add_argument("--modes", nargs="+", default=["eval", "train"], choices=["eval", "train"])
    parser.add_argument("--qlen", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--n-head", type=int, default=8)
    parser.add_argument("--chunk", type=int, default=16, help="query rows per chunk (train mode)")
    parser.add_argument("--key-block", type=int, default=256, help="keys per block (eval mode)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cell", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cell:
        mode, mlen, efficient = args.cell.split(",")
        print(json.dumps(run_cell(mode, int(mlen), efficient == "1", args)))
        return
    fp32 = matmul_flops_per_s(torch.float32)
    print(f"B {args.batch}, L {args.qlen}, d_model {args.d_model}, {args.n_head} heads; {torch.get_num_threads()} threads; "
          f"measured fp32 matmul throughput {fp32 / 1e9:.1f} GFLOP/s")
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    for mode in args.modes:
        name = f"keys in blocks of {args.key_block}" if mode == "eval" else f"queries in chunks of {args.chunk}"
        print(f"\n{mode}: plain vs {name}")
        print("| M | plain ms | plain peak MiB | plain MFU | efficient ms | efficient peak MiB | efficient MFU "
              "| memory ratio |")
        print("|---|---|---|---|---|---|---|---|")
        for mlen in args.mem_lens:
            cells = []
            for efficient in ("0", "1"):
                out = subprocess.run([sys.executable, __file__, "--cell", f"{mode},{mlen},{efficient}"] + sys.argv[1:],
                                     capture_output=True, text=True, check=True, env=env)
                cells.append(json.loads(out.stdout.strip().splitlines()[-1]))
            mib = [c["peak_bytes"] / 2 ** 20 for c in cells]
            mfu = [c["flops"] / c["seconds"] / fp32 for c in cells]
            ms = [1e3 * c["seconds"] for c in cells]
            print(f"| {mlen} | {ms[0]:.1f} | {mib[0]:.0f} | {mfu[0]:.0%} | {ms[1]:.1f} | {mib[1]:.0f} | {mfu[1]:.0%} "
                  f"| {mib[0] / max(mib[1], 1e-9):.1f}x |", flush=True)


if __name__ == "__main__":
    main()
