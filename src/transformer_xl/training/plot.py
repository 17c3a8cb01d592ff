"""``txl plot``: a run's training and validation loss curves as an image; shared figure helpers.

Output paths are checked before anything is computed (:func:`check_image_path`) and figures are
written to a temporary file in the same directory, then renamed (:func:`save_figure`), so that a
failed write leaves neither a partial image nor a changed old one.
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
from pathlib import Path
from typing import List, Optional

from ..errors import DataError

log = logging.getLogger(__name__)

METRICS_NAME = "metrics.jsonl"


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise DataError("plotting needs matplotlib: pip install 'transformer-xl[plot]'") from None
    return plt


def check_image_path(path, flag: str = "--out") -> Path:
    """``path`` as a Path, after checking that an image can be written there (else DataError naming ``flag``)."""
    p = Path(path)
    plt = _pyplot()
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
    """Write ``fig`` to ``path`` through a temporary file and a rename; DataError naming the path on failure."""
    path = Path(path)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
        os.close(fd)
        fig.savefig(tmp, format=path.suffix.lower().lstrip("."))
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise DataError(f"{flag}: cannot write {path}: {exc.strerror or exc}") from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    return path


def read_loss_records(run_dir) -> List[dict]:
    """The records of ``RUN_DIR/metrics.jsonl``; a corrupt line is a DataError naming the file and line.

    A last line without its newline that does not parse (the run is still writing, or was killed while
    writing) is skipped with a warning.
    """
    run = Path(run_dir)
    if not run.is_dir():
        raise DataError(f"{run}: {'not a directory' if run.exists() else 'no such run directory'}")
    path = run / METRICS_NAME
    if not path.is_file():
        raise DataError(f"{path}: not found; is {run} a run directory?")
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    records = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            if n == len(lines):  # no newline after it: torn
                log.warning("warning: %s: line %d is incomplete (the run was writing it); skipped", path, n)
                continue
            raise DataError(f"{path}: line {n} is not valid JSON") from None
        records.append(_checked_record(record, path, n))
    return records


def _checked_record(record, path: Path, n: int) -> dict:
    if not isinstance(record, dict):
        raise DataError(f"{path}: line {n} is not a JSON object")
    if record.get("split") in ("train", "valid"):
        for key in ("step", "loss"):
            value = record.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise DataError(f"{path}: line {n}: field {key!r} is not a number ({value!r})")
    return record


def plot_run(run_dir, out: Optional[str] = None) -> Path:
    """Draw the train and valid loss curves of a run; returns the image path."""
    records = read_loss_records(run_dir)
    path = check_image_path(out if out else Path(run_dir) / "loss.png", "--out")
    curves = {split: [(r["step"], r["loss"]) for r in records if r.get("split") == split] for split in ("train", "valid")}
    if not any(curves.values()):
        raise DataError(f"{Path(run_dir) / METRICS_NAME}: no train or valid loss records to plot")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for split, style in (("train", "-"), ("valid", "o-")):
        if curves[split]:
            steps, losses = zip(*curves[split])
            ax.plot(steps, [v if math.isfinite(v) else float("nan") for v in losses], style, label=split, markersize=4)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per token)")
    ax.set_title(Path(run_dir).resolve().name)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        return save_figure(fig, path, "--out")
    finally:
        plt.close(fig)
