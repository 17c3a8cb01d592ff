"""Evaluation with memory: each segment attends to the cached states of the previous ones,
so the whole split is read once (no re-computation of overlapping windows)."""

from __future__ import annotations

import itertools
import time
from dataclasses import asdict, dataclass
from typing import Any, Optional, Tuple

import torch

from ..data import LMOrderedIterator, align_labels
from ..devices import all_reduce_sum
from ..errors import ConfigError
from ..labels import IGNORE_INDEX
from ..model import RunLengths
from .metrics import metric_name, metric_value
from .segments import losses_with_memory
from .token_losses import sliding_losses


@dataclass
class EvalResult:
    loss: float  # mean NLL per token, nats
    tokens: int
    seconds: float
    metric: str  # 'ppl', 'bpc' or 'bits_per_byte' (evaluation.metrics)
    value: float  # perplexity or bits per character

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("inf")

    def to_dict(self) -> dict:
        return {**asdict(self), "tokens_per_s": self.tokens_per_s}


@dataclass
class EvalSettings:
    """How to read a split: ``lengths`` are the run-time lengths to read it with (None: the model's own).

    ``mode="segment"`` reads the ``batch_size`` rows segment by segment with memory, as the paper's code does;
    ``mode="sliding"`` is the vanilla Transformer's evaluation: each prediction runs a fresh window of
    ``tgt_len`` tokens, then the window moves by one (``max_steps`` then counts predictions per row).
    ``level`` picks the metric (ppl for words, bpc for characters, bits_per_byte for bytes). With
    ``world_size > 1`` (process group initialised, segment mode) each rank reads its ``batch_size / world_size``
    rows.
    """

    batch_size: int = 10
    lengths: Optional[RunLengths] = None
    level: str = "word"
    max_steps: Optional[int] = None
    mode: str = "segment"
    device: Any = None
    autocast_dtype: Any = None
    rank: int = 0
    world_size: int = 1


@torch.no_grad()
def evaluate(model, data, settings: Optional[EvalSettings] = None, **fields) -> EvalResult:
    """Mean per-token loss of ``model`` on the 1-D token array ``data``, read as ``settings`` says (or its
    fields given as keywords). The model's own run-time lengths are restored afterwards. In a distributed run
    the summed losses and token counts are all-reduced, so every rank returns the result of reading all rows.
    """
    if settings is not None and fields:
        raise ConfigError(f"evaluate: give EvalSettings or its fields, not both ({', '.join(fields)})")
    cfg = settings or EvalSettings(**fields)
    lengths = cfg.lengths or model.lengths
    if cfg.mode == "sliding":
        return _evaluate_sliding(model, data, cfg.batch_size, lengths.tgt_len, cfg.level, cfg.max_steps, cfg.device)
    if cfg.mode != "segment":
        raise ConfigError(f"mode: must be 'segment' or 'sliding', got {cfg.mode!r}")
    device = cfg.device or next(model.parameters()).device
    start = time.perf_counter()
    with model.inference(**lengths.to_dict()):
        iterator = LMOrderedIterator(data, cfg.batch_size, model.tgt_len, ext_len=model.ext_len, device=device,
                                     rank=cfg.rank, world_size=cfg.world_size)
        total, count = _segment_losses(model, iterator, cfg.max_steps, cfg.autocast_dtype)
    if cfg.world_size > 1:
        total, count = all_reduce_sum([total, count], device)
    seconds = time.perf_counter() - start
    loss = total / max(count, 1)
    metric = metric_name(cfg.level)
    return EvalResult(loss=loss, tokens=int(count), seconds=seconds, metric=metric, value=metric_value(loss, metric))


def _segment_losses(model, iterator, max_steps, autocast_dtype) -> Tuple[float, int]:
    """Summed loss (float64) and token count over the iterator's segments, memory carried from each to the next."""
    counts = []

    def segments():
        for inp, tgt, _ in itertools.islice(iterator, max_steps):
            tgt = align_labels(inp, tgt)
            counts.append(int((tgt != IGNORE_INDEX).sum()))
            yield inp, tgt

    total = 0.0
    for losses in losses_with_memory(model, segments(), autocast_dtype):
        total += float(losses.double().sum())  # ignored positions (-100) contribute 0
    return total, sum(counts)


def _evaluate_sliding(model, data, batch_size, window, level, max_predictions, device) -> EvalResult:
    start = time.perf_counter()
    losses = sliding_losses(model, data, batch_size, window, max_tokens=max_predictions, device=device)
    seconds = time.perf_counter() - start
    loss = float(losses.double().mean())
    metric = metric_name(level)
    return EvalResult(loss=loss, tokens=losses.numel(), seconds=seconds, metric=metric,
                      value=metric_value(loss, metric))
