"""Decoding speed against memory length, three methods on one model in one process.

1. cached: this package's DecodingCache (projected keys/values kept; O(d^2 + (M+t) d) per token);
2. reproject: the original code's and HuggingFace's way: states kept as memory, re-projected through
   W_k, W_v at every token (O((M+t) d^2) per token);
3. recompute: no memory; the whole window of M+1 tokens is run again for every token.

Each method sees the same M+1 positions per new token (tgt_len 1, mem_len M). Prints a markdown
table, one per precision of the weights (``--precisions fp32 bf16``: cast once, as ``txl generate --precision``).
Example:

    python benchmarks/generate.py --mem-lens 128 512 2048 --tokens 16
    python benchmarks/generate.py --mem-lens 512 2048 --precisions fp32 bf16 --threads 2
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import markdown_table, table_row

from transformer_xl.generation import DecodingCache
from transformer_xl.model import TransformerXL, TransformerXLConfig


def build_model(args) -> TransformerXL:
    torch.manual_seed(0)
    cfg = TransformerXLConfig(n_token=args.vocab, n_layer=args.n_layer, n_head=args.n_head, d_model=args.d_model,
                              d_head=args.d_model // args.n_head, d_inner=4 * args.d_model, dropout=0.0,
                              tgt_len=1, mem_len=max(args.mem_lens))
    return TransformerXL(cfg).eval()


@torch.no_grad()
def run_cached(model, prompt, n_tokens):
    cache = DecodingCache(model, 1, max_distance=prompt.size(1) + n_tokens + 2)
    for s in range(0, prompt.size(1), 128):
        hidden = cache.extend(prompt[:, s:s + 128])
    tok = model.crit.log_probs(hidden[:, -1]).argmax(-1)
    start = time.perf_counter()
    for _ in range(n_tokens):
        tok = model.crit.log_probs(cache.extend(tok[:, None])[:, -1]).argmax(-1)
    return time.perf_counter() - start


@torch.no_grad()
def run_reproject(model, prompt, n_tokens):
    mems = None
    for s in range(0, prompt.size(1) - 1, 128):
        chunk = prompt[:, s:min(s + 128, prompt.size(1) - 1)]
        mems = model.transformer(chunk, mems)[1]
    hidden, mems, _, _ = model.transformer(prompt[:, -1:], mems)
    tok = model.crit.log_probs(hidden[:, -1]).argmax(-1)
    start = time.perf_counter()
    for _ in range(n_tokens):
        hidden, mems, _, _ = model.transformer(tok[:, None], mems)
        tok = model.crit.log_probs(hidden[:, -1]).argmax(-1)
    return time.perf_counter() - start


@torch.no_grad()
def run_recompute(model, prompt, n_tokens, window):
    seq = prompt[:, -window:]
    start = time.perf_counter()
    for _ in range(n_tokens):
        hidden = model.transformer(seq[:, -window:], None)[0]
        tok = model.crit.log_probs(hidden[:, -1]).argmax(-1)
        seq = torch.cat([seq, tok[:, None]], 1)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mem-lens", type=int, nargs="+", default=[128, 512, 2048])
    parser.add_argument("--tokens", type=int, default=16, help="tokens timed per method and memory length")
    parser.add_argument("--n-layer", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--n-head", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=10000)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--precisions", nargs="+", default=["fp32"], choices=["fp32", "bf16"])
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    for precision in args.precisions:
        print(f"\nweights: {precision}")
        table(build_model(args).to(torch.bfloat16 if precision == "bf16" else torch.float32), args)


def table(model, args) -> None:
    print(f"model: n_layer {args.n_layer}, d_model {args.d_model}, n_head {args.n_head}, vocab {args.vocab}; "
          f"{torch.get_num_threads()} threads; {args.tokens} tokens per cell, batch 1")
    print(markdown_table(["M", "cached ms/tok", "reproject ms/tok", "recompute ms/tok", "cached tok/s",
                          "speed-up vs reproject", "vs recompute"]))
    for mem_len in args.mem_lens:
        model.reset_length(tgt_len=1, ext_len=0, mem_len=mem_len)
        prompt = torch.randint(0, args.vocab, (1, mem_len + 1), generator=torch.Generator().manual_seed(mem_len))
        t_cached = run_cached(model, prompt, args.tokens)
        t_reproj = run_reproject(model, prompt, args.tokens)
        t_recomp = run_recompute(model, prompt, args.tokens, mem_len + 1)
        n = args.tokens
        print(table_row([mem_len, *(f"{1e3 * t / n:.2f}" for t in (t_cached, t_reproj, t_recomp)),
                         f"{n / t_cached:.1f}", f"{t_reproj / t_cached:.1f}x", f"{t_recomp / t_cached:.1f}x"]),
              flush=True)


if __name__ == "__main__":
    main()
