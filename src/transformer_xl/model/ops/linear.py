"""Linear layers whose few-row products use every CPU thread.

Decoding feeds one token per row, so each projection is a matrix-vector product that reads the whole weight
matrix from memory once. MKL runs such a product on one thread, at the bandwidth one core draws (about 10 GB/s
here against about 40 GB/s for two), and a decoding step is mostly these reads: ``4 * d_model * (3 * H * D +
H * D + 2 * d_inner)`` bytes per layer, plus the output layer. :func:`linear` splits the output features into
one block per thread and hands the blocks to one batched product (``baddbmm``), which PyTorch spreads over
its threads; each output is still one dot product over the same inputs.

Only without autograd, on CPU, outside compilation and export, for at most :data:`FEW_ROWS` rows; everything
else is ``torch.nn.functional.linear``. :class:`Linear` is ``nn.Linear`` with this forward (same parameters and
state-dict names).
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

FEW_ROWS = 32  # up to this many rows the split product was faster (1 row: 1.5x; 32 rows: 1.15x)


def linear(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    """``F.linear(x, weight, bias)``: ``[..., in] -> [..., out]``, split across threads for few rows (module doc)."""
    threads = _split(x, weight, bias)
    if threads < 2:
        return F.linear(x, weight, bias)
    out_f, in_f = weight.shape
    rows = x.numel() // in_f
    xs = x.reshape(1, rows, in_f).expand(threads, rows, in_f)  # [T, N, in], no copy
    w = weight.view(threads, out_f // threads, in_f).transpose(1, 2)  # [T, in, out/T]
    if bias is None:
        y = torch.bmm(xs, w)  # [T, N, out/T]
    else:
        y = torch.baddbmm(bias.view(threads, 1, out_f // threads), xs, w)
    return y.transpose(0, 1).reshape(*x.shape[:-1], out_f)  # [..., out]


def _split(x: Tensor, weight: Tensor, bias: Optional[Tensor]) -> int:
    """How many blocks to split the output features into (0: use ``F.linear``)."""
    if x.device.type != "cpu" or x.dim() == 0 or x.size(-1) == 0 or torch.compiler.is_compiling():
        return 0
    bias_grad = bias is not None and bias.requires_grad
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad or bias_grad):
        return 0
    if torch.is_autocast_enabled("cpu") or x.dtype != weight.dtype or not weight.is_contiguous():
        return 0
    if x.numel() // x.size(-1) > FEW_ROWS or (bias is not None and not bias.is_contiguous()):
        return 0
    threads, out_f = torch.get_num_threads(), weight.size(0)
    while threads > 1 and out_f % threads:
        threads -= 1
    return threads if threads > 1 else 0


class Linear(nn.Linear):
    """``nn.Linear`` whose forward is :func:`linear`."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)


__all__ = ["FEW_ROWS", "Linear", "linear"]
