"""``txl plot``: a run's training and validation loss curves as an image (figure helpers:
:mod:`transformer_xl.evaluation.figures`)."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import List, Optional

from ..errors import DataError
from .figures import check_image_path, pyplot, save_figure

log = logging.getLogger(__name__)

METRICS_NAME = "metrics.jsonl"


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
    curves = {split: [(r["step"], r["loss"]) for r in records if r.get("split") == split]
              for split in ("train", "valid")}
    if not any(curves.values()):
        if any("mean_return" in r for r in records):
            raise DataError(f"{run_dir}: a txl rl run; its curve is {Path(run_dir) / 'returns.png'}, and "
                            f"txl rl-eval {run_dir} plays its agent")
        raise DataError(f"{Path(run_dir) / METRICS_NAME}: no train or valid loss records to plot")
    plt = pyplot()
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
    return save_figure(fig, path, "--out")
