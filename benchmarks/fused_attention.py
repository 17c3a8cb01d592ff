"""The attention of a 16-bit segment without gradients: the masked softmax against the fused path, per shape.

``plain`` is the reference back-end's score and masked softmax (``rel_attn_score`` + ``masked_softmax_attend``);
``fused`` is what a segment of bf16 weights runs on a CPU with AMX (``fused_inference_attention``: one
``scaled_dot_product_attention`` with the position term as its bias). Both on the same bf16 queries, keys, values
and position keys in the model's strided head layout, a segment of ``L`` queries over ``M`` remembered steps, the
causal mask; best of three medians of ``--calls`` calls, ms a call, with the CPU named. Large blocks are served
from the heap as ``txl eval`` serves them (``keep_cpu_memory``), so the masked softmax's ``[B, H, L, K]`` scores do
not pay for fresh pages at each call. The fused path is the one taken on CPUs with AMX only; this times both
wherever it runs::

    python benchmarks/fused_attention.py --threads 2
    python benchmarks/fused_attention.py --shapes 8,8,128,128,32 10,10,70,70,38    # B,H,L,M,D each
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import cpu_description, markdown_table, table_row

SHAPES = ("8,8,128,128,32", "8,8,128,128,64", "10,10,70,70,38", "10,10,70,70,64", "16,4,64,64,32")


def timed(fn, calls: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def compare(bsz: int, n_head: int, qlen: int, mlen: int, d_head: int, calls: int):
    from transformer_xl.model.attention import backends, segment_visibility

    klen, dt = qlen + mlen, torch.bfloat16
    q = torch.randn(bsz, qlen, n_head, d_head, dtype=dt).transpose(1, 2)  # [B, H, L, D], heads of one projection
    k, v = (torch.randn(bsz, klen, n_head, d_head, dtype=dt).transpose(1, 2) for _ in range(2))
    r_k = torch.randn(klen + 1, n_head, d_head, dtype=dt).transpose(0, 1)  # [H, K+1, D]
    u, v_bias = torch.randn(n_head, d_head, dtype=dt), torch.randn(n_head, d_head, dtype=dt)
    call = backends.AttentionCall(q, r_k, u, v_bias, segment_visibility(qlen, mlen, "cpu"), d_head ** -0.5,
                                  torch.nn.Dropout(0.0), k=k, v=v)

    def plain():
        score = backends.rel_attn_score(q, k, r_k, u, v_bias, call.scale)
        return backends.masked_softmax_attend(score, v, call.vis, call.dropatt)

    with torch.no_grad():
        rounds = [(timed(plain, calls), timed(lambda: backends.fused_inference_attention(call, k, v), calls))
                  for _ in range(3)]
    return min(p for p, _ in rounds), min(f for _, f in rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), help="B,H,L,M,D each")
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from transformer_xl.training.allocator import keep_cpu_memory

    keep_cpu_memory()  # as txl eval and txl train do on CPU
    print(cpu_description())
    print(markdown_table(["B, H, L, M, D", "masked softmax ms", "fused ms", "masked softmax / fused"]))
    for text in args.shapes:
        try:
            shape = [int(x) for x in text.split(",")]
            if len(shape) != 5 or min(shape) < 1:
                raise ValueError
        except ValueError:
            sys.exit(f"fused_attention.py: --shapes takes B,H,L,M,D (five whole numbers >= 1), got {text!r}")
        plain, fused = compare(*shape, args.calls)
        print(table_row([", ".join(map(str, shape)), f"{plain:.3f}", f"{fused:.3f}", f"{plain / fused:.2f}x"]),
              flush=True)


if __name__ == "__main__":
    main()
