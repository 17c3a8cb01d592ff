"""``txl eval`` and ``txl score`` against the model-level evaluation they are built on: tokens per second.

A base-like run (4 layers, d_model 256, 8 heads of 32, d_inner 1024, tgt_len = mem_len = 128) is trained for
two steps on Penn Treebank (``$TXL_DATA_DIR/ptb``) into a temporary folder, or ``--run RUN`` names one. Then,
on PTB's validation split:

- **model level**: the bare loop ``out = model(inp, tgt, mems=mems)`` under ``torch.no_grad()``, segments of
  ``tgt_len`` with the memory carried, the split cut into ``--batch-size`` rows (as ``txl eval`` cuts it), and
  one row for ``score``'s comparison (``txl score`` reads one document as one row);
- **txl eval**: the command, run as a user runs it; its own tokens/s (``--json``), which times the evaluation
  from the first segment to the last;
- **txl score**: ``open_checkpoint(RUN).score(text, doc_sep="none")``, what ``txl score RUN FILE --doc-sep none``
  computes and prints, timed in-process around the call (tokenizing included), on the split's first
  lines holding ``--score-tokens`` tokens.

The figure of interest is each command's throughput as a share of the model level's at the same batch size.

    python benchmarks/command_overhead.py
    python benchmarks/command_overhead.py --run runs/ptb-base --batch-size 10
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import cpu_description, markdown_table, run_json, table_row

BASE = ["--n-layer", "4", "--d-model", "256", "--n-head", "8", "--d-head", "32", "--d-inner", "1024",
        "--tgt-len", "128", "--mem-len", "128", "--eval.tgt-len", "128", "--eval.mem-len", "128"]


def train_run(run: Path, ptb: Path) -> None:
    cmd = ["txl", "train", "--dataset", "ptb", "--data-dir", str(ptb), "--run-dir", str(run), "--max-steps", "2",
           "--batch-size", "8", "--eval-interval", "1000000", *BASE]
    subprocess.run(cmd, check=True, capture_output=True, text=True)


@torch.no_grad()
def model_level(model, ids: torch.Tensor, batch: int) -> float:
    """Tokens/s of the bare segment loop over ``ids`` cut into ``batch`` rows."""
    n = ids.numel() // batch
    rows = ids[: n * batch].view(batch, n)  # [B, T] as the ordered iterator cuts it
    mems, tokens, start, L = None, 0, time.perf_counter(), model.tgt_len
    for s in range(0, n - 1, L):
        inp, tgt = rows[:, s:min(s + L, n - 1)], rows[:, s + 1:min(s + L, n - 1) + 1]
        mems = model(inp, tgt, mems=mems).mems
        tokens += tgt.numel()
    return tokens / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_data = Path(os.environ.get("TXL_DATA_DIR", Path(__file__).resolve().parents[1].parent / "shared" / "data"))
    parser.add_argument("--ptb", default=str(default_data / "ptb"))
    parser.add_argument("--run", help="an existing run on PTB (default: train a base-like one for 2 steps)")
    parser.add_argument("--batch-size", type=int, default=10, help="txl eval's default")
    parser.add_argument("--score-tokens", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from transformer_xl import open_checkpoint
    from transformer_xl.data import load_corpus
    from transformer_xl.training.allocator import keep_cpu_memory

    keep_cpu_memory()  # txl eval and txl score do this on CPU
    print(cpu_description())
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(args.run) if args.run else Path(tmp) / "run"
        if not args.run:
            train_run(run, Path(args.ptb))
        ckpt = open_checkpoint(str(run))
        model = ckpt.model.eval()
        valid = torch.from_numpy(load_corpus("ptb", data_dir=args.ptb).valid.astype("int64"))
        cmd = ["txl", "eval", str(run), "--split", "valid", "--batch-size", str(args.batch_size), "--json"]
        eval_pairs = []  # (model level, command), alternating
        for _ in range(args.rounds):
            level = model_level(model, valid, args.batch_size)
            out = run_json(cmd, check=True)
            eval_pairs.append((level, out["tokens_per_s"]))
        text, n = [], 0
        for line in (Path(args.ptb) / "ptb.valid.txt").read_text(encoding="utf-8").splitlines(keepends=True):
            text.append(line)
            n += len(line.split()) + 1
            if n >= args.score_tokens:
                break
        text = "".join(text)
        ids = torch.tensor(ckpt.tokenizer.encode(text))  # what txl score reads
        score_pairs = []
        for _ in range(args.rounds):
            level = model_level(model, ids, 1)
            start = time.perf_counter()
            result = ckpt.score(text, doc_sep="none")
            score_pairs.append((level, result.tokens / (time.perf_counter() - start)))
    L, M = model.tgt_len, model.mem_len
    print(f"run {run.name}: {model.config.n_layer} layers, d_model {model.config.d_model}, tgt_len {L}, mem_len {M}; "
          f"PTB valid ({valid.numel():,} tokens)")
    print(f"{args.rounds} rounds, each the model level then the command; tokens/s are medians, the share is the "
          "median of the per-round ratios")
    print(markdown_table(["path", "batch", "tokens/s", "share of the model level"]))
    for label, batch, pairs in (("`txl eval --split valid`", args.batch_size, eval_pairs),
                                (f"`txl score --doc-sep none` on {ids.numel():,} tokens (in-process, tokenizing "
                                 f"included)", 1, score_pairs)):
        level, command = (statistics.median(p[i] for p in pairs) for i in (0, 1))
        share = statistics.median(c / m for m, c in pairs)
        print(table_row(["model level (bare loop)", batch, f"{level:,.0f}", "100%"]))
        print(table_row([label, batch, f"{command:,.0f}", f"**{share:.0%}**"]))

if __name__ == "__main__":
    main()
