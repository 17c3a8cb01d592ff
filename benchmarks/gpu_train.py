"""Training step on a CUDA device: tokens/s, peak memory and model FLOPs utilisation, by precision and attention.

A step is what ``txl train`` does on a GPU: forward of one segment with the previous segment's memory (under
autocast for bf16/fp16), backward (fp16 through a gradient scaler), gradient clipping at 0.25 and an Adam update.
Each variant starts from the same weights and reads the same random byte tokens. Reported per variant:

- ms/step and tokens/s (median of ``--steps`` timed steps after ``--warmup`` steps, CUDA-synchronised);
- peak memory (``torch.cuda.max_memory_allocated`` over the timed steps);
- MFU: the step's FLOPs (``torch.utils.flop_counter`` on one step) per second over the dense bf16 matmul rate
  measured on this card in the same run (``common.MatmulReference``, ten 8192^3 products), so the figure needs no
  datasheet;
- the mean loss of the timed steps, to show the variants compute the same thing.

Default model: the paper's enwik8 base shape (12 layers, d_model 512, 8 heads of 64, d_inner 2048, tgt_len =
mem_len = 512, batch 22, byte vocabulary).

    python benchmarks/gpu_train.py
    python benchmarks/gpu_train.py --variants bf16:triton bf16:plain --mem-len 2048
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from transformer_xl.model import TransformerXL, TransformerXLConfig

sys.path.insert(0, str(Path(__file__).parent))
from common import MatmulReference, markdown_table, table_row

VARIANTS = ["fp32:plain", "fp32:triton", "bf16:plain", "bf16:triton", "fp16:plain", "fp16:triton"]
DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def run_variant(cfg: TransformerXLConfig, state: dict, tokens: torch.Tensor, variant: str, warmup: int,
                steps: int) -> dict:
    precision, attention = variant.split(":")
    device = tokens.device.type
    model = TransformerXL(cfg).to(tokens.device).train()
    model.load_state_dict(state)
    model.set_attention(attention)
    torch.manual_seed(1)  # the same dropout masks in every variant
    opt = torch.optim.Adam(model.parameters(), lr=2.5e-4)
    scaler = torch.amp.GradScaler(device, enabled=precision == "fp16")
    dtype = DTYPES[precision]
    L, mems = cfg.tgt_len, None

    def step(i: int):
        nonlocal mems
        j = (i * L) % (tokens.size(1) - L - 1)
        with torch.autocast(device, dtype=dtype or torch.float32, enabled=dtype is not None):
            out = model(tokens[:, j:j + L], tokens[:, j + 1:j + L + 1], mems=mems)
        scaler.scale(out.loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        mems = out.mems
        return out.loss.detach()

    for i in range(warmup):
        step(i)
    model.set_attention("plain")  # the fused kernel's matmuls are invisible to the counter: count the same maths
    with FlopCounterMode(display=False) as counter:
        step(warmup)
    flops = counter.get_total_flops()
    model.set_attention(attention)
    sync()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times, losses = [], []
    for i in range(steps):
        start = time.perf_counter()
        loss = step(warmup + 1 + i)
        sync()
        times.append(time.perf_counter() - start)
        losses.append(loss.item())
    ms = 1e3 * statistics.median(times)
    return {"variant": variant, "ms": ms, "tokens_per_s": tokens.size(0) * L / (ms / 1e3),
            "peak": torch.cuda.max_memory_allocated() if device == "cuda" else 0, "flops": flops,
            "loss": statistics.mean(losses)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variants", nargs="+", default=VARIANTS, choices=VARIANTS)
    parser.add_argument("--n-layer", type=int, default=12)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--n-head", type=int, default=8)
    parser.add_argument("--d-inner", type=int, default=2048)
    parser.add_argument("--tgt-len", type=int, default=512)
    parser.add_argument("--mem-len", type=int, default=512)
    parser.add_argument("--batch", type=int, default=22)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--cpu", action="store_true", help=argparse.SUPPRESS)  # a dry run of the script's code
    args = parser.parse_args()
    if not torch.cuda.is_available() and not args.cpu:
        raise SystemExit("gpu_train.py: needs a CUDA device")
    device = "cpu" if args.cpu else "cuda"
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 is fp32
    cfg = TransformerXLConfig(n_token=256, n_layer=args.n_layer, n_head=args.n_head, d_model=args.d_model,
                              d_head=args.d_model // args.n_head, d_inner=args.d_inner, tgt_len=args.tgt_len,
                              mem_len=args.mem_len, dropout=0.1, dropatt=0.0)
    torch.manual_seed(0)
    state = TransformerXL(cfg).state_dict()
    steps_needed = (args.warmup + args.steps + 2) * args.tgt_len + 1
    tokens = torch.randint(0, 256, (args.batch, steps_needed), generator=torch.Generator().manual_seed(0)).to(device)
    peak = MatmulReference(torch.bfloat16, n=256 if args.cpu else 8192, repeat=10, device=device)()
    card = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    print(f"{card}, torch {torch.__version__}; dense bf16 matmul measured: "
          f"{peak / 1e12:.0f} TFLOP/s. Model: {args.n_layer} layers, d_model {args.d_model}, {args.n_head} heads, "
          f"d_inner {args.d_inner}, tgt_len {args.tgt_len}, mem_len {args.mem_len}, batch {args.batch}, bytes")
    print(markdown_table(["precision:attention", "ms/step", "tokens/s", "peak memory", "MFU (of measured bf16)",
                          "mean loss"]))
    for v in args.variants:
        try:
            r = run_variant(cfg, state, tokens, v, args.warmup, args.steps)
        except torch.cuda.OutOfMemoryError:
            print(table_row([v, "out of memory", "", "", "", ""]), flush=True)
            torch.cuda.empty_cache()
            continue
        mfu = r["flops"] / (r["ms"] / 1e3) / peak
        print(table_row([v, f"{r['ms']:.1f}", f"{r['tokens_per_s']:,.0f}", f"{r['peak'] / 2**30:.2f} GiB",
                         f"{100 * mfu:.1f}%", f"{r['loss']:.4f}"]), flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
