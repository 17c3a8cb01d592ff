"""Metrics: one JSON object per line in ``RUN_DIR/metrics.jsonl``, mirrored to TensorBoard."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Optional

log = logging.getLogger(__name__)


def metric_name(level: str) -> str:
    """'ppl' for word-level corpora, 'bpc' for character/byte-level ones, as the paper reports."""
    return "ppl" if level in ("word", "bpe") else "bpc"


def metric_value(loss: float, metric: str) -> float:
    """Perplexity ``exp(loss)`` or bits per character ``loss / ln 2`` from a mean NLL in nats."""
    if metric == "bpc":
        return loss / math.log(2)
    return math.exp(min(loss, 700.0))


class MetricsLogger:
    """Append-only JSONL log (flushed every line) plus optional TensorBoard scalars."""

    def __init__(self, run_dir: Path, tensorboard: bool = True, truncate_after_step: Optional[int] = None):
        self.path = Path(run_dir) / "metrics.jsonl"
        if truncate_after_step is not None:
            self._truncate(truncate_after_step)
        self._fh = open(self.path, "a", encoding="utf-8")
        self._tb = self._open_tensorboard(Path(run_dir) / "tb") if tensorboard else None

    def _truncate(self, step: int) -> None:
        """On resume, drop records written after the checkpoint (the killed run's tail)."""
        if not self.path.exists():
            return
        kept = [line for line in self.path.read_text(encoding="utf-8").splitlines()
                if line.strip() and json.loads(line).get("step", 0) <= step]
        self.path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")

    @staticmethod
    def _open_tensorboard(folder: Path):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # tensorboard is an optional extra
            log.info("tensorboard is not installed; metrics go to metrics.jsonl only (pip install 'transformer-xl[tensorboard]')")
            return None
        return SummaryWriter(log_dir=str(folder))

    def log(self, record: dict) -> None:
        self._fh.write(json.dumps(record, sort_keys=True) + "\n")
        self._fh.flush()
        if self._tb is not None:
            split = record.get("split", "train")
            for key, value in record.items():
                if key not in ("step", "split") and isinstance(value, (int, float)) and not isinstance(value, bool):
                    self._tb.add_scalar(f"{split}/{key}", value, record["step"])

    def close(self) -> None:
        self._fh.close()
        if self._tb is not None:
            self._tb.close()


class NullMetrics:
    """What ranks other than 0 log to in a distributed run: nothing."""

    def log(self, record: dict) -> None:
        pass

    def close(self) -> None:
        pass


def read_metrics(run_dir) -> list:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
