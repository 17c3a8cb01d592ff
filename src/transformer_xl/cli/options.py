"""Sub-command registration and the range checks of numeric options (declared per sub-command with
:func:`checks`, applied before the command starts, so nothing is read, computed or written for a bad value).
"""

from __future__ import annotations

import argparse
import math
from typing import Callable, Dict, Optional, Sequence, Tuple


from ..data import KNOWN_CORPORA
from ..errors import ConfigError
from ..model.attention import AttentionChoice
from .common import add_checkpoint_args


COMMANDS: Dict[str, Callable[[argparse._SubParsersAction], None]] = {}


def command(fn):
    """Register a function that adds one sub-parser."""
    COMMANDS[fn.__name__.removeprefix("add_")] = fn
    return fn


Check = Tuple[str, Optional[float], Optional[float], bool]  # (flag, lower, upper, lower bound excluded)


def check_range(flag: str, value, lo: Optional[float] = None, hi: Optional[float] = None,
                lo_open: bool = False) -> None:
    """ConfigError naming ``flag`` unless ``value`` (a number, a list of numbers or None) is finite and in
    ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``); None bounds are not checked, a None value is not given."""
    if value is None:
        return
    for v in (value if isinstance(value, (list, tuple)) else [value]):
        if isinstance(v, float) and not math.isfinite(v):
            raise ConfigError(f"{flag}: must be a finite number, got {v}")
        below = lo is not None and (v <= lo if lo_open else v < lo)
        if below or (hi is not None and v > hi):
            raise ConfigError(f"{flag}: must be {_describe_range(lo, hi, lo_open)}, got {v}")


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


def positive(flag: str) -> Check:
    return (flag, 0, None, True)


def check_options(args) -> None:
    """Apply the sub-command's declared range checks to the parsed values."""
    for flag, lo, hi, lo_open in getattr(args, "range_checks", ()):
        check_range(flag, getattr(args, flag.lstrip("-").replace("-", "_")), lo, hi, lo_open)


def check_dataset(name: str, own_files: str) -> None:
    """ConfigError naming ``--dataset`` unless ``name`` is a named corpus or ``text`` (the user's own files, given
    with the flag ``own_files``, e.g. ``--train-file``)."""
    if name == "text" or str(name).strip().lower() in KNOWN_CORPORA:
        return
    raise ConfigError(f"--dataset: unknown corpus {name!r}; expected one of {', '.join(KNOWN_CORPORA)}, text "
                      f"(your own files: --dataset text {own_files} FILE)")


INFERENCE_CHECKS = (at_least("--tgt-len", 1), at_least("--mem-len", 0))


def add_inference_args(p) -> None:
    add_checkpoint_args(p)
    p.add_argument("--tgt-len", type=int, help="segment length (default: training value)")
    p.add_argument("--mem-len", type=int, help="memory length (default: training value)")
    p.add_argument("--device", default="auto")


def add_attention_args(p) -> None:
    """``--attention NAME[:CHUNK]``, the one option that picks the attention, and its older spellings."""
    p.add_argument("--attention", metavar="NAME[:CHUNK]",
                   help="the attention back-end (attn_type 0), same results: plain (default); streamed:N, keys N at a "
                        "time (e.g. streamed:256), so peak memory no longer grows with --mem-len; triton, the fused "
                        "CUDA kernel (elsewhere streamed with :N, else plain)")
    p.add_argument("--attn-chunk", type=int, default=0, metavar="N", help="the same as --attention streamed:N")
    p.add_argument("--fused-attention", action="store_true", help="the same as --attention triton")


def attention_option(args) -> AttentionChoice:
    """The attention asked for on the command line (ConfigError naming the flag when it is not one)."""
    chunk, fused = getattr(args, "attn_chunk", 0) or 0, getattr(args, "fused_attention", False)
    check_range("--attn-chunk", chunk, 0)
    text = getattr(args, "attention", None)
    if text is None:
        return AttentionChoice.of(chunk, fused)
    if chunk or fused:
        raise ConfigError("--attention: give it alone (--attn-chunk and --fused-attention are its older spellings)")
    try:
        return AttentionChoice.parse(text)
    except ValueError as exc:
        raise ConfigError(f"--attention: {exc}") from None
