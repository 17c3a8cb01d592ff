"""Segment-level recurrence memory (paper section 3.2).

Memory is a plain value the caller holds: a list with one tensor per layer, ``[B, M, d_model]``,
holding the *input* states of that layer for the last ``M <= mem_len`` positions. The model never
stores it; it takes ``mems`` in and returns the updated memory.

Memory has one length for the whole batch. To forget some rows (a document boundary) or to
ignore padding, a companion bool mask ``mems_mask [B, M]`` marks memory positions that no query
may attend to (True = hidden). The model carries it forward next to the memory.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch
from torch import Tensor

Mems = List[Tensor]


def empty_mems(n_layer: int, batch_size: int, d_model: int, dtype=None, device=None) -> Mems:
    """Memory of length 0 for every layer: ``n_layer x [B, 0, d_model]``."""
    return [torch.zeros(batch_size, 0, d_model, dtype=dtype, device=device) for _ in range(n_layer)]


def cache_window(mlen: int, qlen: int, mem_len: int, ext_len: int) -> Tuple[int, int]:
    """Slice ``[beg, end)`` of the ``M + L`` states that becomes the next memory.

    The last ``ext_len`` positions of the segment are not cached (they are re-fed as extended
    context), and at most ``mem_len`` positions are kept, as in the paper's code.
    """
    end = mlen + max(0, qlen - ext_len)
    return max(0, end - mem_len), end


@torch.no_grad()
def update_mems(hids: Sequence[Tensor], mems: Optional[Sequence[Tensor]], mem_len: int, ext_len: int) -> Mems:
    """New memory from each layer's input states ``hids[i] [B, L, d]`` and the old ``mems[i] [B, M, d]``.

    The result is detached: no gradient ever enters the memory.
    """
    mlen = 0 if not mems else mems[0].size(1)
    beg, end = cache_window(mlen, hids[0].size(1), mem_len, ext_len)
    new = []
    for i, h in enumerate(hids):
        if beg >= mlen:  # all from the segment: a slice of h, no copy (the usual case mem_len <= tgt_len)
            new.append(h[:, beg - mlen:end - mlen].detach())
        else:  # [B, mlen-beg, d] + [B, end-mlen, d]; only the kept rows are copied
            new.append(torch.cat([mems[i][:, beg:].to(h.dtype), h[:, :end - mlen]], dim=1).detach())
    return new


@torch.no_grad()
def shift_mems(hids: Sequence[Tensor], mems: Sequence[Tensor], hidden: Optional[Tensor]) -> Tuple[Mems, Tensor]:
    """A memory of fixed length ``M`` (that of ``mems``): the last ``M`` of ``[mems, hids]`` in every layer and the
    last ``M`` of the hidden-key mask ``hidden [B, M+L]`` (:func:`next_hidden`), with no branch on the segment length
    (what an exported graph runs; slots that never held a state stay hidden). ``hids[i] [B, L, d]``,
    ``mems[i] [B, M, d]`` -> ``(n_layer x [B, M, d], [B, M])``."""
    start = hids[0].size(1)  # of the last M rows of [M + L]: a non-negative index, right also for M = 0
    new = [torch.cat([mem.to(h.dtype), h], dim=1)[:, start:] for mem, h in zip(mems, hids)]
    if hidden is None:
        hidden = torch.zeros(hids[0].size(0), mems[0].size(1) + start, dtype=torch.bool, device=hids[0].device)
    return new, hidden[:, start:]


def next_hidden(key_hidden: Optional[Tensor], episode: Optional[Tensor]) -> Optional[Tensor]:
    """Which of the ``M + L`` states stay hidden in the next memory: ``[B, M+L]`` bool, or None when none is.

    Hidden keys (``key_hidden``: hidden memory and padding) stay hidden, and so does every state of an episode that
    ended in this window (``episode [B, M+L]`` numbers below the row's last): no later step may see them.
    """
    if episode is None:
        return key_hidden
    ended = episode < episode[:, -1:]  # [B, M+L]
    return ended if key_hidden is None else key_hidden | ended


def update_mems_mask(hidden: Optional[Tensor], mlen: int, qlen: int, mem_len: int, ext_len: int) -> Optional[Tensor]:
    """The hidden-slot mask ``[B, M']`` that goes with :func:`update_mems`'s result (``hidden [B, M+L]`` from
    :func:`next_hidden`), or None when nothing is hidden."""
    if hidden is None:
        return None
    beg, end = cache_window(mlen, qlen, mem_len, ext_len)
    return hidden[:, beg:end]


def reset_mems(mems: Sequence[Tensor], mems_mask: Optional[Tensor], rows,
               mem_init: str = "empty") -> Tuple[Mems, Optional[Tensor]]:
    """Forget the memory of the chosen batch rows, e.g. at a document boundary.

    ``rows`` is a bool mask ``[B]`` or a sequence of row indices. Returns ``(mems, mems_mask)`` to
    pass to the next forward: the chosen rows' memory is zeroed and hidden from attention, so
    those rows continue exactly as if they started without memory. With ``mem_init="zeros"`` (the
    model's ``config.mem_init``; a fresh start attends to ``mem_len`` zero states) the zeroed rows stay
    visible instead, which is that fresh start once the memory is ``mem_len`` long. Inputs are not modified.
    """
    if not mems or mems[0].size(1) == 0:
        return list(mems), mems_mask
    batch, mlen = mems[0].shape[:2]
    device = mems[0].device
    rows = torch.as_tensor(rows, device=device)
    if rows.dtype == torch.bool:
        if rows.shape != (batch,):
            raise ValueError(f"rows: a bool mask must have shape [{batch}], got {list(rows.shape)}")
        chosen = rows
    else:
        chosen = torch.zeros(batch, dtype=torch.bool, device=device)
        chosen[rows.long()] = True
    mask = mems_mask.clone() if mems_mask is not None else torch.zeros(batch, mlen, dtype=torch.bool, device=device)
    mask[chosen] = mem_init != "zeros"
    keep = (~chosen).to(mems[0].dtype)[:, None, None]  # [B, 1, 1]
    return [m * keep for m in mems], mask
