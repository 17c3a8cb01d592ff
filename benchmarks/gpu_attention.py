"""Fused Triton relative attention against the plain PyTorch path, on CUDA: time and peak memory vs M.

For each memory length M, one forward + backward (gradients of q, k, v, r_k, u and v) of

* fused: ``transformer_xl.model.ops.triton_kernel.rel_attention`` (no ``[B, H, L, K]`` tensor), and
* plain: ``rel_attn_score`` + masked float32 softmax + ``prob @ v``, as ``RelativeAttention``,

timed with CUDA events (mean of ``--repeat`` runs after a warm-up) and with the peak of
``torch.cuda.max_memory_allocated`` above the inputs during one run. Prints a markdown table; the last
column is the largest difference between the two outputs.

    python benchmarks/gpu_attention.py --mem-lens 128 256 512 1024 2048 4096 8192 --dtype bfloat16
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import markdown_table, table_row

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def plain_attention(q, k, v, r_k, u, vb, scale, mask):
    from transformer_xl.model.attention import rel_attn_score

    score = rel_attn_score(q, k, r_k, u, vb, scale).float()  # [B, H, L, K]
    prob = torch.softmax(score.masked_fill_(mask, float("-inf")), dim=-1).to(v.dtype)
    return torch.matmul(prob, v)  # [B, H, L, D]


def measure(fn, leaves, grad_out, repeat: int):
    """(mean ms of forward + backward, peak bytes above what was allocated before, output)."""
    def step():
        out = fn(*leaves)
        torch.autograd.grad(out, leaves, grad_out)
        return out

    out = step().detach()  # warm-up (and Triton compilation)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeat):
        step()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / repeat, peak, out


def run_row(mlen: int, args) -> str:
    from transformer_xl.model.attention import segment_visibility
    from transformer_xl.model.ops.triton_kernel import rel_attention

    dtype = DTYPES[args.dtype]
    bsz, n_head, qlen, d_head = args.batch, args.n_head, args.qlen, args.d_head
    klen = mlen + qlen
    scale = d_head ** -0.5
    gen = torch.Generator(device="cuda").manual_seed(0)
    shapes = [(bsz, n_head, qlen, d_head), (bsz, n_head, klen, d_head), (bsz, n_head, klen, d_head),
              (n_head, klen + 1, d_head), (n_head, d_head), (n_head, d_head)]
    leaves = [torch.randn(*s, device="cuda", generator=gen).to(dtype).requires_grad_() for s in shapes]
    grad_out = torch.randn(bsz, n_head, qlen, d_head, device="cuda", generator=gen).to(dtype)
    mask = segment_visibility(qlen, mlen, "cuda", args.window).mask  # [L, K], True = hidden

    cells = {}
    for name, fn in (("fused", lambda *xs: rel_attention(*xs, scale, window=args.window, block=args.block)),
                     ("plain", lambda *xs: plain_attention(*xs, scale, mask))):
        try:
            cells[name] = measure(fn, leaves, grad_out, args.repeat)
        except torch.cuda.OutOfMemoryError:
            cells[name] = None
        torch.cuda.empty_cache()
    mib = 2.0 ** 20

    def fmt(name, i, unit=1.0, spec=".2f"):
        return "OOM" if cells[name] is None else format(cells[name][i] / unit, spec)

    if cells["fused"] and cells["plain"]:
        speedup = f"{cells['plain'][0] / cells['fused'][0]:.2f}x"
        mem_ratio = f"{cells['plain'][1] / max(cells['fused'][1], 1):.1f}x"
        diff = f"{(cells['fused'][2].float() - cells['plain'][2].float()).abs().max().item():.1e}"
    else:
        speedup = mem_ratio = diff = "-"
    return table_row([mlen, klen, fmt("fused", 0), fmt("plain", 0), speedup, fmt("fused", 1, mib, ".1f"),
                      fmt("plain", 1, mib, ".1f"), mem_ratio, diff])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mem-lens", type=int, nargs="+", default=[128, 256, 512, 1024, 2048, 4096, 8192])
    parser.add_argument("--qlen", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--n-head", type=int, default=8)
    parser.add_argument("--d-head", type=int, default=64)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    parser.add_argument("--window", type=int, default=0, help="same_length window (0: causal with memory)")
    parser.add_argument("--block", type=int, default=None, help="kernel block size (default 64)")
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()

    if not torch.cuda.is_available():
        sys.exit("gpu_attention.py: no CUDA device; the fused Triton attention can only be timed on a GPU.")
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        sys.exit("gpu_attention.py: TRITON_INTERPRET=1 is set; unset it to time the compiled kernels.")
    from transformer_xl.model.ops import triton_kernel as triton_attention

    if not triton_attention.is_available(torch.zeros(1, device="cuda")):
        sys.exit("gpu_attention.py: Triton >= 3.2 (with tl.gather) is not installed; nothing to time.")
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 runs compare IEEE matmuls on both sides

    print(f"{torch.cuda.get_device_name()}; B {args.batch}, L {args.qlen}, H {args.n_head}, D {args.d_head}, "
          f"{args.dtype}, window {args.window}; forward + backward, mean of {args.repeat}")
    print(markdown_table(["M", "K", "fused ms", "plain ms", "speedup", "fused peak MiB", "plain peak MiB",
                          "memory ratio", "max abs diff"]))
    for mlen in args.mem_lens:
        print(run_row(mlen, args), flush=True)


if __name__ == "__main__":
    main()
