"""What the sub-commands share: the range checks of numeric options (declared per sub-command with :func:`checks`,
applied before the command starts, so nothing is read, computed or written for a bad value), and the options that
turn into typed settings: a checkpoint (``CKPT``, ``--revision``), the lengths, the attention, the corpus.

Every ``CKPT`` argument accepts what ``TransformerXL.from_pretrained`` accepts: a hub id (``org/name``, with
``--revision``), a folder of ours, a run directory, or a HuggingFace TransfoXL folder.
"""

from __future__ import annotations

import argparse
import math
from typing import Dict, Optional, Sequence, Tuple, Union

from ..errors import ConfigError
from ..jobs import CorpusChoice
from ..model.attention import AttentionChoice
from ..training.run_config import REMOVED_SPELLINGS, parse_attention, removed_spelling

CKPT_HELP = ("a hub id (org/name), a checkpoint folder (ours, or a HuggingFace TransfoXL folder with its "
             "vocab.pkl) or a run directory (its best/, else its last checkpoint)")

#: (flag, lower, upper, lower bound excluded), and optionally what to use instead of a value out of range.
Check = Union[Tuple[str, Optional[float], Optional[float], bool], Tuple[str, Optional[float], Optional[float], bool,
                                                                       str]]


# ---------------------------------------------------------------------------- range checks
def check_range(flag: str, value, lo: Optional[float] = None, hi: Optional[float] = None,
                lo_open: bool = False, hint: str = "") -> None:
    """ConfigError naming ``flag`` unless ``value`` (a number, a list of numbers or None) is finite and in
    ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``); None bounds are not checked, a None value is not given.
    ``hint`` ends the line of a value out of range (``for the most likely token, use --greedy``)."""
    if value is None:
        return
    for v in (value if isinstance(value, (list, tuple)) else [value]):
        if isinstance(v, float) and not math.isfinite(v):
            raise ConfigError(f"{flag}: must be a finite number, got {v}")
        below = lo is not None and (v <= lo if lo_open else v < lo)
        if below or (hi is not None and v > hi):
            raise ConfigError(f"{flag}: must be {_describe_range(lo, hi, lo_open)}, got {v}"
                              + (f" ({hint})" if hint else ""))


def _describe_range(lo, hi, lo_open: bool) -> str:
    if hi is None:
        return f"{'>' if lo_open else '>='} {lo}"
    if lo is None:
        return f"<= {hi}"
    return f"in {'(' if lo_open else '['}{lo}, {hi}]"


def checks(*items: Check) -> Dict[str, Sequence[Check]]:
    """``p.set_defaults(**checks(...))``: the numeric options of a sub-command and their ranges."""
    return {"range_checks": items}


def at_least(flag: str, lo: float) -> Check:
    return (flag, lo, None, False)


def positive(flag: str, hint: str = "") -> Check:
    return (flag, 0, None, True, hint)


def check_options(args) -> None:
    """Apply the sub-command's declared range checks to the parsed values."""
    for flag, lo, hi, lo_open, *hint in getattr(args, "range_checks", ()):
        check_range(flag, getattr(args, flag.lstrip("-").replace("-", "_")), lo, hi, lo_open, *hint)


# ---------------------------------------------------------------------------- checkpoints and lengths
INFERENCE_CHECKS = (at_least("--tgt-len", 1), at_least("--mem-len", 0))


def add_checkpoint_args(p, nargs=None) -> None:
    """The ``CKPT`` positional argument and ``--revision``."""
    p.add_argument("checkpoint" if nargs is None else "checkpoints", metavar="CKPT", nargs=nargs, help=CKPT_HELP)
    p.add_argument("--revision", help="for hub ids: a branch, tag or commit (default: main)")


def add_inference_args(p) -> None:
    add_checkpoint_args(p)
    p.add_argument("--tgt-len", type=int, help="segment length (default: training value)")
    p.add_argument("--mem-len", type=int, help="memory length (default: training value)")
    p.add_argument("--device", default="auto")
    add_precision_arg(p)


def add_precision_arg(p) -> None:
    """``--precision``: the dtype the weights are cast to once when the model is loaded."""
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"],
                   help="the weights' precision, cast once at load: fp32 (default), bf16 (CPUs with avx512_bf16 or "
                        "AMX, and GPUs; elsewhere fp32 with a warning), fp16 (GPUs)")


# ---------------------------------------------------------------------------- the attention
def add_attention_args(p) -> None:
    """``--attention NAME[:CHUNK]``, the one option that picks the attention; its removed spellings are kept only
    to answer them with one line."""
    p.add_argument("--attention", metavar="NAME[:CHUNK]",
                   help="the attention back-end (attn_type 0), same results: plain (default); streamed:N, keys N at a "
                        "time (e.g. streamed:256), so peak memory no longer grows with --mem-len; triton, the fused "
                        "CUDA kernel (elsewhere streamed with :N, else plain)")
    for name in REMOVED_SPELLINGS:
        p.add_argument("--" + name.replace("_", "-"), dest="removed_" + name, nargs="?", const="", default=None,
                       help=argparse.SUPPRESS)


def attention_option(args) -> Optional[AttentionChoice]:
    """The attention asked for on the command line, None when none was (ConfigError naming the flag)."""
    for name in REMOVED_SPELLINGS:
        if getattr(args, "removed_" + name) is not None:
            raise removed_spelling("--" + name.replace("_", "-"), flag=True)
    return None if args.attention is None else parse_attention(args.attention, "--attention")


# ---------------------------------------------------------------------------- the corpus of eval and context
def add_corpus_args(p, use: str) -> None:
    """``--dataset``, ``--data-dir``, ``--test-file``/``--valid-file``/``--train-file`` and ``--cache-dir``;
    ``use`` says what the command does with the corpus (``"evaluate on"``)."""
    p.add_argument("--dataset", help=f"the corpus to {use}, encoded with the checkpoint's vocabulary: a named "
                                     f"corpus (with --data-dir), or 'text' with --test-file/--valid-file/--train-file "
                                     f"(default: the run's corpus, from run.yaml)")
    p.add_argument("--data-dir", help="local copy of the corpus (default: the run's)")
    for split in ("test", "valid", "train"):
        p.add_argument(f"--{split}-file", help=f"with --dataset text: the file read by --split {split}")
    p.add_argument("--cache-dir", help="corpus cache (default: $TXL_CACHE_DIR or ~/.cache/transformer-xl)")


def corpus_choice(args) -> CorpusChoice:
    files = {s: getattr(args, f"{s}_file") for s in ("train", "valid", "test") if getattr(args, f"{s}_file")}
    return CorpusChoice(args.dataset, args.data_dir, args.cache_dir, files)
