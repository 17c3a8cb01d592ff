"""``txl plot``: a run's training and validation loss curves as a PNG."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..errors import DataError
from .metrics import read_metrics


def plot_run(run_dir, out: Optional[str] = None) -> Path:
    records = read_metrics(run_dir)
    if not records:
        raise DataError(f"{run_dir}: no metrics.jsonl with records to plot")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise DataError("txl plot needs matplotlib: pip install 'transformer-xl[plot]'") from None
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for split, style in (("train", "-"), ("valid", "o-")):
        points = [(r["step"], r["loss"]) for r in records if r.get("split") == split]
        if points:
            steps, losses = zip(*points)
            ax.plot(steps, losses, style, label=split, markersize=4)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per token)")
    ax.set_title(Path(run_dir).resolve().name)
    ax.grid(alpha=0.3)
    ax.legend()
    path = Path(out) if out else Path(run_dir) / "loss.png"
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
