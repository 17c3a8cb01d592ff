"""What ``txl generate`` and ``txl score`` do, as functions."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..errors import CheckpointError, DataError
from ..evaluation.cli import resolve_checkpoint
from ..model import TransformerXL
from ..training.loop import resolve_device
from .generate import generate
from .sampling import SamplingConfig
from ..training.metrics import metric_value
from .text import StreamDecoder, encode_prompt, score_ids, split_documents, symbols


def load_model_and_vocab(path, device="auto", tgt_len=None, mem_len=None):
    from ..data import load_vocab

    model_dir = resolve_checkpoint(path)
    model = TransformerXL.from_pretrained(model_dir, map_location=resolve_device(device)).eval()
    try:
        vocab = load_vocab(model_dir)
    except DataError as exc:
        raise CheckpointError(f"{model_dir}: the checkpoint has no usable vocabulary ({exc})") from None
    if len(vocab) != model.config.n_token:
        raise CheckpointError(f"{model_dir}: vocabulary of {len(vocab)} symbols for a model of {model.config.n_token}")
    model.reset_length(tgt_len or model.tgt_len, 0, model.mem_len if mem_len is None else mem_len)
    return model, vocab


def run_generate(args) -> int:
    model, vocab = load_model_and_vocab(args.checkpoint, args.device, args.tgt_len, args.mem_len)
    ids = encode_prompt(vocab, args.prompt)
    stops = [vocab.get_idx(s) if hasattr(vocab, "get_idx") else int(s) for s in (args.stop or [])]
    sampling = SamplingConfig(max_new_tokens=args.max_new_tokens, do_sample=not args.greedy,
                              temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                              repetition_penalty=args.repetition_penalty, seed=args.seed, stop_tokens=stops)
    decoder = StreamDecoder(vocab, after_newline=args.prompt.endswith("\n"))
    out = sys.stdout
    out.write(args.prompt)
    out.flush()

    def on_token(_step, tokens):
        out.write(decoder.piece(int(tokens[0])))
        out.flush()

    generate(model, [ids], sampling, on_token=on_token)
    out.write("\n")
    return 0


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
