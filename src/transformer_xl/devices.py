"""Devices and precisions by name (``--device auto|cpu|cuda|cuda:N|mps``, ``--precision fp32|bf16|fp16``), and the
one collective that evaluation and training share."""

from __future__ import annotations

import functools
import logging
from typing import List, Sequence

import torch

from .errors import ConfigError

log = logging.getLogger(__name__)

PRECISIONS = ("fp32", "bf16", "fp16")


def resolve_device(name: str) -> torch.device:
    """``'auto'`` (CUDA when available, else CPU), ``'cpu'``, ``'cuda'``, ``'cuda:N'`` or ``'mps'``.

    An unknown name, or a device this machine does not have, is a one-line ConfigError.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError, TypeError):
        raise ConfigError(f"device: unknown device {name!r}; expected auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "cpu":
        return device
    if device.type == "cuda":
        if not torch.cuda.is_available():
            build = "this torch is a CPU build" if torch.version.cuda is None else "no CUDA device is visible"
            raise ConfigError(f"device: {name} requested but CUDA is not available ({build}); use --device cpu "
                              f"or auto")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"device: {name} requested but this machine has {torch.cuda.device_count()} "
                              f"CUDA device(s)")
        return device
    if device.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise ConfigError(f"device: {name} requested but MPS is not available; use --device cpu or auto")
        return device
    raise ConfigError(f"device: {name!r} is not supported; expected auto, cpu, cuda, cuda:N or mps")


def weights_dtype(precision: str, device: torch.device) -> torch.dtype:
    """The dtype inference casts the weights to once (``--precision`` of eval, score, generate, context, lm-eval and
    export): float32, bfloat16 or float16 (CUDA only). bf16 on a CPU without native bf16 instructions falls back
    to float32 with one warning line, as :func:`autocast_dtype` does."""
    return autocast_dtype(precision, device) or torch.float32


def autocast_dtype(precision: str, device: torch.device):
    """The autocast dtype of ``precision`` on ``device``, or None for fp32.

    bf16 on a CPU without native bf16 instructions (avx512_bf16 or AMX) falls back to fp32 with one warning line:
    there, oneDNN emulates bf16 products and a training step ran 25x slower than in fp32.
    """
    if precision not in PRECISIONS:
        raise ConfigError(f"precision: must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "fp32":
        return None
    if precision == "fp16" and device.type != "cuda":
        raise ConfigError("precision: fp16 needs a CUDA device (use bf16 on CPU)")
    if precision == "bf16" and device.type == "cpu" and not _cpu_has_bf16():
        log.warning("precision bf16: this CPU has no native bf16 instructions (avx512_bf16 or amx_bf16), where "
                    "bf16 runs many times slower than fp32; running in fp32 instead")
        return None
    return torch.bfloat16 if precision == "bf16" else torch.float16


def _cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively: avx512_bf16 or amx_bf16 (x86), bf16 (Arm), read from
    /proc/cpuinfo; elsewhere oneDNN's own answer (which also says yes where it only emulates bf16)."""
    flags = cpu_flags()
    if flags is not None:
        return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def cpu_flags(cpuinfo: str = "/proc/cpuinfo"):
    """The first processor's feature flags (``flags`` on x86, ``Features`` on Arm) as a set, or None where
    the file is not there (not Linux)."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return set(value.split())
    except OSError:
        return None
    return set()


@functools.lru_cache(maxsize=None)
def cpu_has_amx() -> bool:
    """Whether this CPU has AMX's bf16 tile products (``amx_bf16`` in /proc/cpuinfo; False where the file is not
    there), read once: PyTorch's fused CPU attention beats the masked softmax on 16-bit segments only there."""
    return "amx_bf16" in (cpu_flags() or ())


def all_reduce_sum(values: Sequence[float], device) -> List[float]:
    """Element-wise sums over the ranks of the initialised process group (float64: token counts stay exact
    below 2**53); the values themselves when no process group is initialised."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return list(values)
    buf = torch.tensor(list(values), dtype=torch.float64, device=device)
    dist.all_reduce(buf)
    return buf.tolist()


__all__ = ["all_reduce_sum", "autocast_dtype", "resolve_device"]
