"""The graph that is exported: one segment with the memory as an input and an output.

::

    log_probs, new_mems, new_mems_mask = graph(input_ids, mems, mems_mask)

    input_ids      [B, T]                         int64
    mems           [n_layer, B, mem_len, d_model] float32   the memory, as the last call returned it
    mems_mask      [B, mem_len]                   bool      True where a memory slot is hidden
    log_probs      [B, T, V]                      float32   next-token log-probabilities after each token
    new_mems       [n_layer, B, mem_len, d_model] float32
    new_mems_mask  [B, mem_len]                   bool

With ``starts=True`` the graph takes a fourth input, ``starts [B, T] bool`` (True where a document or episode
begins: no token attends to a token before it, in the segment or in memory; see
:class:`~transformer_xl.model.TransformerXLBackbone`).

B and T are dynamic (T from 1; up to ``tgt_len + ext_len`` for the learned position tables of attn_type 1 and
3, unbounded otherwise); the memory length is fixed at ``mem_len``. A memory that is not full is hidden slots:
the states sit right-aligned, so every distance between a query and a real state is what the model computes
with a memory of that length (:func:`~transformer_xl.model.memory.shift_mems`). A fresh start is zero ``mems``
with ``mems_mask`` all True for ``config.mem_init == "empty"`` (no memory) and all False for ``"zeros"``
(``mem_len`` zero states, as TensorFlow and HuggingFace models start). The graph runs the model's own forward
(``fixed_memory=True``, the plain attention, evaluation mode, ext_len 0).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor, nn

from ..model import TransformerXL


class SegmentGraph(nn.Module):
    """``(input_ids, mems, mems_mask[, starts]) -> (log_probs, new_mems, new_mems_mask)`` (module docstring)."""

    def __init__(self, model: TransformerXL):
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, mems: Tensor, mems_mask: Tensor,
                starts: Optional[Tensor] = None) -> Tuple[Tensor, Tensor, Tensor]:
        core, new_mems, new_mask, _ = self.model.transformer(input_ids, list(mems.unbind(0)), mems_mask,
                                                            fixed_memory=True, starts=starts)
        bsz, qlen, d = core.shape
        log_probs = self.model.crit.log_probs(core.reshape(-1, d)).view(bsz, qlen, -1)  # [B, T, V]
        return log_probs, torch.stack(new_mems), new_mask


def fresh_memory(model: TransformerXL, batch_size: int) -> Tuple[Tensor, Tensor]:
    """The ``(mems, mems_mask)`` of a fresh start: zeros, hidden unless ``config.mem_init == "zeros"``."""
    cfg = model.config
    mems = torch.zeros(cfg.n_layer, batch_size, model.mem_len, cfg.d_model)
    return mems, torch.full((batch_size, model.mem_len), cfg.mem_init != "zeros", dtype=torch.bool)


__all__ = ["SegmentGraph", "fresh_memory"]
