"""Figure helpers shared by every plot (`txl plot`, `txl context --plot`, `txl bench eval-speed --plot`), and the
curves of loss against context length (:func:`plot_context`).

Output paths are checked before anything is computed (:func:`check_image_path`) and figures are
written to a temporary file in the same directory, then renamed (:func:`save_figure`), so that a
failed write leaves neither a partial image nor a changed old one.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Mapping

from ..errors import DataError
from ..files import atomic_write


def pyplot():
    """matplotlib's pyplot on the Agg back-end (matplotlib is an optional extra, imported when a plot is made).
    matplotlib's one-time "building the font cache" warning, which a first plot at the end of a run printed amid
    the run's own lines, is left out."""
    fonts = logging.getLogger("matplotlib.font_manager")
    if _font_cache_notice not in fonts.filters:
        fonts.addFilter(_font_cache_notice)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise DataError("plotting needs matplotlib: pip install 'transformer-xl[plot]'") from None
    return plt


def _font_cache_notice(record: logging.LogRecord) -> bool:
    """False (leave out) for matplotlib's notice that it is building its font cache."""
    return not str(record.msg).startswith("Matplotlib is building the font cache")


def check_image_path(path, flag: str = "--out") -> Path:
    """``path`` as a Path, after checking that an image can be written there (else DataError naming ``flag``)."""
    p = Path(path)
    plt = pyplot()
    supported = plt.figure().canvas.get_supported_filetypes()
    plt.close("all")
    suffix = p.suffix.lower().lstrip(".")
    if suffix not in supported:
        raise DataError(f"{flag}: {p}: unsupported image type {p.suffix or '(no suffix)'}; "
                        f"use .png, .pdf or .svg")
    if p.is_dir():
        raise DataError(f"{flag}: {p} is a directory")
    parent = p.parent
    if not parent.exists():
        raise DataError(f"{flag}: {p}: directory {parent} does not exist")
    if not parent.is_dir():
        raise DataError(f"{flag}: {p}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise DataError(f"{flag}: {p}: permission denied")
    return p


def save_figure(fig, path, flag: str = "--out") -> Path:
    """Lay ``fig`` out, write it to ``path`` through a temporary file and a rename (DataError naming the path on
    failure), and close it."""
    path = Path(path)
    fig.tight_layout()
    try:
        atomic_write(path, lambda tmp: fig.savefig(tmp, format=path.suffix.lower().lstrip(".")), suffix=path.suffix)
    except OSError as exc:
        raise DataError(f"{flag}: cannot write {path}: {exc.strerror or exc}") from None
    finally:
        pyplot().close(fig)
    return path


def plot_context(curves: Mapping[str, Mapping[int, float]], path, metric: str = "ppl") -> Path:
    """Perplexity, bits per character or bits per byte (``curves``: model -> context length -> value in
    ``metric``) against context length, one line per model."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for name, curve in curves.items():
        xs = sorted(curve)
        ax.plot(xs, [curve[c] for c in xs], "o-", label=name, markersize=4)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel({"ppl": "perplexity", "bpc": "bits per character"}.get(metric, "bits per byte"))
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, path, "--plot")
