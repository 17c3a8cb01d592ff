"""What lm-eval's WikiText word perplexity is, against the paper's token-level perplexity, on one checkpoint.

Scores one WikiText test file (default: ``$TXL_DATA_DIR/wikitext-2/test.txt``) three ways, with the same model,
tokenizer and lengths:

1. the paper's way: the whole file as one stream, the memory carried across articles, per token
   (``txl score CKPT FILE --doc-sep none``; the tokens include the ``<eos>`` of every line);
2. lm-eval's way, per token: each article scored alone from a fresh memory (``loglikelihood_rolling``
   through ``lm_eval.simple_evaluate`` on a local task, as ``txl lm-eval`` runs it);
3. lm-eval's ``word_perplexity``: the same summed log-likelihood divided by the whitespace-separated words
   of the text (``len(re.split(r"\\s+", page))``), not by the tokens the model predicted.

    python benchmarks/lm_eval_wikitext.py runs/wt2 [--test-file FILE] [--limit N] [--batch-size 8]

Needs the ``lm-eval`` extra. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import markdown_table

from transformer_xl.lm_eval import wikitext_documents
from transformer_xl.text.tokenizer import TransformerXLTokenizer


def stream_score(ckpt: str, path: Path, lengths) -> dict:
    from transformer_xl.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["score", ckpt, str(path), "--doc-sep", "none", "--json", *lengths]) == 0
    return json.loads(out.getvalue())


def harness_score(ckpt: str, path: Path, limit, batch_size: int, model_args: str) -> dict:
    import lm_eval
    from lm_eval.tasks import TaskManager

    import transformer_xl.lm_eval as harness

    with tempfile.TemporaryDirectory() as tmp:
        harness.write_wikitext_task(tmp, path, name="wikitext_file", limit=limit)
        tasks = TaskManager(include_path=tmp, include_defaults=False)
        args = f"pretrained={ckpt}" + (f",{model_args}" if model_args else "")
        out = lm_eval.simple_evaluate(model="transformer-xl", model_args=args, tasks=["wikitext_file"],
                                      task_manager=tasks, batch_size=batch_size, device="cpu", log_samples=True)
    samples = out["samples"]["wikitext_file"]
    tokenizer = TransformerXLTokenizer.from_pretrained(ckpt)
    # every token of an article is predicted (it is read after the line-break token)
    tokens = sum(len(tokenizer.encode(s["doc"]["page"], warn_unknown=False)) for s in samples)
    return dict(results=out["results"]["wikitext_file"], logprob=sum(s["filtered_resps"][0] for s in samples),
                tokens=tokens, articles=len(samples),
                words=sum(len(re.split(r"\s+", s["doc"]["page"])) for s in samples))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("checkpoint")
    data = Path(os.environ.get("TXL_DATA_DIR", "../shared/data"))
    p.add_argument("--test-file", type=Path, default=data / "wikitext-2" / "test.txt")
    p.add_argument("--limit", type=int, default=None, help="the first N articles only")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--model-args", default="", help="e.g. mem_len=128 (also given to txl score)")
    args = p.parse_args()
    lengths = []
    for item in filter(None, args.model_args.split(",")):
        key, value = item.split("=", 1)
        lengths += [f"--{key.replace('_', '-')}", value]
    harness = harness_score(args.checkpoint, args.test_file, args.limit, args.batch_size, args.model_args)
    with tempfile.TemporaryDirectory() as tmp:
        docs = wikitext_documents(args.test_file.read_text(encoding="utf-8"))[:args.limit]
        path = Path(tmp) / "articles.txt"
        path.write_text("\n" + "".join(docs), encoding="utf-8")  # the line break the first article follows
        stream = stream_score(args.checkpoint, path, lengths)
    r = harness["results"]
    print(f"checkpoint {args.checkpoint}, {harness['articles']} articles of {args.test_file}")
    print(markdown_table(["way", "divided by", "count", "perplexity"], [
        ["one stream, memory across articles (`txl score --doc-sep none`)", "tokens", f"{stream['tokens']:,}",
         f"{math.exp(stream['loss']):.2f}"],
        ["each article from a fresh memory (lm-eval's requests)", "tokens", f"{harness['tokens']:,}",
         f"{math.exp(-harness['logprob'] / harness['tokens']):.2f}"],
        ["lm-eval `word_perplexity` (same sum)", "whitespace words", f"{harness['words']:,}",
         f"{r['word_perplexity,none']:.2f}"]]))
    print(f"lm-eval byte_perplexity {r['byte_perplexity,none']:.4f}, bits_per_byte {r['bits_per_byte,none']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
