"""The paper's metrics from a mean negative log-likelihood: perplexity for word-level corpora, bits per
character for character- and byte-level ones."""

from __future__ import annotations

import math


def metric_name(level: str) -> str:
    """'ppl' for word-level corpora, 'bpc' for character/byte-level ones, as the paper reports."""
    return "ppl" if level in ("word", "bpe") else "bpc"


def metric_value(loss: float, metric: str) -> float:
    """Perplexity ``exp(loss)`` or bits per character ``loss / ln 2`` from a mean NLL in nats."""
    if metric == "bpc":
        return loss / math.log(2)
    return math.exp(min(loss, 700.0))
