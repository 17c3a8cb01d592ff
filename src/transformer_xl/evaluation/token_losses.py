"""Per-token losses over a split, aligned so that different models and methods can be compared.

The split is cut into ``B`` contiguous rows (as the ordered iterator does); entry ``[b, j]`` of the
result is the loss of predicting token ``j + 1`` of row ``b``. Two ways to compute it:

* ``segment``: segments of ``tgt_len`` tokens with memory (Transformer-XL's evaluation, paper 3.2);
* ``sliding``: the vanilla Transformer's evaluation: every prediction runs a fresh window of the
  ``window`` most recent tokens (the target's predecessors), then the window moves by one. A
  prediction near the start of a row uses the shorter prefix available.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from .segments import losses_with_memory, row_segments

WINDOWS_PER_CALL = 64  # windows one forward pass of the sliding evaluation runs


def stream_rows(data, batch_size: int) -> torch.Tensor:
    """``[N] -> [B, N // B]`` contiguous rows, as :class:`LMOrderedIterator` lays them out."""
    arr = np.asarray(data)
    n = arr.size // batch_size
    return torch.from_numpy(np.ascontiguousarray(arr[: n * batch_size].reshape(batch_size, n), dtype=np.int64))


def _predictions(rows: torch.Tensor, max_tokens: Optional[int]) -> int:
    n_pred = rows.size(1) - 1
    return n_pred if max_tokens is None else min(n_pred, max_tokens)


@torch.no_grad()
def segment_losses(model, data, batch_size: int, tgt_len: int, mem_len: int, max_tokens: Optional[int] = None,
                   clamp_len: Optional[int] = None, same_length: Optional[bool] = None, device=None) -> torch.Tensor:
    """``[B, P]`` per-token losses with memory; ``P`` predictions per row (at most ``max_tokens``)."""
    device = device or next(model.parameters()).device
    rows = stream_rows(data, batch_size)
    n_pred = _predictions(rows, max_tokens)
    with model.inference(tgt_len, 0, mem_len, clamp_len, same_length):
        segments = row_segments(rows[:, :-1], rows[:, 1:], tgt_len, device, limit=n_pred)
        return torch.cat([losses.float().cpu() for losses in losses_with_memory(model, segments)], dim=1)


@torch.no_grad()
def sliding_losses(model, data, batch_size: int, window: int, max_tokens: Optional[int] = None,
                   windows_per_call: int = WINDOWS_PER_CALL, device=None, first: int = 0) -> torch.Tensor:
    """``[B, P]`` per-token losses where each prediction runs its own window of ``window`` tokens.

    Predictions before index ``first`` are skipped (left NaN), e.g. to time full windows only.
    """
    device = device or next(model.parameters()).device
    rows = stream_rows(data, batch_size)
    n_pred = _predictions(rows, max_tokens)
    losses = torch.full((rows.size(0), n_pred), float("nan"))
    with model.inference():
        for j in range(first, min(window - 1, n_pred)):  # short prefixes at the start of each row
            losses[:, j] = _last_token_loss(model, rows[:, : j + 1], rows[:, j + 1], device)
        # full windows: tokens [s, s + window) predict token s + window, stored at index s + window - 1
        starts = list(range(max(0, first - window + 1), n_pred - window + 1))
        for k in range(0, len(starts), windows_per_call):
            s0, s1 = starts[k], starts[min(k + windows_per_call, len(starts)) - 1] + 1
            win = rows[:, s0:s1 + window - 1].unfold(1, window, 1)  # [B, n_win, window]
            tgt = rows[:, s0 + window:s1 + window]  # [B, n_win]
            loss = _last_token_loss(model, win.reshape(-1, window), tgt.reshape(-1), device)
            losses[:, s0 + window - 1:s1 + window - 1] = loss.view(rows.size(0), -1)
    return losses


def _last_token_loss(model, windows: torch.Tensor, targets: torch.Tensor, device) -> torch.Tensor:
    """Loss of predicting ``targets [W]`` after each window ``[W, T]``, run without memory."""
    hidden = model.transformer(windows.to(device), None)[0][:, -1]  # [W, d]
    return -model.crit(hidden, targets.to(device)).float().cpu()


def mean_loss(losses: torch.Tensor) -> float:
    return float(losses.double().mean())


__all__ = ["mean_loss", "segment_losses", "sliding_losses", "stream_rows"]
