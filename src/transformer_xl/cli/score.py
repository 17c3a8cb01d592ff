"""``txl score``: per-token log-probabilities and the figures of a document, with memory.

What it prints is :func:`transformer_xl.score_text`'s result: the loss in nats per token and the figures named
for what they are (perplexity and bits per token for words and BPE, bits per character, bits per byte).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from ..errors import DataError
from ..evaluation.metrics import describe_figures, named_figures
from ..evaluation.score import score_text
from ..model.attention import AttentionChoice
from ..runtime.footprint import fit_attention
from .common import open_for_inference, weight_bytes
from .options import INFERENCE_CHECKS, add_inference_args, checks, command

log = logging.getLogger(__name__)


@command
def add_score(sub) -> None:
    p = sub.add_parser("score", help="per-token log-probs and perplexity of a document, with memory")
    add_inference_args(p)
    p.add_argument("file", help="UTF-8 text file")
    p.add_argument("--doc-sep", default="blank", choices=["blank", "none"],
                   help="blank: documents are separated by blank lines (memory resets at each); none: one document")
    p.add_argument("--tokens", action="store_true", help="also print every token's log-probability")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run_score, **checks(*INFERENCE_CHECKS))


def _plan_scoring(model) -> None:
    """Score one row at a time: switch to the streamed attention when only it fits (one note)."""
    device = next(model.parameters()).device
    model.set_attention(*fit_attention(model.config, 1, model.tgt_len, model.mem_len, device,
                                       AttentionChoice(*model.attn_backend), extra_bytes=-weight_bytes(model)))


def read_text_file(path: Path) -> str:
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    if not text.strip():
        raise DataError(f"{path}: empty file, nothing to score")
    return text


def run_score(args) -> int:
    ckpt = open_for_inference(args)
    path = Path(args.file)
    text = read_text_file(path)
    _plan_scoring(ckpt.model)
    result = score_text(ckpt.model, ckpt.tokenizer, text, doc_sep=args.doc_sep, keep_tokens=args.tokens)
    summary = {"file": str(path), **result.to_dict(ckpt.tokenizer if args.tokens else None)}
    if args.json:
        print(json.dumps(summary))
        return 0
    for item, doc in zip(summary["per_document"], result.documents):
        print(f"doc {item['doc']}: {doc.tokens} tokens | loss {doc.loss:.4f} | "
              f"{describe_figures(named_figures(doc.loss, result.level))}")
        for tok in item.get("token_logprobs", []):
            print(f"  {tok['token']}\t{tok['logprob']:.4f}")
    print(f"total: {len(result.documents)} documents, {result.tokens} tokens | loss {result.loss:.4f} nats/token | "
          f"{describe_figures(result.figures)}")
    return 0
