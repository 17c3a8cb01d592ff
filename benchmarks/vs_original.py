"""This package against the original Transformer-XL PyTorch code, side by side in one process.

The original is the authors' ``pytorch/mem_transformer.py`` (a clone of kimiyoung/transformer-xl; give its
``pytorch`` folder with ``--original DIR`` or ``$TXL_ORIGINAL_DIR``). It is imported from that folder, not
copied. Two things are adjusted while importing, neither of which changes what it computes: ``.byte()`` ->
``.bool()`` in its masks (PyTorch 2 refuses uint8 masks in ``masked_fill``; the values are the same), and
``torch.version.cuda`` reads ``"0.0"`` on a CPU build for the duration of the import (its
``utils/proj_adaptive_softmax.py`` parses it at import time and never uses it).

Both models hold the same weights (ours exported to the original's names) and read the same token stream.
Before timing, the script checks that they compute the same thing: per-token losses over three segments
with memory, dropout off, must agree within 1e-4, else it stops. Then, for each mode, it alternates the two
models round by round (``--rounds``, each ``--steps`` steps after one untimed step) and prints the median of
the per-round time ratios, original / ours, with the machine's CPU flags:

- ``train``: what each project's trainer does per step: forward with memory, backward, clipping to 0.25 and
  Adam (the original's ``train.py``: ``torch.optim.Adam``, default implementation; ours: ``build_optimizer``,
  what ``txl train`` uses), dropout 0.1 in both;
- ``eval``: forward with memory and no gradient, as each project's evaluation runs it (the original's
  ``eval.py`` and ``txl eval`` both under ``torch.no_grad()``);
- ``bf16``: our training step under CPU bf16 autocast against the original's fp32 step;
- ``eval-bf16``: our evaluation with the weights cast to bf16 once (``txl eval --precision bf16``) against the
  original's fp32 evaluation;
- ``eval-bf16-compile``: the same with ``torch.compile`` (inductor) around our model;
- ``bf16-compile``: our bf16 autocast training step with ``torch.compile`` (inductor) around our model, as
  ``txl train train.compile=true`` runs it, against the original's fp32 step.

Default model: the issue's base-like configuration (4 layers, d_model 256, 8 heads of 32, d_inner 1024,
tgt_len = mem_len = 128, batch 8, vocabulary 10k, no adaptive softmax, dropout 0.1).

    python benchmarks/vs_original.py --original ~/transformer-xl/pytorch
    python benchmarks/vs_original.py --modes eval --rounds 9 --threads 1
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import types
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import add_model_args, cpu_description, markdown_table, table_row
from train_step import token_stream

MODES = ("train", "eval", "bf16", "eval-bf16", "eval-bf16-compile", "bf16-compile")


def load_original(folder: Path) -> types.ModuleType:
    """The original ``mem_transformer`` module, imported from its own folder (its ``utils`` on the path)."""
    source_file = folder / "mem_transformer.py"
    if not source_file.is_file():
        sys.exit(f"vs_original.py: {source_file}: not found; give the 'pytorch' folder of a clone of "
                 "kimiyoung/transformer-xl with --original or $TXL_ORIGINAL_DIR")
    sys.path[:0] = [str(folder), str(folder / "utils")]
    source = source_file.read_text(encoding="utf-8").replace(".byte()", ".bool()")  # uint8 masks: refused by torch 2
    module = types.ModuleType("original_mem_transformer")
    module.__file__ = str(source_file)
    cuda = torch.version.cuda
    torch.version.cuda = cuda or "0.0"  # parsed at import by utils/proj_adaptive_softmax.py, unused after
    try:
        exec(compile(source, str(source_file), "exec"), module.__dict__)
    finally:
        torch.version.cuda = cuda
    return module


def build_ours(args):
    """Our model of the benchmark's configuration, seeded."""
    from transformer_xl.model import TransformerXL, TransformerXLConfig

    cfg = TransformerXLConfig(n_token=args.vocab, n_layer=args.n_layer, d_model=args.d_model, n_head=args.n_head,
                              d_head=args.d_head, d_inner=args.d_inner, tgt_len=args.tgt_len, mem_len=args.mem_len,
                              dropout=args.dropout, dropatt=getattr(args, "dropatt", 0.0), cutoffs=[], tie_weight=True)
    torch.manual_seed(0)
    return TransformerXL(cfg)


def build_pair(original, args):
    """(ours, theirs): the same weights, ours exported to the original's parameter names."""
    from transformer_xl.checkpoints.layouts import export_state_dict

    ours = build_ours(args)
    state, a = export_state_dict(ours, "original")
    theirs = original.MemTransformerLM(
        a["n_token"], a["n_layer"], a["n_head"], a["d_model"], a["d_head"], a["d_inner"], a["dropout"],
        a["dropatt"], tie_weight=a["tie_weight"], d_embed=a["d_embed"], div_val=a["div_val"],
        tie_projs=a["tie_projs"], pre_lnorm=a["pre_lnorm"], tgt_len=args.tgt_len, ext_len=0, mem_len=args.mem_len,
        cutoffs=a["cutoffs"], same_length=a["same_length"], attn_type=a["attn_type"], clamp_len=a["clamp_len"])
    theirs.load_state_dict(state, strict=True)
    return ours, theirs


class Ours:
    """Our model driven as ``txl train`` / ``txl eval`` drive it (batch-first; memory as returned)."""

    def __init__(self, model, args, precision="fp32"):
        from transformer_xl.training.run_config import TrainConfig
        from transformer_xl.training.schedule import build_optimizer

        self.model, self.precision, self.mems = model, precision, None
        self.optimizer = build_optimizer(model, TrainConfig(lr=args.lr))

    def train_step(self, inp, tgt):  # inp, tgt: [B, L]
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.precision == "bf16"):
            out = self.model(inp, tgt, mems=self.mems)
        out.loss.float().backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 0.25)
        self.optimizer.step()
        self.mems = out.mems

    def eval_step(self, inp, tgt):
        self.model.eval()
        with torch.no_grad():  # as txl eval, txl score and lm-eval run it
            out = self.model(inp, tgt, mems=self.mems)
        self.mems = out.mems
        return out.losses  # [B, L]


class Theirs:
    """The original model driven as its ``train.py`` / ``eval.py`` drive it (time-first; ``*mems``)."""

    def __init__(self, model, args):
        self.model, self.mems = model, tuple()
        self.optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    def train_step(self, inp, tgt):
        self.model.train()
        self.model.zero_grad()
        ret = self.model(inp.t().contiguous(), tgt.t().contiguous(), *self.mems)
        ret[0].float().mean().backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 0.25)
        self.optimizer.step()
        self.mems = tuple(ret[1:])

    def eval_step(self, inp, tgt):
        self.model.eval()
        with torch.no_grad():
            ret = self.model(inp.t().contiguous(), tgt.t().contiguous(), *self.mems)
        self.mems = tuple(ret[1:])
        return ret[0].t()  # [B, L]


def check_same(original, args, rows) -> float:
    """Largest per-token loss difference over three segments with memory, dropout off."""
    saved, args.dropout, args.dropatt = (args.dropout, args.dropatt), 0.0, 0.0
    ours, theirs = build_pair(original, args)
    args.dropout, args.dropatt = saved
    a, b, L, worst = Ours(ours, args), Theirs(theirs, args), args.tgt_len, 0.0
    for s in range(3):
        inp, tgt = rows[:, s * L:(s + 1) * L], rows[:, s * L + 1:(s + 1) * L + 1]
        worst = max(worst, float((a.eval_step(inp, tgt) - b.eval_step(inp, tgt)).abs().max()))
    return worst


def time_mode(mode, original, args, rows) -> list:
    """Per-round ratios original / ours for one mode, the two models alternating round by round."""
    ours, theirs = build_pair(original, args)
    if mode.startswith("eval-bf16"):
        ours = ours.to(torch.bfloat16)  # the weights cast once, as txl eval --precision bf16 loads them
    if mode.endswith("compile"):
        ours.compile()  # txl eval --compile, txl train train.compile=true
    runners = {"ours": Ours(ours, args, "bf16" if mode.startswith("bf16") else "fp32"),
               "original": Theirs(theirs, args)}
    L, per_round = args.tgt_len, args.steps + 1
    ratios, seconds = [], {"ours": [], "original": []}
    for r in range(args.rounds):
        order = ("ours", "original") if r % 2 == 0 else ("original", "ours")
        for name in order:
            runner = runners[name]
            step = runner.eval_step if mode.startswith("eval") else runner.train_step
            runner.mems = None if name == "ours" else tuple()  # each round starts from a fresh memory
            start = 0.0
            for i in range(per_round):
                if i == 1:
                    start = time.perf_counter()  # the first step (no memory yet) is untimed
                s = (r * per_round + i) % (rows.size(1) // L - 1)
                step(rows[:, s * L:(s + 1) * L], rows[:, s * L + 1:(s + 1) * L + 1])
            seconds[name].append((time.perf_counter() - start) / args.steps)
        ratios.append(seconds["original"][-1] / seconds["ours"][-1])
    return ratios, {k: statistics.median(v) for k, v in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--original", default=os.environ.get("TXL_ORIGINAL_DIR"),
                        help="the 'pytorch' folder of a clone of kimiyoung/transformer-xl")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    add_model_args(parser)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=4, help="timed steps per round and model")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args()
    if not args.original:
        sys.exit("vs_original.py: give the original code's 'pytorch' folder with --original DIR or $TXL_ORIGINAL_DIR")
    if args.threads:
        torch.set_num_threads(args.threads)
    from transformer_xl.training.allocator import keep_cpu_memory

    keep_cpu_memory()  # as txl train and txl eval do on CPU; the original's steps run under it too
    original = load_original(Path(args.original).expanduser())
    rows = token_stream(args.vocab, args.batch * (40 * args.tgt_len + 1)).view(args.batch, -1)  # [B, T]
    print(cpu_description())
    print(f"n_layer {args.n_layer}, d_model {args.d_model}, {args.n_head}x{args.d_head} heads, d_inner {args.d_inner}, "
          f"tgt_len {args.tgt_len}, mem_len {args.mem_len}, batch {args.batch}, vocab {args.vocab}, dropout "
          f"{args.dropout}; {args.rounds} alternating rounds of {args.steps} timed steps")
    worst = check_same(original, args, rows)
    print(f"same computation: largest per-token loss difference over 3 segments with memory {worst:.2e}")
    if worst > 1e-4:
        sys.exit("vs_original.py: the two models disagree; not timing them")
    print(markdown_table(["mode", "original ms/step", "ours ms/step", "speed-up (median of per-round ratios)", "min",
                          "max"]))
    for mode in args.modes:
        ratios, med = time_mode(mode, original, args, rows)
        label = {"train": "training step, fp32", "eval": "evaluation (no grad), fp32",
                 "bf16": "training step, ours bf16 autocast vs original fp32",
                 "eval-bf16": "evaluation (no grad), ours bf16 weights vs original fp32",
                 "eval-bf16-compile": "evaluation (no grad), ours bf16 weights + torch.compile vs original fp32",
                 "bf16-compile": "training step, ours bf16 autocast + torch.compile vs original fp32"}[mode]
        print(table_row([label, f"{1e3 * med['original']:.1f}", f"{1e3 * med['ours']:.1f}",
                         f"**{statistics.median(ratios):.2f}x**", f"{min(ratios):.2f}x", f"{max(ratios):.2f}x"]),
              flush=True)


if __name__ == "__main__":
    main()
