"""Which real corpus can show a memory past the training length? The measurement behind the long-memory study's
choice (docs/RESULTS.md, section 3).

For each corpus that exists offline, at its own level (bytes, characters or words), this prints its size, how many
epochs a 64M-token budget would read, and, over its validation split, the share of predictions whose evidence lies
beyond the training length: a token completes an n-gram (n = 8 for bytes and characters, 3 for words) whose most
recent earlier occurrence is d tokens back (``transformer_xl.analysis.repeats``), and only a context longer than d
can copy what followed it. The shares in (L, 4L] and (4L, 16L] for L = 64 and 128 are what a memory of 4L and 16L
can reach that a memory of L cannot. Last, the share of the validation split's 64-token windows that occur
verbatim in the training split: text a model can recall from its weights, with no use for a long memory.

    python benchmarks/long_memory_corpora.py [--data-dir ../shared/data] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import markdown_table, table_row

from transformer_xl.analysis.repeats import repeat_distances
from transformer_xl.data import load_corpus

BUDGET = 64_000_000


def shares(ids, n: int, L: int) -> dict:
    d = repeat_distances(np.asarray(ids), n)
    total = d.size
    return {"(L, 4L]": float(((d > L) & (d <= 4 * L)).sum() / total),
            "(4L, 16L]": float(((d > 4 * L) & (d <= 16 * L)).sum() / total),
            "within L": float(((d > 0) & (d <= L)).sum() / total)}


def seen_in_train(train, valid, n: int = 64) -> float:
    """Share of ``valid``'s n-token windows that occur verbatim in ``train`` (compared by a 64-bit rolling hash)."""
    def windows(a):
        a = np.asarray(a, dtype=np.uint64)
        h = np.zeros(a.size - n + 1, dtype=np.uint64)
        for i in range(n):
            h = h * np.uint64(1099511628211) + a[i:a.size - n + 1 + i] + np.uint64(1)
        return h

    return float(np.isin(windows(valid), np.unique(windows(train))).mean())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=os.environ.get("TXL_DATA_DIR", "../shared/data"))
    p.add_argument("--max-tokens", type=int, default=1_000_000, help="of each validation split")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    data = Path(args.data_dir)
    corpora = [("stdlib", None, 8), ("default", None, 8), ("shakespeare", data / "tinyshakespeare", 8),
               ("wt2", data / "wikitext-2", 3), ("ptb", data / "ptb", 3)]
    rows = []
    for name, folder, n in corpora:
        if folder is not None and not folder.is_dir():
            print(f"{name}: no copy in {folder}, skipped", file=sys.stderr)
            continue
        c = load_corpus(name, data_dir=folder)
        ids = c.valid[: args.max_tokens]
        row = {"corpus": name, "level": c.level, "train_tokens": int(c.train.size), "ngram": n,
               "epochs_at_64M": BUDGET / c.train.size, "valid_tokens_measured": int(ids.size),
               **{f"L={L}": shares(ids, n, L) for L in (64, 128)},
               "valid_64grams_in_train": seen_in_train(c.train, ids)}
        rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(markdown_table(["corpus", "level", "train tokens", "epochs at 64M", "n", "L = 64: (L, 4L]", "(4L, 16L]",
                          "L = 128: (L, 4L]", "(4L, 16L]", "valid 64-grams seen in train"]))
    for r in rows:
        a, b = r["L=64"], r["L=128"]
        print(table_row([r["corpus"], r["level"], f"{r['train_tokens']:,}", f"{r['epochs_at_64M']:.1f}", r["ngram"],
                         *(f"{s[k]:.1%}" for s in (a, b) for k in ("(L, 4L]", "(4L, 16L]")),
                         f"{r['valid_64grams_in_train']:.1%}"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
