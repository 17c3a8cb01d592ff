"""Training step: tokens/s, peak memory and model FLOPs utilisation, for several fast-path variants.

A step is what ``txl train`` does: forward with the previous segment's memory, backward, gradient
clipping and an Adam update. Each variant runs in a fresh subprocess (so its peak resident memory is
its own), from the same initial weights and on the same token stream, and reports:

- ms/step and tokens/s (median of the timed steps, after warm-up steps that also absorb compilation);
- peak memory: peak resident memory minus the resident memory before the first step;
- FLOPs per step, counted by ``torch.utils.flop_counter`` on one real step (forward + backward);
- MFU: each timed step's FLOP/s divided by the fp32 (and bf16) matmul throughput measured right before
  and after that step, median over the steps (the rate of a shared machine drifts within seconds);
- the loss curve's difference from the first variant (fp32 eager), to show what a fast path changes.

Default model: the issue's small base-like configuration (4 layers, d_model 256, 8 heads of 32, d_inner
1024, tgt_len = mem_len = 128, batch 8, vocabulary 10k, no adaptive softmax). Tokens come from Penn
Treebank under ``$TXL_DATA_DIR`` when it is there (its vocabulary is 10k), random tokens otherwise.

Variants: ``fp32``, ``fp32-faults`` (fp32 without :func:`~transformer_xl.training.allocator.keep_cpu_memory`,
which ``txl train`` calls), ``fp32+compile``, ``bf16`` (CPU autocast), ``bf16+compile``.

    python benchmarks/train_step.py                       # all variants
    python benchmarks/train_step.py --variants fp32 fp32+compile --steps 30
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import (
    MatmulReference,
    add_model_args,
    current_rss_bytes,
    last_line,
    last_stderr_line,
    markdown_table,
    peak_rss_bytes,
    table_row,
)

VARIANTS = ("fp32", "fp32-faults", "fp32+compile", "bf16", "bf16+compile")


def token_stream(n_token: int, n: int) -> torch.Tensor:
    """``n`` tokens: PTB's training text when available (and the vocabulary fits), random otherwise."""
    data_dir = Path(os.environ.get("TXL_DATA_DIR", Path(__file__).resolve().parents[1].parent / "shared" / "data"))
    ptb = data_dir / "ptb"
    if ptb.is_dir():
        from transformer_xl.data import load_corpus

        ids = load_corpus("ptb", data_dir=str(ptb)).train
        if int(ids.max()) < n_token and ids.size >= n:
            return torch.from_numpy(ids[:n].astype("int64"))
    return torch.randint(0, n_token, (n,), generator=torch.Generator().manual_seed(0))


def build(args):
    from transformer_xl.model import TransformerXL, TransformerXLConfig

    cfg = TransformerXLConfig(n_token=args.vocab, n_layer=args.n_layer, d_model=args.d_model, n_head=args.n_head,
                              d_head=args.d_head, d_inner=args.d_inner, tgt_len=args.tgt_len, mem_len=args.mem_len,
                              dropout=args.dropout, dropatt=args.dropatt, cutoffs=[], tie_weight=True)
    torch.manual_seed(0)
    return TransformerXL(cfg)


def run_variant(name: str, args) -> dict:
    """One variant, in this (fresh) process.

    The reference matmul throughputs (fp32 and bf16) are measured between every two steps, so that each
    step's MFU is taken against what the machine delivered at that moment; on a shared machine the rate
    drifts by a factor of two from one second to the next.
    """
    from transformer_xl.training.allocator import keep_cpu_memory

    if name != "fp32-faults":
        keep_cpu_memory()  # as txl train does (train.keep_cpu_memory)
    torch.manual_seed(0)
    model = build(args).train()
    model.set_attention("streamed" if args.attn_chunk else "plain", args.attn_chunk)
    precision = "bf16" if name.startswith("bf16") else "fp32"
    engine = model
    if "compile" in name:
        engine = torch.compile(model)
    from transformer_xl.training.run_config import TrainConfig
    from transformer_xl.training.schedule import build_optimizer

    optimizer = build_optimizer(model, TrainConfig(lr=args.lr))  # what txl train uses
    b, L = args.batch, args.tgt_len
    n_steps = args.warmup + args.steps
    stream = token_stream(args.vocab, b * (n_steps * L + 1))
    rows = stream.view(b, -1)  # [B, T]

    def step(i: int, mems):
        inp, tgt = rows[:, i * L:(i + 1) * L], rows[:, i * L + 1:(i + 1) * L + 1]
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            out = engine(inp, tgt, mems=mems)
        out.loss.float().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        optimizer.step()
        return float(out.loss.detach()), out.mems

    # FLOPs of one step, counted on a separate model so that the measured run's state is untouched.
    flops = count_step_flops(args)
    refs = {"fp32": MatmulReference(torch.float32), "bf16": MatmulReference(torch.bfloat16)}
    before = current_rss_bytes()
    mems, losses, times, ref_rates = None, [], [], {key: [] for key in refs}
    for i in range(n_steps):
        rate_before = {key: ref() for key, ref in refs.items()}
        start = time.perf_counter()
        loss, mems = step(i, mems)
        times.append(time.perf_counter() - start)
        losses.append(loss)
        for key, ref in refs.items():
            ref_rates[key].append((rate_before[key] + ref()) / 2)  # the machine's rate around this step
    peak = peak_rss_bytes() - before
    timed_steps = range(args.warmup, n_steps)
    mfu = {key: statistics.median(flops / times[i] / rates[i] for i in timed_steps) for key, rates in ref_rates.items()}
    return {"variant": name, "seconds": statistics.median(times[i] for i in timed_steps),
            "first_step_seconds": times[0], "peak_bytes": peak, "flops": flops, "tokens": b * L, "losses": losses,
            "mfu": mfu,
            "ref": {key: statistics.median(rates[i] for i in timed_steps) for key, rates in ref_rates.items()}}


def count_step_flops(args) -> float:
    """Matmul FLOPs of one training step (forward + backward, with a memory of mem_len) in fp32 eager."""
    from torch.utils.flop_counter import FlopCounterMode

    model = build(args).train()
    x = torch.randint(0, args.vocab, (args.batch, 2 * args.tgt_len + 1))
    L = args.tgt_len
    mems = model(x[:, :L], x[:, 1:L + 1]).mems
    with FlopCounterMode(display=False) as counter:
        model(x[:, L:2 * L], x[:, L + 1:2 * L + 1], mems=mems).loss.backward()
    return float(counter.get_total_flops())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    add_model_args(parser)
    parser.add_argument("--attn-chunk", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation happens here)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps")
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:
        print(json.dumps(run_variant(args.variant, args)))
        return
    print(f"n_layer {args.n_layer}, d_model {args.d_model}, {args.n_head}x{args.d_head} heads, d_inner {args.d_inner}, "
          f"tgt_len {args.tgt_len}, mem_len {args.mem_len}, batch {args.batch}, vocab {args.vocab}, "
          f"dropout {args.dropout}; {torch.get_num_threads()} threads; {args.steps} timed steps per variant")
    print("MFU: median over the timed steps of (step FLOPs / step time) / (matmul FLOP/s measured around that step)")
    print(markdown_table(["variant", "ms/step", "tokens/s", "peak MiB", "GFLOP/step", "ref fp32 GFLOP/s", "MFU vs fp32",
                          "ref bf16 GFLOP/s", "MFU vs bf16", "first step s", "mean abs loss diff vs first"]))
    base = None
    for name in args.variants:
        out = subprocess.run([sys.executable, __file__, "--variant", name] + sys.argv[1:], capture_output=True,
                             text=True)
        if out.returncode != 0:
            print(table_row([name, f"failed: {last_stderr_line(out, str(out.returncode))}"]))
            continue
        r = last_line(out)
        base = base or r
        diff = statistics.fmean(abs(a - b) for a, b in zip(r["losses"], base["losses"]))
        print(table_row([name, f"{1e3 * r['seconds']:.0f}", f"{r['tokens'] / r['seconds']:.0f}",
                         f"{r['peak_bytes'] / 2 ** 20:.0f}", f"{r['flops'] / 1e9:.1f}", f"{r['ref']['fp32'] / 1e9:.0f}",
                         f"{r['mfu']['fp32']:.0%}", f"{r['ref']['bf16'] / 1e9:.0f}", f"{r['mfu']['bf16']:.0%}",
                         f"{r['first_step_seconds']:.1f}", f"{diff:.4f}"]), flush=True)
    if base:
        print(f"loss after {len(base['losses'])} steps ({base['variant']}): {base['losses'][-1]:.4f}")


if __name__ == "__main__":
    main()
