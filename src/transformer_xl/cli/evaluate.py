"""``txl eval``: find the checkpoint, get its corpus, check that the lengths fit in memory, evaluate.

The corpus is the run's (from ``run.yaml`` beside the checkpoint), or one the user names
(``--dataset NAME --data-dir DIR``, or ``--dataset text --test-file FILE``) encoded with the checkpoint's
own vocabulary: the only way to evaluate a converted checkpoint, which has no run.yaml.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Tuple


from ..errors import CheckpointError, ConfigError, DataError
from ..evaluation import EvalResult, evaluate
from ..evaluation.vocab_data import EvalData, split_for_checkpoint
from ..model import TransformerXL, TransformerXLConfig
from ..model.attention import choose_backend
from ..model.footprint import plan_attention
from ..training import load_run_config
from ..training.allocator import keep_cpu_memory
from ..training.loop import autocast_dtype, load_data, resolve_device
from .common import check_vocab, find_run_config, load_model_config, resolve_checkpoint
from .options import at_least, check_dataset, checks, command


log = logging.getLogger(__name__)


SLIDING_WINDOWS_PER_CALL = 64  # windows one forward pass of the sliding evaluation runs (token_losses.py)


@command
def add_eval(sub) -> None:
    p = sub.add_parser("eval", help="evaluate a run or checkpoint on a split (loss, ppl or bpc, tokens/s)")
    p.add_argument("checkpoint", metavar="RUN_OR_CHECKPOINT", help="a run directory (uses best/, else the last "
                                                                   "checkpoint) or a checkpoint directory")
    p.add_argument("--split", default="test", choices=["train", "valid", "test"])
    p.add_argument("--mode", default="segment", choices=["segment", "sliding"],
                   help="segment: segments with memory (Transformer-XL); sliding: a fresh window of --tgt-len "
                        "tokens for every prediction, moved by one (the vanilla Transformer's evaluation)")
    p.add_argument("--tgt-len", type=int, help="segment length, or the window with --mode sliding (default: training value)")
    p.add_argument("--mem-len", type=int, help="memory length (default: training value)")
    p.add_argument("--ext-len", type=int, help="extended context length (default: training value)")
    p.add_argument("--clamp-len", type=int, help="clamp relative distances (default: training value)")
    p.add_argument("--same-length", action="store_true", default=None, help="every query sees mem_len keys")
    p.add_argument("--batch-size", type=int, default=10)
    p.add_argument("--max-steps", type=int, help="evaluate only the first N segments (with --mode sliding: N predictions per row)")
    p.add_argument("--dataset", help="the corpus to evaluate on, encoded with the checkpoint's vocabulary: a named "
                                     "corpus (with --data-dir), or 'text' with --test-file/--valid-file/--train-file "
                                     "(default: the run's corpus, from run.yaml)")
    p.add_argument("--data-dir", help="local copy of the corpus (default: the run's)")
    p.add_argument("--test-file", help="with --dataset text: the file evaluated by --split test")
    p.add_argument("--valid-file", help="with --dataset text: the file evaluated by --split valid")
    p.add_argument("--train-file", help="with --dataset text: the file evaluated by --split train")
    p.add_argument("--cache-dir", help="corpus cache (default: $TXL_CACHE_DIR or ~/.cache/transformer-xl)")
    p.add_argument("--device", default="auto")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"],
                   help="autocast precision of the forward passes (fp16 needs a GPU)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model first (pays off on long evaluations)")
    p.add_argument("--attn-chunk", type=int, default=0, metavar="N",
                   help="memory-efficient attention (attn_type 0): keys streamed N at a time (e.g. 256), so peak "
                        "memory no longer grows with --mem-len; same results")
    p.add_argument("--fused-attention", action="store_true",
                   help="the fused Triton attention kernel (CUDA with triton installed; elsewhere the plain path)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run_eval, **checks(at_least("--tgt-len", 1), at_least("--mem-len", 0),
                                           at_least("--ext-len", 0), at_least("--clamp-len", -1),
                                           at_least("--batch-size", 1), at_least("--max-steps", 1)))


def run_eval(args) -> int:
    result, info = evaluate_checkpoint(args)
    if args.json:
        print(json.dumps({**result.to_dict(), **info}, sort_keys=True))
    else:
        print(f"{info['split']} ({info['mode']}): loss {result.loss:.4f} | {result.metric} {result.value:.4f} | "
              f"{result.tokens:,} tokens in {result.seconds:.1f} s ({result.tokens_per_s:,.0f} tokens/s) | "
              f"tgt_len {info['tgt_len']} mem_len {info['mem_len']} clamp_len {info['clamp_len']} "
              f"same_length {info['same_length']}")
    return 0


def _eval_lengths(config: TransformerXLConfig, args) -> dict:
    """The run-time lengths of ``txl eval``, validated as the model will validate them."""
    lengths = {"tgt_len": args.tgt_len or config.tgt_len,
               "ext_len": config.ext_len if args.ext_len is None else args.ext_len,
               "mem_len": config.mem_len if args.mem_len is None else args.mem_len,
               "clamp_len": config.clamp_len if args.clamp_len is None else args.clamp_len,
               "same_length": config.same_length if args.same_length is None else args.same_length}
    config.replace(**lengths)  # ConfigError naming the field, e.g. same_length without memory
    return lengths


def _run_data(model_dir: Path, args) -> EvalData:
    """The split of the run's own corpus (run.yaml), checked against the checkpoint's vocabulary."""
    try:
        run_config = find_run_config(model_dir)
    except CheckpointError as exc:
        raise CheckpointError(f"{exc}; name one with --dataset NAME --data-dir DIR, or --dataset text "
                              f"--{args.split}-file FILE") from None
    overrides = []
    for flag in ("data_dir", "cache_dir"):
        if getattr(args, flag, None):
            overrides += [f"--{flag.replace('_', '-')}", getattr(args, flag)]
    cfg = load_run_config(str(run_config), overrides)
    corpus = load_data(cfg, vocab_dir=model_dir if cfg.train.init_from else None)  # a fine-tuned run's own vocabulary
    check_vocab(model_dir, corpus)
    return EvalData(corpus.split(args.split), corpus.level, cfg.data.dataset, len(corpus.vocab),
                    cfg.train.keep_cpu_memory)


def evaluate_checkpoint(args) -> Tuple[EvalResult, dict]:
    if getattr(args, "attn_chunk", 0) < 0:
        raise ConfigError(f"attn_chunk: must be >= 0, got {args.attn_chunk}")
    if getattr(args, "dataset", None):
        check_dataset(args.dataset, f"--{args.split}-file")
    model_dir = resolve_checkpoint(args.checkpoint)
    device = resolve_device(args.device)
    config = load_model_config(model_dir)
    lengths = _eval_lengths(config, args)
    mode = getattr(args, "mode", "segment")
    amp = autocast_dtype(getattr(args, "precision", "fp32"), device)
    _plan_eval_memory(config, args, lengths, mode, device, 0)  # refuse before reading any data
    if getattr(args, "dataset", None) or any(getattr(args, f"{s}_file", None) for s in ("train", "valid", "test")):
        data = split_for_checkpoint(model_dir, args)
    else:
        data = _run_data(model_dir, args)
    if data.n_token != config.n_token:
        raise DataError(f"{model_dir}: model has {config.n_token} tokens, corpus vocabulary {data.n_token}")
    if device.type == "cpu" and data.keep_cpu_memory:
        keep_cpu_memory()
    chunk = _plan_eval_memory(config, args, lengths, mode, device, data.ids.size)  # with the data's copy
    model = TransformerXL.from_pretrained(model_dir, map_location=device)
    model.set_attention(*choose_backend(chunk, getattr(args, "fused_attention", False)))
    if getattr(args, "compile", False):
        model.compile()
    result = evaluate(model, data.ids, batch_size=args.batch_size, tgt_len=lengths["tgt_len"],
                      mem_len=lengths["mem_len"], ext_len=lengths["ext_len"], clamp_len=lengths["clamp_len"],
                      same_length=lengths["same_length"], level=data.level, max_steps=args.max_steps, device=device,
                      autocast_dtype=amp, mode=mode)
    info = {"checkpoint": str(model_dir), "split": args.split, "dataset": data.dataset, "mode": mode,
            **{k: lengths[k] for k in ("tgt_len", "mem_len", "clamp_len", "same_length")}}
    return result, info


def _plan_eval_memory(config, args, lengths: dict, mode: str, device, n_tokens: int) -> int:
    """The attention block size to evaluate with: ``--attn-chunk``, or the streamed attention when only it
    fits (one note on stderr); ConfigError with the estimate when nothing fits."""
    if mode == "sliding":
        batch, seg, mem = args.batch_size * SLIDING_WINDOWS_PER_CALL, lengths["tgt_len"], 0
    else:
        batch, seg, mem = args.batch_size, lengths["tgt_len"] + lengths["ext_len"], lengths["mem_len"]
    chunk, note = plan_attention(config, batch, seg, mem, device, attn_chunk=getattr(args, "attn_chunk", 0),
                                 precision=getattr(args, "precision", "fp32"), extra_bytes=8 * n_tokens)
    if note and n_tokens:  # said once, with the data counted
        log.warning(note)
    return chunk
