"""The paper's metrics from a mean negative log-likelihood: perplexity for word-level corpora, bits per
character for character-level ones and bits per byte for byte-level ones; one name per unit everywhere
(:func:`metric_label` in the lines the commands print, the metric's name in JSON and metrics.jsonl)."""

from __future__ import annotations

import math

from ..data import metric_name  # the one rule of ppl or bpc, where the levels live

#: How each metric is written in the lines the commands print.
LABELS = {"ppl": "ppl", "bpc": "bpc", "bits_per_byte": "bits/byte"}


def metric_value(loss: float, metric: str) -> float:
    """Perplexity ``exp(loss)``, or bits (per character, per byte) ``loss / ln 2``, from a mean NLL in nats."""
    if metric in ("bpc", "bits_per_byte"):
        return loss / math.log(2)
    return math.exp(min(loss, 700.0))


def metric_label(metric: str) -> str:
    """``ppl``, ``bpc`` or ``bits/byte``: the metric as the commands print it."""
    return LABELS.get(metric, metric)


#: What each level's bits are per: the figures of :func:`named_figures` say it in their names.
UNITS = {"word": "token", "bpe": "token", "char": "char", "byte": "byte"}


def named_figures(loss: float, level: str) -> dict:
    """The figures of a mean NLL (nats per token), each named for what it is: perplexity per token and bits per
    token for word and BPE tokens, bits per character (bpc) for characters, bits per byte for bytes."""
    bits = loss / math.log(2)
    if metric_name(level) == "ppl":
        return {"ppl": metric_value(loss, "ppl"), "bits_per_token": bits}
    if level == "char":
        return {"bpc": bits}
    return {"bits_per_byte": bits}


def describe_figures(figures: dict) -> str:
    """``ppl 61.70 | 5.9471 bits/token`` and the like, for one output line."""
    labels = {"ppl": "ppl {:.2f}", "bits_per_token": "{:.4f} bits/token", "bpc": "{:.4f} bits/char (bpc)",
              "bits_per_byte": "{:.4f} bits/byte"}
    return " | ".join(labels[k].format(v) for k, v in figures.items())
