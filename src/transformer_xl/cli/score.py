"""``txl score``: per-token log-probabilities and perplexity of a document, with memory.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path


from ..errors import DataError
from ..evaluation.metrics import metric_value
from ..generation.text import score_ids, split_documents, symbols
from ..model.attention import choose_backend
from ..model.footprint import plan_attention
from .common import load_model_and_vocab, weight_bytes
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
    chunk, note = plan_attention(model.config, 1, model.tgt_len, model.mem_len, device,
                                 attn_chunk=model.attn_backend[1], extra_bytes=-weight_bytes(model))
    if note:
        log.warning(note)
    model.set_attention(*choose_backend(chunk))


def run_score(args) -> int:
    model, vocab = load_model_and_vocab(args.checkpoint, args.device, args.tgt_len, args.mem_len)
    path = Path(args.file)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    docs = [d for d in split_documents(text, args.doc_sep) if d.strip()]
    if not docs:
        raise DataError(f"{path}: empty file, nothing to score")
    _plan_scoring(model)
    total_nll, total_tokens, results = 0.0, 0, []
    for n, doc in enumerate(docs):
        ids = vocab.encode(doc)
        score = score_ids(model, ids, keep_tokens=args.tokens)
        total_nll, total_tokens = total_nll + score.nll, total_tokens + score.tokens
        result = {"doc": n, "tokens": score.tokens, "loss": score.loss, "ppl": metric_value(score.loss, "ppl")}
        if args.tokens:
            result["token_logprobs"] = [{"token": s, "logprob": lp} for s, lp in
                                        zip(symbols(vocab, ids[1:]), score.token_logprobs)]
        results.append(result)
        if not args.json:
            print(f"doc {n}: {score.tokens} tokens | loss {score.loss:.4f} | ppl {result['ppl']:.2f}")
            for item in result.get("token_logprobs", []):
                print(f"  {item['token']}\t{item['logprob']:.4f}")
    loss = total_nll / max(total_tokens, 1)
    summary = {"file": str(path), "documents": len(docs), "tokens": total_tokens, "loss": loss,
               "ppl": metric_value(loss, "ppl"), "bpc": metric_value(loss, "bpc"), "mem_len": model.mem_len,
               "tgt_len": model.tgt_len}
    if args.json:
        print(json.dumps({**summary, "per_document": results}))
    else:
        print(f"total: {len(docs)} documents, {total_tokens} tokens | loss {summary['loss']:.4f} | "
              f"ppl {summary['ppl']:.2f} | bpc {summary['bpc']:.4f}")
    return 0
