"""Dropout with a cheaper random mask on CPU.

``torch.nn.Dropout`` draws its CPU mask with ``bernoulli_``, and ``random_`` is no better: both take
one draw per element from torch's Mersenne Twister through a serial kernel, 5–7 ns each, which was
~10% of a training step of the base-like model. Here the random bits come from NumPy's PCG64 bit
generator, which fills 64-bit words at ~3 ns each; every word gives four 16-bit lanes, one per
element. An element is dropped when its lane falls below ``round(p * 2**16)``, so the drop rate is
``p' = round(p * 2**16) / 2**16`` (``|p' - p| <= 2**-17``), and kept elements are scaled by
``1 / (1 - p')``, which keeps the expectation exact.

Each mask takes one 63-bit seed from torch's default CPU generator, so ``torch.manual_seed`` and
saved RNG states reproduce the masks; :func:`keep_mask` also takes an explicit seed, which lets a
backward pass rebuild a mask instead of storing it (see :mod:`.attention.streamed`).

On other devices, under ``torch.compile`` (whose own generator fuses into the kernels) and in eval
mode this is exactly ``nn.Dropout``. Parameter-free, so state dicts are unchanged.
"""

from __future__ import annotations

import math
from typing import Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor, nn

_LANE_RANGE = 1 << 16  # values of one 16-bit lane


def draw_seed() -> int:
    """A 63-bit seed from torch's default CPU generator (so ``torch.manual_seed`` reproduces it)."""
    return int(torch.empty((), dtype=torch.int64).random_())


def keep_mask(shape: Sequence[int], p: float, seed: Union[int, Sequence[int], None] = None,
              device="cpu") -> Tuple[Tensor, float]:
    """``(keep, scale)``: a bool tensor of ``shape``, False with probability ``p'``, and ``1 / (1 - p')``.

    ``seed`` (an int or a sequence of ints, e.g. ``[call_seed, block_index]``) fixes the mask; by default
    one is drawn with :func:`draw_seed`. ``0 <= p < 1 - 2**-17``. On CPU the bits come from PCG64; on
    another device from a ``torch.Generator`` of that device seeded alike.
    """
    n = math.prod(shape)
    count = round(p * _LANE_RANGE)  # lanes below count - 2**15 are dropped
    if not 0 <= count < _LANE_RANGE:
        raise ValueError(f"dropout probability must be in [0, 1), got {p}")
    seed = draw_seed() if seed is None else seed
    scale = _LANE_RANGE / (_LANE_RANGE - count)
    if torch.device(device).type == "cpu":
        words = np.random.PCG64(seed).random_raw((n + 3) // 4)  # [ceil(N/4)] uint64, four lanes each
        lanes = torch.from_numpy(words.view(np.int16)[:n])  # [N], uniform over the int16 range
        return (lanes >= count - _LANE_RANGE // 2).view(tuple(shape)), scale
    gen = torch.Generator(device=device)
    gen.manual_seed(int(np.random.SeedSequence(seed).generate_state(1, np.uint64)[0]) >> 1)
    lanes = torch.randint(0, _LANE_RANGE, tuple(shape), generator=gen, device=device, dtype=torch.int32)
    return lanes >= count, scale


class Dropout(nn.Dropout):
    """``nn.Dropout`` (same arguments and results in distribution) with the cheaper CPU mask."""

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        if (x.device.type != "cpu" or self.p >= 1.0 - 2.0 ** -17 or self.inplace
                or torch.compiler.is_compiling()):
            return super().forward(x)
        keep, scale = keep_mask(x.shape, self.p)
        if x.dtype == torch.float32:
            return x * torch.where(keep, scale, 0.0)  # one float mask, read again by the backward pass
        return torch.where(keep, x, 0.0).mul_(scale)  # the scale applied in float: one rounding per element
