"""Evaluation with memory: each segment attends to the cached states of the previous ones,
so the whole split is read once (no re-computation of overlapping windows)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Optional

import torch

from ..data import LMOrderedIterator, align_labels
from ..errors import ConfigError
from ..model.transformer import IGNORE_INDEX
from .metrics import metric_name, metric_value
from .token_losses import sliding_losses


@dataclass
class EvalResult:
    loss: float  # mean NLL per token, nats
    tokens: int
    seconds: float
    metric: str  # 'ppl' or 'bpc'
    value: float  # perplexity or bits per character

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("inf")

    def to_dict(self) -> dict:
        return {**asdict(self), "tokens_per_s": self.tokens_per_s}


@torch.no_grad()
def evaluate(model, data, batch_size: int = 10, tgt_len: Optional[int] = None, mem_len: Optional[int] = None,
             ext_len: Optional[int] = None, clamp_len: Optional[int] = None, same_length: Optional[bool] = None,
             level: str = "word", max_steps: Optional[int] = None, device=None, autocast_dtype=None,
             mode: str = "segment", rank: int = 0, world_size: int = 1) -> EvalResult:
    """Mean per-token loss of ``model`` on the 1-D token array ``data``.

    The stream is cut into ``batch_size`` contiguous rows. ``mode='segment'`` reads them segment by
    segment with memory, as the paper's code does; ``mode='sliding'`` is the vanilla Transformer's
    evaluation: each prediction runs a fresh window of ``tgt_len`` tokens, then the window moves by
    one (``max_steps`` then counts predictions per row). Lengths default to the model's training
    values; the model's own run-time lengths are restored afterwards.

    In a distributed run (``world_size > 1``, process group initialised, segment mode) each rank reads
    its ``batch_size / world_size`` rows; the summed losses and token counts are all-reduced, so every
    rank returns the result of reading all rows.
    """
    if mode == "sliding":
        return _evaluate_sliding(model, data, batch_size, tgt_len or model.tgt_len, level, max_steps, device)
    if mode != "segment":
        raise ConfigError(f"mode: must be 'segment' or 'sliding', got {mode!r}")
    device = device or next(model.parameters()).device
    tgt_len = tgt_len or model.tgt_len
    total, count, mems = 0.0, 0, None
    start = time.perf_counter()
    with model.inference(tgt_len, ext_len, mem_len, clamp_len, same_length):
        iterator = LMOrderedIterator(data, batch_size, tgt_len, ext_len=model.ext_len, device=device, rank=rank,
                                     world_size=world_size)
        for step, (inp, tgt, _) in enumerate(iterator):
            if max_steps is not None and step >= max_steps:
                break
            tgt = align_labels(inp, tgt)
            with torch.autocast(device_type=torch.device(device).type, dtype=autocast_dtype,
                                enabled=autocast_dtype is not None):
                out = model(inp, tgt, mems=mems)
            mems = out.mems
            total += float(out.losses.double().sum())  # ignored positions (-100) contribute 0
            count += int((tgt != IGNORE_INDEX).sum())
    if world_size > 1:
        total, count = _all_reduce_sum([total, count], device)
    seconds = time.perf_counter() - start
    loss = total / max(count, 1)
    metric = metric_name(level)
    return EvalResult(loss=loss, tokens=int(count), seconds=seconds, metric=metric, value=metric_value(loss, metric))


def _all_reduce_sum(values, device):
    import torch.distributed as dist

    buf = torch.tensor(values, dtype=torch.float64, device=device)  # token counts stay exact below 2**53
    dist.all_reduce(buf)
    return buf.tolist()


def _evaluate_sliding(model, data, batch_size, window, level, max_predictions, device) -> EvalResult:
    start = time.perf_counter()
    losses = sliding_losses(model, data, batch_size, window, max_tokens=max_predictions, device=device)
    seconds = time.perf_counter() - start
    loss = float(losses.double().mean())
    metric = metric_name(level)
    return EvalResult(loss=loss, tokens=losses.numel(), seconds=seconds, metric=metric, value=metric_value(loss, metric))
