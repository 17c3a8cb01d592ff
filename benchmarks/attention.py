"""Relative attention alone: time and peak memory against memory length M, plain path vs query chunks.

Each (M, path) cell runs in a fresh subprocess, so its peak resident memory (``ru_maxrss``) is its own;
the figure printed is the peak minus the resident memory just before the attention call. Also prints
model FLOPs utilisation: achieved FLOP/s of the call divided by the fp32 matmul throughput measured in
the same run on the same machine.

    python benchmarks/attention.py --mem-lens 128 512 1024 2048 4096 --chunk 16
"""

from __future__ import annotations

import argparse
import json
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


def run_cell(mlen: int, chunk: int, args) -> dict:
    from transformer_xl.model.attention import RelPartialLearnableMultiHeadAttn, sinusoid_table

    torch.manual_seed(0)
    attn = RelPartialLearnableMultiHeadAttn(args.n_head, args.d_model, args.d_model // args.n_head, 0.0, 0.0,
                                            False).eval()
    dh = args.d_model // args.n_head
    h = torch.randn(args.batch, args.qlen, args.d_model)
    mems = torch.randn(args.batch, mlen, args.d_model)
    klen = mlen + args.qlen
    pos = sinusoid_table(torch.arange(klen, -1, -1.0), args.d_model)
    u, v = torch.randn(args.n_head, dh), torch.randn(args.n_head, dh)
    mask = torch.triu(torch.ones(args.qlen, klen, dtype=torch.bool), 1 + mlen)

    def call():
        with torch.no_grad():
            attn(h, pos, u, v, attn_mask=mask, mems=mems, chunk=chunk)

    before = current_rss_bytes()
    call()
    peak = peak_rss_bytes() - before
    seconds = timed(call, repeat=args.repeat)
    flops = attention_flops(args.batch, args.qlen, mlen, args.d_model, args.n_head, dh)
    return {"mlen": mlen, "chunk": chunk, "seconds": seconds, "peak_bytes": peak, "flops": flops}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mem-lens", type=int, nargs="+", default=[128, 512, 1024, 2048, 4096])
    parser.add_argument("--qlen", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--n-head", type=int, default=8)
    parser.add_argument("--chunk", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cell", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cell:
        mlen, chunk = map(int, args.cell.split(","))
        print(json.dumps(run_cell(mlen, chunk, args)))
        return
    fp32 = matmul_flops_per_s(torch.float32)
    print(f"B {args.batch}, L {args.qlen}, d_model {args.d_model}, {args.n_head} heads; {torch.get_num_threads()} threads; "
          f"measured fp32 matmul throughput {fp32 / 1e9:.1f} GFLOP/s")
    print("| M | plain ms | plain peak MiB | plain MFU | chunked ms | chunked peak MiB | chunked MFU | memory ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for mlen in args.mem_lens:
        cells = []
        for chunk in (0, args.chunk):
            out = subprocess.run([sys.executable, __file__, "--cell", f"{mlen},{chunk}"] + sys.argv[1:],
                                 capture_output=True, text=True, check=True)
            cells.append(json.loads(out.stdout.strip().splitlines()[-1]))
        plain, chunked = cells
        mib = [c["peak_bytes"] / 2 ** 20 for c in cells]
        mfu = [c["flops"] / c["seconds"] / fp32 for c in cells]
        print(f"| {mlen} | {1e3 * plain['seconds']:.1f} | {mib[0]:.0f} | {mfu[0]:.0%} | {1e3 * chunked['seconds']:.1f} "
              f"| {mib[1]:.0f} | {mfu[1]:.0%} | {mib[0] / max(mib[1], 1e-9):.1f}x |", flush=True)


if __name__ == "__main__":
    main()
