"""Dropout with a cheaper random mask on CPU.

``torch.nn.Dropout`` draws its CPU mask with ``bernoulli_``, one Mersenne-Twister draw per element:
on a 2-core machine that was ~10% of a training step of the base-like model. This module draws one
31-bit integer per *two* elements and compares each 15-bit half against ``round(p * 2**15)``, so an
element is dropped with probability ``p' = round(p * 2**15) / 2**15`` (``|p' - p| <= 2**-16``) and
kept ones are scaled by ``1 / (1 - p')``, which keeps the expectation exact. The generator is
torch's default CPU generator, so ``torch.manual_seed`` and saved RNG states reproduce the masks.

On other devices, under ``torch.compile`` (whose own generator fuses into the kernels) and in eval
mode this is exactly ``nn.Dropout``. Parameter-free, so state dicts are unchanged.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

_LANE_BITS = 15
_LANE_RANGE = 1 << _LANE_BITS  # 32768 values per 15-bit lane


def keep_mask(shape, p: float, device="cpu"):
    """``(keep, scale)``: a bool tensor of ``shape``, False with probability ``p'``, and ``1 / (1 - p')``."""
    n = 1
    for s in shape:
        n *= s
    threshold = round(p * _LANE_RANGE)
    bits = torch.empty((n + 1) // 2, dtype=torch.int32, device=device).random_()  # [ceil(N/2)], 31 random bits each
    lanes = bits.view(torch.int16)[:n].bitwise_and_(_LANE_RANGE - 1)  # [N], two uniform 15-bit lanes per int32
    return (lanes >= threshold).view(shape), _LANE_RANGE / (_LANE_RANGE - threshold)


class Dropout(nn.Dropout):
    """``nn.Dropout`` (same arguments and results in distribution) with the cheaper CPU mask."""

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        if x.device.type != "cpu" or self.p >= 1.0 or self.inplace or torch.compiler.is_compiling():
            return super().forward(x)
        keep, scale = keep_mask(x.shape, self.p, device=x.device)
        if x.dtype == torch.float32:
            return x * torch.where(keep, scale, 0.0)  # one float mask, read again by the backward pass
        return torch.where(keep, x, 0.0).mul_(scale)  # the scale applied in float: one rounding per element
