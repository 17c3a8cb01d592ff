"""The one loop of evaluation with memory: segments in order, each attending to the states the previous ones left.

``evaluate`` (a split through the ordered iterator), ``segment_losses`` (per-token losses of contiguous rows) and
``score_ids`` (one document) differ only in where their segments come from; they all read them through
:func:`outputs_with_memory`. So do lm-eval's requests (:mod:`~transformer_xl.evaluation.rolling`), whose
rows leave the batch as they end.
"""

from __future__ import annotations

import contextlib
from typing import Iterable, Iterator, Optional, Tuple

import torch
from torch import Tensor


def outputs_with_memory(model, segments: Iterable[Tuple[Tensor, Tensor]], autocast_dtype=None,
                        mems=None) -> Iterator:
    """The model's output for each ``(input_ids [B, L], labels [B, L])`` segment, read in order with the memory
    carried from one to the next (``mems``: the memory to start from; None for a fresh start). Labels ``-100``
    are ignored (loss 0). Runs under ``torch.autocast`` with ``autocast_dtype`` when it is given. A segment may
    have fewer rows than the one before: the rows that ended left the batch, and the first ``B`` rows of the
    memory go on."""
    for inp, tgt in segments:
        if mems is not None and len(mems) and mems[0].size(0) > inp.size(0):
            mems = [m[:inp.size(0)] for m in mems]  # n_layer x [B, M, d_model]
        amp = contextlib.nullcontext() if autocast_dtype is None else torch.autocast(inp.device.type, autocast_dtype)
        with amp:
            out = model(inp, tgt, mems=mems)
        mems = out.mems
        yield out


def losses_with_memory(model, segments: Iterable[Tuple[Tensor, Tensor]], autocast_dtype=None,
                       mems=None) -> Iterator[Tensor]:
    """Per-token losses ``[B, L]`` of each segment (:func:`outputs_with_memory`)."""
    for out in outputs_with_memory(model, segments, autocast_dtype, mems):
        yield out.losses


def row_segments(inputs: Tensor, labels: Tensor, tgt_len: int, device=None,
                 limit: Optional[int] = None) -> Iterator[Tuple[Tensor, Tensor]]:
    """``(inputs, labels)`` ``[B, N]`` cut into consecutive segments of ``tgt_len`` columns (the first ``limit``
    columns only, when given), moved to ``device``."""
    n = inputs.size(1) if limit is None else min(limit, inputs.size(1))
    for s in range(0, n, tgt_len):
        e = min(s + tgt_len, n)
        yield inputs[:, s:e].to(device), labels[:, s:e].to(device)


__all__ = ["losses_with_memory", "outputs_with_memory", "row_segments"]
