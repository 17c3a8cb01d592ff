"""What ``txl bench eval-speed`` does: the paper's Table 9 measured here.

For each attention length A, two models of the same depth and width read the same tokens:

* vanilla Transformer (attn_type 2, no memory), sliding-window evaluation: every prediction runs
  a fresh window of A tokens;
* Transformer-XL (attn_type 0), segment evaluation with memory: segments of ``min(A, 128)`` tokens,
  memory A, so every query attends over at least A keys.

Why the ratio is what it is (multiply-accumulates per predicted token, d = d_model, f = d_inner,
h = n_head * d_head, V = vocabulary, n = n_layer, S = XL segment length):

* vanilla: A tokens pass through every layer and attention is over the window:
  ``n * (A * (4 h d + 2 d f) + A^2 h) + d V``;
* Transformer-XL: one new token per prediction, attending over about A + S/2 keys, plus the
  position keys of the segment: ``n * (4 h d + 2 d f + 2 (A + S/2) h + (A + S) h d / S) + d V``.

The dense part of the ratio is about A, so the speed-up grows linearly with the attention length
until the memory-bound parts dominate.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import List, Optional, Sequence

import torch

from ..analysis.figures import check_image_path, pyplot, save_figure
from ..data import load_corpus
from ..devices import resolve_device
from ..errors import ConfigError
from ..evaluation.token_losses import WINDOWS_PER_CALL, segment_losses, sliding_losses
from ..model import TransformerXL, TransformerXLConfig
from ..runtime.footprint import MARGIN, available_bytes, format_bytes, forward_footprint, shapes_only


@dataclass
class SpeedRow:
    attn_len: int
    vanilla_s_per_token: float
    xl_s_per_token: float
    vanilla_tokens: int
    xl_tokens: int
    macs_ratio: float  # operation-count ratio vanilla / XL per predicted token

    @property
    def speedup(self) -> float:
        return self.vanilla_s_per_token / self.xl_s_per_token


def macs_per_token(cfg: TransformerXLConfig, attn_len: int, vanilla: bool, seg_len: int) -> float:
    """Multiply-accumulates to predict one token (see the module docstring)."""
    d, f, h, n, v = cfg.d_model, cfg.d_inner, cfg.n_head * cfg.d_head, cfg.n_layer, cfg.n_token
    if vanilla:
        return n * (attn_len * (4 * h * d + 2 * d * f) + attn_len ** 2 * h) + d * v
    keys = attn_len + seg_len / 2
    return n * (4 * h * d + 2 * d * f + 2 * keys * h + (attn_len + seg_len) * h * d / seg_len) + d * v


def bench_models(n_layer: int, d_model: int, n_head: int, d_inner: int, n_token: int, seed: int = 0,
                 device=None):
    """The vanilla (attn_type 2) and the Transformer-XL model of the benchmark (``device='meta'``: shapes only)."""
    torch.manual_seed(seed)
    common = dict(n_token=n_token, n_layer=n_layer, n_head=n_head, d_model=d_model, d_head=d_model // n_head,
                  d_inner=d_inner, dropout=0.0, dropatt=0.0)
    with shapes_only() if device == "meta" else torch.device(device or "cpu"):
        vanilla = TransformerXL(TransformerXLConfig(attn_type=2, mem_len=0, **common)).eval()
        xl = TransformerXL(TransformerXLConfig(attn_type=0, **common)).eval()
    return vanilla, xl


def _timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def windows_per_call(config: TransformerXLConfig, attn_len: int, device) -> int:
    """Windows of ``attn_len`` tokens the vanilla model runs per forward pass: up to ``WINDOWS_PER_CALL``, halved
    while one pass would need more than half the memory free on ``device`` (its ``[W, H, A, A]`` scores)."""
    avail, w = available_bytes(device), WINDOWS_PER_CALL
    while w > 1 and avail is not None and forward_footprint(config, w, attn_len, 0).total > avail / 2:
        w //= 2
    return w


def measure(vanilla, xl, data, attn_lens: Sequence[int], vanilla_tokens: int, xl_tokens: int,
            batch_size: int = 1, seg_len: int = 128) -> List[SpeedRow]:
    rows = []
    device = next(vanilla.parameters()).device
    for a in attn_lens:
        seg = min(a, seg_len)
        n_van = max(1, vanilla_tokens // batch_size)
        per_call = windows_per_call(vanilla.config, a, device)
        # vanilla: time only full windows of A tokens (the shorter prefixes of a row's start are skipped)
        _, t_van = _timed(lambda: sliding_losses(vanilla, data, batch_size, window=a, max_tokens=a - 1 + n_van,
                                                 first=a - 1, windows_per_call=per_call))
        # Transformer-XL: every token from the row start; the first A (memory still filling) are a bit
        # cheaper, so at least 4 A tokens are timed
        n_xl = max(4 * a, xl_tokens // batch_size)
        _, t_xl = _timed(lambda: segment_losses(xl, data, batch_size, tgt_len=seg, mem_len=a, max_tokens=n_xl))
        ratio = macs_per_token(vanilla.config, a, True, seg) / macs_per_token(xl.config, a, False, seg)
        rows.append(SpeedRow(a, t_van / (n_van * batch_size), t_xl / (n_xl * batch_size), n_van * batch_size,
                             n_xl * batch_size, ratio))
    return rows


def format_table(rows: Sequence[SpeedRow]) -> str:
    lines = ["| attention length | vanilla ms/token | Transformer-XL ms/token | speed-up | op-count ratio |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.attn_len} | {1e3 * r.vanilla_s_per_token:.3f} | {1e3 * r.xl_s_per_token:.4f} "
                     f"| {r.speedup:,.1f}x | {r.macs_ratio:,.1f}x |")
    return "\n".join(lines)


def plot_speed(rows: Sequence[SpeedRow], path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2), dpi=120)
    xs = [r.attn_len for r in rows]
    ax.plot(xs, [r.speedup for r in rows], "o-", label="measured speed-up")
    ax.plot(xs, [r.macs_ratio for r in rows], "s--", label="operation-count ratio")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("attention length")
    ax.set_ylabel("vanilla time / Transformer-XL time")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    save_figure(fig, path, "--plot")


def default_tokens(n_tokens: int) -> torch.Tensor:
    """Real text to time on: the start of the built-in corpus' validation split."""

    corpus = load_corpus("default")
    return torch.as_tensor(corpus.valid[:n_tokens].astype("int64"))


def required_tokens(attn_lens: Sequence[int], vanilla_tokens: int, xl_tokens: int) -> int:
    """Tokens of text :func:`run_eval_speed` reads."""
    return max(4 * max(attn_lens), max(attn_lens) + vanilla_tokens, xl_tokens) + 2


@dataclass
class EvalSpeedSettings:
    """The attention lengths, the predictions timed for each model, the models' shape (byte vocabulary) and the
    plot's path (None: no plot)."""

    attn_lens: Sequence[int] = (128, 256, 512, 1024)
    vanilla_tokens: int = 64
    xl_tokens: int = 4096
    n_layer: int = 4
    d_model: int = 256
    n_head: int = 8
    d_inner: int = 1024
    plot: Optional[str] = "eval_speed.png"
    device: str = "auto"  # auto (CUDA when available), cpu, cuda, cuda:N

    def models(self, device=None):
        return bench_models(self.n_layer, self.d_model, self.n_head, self.d_inner, n_token=256,
                            device=device or resolve_device(self.device))


def check_eval_speed(s: EvalSpeedSettings) -> None:
    """Everything that can be checked before timing: the model shape, the text available, the memory
    the largest attention length needs, and the plot path. ConfigError/DataError naming the flag."""
    if s.d_model % s.n_head:
        raise ConfigError(f"--n-head: {s.n_head} does not divide --d-model {s.d_model}")
    if s.plot:
        check_image_path(s.plot, "--plot")
    avail = available_bytes(resolve_device(s.device))
    if avail is not None:
        a = max(s.attn_lens)
        vanilla, xl = s.models(device="meta")
        peak = max(forward_footprint(vanilla.config, 1, a, 0).total,  # one window per pass at the least
                   forward_footprint(xl.config, 1, min(a, 128), a).total)
        if peak > MARGIN * avail:
            raise ConfigError(f"--attn-lens {a}: needs about {format_bytes(peak)} of memory, but "
                              f"{format_bytes(avail)} is available")
    n_text = load_corpus("default").valid.size
    need = required_tokens(s.attn_lens, s.vanilla_tokens, s.xl_tokens)
    if need > n_text:
        raise ConfigError(f"--attn-lens/--vanilla-tokens/--xl-tokens: need {need:,} tokens of text, the built-in "
                          f"corpus' validation split has {n_text:,}")


def run_eval_speed(s: EvalSpeedSettings) -> List[SpeedRow]:
    """Time both models at every attention length (after :func:`check_eval_speed`), and plot the speed-ups."""
    data = default_tokens(required_tokens(s.attn_lens, s.vanilla_tokens, s.xl_tokens)).numpy()
    vanilla, xl = s.models()
    if next(xl.parameters()).device.type == "cuda":  # CUDA's context, kernels and cuBLAS handles, untimed
        measure(vanilla, xl, data, s.attn_lens[:1], 2, 2)
    rows = measure(vanilla, xl, data, s.attn_lens, s.vanilla_tokens, s.xl_tokens)
    if s.plot:
        plot_speed(rows, s.plot)
    return rows


__all__ = ["EvalSpeedSettings", "SpeedRow", "bench_models", "check_eval_speed", "format_table", "macs_per_token",
           "measure", "plot_speed", "run_eval_speed"]
