"""``txl context``: loss against context length, and RECL for two or more models.

Each model reads its run's corpus, or the one named with ``--dataset`` (see :mod:`.corpus`).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path


from ..devices import resolve_device
from ..errors import DataError
from ..evaluation.context import context_losses, plot_context, recl
from ..evaluation.figures import check_image_path
from ..evaluation.metrics import metric_name, metric_value
from ..model import TransformerXL
from ..model.attention import AttentionChoice
from ..runtime.footprint import fit_attention
from ..checkpoints.loading import load_located
from .common import add_checkpoint_args, load_model_config, locate_checkpoint
from .corpus import add_corpus_args, check_corpus_args, checkpoint_split
from .evaluate import SLIDING_WINDOWS_PER_CALL
from .options import at_least, checks, command


log = logging.getLogger(__name__)


@command
def add_context(sub) -> None:
    p = sub.add_parser("context", help="loss against context length; RECL for two or more models",
                       description="Evaluate each model at increasing context lengths (Transformer-XL: memory with "
                                   "same_length; models without memory: sliding windows), plot loss against context "
                                   "length, and with two or more models compute the paper's Relative Effective "
                                   "Context Length (r=0.1 and r=1).")
    add_checkpoint_args(p, nargs="+")
    p.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64, 128, 256])
    p.add_argument("--split", default="valid", choices=["train", "valid", "test"])
    p.add_argument("--batch-size", type=int, default=10)
    p.add_argument("--max-tokens", type=int, default=500, help="predictions per row (default 500)")
    p.add_argument("--names", nargs="*", help="labels for the models (default: directory names)")
    p.add_argument("--plot", help="PNG path (default: context.png in the current directory)", default="context.png")
    p.add_argument("--json", action="store_true")
    add_corpus_args(p, "read")
    p.add_argument("--device", default="auto")
    p.set_defaults(func=run_context,
                   **checks(at_least("--lengths", 1), at_least("--batch-size", 1), at_least("--max-tokens", 1)))


def run_context(args) -> int:
    """``txl context``: per-model curves of loss against context length, and RECL for a group."""


    names = args.names or [Path(c).resolve().name for c in args.checkpoints]
    if len(names) != len(args.checkpoints) or len(set(names)) != len(names):
        raise DataError("--names: give one distinct name per checkpoint")
    check_image_path(args.plot, "--plot")
    check_corpus_args(args)
    device = resolve_device(args.device)
    located = [locate_checkpoint(path, args) for path in args.checkpoints]
    group, curves, metric = {}, {}, "ppl"
    for name, found in zip(names, located):
        config = load_model_config(found)
        choice = _plan_context_memory(config, args.batch_size, args.lengths, device)
        data = checkpoint_split(found, args, config.n_token)
        model = load_located(found, TransformerXL, device)
        model.set_attention(*choice)
        metric = metric_name(data.level)
        group[name] = context_losses(model, data.ids, args.lengths, args.batch_size, args.max_tokens)
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


def _plan_context_memory(config, batch_size: int, lengths, device) -> AttentionChoice:
    """As :func:`_plan_eval_memory`, for the longest context length (see :func:`.context.context_losses`)."""
    c = max(lengths)
    if config.attn_type == 0 or config.mem_len > 0:
        batch, seg, mem = batch_size, min(config.tgt_len, c), c
    else:
        batch, seg, mem = batch_size * SLIDING_WINDOWS_PER_CALL, c, 0
    return fit_attention(config, batch, seg, mem, device)


def _print_context_table(curves, lengths, metric: str) -> None:

    print("| model | " + " | ".join(str(c) for c in lengths) + " |")
    print("|---|" + "---|" * len(lengths))
    for name, curve in curves.items():
        values = [metric_value(curve[c], metric) for c in lengths]
        print(f"| {name} ({metric}) | " + " | ".join(f"{v:.2f}" for v in values) + " |")
