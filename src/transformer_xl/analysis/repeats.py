"""Which predictions need a long memory: tokens that repeat something seen far back.

Definitions (for one row of tokens ``x[0..N)``, as the evaluation lays the stream out in rows):

* token ``t`` (with ``t >= n - 1``) *completes* the n-gram ``x[t-n+1 .. t]``;
* its *repeat distance* ``d(t) = t - s`` where ``s < t`` is the largest index with ``s >= n - 1`` and
  ``x[s-n+1 .. s] == x[t-n+1 .. t]``: the most recent earlier completion of the same n-gram in the row
  (occurrences may overlap). ``d(t) = NO_REPEAT`` (-1) when there is none, or when ``t < n - 1``;
* a *far repeat* for a training length ``L`` is a token with ``d(t) > L``: the n-gram was seen before,
  but not within the last ``L`` tokens. The byte that followed the earlier occurrence, ``x[s]``, is the
  answer; a model can copy it only if its context reaches ``d(t)`` tokens back (the n - 1 bytes before
  ``t`` are in the recent context and say where to look).

Per-token losses from :mod:`.token_losses` are ``[B, P]`` with entry ``[b, j]`` the loss of predicting
token ``j + 1`` of row ``b``; :func:`row_distances` returns distances aligned with them.
Everything here is a pure function of token ids and losses.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

NO_REPEAT = -1


def repeat_distances(ids, n: int) -> np.ndarray:
    """``d(t)`` for every position of the 1-D sequence ``ids`` (see the module docstring); O(N) with a dict."""
    if n < 1:
        raise ValueError(f"n: must be >= 1, got {n}")
    arr = np.ascontiguousarray(np.asarray(ids, dtype=np.int64))
    out = np.full(arr.size, NO_REPEAT, dtype=np.int64)
    last: Dict[bytes, int] = {}
    raw, width = arr.tobytes(), arr.itemsize
    for t in range(n - 1, arr.size):
        key = raw[(t - n + 1) * width:(t + 1) * width]
        s = last.get(key)
        if s is not None:
            out[t] = t - s
        last[key] = t
    return out


def repeat_distances_brute(ids, n: int) -> np.ndarray:
    """The same as :func:`repeat_distances`, straight from the definition (O(N^2 n)): for tests."""
    x = [int(v) for v in np.asarray(ids).reshape(-1)]
    out = np.full(len(x), NO_REPEAT, dtype=np.int64)
    for t in range(n - 1, len(x)):
        for s in range(t - 1, n - 2, -1):
            if x[s - n + 1:s + 1] == x[t - n + 1:t + 1]:
                out[t] = t - s
                break
    return out


def row_distances(rows, n: int, n_pred: Optional[int] = None) -> np.ndarray:
    """``[B, P]`` repeat distances aligned with per-token losses: entry ``[b, j]`` is ``d(j + 1)`` in row b.

    ``rows`` is ``[B, T]`` (e.g. :func:`.token_losses.stream_rows`); ``P = n_pred`` or ``T - 1``.
    Distances are computed within each row, since the evaluation never carries context across rows.
    """
    rows = np.asarray(rows)
    if rows.ndim != 2:
        raise ValueError(f"rows: expected a [B, T] array, got shape {rows.shape}")
    p = rows.shape[1] - 1 if n_pred is None else n_pred
    if not 0 <= p <= rows.shape[1] - 1:
        raise ValueError(f"n_pred: must be in [0, {rows.shape[1] - 1}], got {n_pred}")
    # distances depend only on the past, so the row prefix that the predictions cover is enough
    return np.stack([repeat_distances(r[:p + 1], n)[1:] for r in rows]) if rows.shape[0] else np.zeros((0, p), np.int64)


def far_repeat_mask(distances, L: int) -> np.ndarray:
    """Tokens whose n-gram was seen before, but most recently more than ``L`` tokens back."""
    d = np.asarray(distances)
    return d > L


def distance_bins(L: int, multiples: Sequence[int] = (1, 2, 4, 8, 16, 32)) -> List[Tuple[str, int, int]]:
    """Labelled half-open distance ranges ``(lo, hi]``: ``(0, L]``, ``(L, 2L]``, ... up to the last multiple,
    then ``> last``. ``hi = -1`` means unbounded."""
    edges = [0] + [m * L for m in multiples]
    bins = [(f"({lo}, {hi}]", lo, hi) for lo, hi in zip(edges[:-1], edges[1:])]
    bins.append((f"> {edges[-1]}", edges[-1], -1))
    return bins


def bin_mask(distances, lo: int, hi: int) -> np.ndarray:
    """Repeat tokens with ``lo < d <= hi`` (``hi = -1``: no upper bound)."""
    d = np.asarray(distances)
    mask = d > lo
    if hi >= 0:
        mask &= d <= hi
    return mask


def masked_mean(losses, mask) -> Tuple[float, int]:
    """Mean of ``losses`` where ``mask`` holds, and how many tokens that is (NaN losses are an error)."""
    x, m = np.asarray(losses, dtype=np.float64), np.asarray(mask, dtype=bool)
    if x.shape != m.shape:
        raise ValueError(f"losses {x.shape} and mask {m.shape} differ in shape")
    sel = x[m]
    if np.isnan(sel).any():
        raise ValueError("losses: NaN where the mask selects tokens")
    return (float(sel.mean()) if sel.size else float("nan")), int(sel.size)


def paired_difference(a, b, mask=None, block: int = 256) -> Tuple[float, float]:
    """Mean of ``a - b`` over the selected tokens and its standard error, from blocks of ``block``
    consecutive predictions per row (neighbouring tokens' losses are correlated, so tokens are not
    independent samples; blocks of a few hundred are nearly so)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"a {a.shape} and b {b.shape}: expected two [B, P] arrays of the same shape")
    m = np.ones(a.shape, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    diff = np.where(m, a - b, 0.0)
    sums, counts = [], []
    for s in range(0, a.shape[1], block):
        sums.append(diff[:, s:s + block].sum(axis=1))
        counts.append(m[:, s:s + block].sum(axis=1))
    sums, counts = np.concatenate(sums), np.concatenate(counts)
    total = counts.sum()
    if total == 0:
        return float("nan"), float("nan")
    mean = sums.sum() / total
    keep = counts > 0
    k = int(keep.sum())
    if k < 2:
        return float(mean), float("nan")
    # ratio estimator over blocks: var of (sum_i - mean * count_i), scaled by the total count
    resid = sums[keep] - mean * counts[keep]
    se = np.sqrt(k / (k - 1) * (resid ** 2).sum()) / total
    return float(mean), float(se)


__all__ = ["NO_REPEAT", "bin_mask", "distance_bins", "far_repeat_mask", "masked_mean", "paired_difference",
           "repeat_distances", "repeat_distances_brute", "row_distances"]
