"""Memory past the training length: per-token losses of Transformer-XL, the vanilla Transformer and
recurrence with absolute positions on the same validation tokens, and where a longer memory helps.

For every evaluation setting the script computes the per-token losses of the same predictions (the first
``--max-tokens`` of each of ``--batch-size`` rows of the split; see ``transformer_xl.evaluation.token_losses``):

* xl: segments of L with memory M = 0, L, 2L, ... 32L; without and with ``same_length``; unclamped, and
  with relative distances clamped at ``--clamp`` (default 2L, the longest distance seen in training);
* absmem: segments of L with memory M = 0, L, 2L, 4L, 8L;
* vanilla: sliding windows of L (every prediction sees the L - 1 tokens before it), and segments of L.

Then it prints (markdown) the bits per byte of every setting, the loss on repeat tokens binned by repeat
distance (``transformer_xl.analysis.repeats``: the distance back to the most recent earlier occurrence of
the n-gram the token completes) for n = ``--ngram`` values, the gain from M = L to each longer memory with a
block standard error, and writes two plots and a JSON of everything.

    python benchmarks/repeat_analysis.py runs/longmem/xl runs/longmem/vanilla runs/longmem/absmem \\
        --batch-size 8 --max-tokens 8192 --out runs/longmem/analysis --plot-prefix docs/longmem
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from transformer_xl.analysis.repeats import (
    NO_REPEAT,
    bin_mask,
    distance_bins,
    far_repeat_mask,
    masked_mean,
    paired_difference,
    row_distances,
)
from transformer_xl.evaluation.token_losses import segment_losses, sliding_losses, stream_rows
from transformer_xl.jobs import CorpusChoice, checkpoint_split
from transformer_xl.pretrained import find_checkpoint

LN2 = math.log(2)
MULTIPLES = (0, 1, 2, 4, 8, 16, 32)


def settings(L: int, clamp: int):
    """(model, label, kwargs) of every evaluation, in the order they run."""
    out = [("vanilla", f"sliding {L}", dict(mode="sliding", window=L)),
           ("vanilla", "segments, M=0", dict(mode="segment", mem_len=0, same_length=False, clamp_len=-1))]
    for k in (0, 1, 2, 4, 8):
        out.append(("absmem", f"M={k * L}", dict(mode="segment", mem_len=k * L, same_length=False, clamp_len=-1)))
    for k in MULTIPLES:
        M = k * L
        for same in ((False,) if M == 0 else (False, True)):
            out.append(("xl", label(M, same, -1), dict(mode="segment", mem_len=M, same_length=same, clamp_len=-1)))
            if L + M - 1 > clamp:  # otherwise no distance reaches the clamp: the same numbers
                out.append(("xl", label(M, same, clamp),
                            dict(mode="segment", mem_len=M, same_length=same, clamp_len=clamp)))
    return out


def show(key: str) -> str:
    return key.replace(" | ", ": ")


def label(M: int, same: bool, clamp: int) -> str:
    return f"M={M}" + (", same_length" if same else "") + (f", clamp {clamp}" if clamp > 0 else "")


def losses_for(model, data, L: int, batch_size: int, max_tokens: int, kw: dict) -> np.ndarray:
    if kw["mode"] == "sliding":
        x = sliding_losses(model, data, batch_size, window=kw["window"], max_tokens=max_tokens)
    else:
        x = segment_losses(model, data, batch_size, tgt_len=L, mem_len=kw["mem_len"], max_tokens=max_tokens,
                           clamp_len=kw["clamp_len"], same_length=kw["same_length"])
    return x.double().numpy()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("xl"), p.add_argument("vanilla"), p.add_argument("absmem")
    p.add_argument("--split", default="valid")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=8192, help="predictions per row")
    p.add_argument("--clamp", type=int, default=None, help="clamp_len of the clamped settings (default 2L)")
    p.add_argument("--ngram", type=int, nargs="+", default=[8, 16])
    p.add_argument("--out", required=True, help="directory for losses.npz and results.json")
    p.add_argument("--plot-prefix", default=None, help="write PREFIX_bpc.png and PREFIX_repeats.png")
    p.add_argument("--reuse", action="store_true", help="reuse losses.npz in --out from an earlier run")
    args = p.parse_args(argv)
    torch.set_grad_enabled(False)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    found = {name: find_checkpoint(getattr(args, name)) for name in ("xl", "vanilla", "absmem")}
    splits = {name: checkpoint_split(f, args.split, CorpusChoice()) for name, f in found.items()}  # each run's own
    if any(not np.array_equal(s.ids, splits["xl"].ids) for s in splits.values()):
        sys.exit("repeat_analysis.py: the three runs do not read the same corpus in the same vocabulary")
    data, corpus_name = splits["xl"].ids, splits["xl"].dataset
    models = {name: f.load_model("cpu") for name, f in found.items()}
    L = models["xl"].config.tgt_len
    clamp = args.clamp or 2 * L
    rows = stream_rows(data, args.batch_size).numpy()
    n_pred = min(args.max_tokens, rows.shape[1] - 1)
    print(f"# {corpus_name} {args.split}: {args.batch_size} rows x {n_pred} predictions = "
          f"{args.batch_size * n_pred:,} tokens; L = {L}, clamp = {clamp}", flush=True)

    cache = out / "losses.npz"
    losses = dict(np.load(cache)) if args.reuse and cache.is_file() else {}
    seconds = {}
    for name, lab, kw in settings(L, clamp):
        key = f"{name} | {lab}"
        if key not in losses:
            start = time.perf_counter()
            losses[key] = losses_for(models[name], data, L, args.batch_size, n_pred, kw)
            seconds[key] = time.perf_counter() - start
            np.savez(cache, **losses)
        print(f"{key}: {losses[key].mean() / LN2:.4f} bpc ({seconds.get(key, 0):.0f} s)", file=sys.stderr, flush=True)

    dist = {n: row_distances(rows, n, n_pred) for n in args.ngram}
    result = {"tokens": int(args.batch_size * n_pred), "rows": args.batch_size, "predictions_per_row": n_pred,
              "L": L, "clamp": clamp, "bpc": {k: float(v.mean() / LN2) for k, v in losses.items()},
              "seconds": seconds, "repeats": {}}
    print_bpc_table(losses, L, clamp)
    ref = losses[f"xl | {label(L, False, -1)}"]
    print(f"\nGain over xl at M = {L} (as trained), bits per byte, all tokens; ± one block standard error "
          f"(blocks of 256 predictions):\n")
    print("| setting | bpc | gain vs M=L |")
    print("|---|---|---|")
    for key, x in losses.items():
        if key.startswith("xl"):
            mean, se = paired_difference(ref, x)
            print(f"| {show(key)} | {x.mean() / LN2:.4f} | {mean / LN2:+.4f} ± {se / LN2:.4f} |")

    main_rows = [f"vanilla | sliding {L}", f"absmem | M={L}"] + \
        [f"xl | {label(k * L, k > 0, clamp if L + k * L - 1 > clamp else -1)}" for k in MULTIPLES] + \
        [f"xl | {label(k * L, False, -1)}" for k in (1, 8, 32)]
    for n in args.ngram:
        d = dist[n]
        bins = [("no earlier occurrence", None)] + [(lab, (lo, hi)) for lab, lo, hi in distance_bins(L)]
        masks = [d == NO_REPEAT if b is None else bin_mask(d, *b) for _, b in bins]
        result["repeats"][n] = {"counts": {lab: int(m.sum()) for (lab, _), m in zip(bins, masks)}, "bpc": {}}
        print(f"\nRepeat tokens, n = {n}: bits per byte by the distance back to the most recent earlier occurrence "
              f"of the {n}-gram that the token completes (count = tokens in the bin):\n")
        print("| setting | " + " | ".join(lab for lab, _ in bins) + f" | far (> {L}) |")
        print("|---|" + "---|" * (len(bins) + 1))
        counts = [int(m.sum()) for m in masks] + [int(far_repeat_mask(d, L).sum())]
        print("| count | " + " | ".join(f"{c:,}" for c in counts) + " |")
        for key in main_rows:
            vals = [masked_mean(losses[key], m)[0] / LN2 for m in masks]
            vals.append(masked_mean(losses[key], far_repeat_mask(d, L))[0] / LN2)
            result["repeats"][n]["bpc"][key] = dict(zip([lab for lab, _ in bins] + ["far"], vals))
            print(f"| {show(key)} | " + " | ".join(f"{v:.3f}" for v in vals) + " |")
        far = far_repeat_mask(d, L)
        print(f"\nFar repeats (n = {n}, d > {L}): gain over xl at M = {L}, bits per byte ± block s.e.:\n")
        print("| setting | gain on far repeats | gain on all other tokens |")
        print("|---|---|---|")
        for key in main_rows:
            if key.startswith("xl"):
                g, se = paired_difference(ref, losses[key], far)
                g2, se2 = paired_difference(ref, losses[key], ~far)
                print(f"| {show(key)} | {g / LN2:+.4f} ± {se / LN2:.4f} | {g2 / LN2:+.4f} ± {se2 / LN2:.4f} |")
    (out / "results.json").write_text(json.dumps(result, indent=1, sort_keys=True))
    if args.plot_prefix:
        plot(losses, dist[args.ngram[0]], L, clamp, args.ngram[0], args.plot_prefix)
    return 0


def print_bpc_table(losses, L: int, clamp: int) -> None:
    print(f"\nTransformer-XL, bits per byte against evaluation memory M (segments of {L}):\n")
    heads = [k * L for k in MULTIPLES]
    print("| evaluation | " + " | ".join(f"M={M}" for M in heads) + " |")
    print("|---|" + "---|" * len(heads))
    for same in (False, True):
        for c in (-1, clamp):
            cells = []
            for M in heads:
                eff = c if L + M - 1 > c > 0 else -1
                key = f"xl | {label(M, same and M > 0, eff)}"
                cells.append(f"{losses[key].mean() / LN2:.4f}" if key in losses else "")
            name = ("same_length" if same else "plain") + (f", clamp_len {c}" if c > 0 else ", no clamp")
            print(f"| {name} | " + " | ".join(cells) + " |")
    print("\nBaselines:\n")
    print("| model | evaluation | bpc |")
    print("|---|---|---|")
    for key, x in losses.items():
        if not key.startswith("xl"):
            print(f"| {key.split(' | ')[0]} | {key.split(' | ')[1]} | {x.mean() / LN2:.4f} |")


def plot(losses, d, L: int, clamp: int, n: int, prefix: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    Ms = [k * L for k in MULTIPLES]
    xs = [max(M, L // 2) for M in Ms]  # M = 0 drawn at L/2 on the log axis
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for same in (False, True):
        for c in (-1, clamp):
            ys = []
            for M in Ms:
                key = f"xl | {label(M, same and M > 0, c if L + M - 1 > c > 0 else -1)}"
                ys.append(losses[key].mean() / LN2)
            ax.plot(xs, ys, "o-" if c > 0 else "s--", markersize=4,
                    label="xl" + (", same_length" if same else "") + (f", clamp {c}" if c > 0 else ""))
    ax.axhline(losses[f"vanilla | sliding {L}"].mean() / LN2, color="k", ls=":", label=f"vanilla, sliding {L}")
    ax.plot([max(k * L, L // 2) for k in (0, 1, 2, 4, 8)],
            [losses[f"absmem | M={k * L}"].mean() / LN2 for k in (0, 1, 2, 4, 8)], "^-.", label="absmem")
    xl_max = max(v.mean() / LN2 for k, v in losses.items() if k.startswith("xl"))
    ax.set_ylim(None, xl_max + 0.1)  # absmem past M = L leaves the chart (see the table)
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, ["0"] + [str(M) for M in Ms[1:]])
    ax.set_xlabel(f"evaluation memory M (bytes; training segment and memory L = {L})")
    ax.set_ylabel("bits per byte")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(f"{prefix}_bpc.png")
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for lab, lo, hi in distance_bins(L):
        m = bin_mask(d, lo, hi)
        ys = [masked_mean(losses[f"xl | {label(M, M > 0, clamp if L + M - 1 > clamp else -1)}"], m)[0] / LN2
              for M in Ms]
        ax.plot(xs, ys, "o-", markersize=4, label=f"repeat distance {lab} ({int(m.sum()):,})")
    m = d == NO_REPEAT
    ax.plot(xs, [masked_mean(losses[f"xl | {label(M, M > 0, clamp if L + M - 1 > clamp else -1)}"], m)[0] / LN2
                 for M in Ms], "k--", label=f"no earlier occurrence ({int(m.sum()):,})")
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, ["0"] + [str(M) for M in Ms[1:]])
    ax.set_xlabel(f"evaluation memory M (same_length, clamp {clamp})")
    ax.set_ylabel("bits per byte")
    ax.set_title(f"Transformer-XL: loss on tokens completing a {n}-gram last seen d bytes back", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(f"{prefix}_repeats.png")
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
