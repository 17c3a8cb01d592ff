"""Will it fit? Peak-memory estimates of a forward pass, a training step and cached decoding.

A pure estimate from the configuration and the run-time lengths, made before anything is allocated,
so that ``txl eval --tgt-len 100000`` is refused with one line instead of running until the kernel
kills the process. Notation: batch ``B``, segment ``L``, memory ``M``, keys ``K = M + L``,
``H`` heads of ``D``, ``d = d_model``, ``f = d_inner``, ``N = B * L`` predicted positions.

What dominates, in evaluation (no gradients, plain attention):

* attention scores: the ``[B, H, L, K]`` content scores and the ``[B, H, L, K+1]`` position scores
  are alive together, then the scores and their softmax: two float32 ``[B, H, L, K]`` tensors per
  layer at its peak (three under bf16/fp16 autocast, where the float32 copies come on top);
* memory states: ``n_layer`` inputs ``[B, M, d]``, and as many new ones while they are built;
* the output layer: logits and log-softmax ``[N, V]`` in float32 (the head and the largest tail
  cluster with an adaptive softmax);
* the weights.

The streamed attention (``model.set_attention("streamed", c)``, attn_type 0) replaces the scores by ``[B, H, L, ~2c+L]``
blocks. A training step adds what autograd saves per layer (the softmax output, the projections, the
feed-forward hidden layer, dropout masks), the gradients and Adam's two moments. Cached decoding
(:class:`~transformer_xl.generation.DecodingCache`) holds the position keys ``W_r R`` of every layer for
``M + 2L + 1`` distances and the projected keys and values of up to ``M + L`` positions.

The estimate is checked against measured peaks (resident set size) in ``tests/training/test_footprint.py``; it is
within a factor of 2 either way there. :func:`check_fits` compares it with :func:`available_bytes` (CPU:
``MemAvailable`` and the cgroup limit; CUDA: ``torch.cuda.mem_get_info``), keeping a 10% margin.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, Optional, Union

import torch
from torch.overrides import TorchFunctionMode

from ..errors import ConfigError
from ..model.attention import AttentionChoice
from ..model.config import TransformerXLConfig
from ..model.transformer import TransformerXL

log = logging.getLogger(__name__)

#: The streamed attention's block size that :func:`plan_attention` switches to.
STREAM_CHUNK = 256
#: Fraction of the available memory an estimate may use.
MARGIN = 0.9

_FP32 = 4


@dataclass
class Footprint:
    """Estimated peak bytes, by part (``total`` is their sum)."""

    parts: Dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return int(sum(self.parts.values()))

    def largest(self) -> str:
        name = max(self.parts, key=self.parts.get)  # the parts are positive but for "already loaded"
        return f"{name} {format_bytes(self.parts[name])}"


def format_bytes(n: float) -> str:
    """``1536 -> '1.5 KiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


# ---------------------------------------------------------------------------------------------- parts
class _SkipRandomInit(TorchFunctionMode):
    """Random initialisers (``normal_``, ``uniform_``) return their tensor untouched. For meta tensors, which hold
    no values: torch runs these on the meta device through its Python reference implementations, whose first call
    imports ``torch._dynamo`` (about a second, paid by every command that plans its memory)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") in ("normal_", "uniform_"):
            tensor = args[0] if args else kwargs["tensor"]
            if tensor.is_meta:
                return tensor
        return func(*args, **kwargs)


@contextlib.contextmanager
def shapes_only() -> Iterator[None]:
    """Modules built inside have their shapes and nothing else: the meta device, no initialisation run."""
    with torch.device("meta"), _SkipRandomInit():
        yield


def parameter_count(config: TransformerXLConfig) -> int:
    """Number of distinct parameters (tied weights once), counted on the meta device: nothing is allocated."""
    with shapes_only():
        model = TransformerXL(config)
    return sum(p.numel() for p in model.parameters())


def _cluster_sizes(config: TransformerXLConfig):
    """Widths of the head (shortlist + one column per tail cluster) and of the largest tail cluster."""
    bounds = [0, *config.cutoffs, config.n_token]
    head = bounds[1] + len(config.cutoffs)
    tails = [hi - lo for lo, hi in zip(bounds[1:-1], bounds[2:])]
    return head, max(tails, default=0)


def _output_layer(config: TransformerXLConfig, n: int, autocast: bool, training: bool) -> int:
    """Logits and log-softmax of ``n`` positions: the head, then (head kept) the largest tail cluster."""
    head, tail = _cluster_sizes(config)
    per = (2 + 8) if autocast else 8  # a bf16 logit, its float32 copy and the float32 log-softmax
    if training:
        per += _FP32  # the gradient of the logits
    return n * (head + tail) * per


def _score_bytes(precision: str, training: bool) -> int:
    """Bytes per ``[B, H, L, K]`` element at the attention's peak (see the module docstring)."""
    per = 12 if precision != "fp32" else 8
    return per + (_FP32 if training else 0)  # the backward pass: the incoming and the softmax gradient


def _attention(config, b: int, l: int, m: int, s: int, chunk: int, precision: str, training: bool) -> int:
    """Working set of one layer's attention (plain, or streamed with blocks of ``chunk`` keys)."""
    k, hd, d = m + l, config.n_head * config.d_head, config.d_model
    r_k = (k + 1) * hd * s
    if chunk > 0 and config.attn_type == 0:
        band = config.n_head * b * l * (2 * chunk + l)  # a block's content and position scores
        return s * (5 * b * l * hd + 2 * b * chunk * hd) + r_k + band * _score_bytes(precision, training)
    cat = b * k * d * s if m > 0 else 0
    scores = config.n_head * b * l * (k + 1) * _score_bytes(precision, training)
    return cat + s * b * (3 * l + 2 * k) * hd + r_k + scores


def _saved_per_layer(config, b: int, l: int, m: int, s: int, chunk: int) -> int:
    """What autograd keeps of one layer until the backward pass reaches it."""
    k, hd, d, f = m + l, config.n_head * config.d_head, config.d_model, config.d_inner
    states = s * b * l * (6 * d + 2 * f + 4 * hd)  # layer norms, residuals, o_net input, FF hidden, q_u, q_v
    masks = b * l * (2 * d + f) if config.dropout > 0 else 0
    if chunk > 0 and config.attn_type == 0:
        return states + masks + b * config.n_head * l * _FP32  # output and row log-sum-exp; inputs by reference
    probs = config.n_head * b * l * k * (_FP32 + (5 if config.dropatt > 0 else 0))
    return states + masks + s * b * k * (d + 2 * hd) + probs  # [mems, h], k, v and the softmax output


def forward_footprint(config: TransformerXLConfig, batch_size: int, tgt_len: int, mem_len: int, *,
                      attn_chunk: int = 0, precision: str = "fp32", training: bool = False,
                      n_params: Optional[int] = None, extra_bytes: int = 0) -> Footprint:
    """Peak bytes of one forward pass (``training``: forward, backward and an Adam step) on segments of
    ``tgt_len`` with ``mem_len`` memory states of a ``batch_size`` batch."""
    b, l, m, n_layer = batch_size, tgt_len, mem_len, config.n_layer
    s = 2 if (precision != "fp32" and training) else _FP32  # residual stream and memory stay float32 in eval
    n_params = parameter_count(config) if n_params is None else n_params
    d, f = config.d_model, config.d_inner
    parts = {"weights": n_params * _FP32}
    if training:
        parts["gradients and Adam moments"] = 3 * n_params * _FP32
    parts["memory states"] = n_layer * b * m * d * _FP32 * (2 if m > l else 1)  # old, and new while built
    parts["layer inputs"] = (n_layer + 1) * b * l * d * _FP32
    attention = _attention(config, b, l, m, s, attn_chunk, precision, training)
    feed_forward = 2 * b * l * f * s
    parts["attention"] = max(attention, feed_forward) + (m + l + 1) * d * _FP32 + l * (m + l)  # + R and the mask
    if training:
        parts["saved for backward"] = n_layer * _saved_per_layer(config, b, l, m, s, attn_chunk)
    parts["output layer"] = _output_layer(config, b * l, precision != "fp32", training)
    if extra_bytes:  # the caller's data, or (negative) weights already loaded
        parts["data" if extra_bytes > 0 else "already loaded"] = int(extra_bytes)
    return Footprint(parts)


def decoding_footprint(config: TransformerXLConfig, batch_size: int, tgt_len: int, mem_len: int, tokens: int,
                       n_params: Optional[int] = None) -> Footprint:
    """Peak bytes of cached decoding (:class:`~transformer_xl.generation.DecodingCache`) of ``tokens``
    positions per row (prompt and new tokens); attn_type other than 0 decodes segment by segment."""
    if config.attn_type != 0:
        return forward_footprint(config, batch_size, tgt_len, mem_len, n_params=n_params)
    b, l, m, n_layer = batch_size, tgt_len, mem_len, config.n_layer
    hd, d = config.n_head * config.d_head, config.d_model
    n_params = parameter_count(config) if n_params is None else n_params
    n_dist = m + 2 * l + 1  # position keys are built for this many distances up front
    keys = min(tokens, m + l)  # a row never keeps more than its memory and its current segment
    parts = {"weights": n_params * _FP32,
             "position keys": (n_layer + 3) * n_dist * max(hd, d) * _FP32,
             "key/value cache": n_layer * 2 * b * 2 * (keys + l) * hd * _FP32,  # buffers grow by doubling
             "attention": config.n_head * b * l * (keys + l) * 8 + b * l * (keys + l),
             "output layer": b * l * config.n_token * 8}
    return Footprint(parts)


# ---------------------------------------------------------------------------------------------- available
def _read_int(path: str) -> Optional[int]:
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _cgroup_room() -> Optional[int]:
    """Bytes left under this process's cgroup memory limit (v2, else v1), None without a limit."""
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        limit, usage = _read_int(limit_file), _read_int(usage_file)
        if limit is not None and usage is not None and limit < (1 << 60):
            return max(0, limit - usage)
    return None


def _mem_available() -> Optional[int]:
    """``MemAvailable`` of /proc/meminfo, else free physical pages from ``sysconf``."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def available_bytes(device: Union[str, torch.device] = "cpu") -> Optional[int]:
    """Memory a new allocation can use on ``device`` now; None when it cannot be told."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type != "cpu":
        return None
    found = [v for v in (_mem_available(), _cgroup_room()) if v is not None]
    return min(found) if found else None


# ---------------------------------------------------------------------------------------------- verdicts
def _refusal(what: str, need: Footprint, avail: int, device, hint: str = "", verb: str = "need") -> str:
    return (f"{what} {verb} about {format_bytes(need.total)} of memory (largest part: {need.largest()}), but "
            f"{format_bytes(avail)} is available on {torch.device(device).type}{hint}")


def _describe(batch_size: int, tgt_len: int, mem_len: int) -> str:
    return f"batch_size {batch_size}, tgt_len {tgt_len} and mem_len {mem_len}"


def check_fits(config: TransformerXLConfig, batch_size: int, tgt_len: int, mem_len: int,
               device: Union[str, torch.device] = "cpu", training: bool = False, *, attn_chunk: int = 0,
               precision: str = "fp32", available: Optional[int] = None, extra_bytes: int = 0) -> Optional[str]:
    """None when the estimate fits in the available memory, else a one-line message saying why not
    (and whether ``attn_chunk`` 256 would make it fit). For a training preflight: ``training=True``.
    ``extra_bytes``: anything else the caller will hold (e.g. the token data)."""
    avail = available_bytes(device) if available is None else available
    if avail is None:
        return None
    n_params = parameter_count(config)
    kwargs = dict(precision=precision, training=training, n_params=n_params, extra_bytes=extra_bytes)
    need = forward_footprint(config, batch_size, tgt_len, mem_len, attn_chunk=attn_chunk, **kwargs)
    if need.total <= MARGIN * avail:
        return None
    hint = ""
    if config.attn_type == 0 and attn_chunk == 0:
        streamed = forward_footprint(config, batch_size, tgt_len, mem_len, attn_chunk=STREAM_CHUNK, **kwargs)
        if streamed.total <= MARGIN * avail:
            hint = f"; with attn_chunk {STREAM_CHUNK} (streamed attention) about {format_bytes(streamed.total)}"
    return _refusal(_describe(batch_size, tgt_len, mem_len), need, avail, device, hint)


def plan_attention(config: TransformerXLConfig, batch_size: int, tgt_len: int, mem_len: int,
                   device: Union[str, torch.device] = "cpu", training: bool = False, *, attn_chunk: int = 0,
                   precision: str = "fp32", available: Optional[int] = None, extra_bytes: int = 0):
    """``(attn_chunk, note)``: the block size to run with and a one-line note when it was switched on.

    Keeps ``attn_chunk`` when the estimate fits; switches to the streamed attention (attn_type 0) when
    only that fits; otherwise raises :class:`~transformer_xl.errors.ConfigError` with the estimate and the
    available memory.
    """
    avail = available_bytes(device) if available is None else available
    if avail is None:
        return attn_chunk, None
    n_params = parameter_count(config)
    kwargs = dict(precision=precision, training=training, n_params=n_params, extra_bytes=extra_bytes)
    need = forward_footprint(config, batch_size, tgt_len, mem_len, attn_chunk=attn_chunk, **kwargs)
    if need.total <= MARGIN * avail:
        return attn_chunk, None
    what = _describe(batch_size, tgt_len, mem_len)
    if config.attn_type == 0 and attn_chunk == 0:
        streamed = forward_footprint(config, batch_size, tgt_len, mem_len, attn_chunk=STREAM_CHUNK, **kwargs)
        if streamed.total <= MARGIN * avail:
            note = (f"note: {what} need about {format_bytes(need.total)} with the plain attention, more than the "
                    f"{format_bytes(avail)} available; using the streamed attention (attn_chunk {STREAM_CHUNK}, "
                    f"same results), about {format_bytes(streamed.total)}")
            return STREAM_CHUNK, note
        need = streamed
    raise ConfigError(_refusal(what, need, avail, device))


def fit_attention(config: TransformerXLConfig, batch_size: int, tgt_len: int, mem_len: int,
                  device: Union[str, torch.device] = "cpu", choice: AttentionChoice = AttentionChoice(),
                  training: bool = False, precision: str = "fp32", extra_bytes: int = 0,
                  quiet: bool = False) -> AttentionChoice:
    """The attention to run with: ``choice`` when the estimate fits; the streamed attention when only it fits
    (one warning line, unless ``quiet``); otherwise a ConfigError with the estimate (:func:`plan_attention`)."""
    chunk, note = plan_attention(config, batch_size, tgt_len, mem_len, device, training, attn_chunk=choice.chunk,
                                 precision=precision, extra_bytes=extra_bytes)
    if chunk == choice.chunk:
        return choice
    if note and not quiet:
        log.warning(note)
    return AttentionChoice("streamed" if choice.backend == "plain" else choice.backend, chunk)


def weight_bytes(model) -> int:
    """Bytes of a loaded model's weights (already resident, so not counted again against the free memory)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def fit_loaded(model, batch_size: int) -> None:
    """Set the attention a loaded model runs ``batch_size`` rows with at its lengths: its own, or the streamed one
    when only that fits (one note); ConfigError when nothing fits."""
    device = next(model.parameters()).device
    model.set_attention(*fit_attention(model.config, batch_size, model.tgt_len, model.mem_len, device,
                                       AttentionChoice(*model.attn_backend), extra_bytes=-weight_bytes(model)))


def check_decoding_fits(config: TransformerXLConfig, batch_size: int, tgt_len: int, mem_len: int, tokens: int,
                        device: Union[str, torch.device] = "cpu", available: Optional[int] = None,
                        extra_bytes: int = 0) -> None:
    """Raise ConfigError when cached decoding of ``tokens`` positions per row does not fit (``extra_bytes``
    is added to the estimate; negative for weights that are already loaded)."""
    avail = available_bytes(device) if available is None else available
    if avail is None:
        return
    need = decoding_footprint(config, batch_size, tgt_len, mem_len, tokens)
    if extra_bytes:
        need.parts["data" if extra_bytes > 0 else "already loaded"] = int(extra_bytes)
    if need.total > MARGIN * avail:
        raise ConfigError(_refusal(f"decoding {tokens} tokens with tgt_len {tgt_len} and mem_len {mem_len}", need,
                                   avail, device, verb="needs"))


__all__ = ["Footprint", "MARGIN", "STREAM_CHUNK", "available_bytes", "check_decoding_fits", "check_fits",
           "decoding_footprint", "fit_attention", "format_bytes", "forward_footprint", "parameter_count",
           "fit_loaded", "plan_attention", "weight_bytes"]
