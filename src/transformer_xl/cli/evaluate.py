"""``txl eval``: find the checkpoint, get its corpus, check that the lengths fit in memory, evaluate.

The corpus is the run's (from ``run.yaml`` beside the checkpoint), or one the user names
(``--dataset NAME --data-dir DIR``, or ``--dataset text --test-file FILE``) encoded with the checkpoint's
own vocabulary: the only way to evaluate a converted checkpoint, which has no run.yaml (see :mod:`.corpus`).
"""

from __future__ import annotations

import json
import logging
from typing import Tuple


from ..devices import autocast_dtype, resolve_device
from ..evaluation import EvalResult, EvalSettings, evaluate
from ..model import RunLengths, TransformerXL, TransformerXLConfig
from ..checkpoints.loading import load_located
from ..model.attention import AttentionChoice
from ..runtime.footprint import fit_attention
from ..pretrained import run_lengths
from ..training.allocator import keep_cpu_memory
from .common import add_checkpoint_args, load_model_config, locate_checkpoint
from .corpus import add_corpus_args, check_corpus_args, checkpoint_split
from .options import add_attention_args, at_least, attention_option, checks, command


log = logging.getLogger(__name__)


SLIDING_WINDOWS_PER_CALL = 64  # windows one forward pass of the sliding evaluation runs (token_losses.py)


@command
def add_eval(sub) -> None:
    p = sub.add_parser("eval", help="evaluate a run or checkpoint on a split (loss, ppl or bpc, tokens/s)")
    add_checkpoint_args(p)
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
    add_corpus_args(p, "evaluate on")
    p.add_argument("--device", default="auto")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"],
                   help="autocast precision of the forward passes (fp16 needs a GPU)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model first (pays off on long evaluations)")
    add_attention_args(p)
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


def _eval_lengths(config: TransformerXLConfig, args) -> RunLengths:
    """The run-time lengths of ``txl eval``, validated as the model will validate them (ConfigError naming the
    field, e.g. same_length without memory)."""
    return run_lengths(config, **{k: getattr(args, k) for k in RunLengths.FIELDS})


def evaluate_checkpoint(args) -> Tuple[EvalResult, dict]:
    check_corpus_args(args)
    located = locate_checkpoint(args.checkpoint, args)
    device = resolve_device(args.device)
    config = load_model_config(located)
    lengths = _eval_lengths(config, args)
    mode = getattr(args, "mode", "segment")
    amp = autocast_dtype(getattr(args, "precision", "fp32"), device)
    _plan_eval_memory(config, args, lengths, mode, device, 0)  # refuse before reading any data
    data = checkpoint_split(located, args, config.n_token)
    if device.type == "cpu" and data.keep_cpu_memory:
        keep_cpu_memory()
    choice = _plan_eval_memory(config, args, lengths, mode, device, data.ids.size)  # with the data's copy
    model = load_located(located, TransformerXL, device)
    model.set_attention(*choice)
    if getattr(args, "compile", False):
        model.compile()
    result = evaluate(model, data.ids, EvalSettings(batch_size=args.batch_size, lengths=lengths, level=data.level,
                                                    max_steps=args.max_steps, device=device, autocast_dtype=amp,
                                                    mode=mode))
    info = {"checkpoint": str(located.directory), "split": args.split, "dataset": data.dataset, "mode": mode,
            **{k: getattr(lengths, k) for k in ("tgt_len", "mem_len", "clamp_len", "same_length")}}
    return result, info


def _plan_eval_memory(config, args, lengths: RunLengths, mode: str, device, n_tokens: int) -> AttentionChoice:
    """The attention to evaluate with: ``--attention``, or the streamed attention when only it fits (one note
    on stderr, once the data is counted); ConfigError with the estimate when nothing fits."""
    if mode == "sliding":
        batch, seg, mem = args.batch_size * SLIDING_WINDOWS_PER_CALL, lengths.tgt_len, 0
    else:
        batch, seg, mem = args.batch_size, lengths.tgt_len + lengths.ext_len, lengths.mem_len
    return fit_attention(config, batch, seg, mem, device, attention_option(args), quiet=not n_tokens,
                         precision=getattr(args, "precision", "fp32"), extra_bytes=8 * n_tokens)
