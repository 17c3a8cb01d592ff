"""What ``txl eval`` and ``txl context`` do, as functions: find the checkpoint, get its corpus, check that
the lengths fit in memory, evaluate.

The corpus is the run's (from ``run.yaml`` beside the checkpoint), or one the user names
(``--dataset NAME --data-dir DIR``, or ``--dataset text --test-file FILE``) encoded with the checkpoint's
own vocabulary: the only way to evaluate a converted checkpoint, which has no run.yaml.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Tuple

from ..data import load_vocab
from ..errors import CheckpointError, ConfigError, DataError
from ..model import TransformerXL, TransformerXLConfig
from ..model.attention import choose_backend
from ..model.footprint import plan_attention
from ..training import checkpoint as ckpt
from ..training.allocator import keep_cpu_memory
from ..training.config import load_run_config
from ..training.loop import RUN_CONFIG_NAME, autocast_dtype, load_data, resolve_device
from .evaluate import EvalResult, evaluate
from .vocab_data import EvalData, split_for_checkpoint
from .context import context_losses, plot_context, recl
from .figures import check_image_path

log = logging.getLogger(__name__)

SLIDING_WINDOWS_PER_CALL = 64  # windows one forward pass of the sliding evaluation runs (token_losses.py)


def resolve_checkpoint(path) -> Path:
    """A model directory: the path itself, or a run's ``best/``, or its last checkpoint."""
    return ckpt.resolve_model_dir(path)


def find_run_config(model_dir: Path) -> Path:
    for candidate in (model_dir / RUN_CONFIG_NAME, model_dir.parent / RUN_CONFIG_NAME,
                      model_dir.parent.parent / RUN_CONFIG_NAME):
        if candidate.is_file():
            return candidate
    raise CheckpointError(f"{model_dir}: no {RUN_CONFIG_NAME} beside the checkpoint, so its corpus is unknown")


def check_vocab(model_dir: Path, corpus) -> None:
    saved = load_vocab(model_dir)
    if len(saved) != len(corpus.vocab) or saved.to_dict() != corpus.vocab.to_dict():
        raise DataError(f"{model_dir}: the checkpoint's vocabulary ({len(saved)} symbols) does not match the "
                        f"corpus' ({len(corpus.vocab)} symbols)")


def load_model_config(model_dir: Path) -> TransformerXLConfig:
    """The checkpoint's config.json, read without loading the weights."""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{model_dir}: not a transformer-xl checkpoint (no config.json)")
    try:
        return TransformerXLConfig.from_json_file(path)
    except ConfigError as exc:
        raise CheckpointError(f"{path}: {exc}") from None


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


def run_context(args) -> int:
    """``txl context``: per-model curves of loss against context length, and RECL for a group."""


    names = args.names or [Path(c).resolve().name for c in args.checkpoints]
    if len(names) != len(args.checkpoints) or len(set(names)) != len(names):
        raise DataError("--names: give one distinct name per checkpoint")
    check_image_path(args.plot, "--plot")
    device = resolve_device(args.device)
    model_dirs = [resolve_checkpoint(path) for path in args.checkpoints]
    group, curves, metric = {}, {}, "ppl"
    for name, model_dir in zip(names, model_dirs):
        overrides = ["--data-dir", args.data_dir] if args.data_dir else []
        cfg = load_run_config(str(find_run_config(model_dir)), overrides)
        config = load_model_config(model_dir)
        chunk = _plan_context_memory(config, args.batch_size, args.lengths, device)
        model = TransformerXL.from_pretrained(model_dir, map_location=device)
        model.set_attention(*choose_backend(chunk))
        corpus = load_data(cfg, vocab_dir=model_dir if cfg.train.init_from else None)
        check_vocab(model_dir, corpus)
        metric = corpus.metric
        group[name] = context_losses(model, corpus.split(args.split), args.lengths, args.batch_size, args.max_tokens)
        curves[name] = {c: float(v.mean()) for c, v in group[name].items()}
    plot_context(curves, args.plot, metric)
    result = {"lengths": sorted(args.lengths), "loss": curves, "plot": args.plot}
    if len(group) >= 2:
        result["recl"] = {f"r={r}": {n: str(v) for n, v in recl(group, args.lengths, r=r).items()} for r in (0.1, 1.0)}
    if args.json:
        print(json.dumps(result, sort_keys=True))
        return 0
    _print_context_table(curves, sorted(args.lengths), metric)
    for key, values in result.get("recl", {}).items():
        print(f"RECL ({key}): " + ", ".join(f"{n} {v}" for n, v in values.items()))
    print(f"wrote {args.plot}")
    return 0


def _plan_context_memory(config, batch_size: int, lengths, device) -> int:
    """As :func:`_plan_eval_memory`, for the longest context length (see :func:`.context.context_losses`)."""
    c = max(lengths)
    if config.attn_type == 0 or config.mem_len > 0:
        batch, seg, mem = batch_size, min(config.tgt_len, c), c
    else:
        batch, seg, mem = batch_size * SLIDING_WINDOWS_PER_CALL, c, 0
    chunk, note = plan_attention(config, batch, seg, mem, device)
    if note:
        log.warning(note)
    return chunk


def _print_context_table(curves, lengths, metric: str) -> None:

    print("| model | " + " | ".join(str(c) for c in lengths) + " |")
    print("|---|" + "---|" * len(lengths))
    for name, curve in curves.items():
        values = [math.exp(curve[c]) if metric == "ppl" else curve[c] / math.log(2) for c in lengths]
        print(f"| {name} ({metric}) | " + " | ".join(f"{v:.2f}" for v in values) + " |")
