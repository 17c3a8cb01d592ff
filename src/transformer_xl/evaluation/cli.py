"""What ``txl eval`` does, as a function: find the checkpoint, rebuild its corpus, evaluate."""

from __future__ import annotations

from pathlib import Path
from typing import Tuple

from ..errors import CheckpointError, ConfigError, DataError
from ..model import TransformerXL
from ..training import checkpoint as ckpt
from ..training.allocator import keep_cpu_memory
from ..training.config import load_run_config
from ..training.loop import RUN_CONFIG_NAME, autocast_dtype, load_data, resolve_device
from .evaluate import EvalResult, evaluate


def resolve_checkpoint(path) -> Path:
    """A model directory: the path itself, or a run's ``best/``, or its last checkpoint."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such run or checkpoint directory")
    if ckpt.is_model_dir(path):
        return path
    if ckpt.is_model_dir(path / "best"):
        return path / "best"
    latest = ckpt.latest_checkpoint(path)
    if latest is None:
        raise CheckpointError(f"{path}: neither a checkpoint (config.json + model.safetensors) nor a run with checkpoints")
    return latest


def find_run_config(model_dir: Path) -> Path:
    for candidate in (model_dir / RUN_CONFIG_NAME, model_dir.parent / RUN_CONFIG_NAME,
                      model_dir.parent.parent / RUN_CONFIG_NAME):
        if candidate.is_file():
            return candidate
    raise CheckpointError(f"{model_dir}: no {RUN_CONFIG_NAME} beside the checkpoint, so its corpus is unknown")


def check_vocab(model_dir: Path, corpus) -> None:
    from ..data import load_vocab

    saved = load_vocab(model_dir)
    if len(saved) != len(corpus.vocab) or saved.to_dict() != corpus.vocab.to_dict():
        raise DataError(f"{model_dir}: the checkpoint's vocabulary ({len(saved)} symbols) does not match the "
                        f"corpus' ({len(corpus.vocab)} symbols)")


def evaluate_checkpoint(args) -> Tuple[EvalResult, dict]:
    model_dir = resolve_checkpoint(args.checkpoint)
    overrides = ["--data-dir", args.data_dir] if getattr(args, "data_dir", None) else []
    cfg = load_run_config(str(find_run_config(model_dir)), overrides)
    device = resolve_device(args.device)
    if device.type == "cpu" and cfg.train.keep_cpu_memory:
        keep_cpu_memory()
    model = TransformerXL.from_pretrained(model_dir, map_location=device)
    corpus = load_data(cfg)
    check_vocab(model_dir, corpus)
    if len(corpus.vocab) != model.config.n_token:
        raise DataError(f"{model_dir}: model has {model.config.n_token} tokens, corpus vocabulary {len(corpus.vocab)}")
    if getattr(args, "attn_chunk", 0) < 0:
        raise ConfigError(f"attn_chunk: must be >= 0, got {args.attn_chunk}")
    model.attn_chunk = getattr(args, "attn_chunk", 0)
    model.fused_attention = getattr(args, "fused_attention", False)
    if getattr(args, "compile", False):
        model.compile()
    result = evaluate(model, getattr(corpus, args.split), batch_size=args.batch_size, tgt_len=args.tgt_len,
                      mem_len=args.mem_len, ext_len=args.ext_len, clamp_len=args.clamp_len,
                      same_length=args.same_length, level=corpus.level, max_steps=args.max_steps, device=device,
                      autocast_dtype=autocast_dtype(getattr(args, "precision", "fp32"), device), mode=getattr(args, "mode", "segment"))
    info = {"checkpoint": str(model_dir), "split": args.split, "dataset": cfg.data.dataset,
            "mode": getattr(args, "mode", "segment"),
            "tgt_len": args.tgt_len or model.tgt_len, "mem_len": model.mem_len if args.mem_len is None else args.mem_len,
            "clamp_len": model.clamp_len if args.clamp_len is None else args.clamp_len,
            "same_length": model.same_length if args.same_length is None else args.same_length}
    return result, info


def run_context(args) -> int:
    """``txl context``: per-model curves of loss against context length, and RECL for a group."""
    import json

    from .context import context_losses, plot_context, recl

    names = args.names or [Path(c).resolve().name for c in args.checkpoints]
    if len(names) != len(args.checkpoints) or len(set(names)) != len(names):
        raise DataError("--names: give one distinct name per checkpoint")
    group, curves, metric = {}, {}, "ppl"
    for name, path in zip(names, args.checkpoints):
        model_dir = resolve_checkpoint(path)
        overrides = ["--data-dir", args.data_dir] if args.data_dir else []
        cfg = load_run_config(str(find_run_config(model_dir)), overrides)
        model = TransformerXL.from_pretrained(model_dir, map_location=resolve_device(args.device))
        corpus = load_data(cfg)
        check_vocab(model_dir, corpus)
        metric = corpus.metric
        group[name] = context_losses(model, getattr(corpus, args.split), args.lengths, args.batch_size, args.max_tokens)
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


def _print_context_table(curves, lengths, metric: str) -> None:
    import math

    print("| model | " + " | ".join(str(c) for c in lengths) + " |")
    print("|---|" + "---|" * len(lengths))
    for name, curve in curves.items():
        values = [math.exp(curve[c]) if metric == "ppl" else curve[c] / math.log(2) for c in lengths]
        print(f"| {name} ({metric}) | " + " | ".join(f"{v:.2f}" for v in values) + " |")
