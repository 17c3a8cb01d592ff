"""What ``txl generate`` and ``txl score`` do, as functions.

Before any text is produced, everything that can be checked is: the device, the lengths, the ``--stop``
tokens, and the memory that decoding or scoring needs (:mod:`transformer_xl.model.footprint`).
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import List

from ..errors import CheckpointError, DataError
from ..evaluation.cli import load_model_config, resolve_checkpoint
from ..model import TransformerXL
from ..model.attention import choose_backend
from ..model.footprint import check_decoding_fits, plan_attention
from ..training.loop import resolve_device
from .generate import generate
from .sampling import SamplingConfig
from ..data import load_vocab
from ..evaluation.metrics import metric_value
from .text import StreamDecoder, encode_prompt, score_ids, split_documents, symbols


log = logging.getLogger(__name__)


def load_model_and_vocab(path, device="auto", tgt_len=None, mem_len=None):
    model_dir = resolve_checkpoint(path)
    device = resolve_device(device)
    config = load_model_config(model_dir)
    config.replace(tgt_len=tgt_len or config.tgt_len,  # ConfigError naming the field, before the weights load
                   mem_len=config.mem_len if mem_len is None else mem_len)
    try:
        vocab = load_vocab(model_dir)
    except DataError as exc:
        raise CheckpointError(f"{model_dir}: the checkpoint has no usable vocabulary ({exc})") from None
    if len(vocab) != config.n_token:
        raise CheckpointError(f"{model_dir}: vocabulary of {len(vocab)} symbols for a model of {config.n_token}")
    model = TransformerXL.from_pretrained(model_dir, map_location=device).eval()
    model.reset_length(tgt_len or model.tgt_len, 0, model.mem_len if mem_len is None else mem_len)
    return model, vocab


def stop_ids(vocab, tokens) -> List[int]:
    """Ids of the ``--stop`` tokens; a token that is not one symbol of the vocabulary is a DataError."""
    ids = []
    for tok in tokens or []:
        if hasattr(vocab, "sym2idx"):  # Vocab: symbols by name
            if tok not in vocab.sym2idx:
                raise DataError(f"--stop: {tok!r} is not in the checkpoint's vocabulary")
            ids.append(vocab.sym2idx[tok])
            continue
        if tok.isdigit() and int(tok) < len(vocab):  # a token id (byte value)
            ids.append(int(tok))
            continue
        encoded = vocab.encode(tok) if tok else []
        if len(encoded) != 1:
            raise DataError(f"--stop: {tok!r} is not one token of the checkpoint's vocabulary "
                            f"(it encodes to {len(encoded)} tokens)")
        ids.append(int(encoded[0]))
    return ids


def run_generate(args) -> int:
    model, vocab = load_model_and_vocab(args.checkpoint, args.device, args.tgt_len, args.mem_len)
    ids = encode_prompt(vocab, args.prompt)
    stops = stop_ids(vocab, args.stop)
    sampling = SamplingConfig(max_new_tokens=args.max_new_tokens, do_sample=not args.greedy,
                              temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                              repetition_penalty=args.repetition_penalty, seed=args.seed, stop_tokens=stops)
    sampling.validate()
    device = next(model.parameters()).device
    check_decoding_fits(model.config, 1, model.tgt_len, model.mem_len, len(ids) + args.max_new_tokens, device,
                        extra_bytes=-_weight_bytes(model))
    decoder = StreamDecoder(vocab, after_newline=args.prompt.endswith("\n"), context=ids)
    out = sys.stdout
    out.write(args.prompt)
    out.flush()

    def on_token(_step, tokens):
        out.write(decoder.piece(int(tokens[0])))
        out.flush()

    generate(model, [ids], sampling, on_token=on_token, decoding=args.decoding)
    out.write(decoder.flush())  # text held back until the next token (e.g. a trailing " @,@ ")
    out.write("\n")
    return 0


def _weight_bytes(model) -> int:
    """Bytes of the loaded weights (already resident, so not counted again against the free memory)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _plan_scoring(model) -> None:
    """Score one row at a time: switch to the streamed attention when only it fits (one note)."""
    device = next(model.parameters()).device
    chunk, note = plan_attention(model.config, 1, model.tgt_len, model.mem_len, device,
                                 attn_chunk=model.attn_backend[1], extra_bytes=-_weight_bytes(model))
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
