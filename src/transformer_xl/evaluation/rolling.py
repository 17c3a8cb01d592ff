"""Log-likelihoods of many token rows at once, each read as ``txl score`` reads a document.

A row is a document of token ids. It is streamed through the model in segments of ``tgt_len`` with memory,
fresh at its start, exactly as :func:`~transformer_xl.evaluation.score.score_ids` streams one document: the
same segment boundaries, the same memory, token ``t`` predicted from the tokens before it. Only the tokens from
``first`` on count (the first token has nothing before it and is never predicted).

Rows are batched ``batch_size`` at a time, longest first, one row per batch row, all starting at segment 0. A
row that ends inside a segment is padded on the right; a padded position is never a key of a real token (it
comes after it) and its label is ignored, so the row's numbers are those it gets alone. Once a row has ended
it leaves the batch (its memory rows are dropped), so the rows still in the batch always share one memory
length. This is what lm-eval's ``loglikelihood`` and ``loglikelihood_rolling`` requests need
(:mod:`transformer_xl.lm_eval`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence

import torch
from torch import Tensor

from ..labels import IGNORE_INDEX
from .segments import outputs_with_memory


@dataclass
class RowScore:
    """The scored part of one row: summed log-probability (nats), how many tokens, and whether each of them
    was the model's most likely next token (only computed when asked for; else True)."""

    logprob: float
    tokens: int
    greedy: bool = True


def _batches(order: List[int], size: int) -> List[List[int]]:
    return [order[i:i + size] for i in range(0, len(order), size)]


def _padded(rows: Sequence[Sequence[int]], firsts: Sequence[int], device):
    """``inputs [B, W]`` (right-padded with 0) and ``labels [B, W]`` (-100 where not scored) of rows sorted
    longest first; ``labels[b, t]`` is ``rows[b][t + 1]``, scored when ``t + 1 >= firsts[b]``."""
    width = max(len(r) for r in rows) - 1
    inputs = torch.zeros(len(rows), width, dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
    for b, (row, first) in enumerate(zip(rows, firsts)):
        ids = torch.as_tensor(list(row), dtype=torch.long)
        n = ids.numel() - 1
        inputs[b, :n] = ids[:-1]
        labels[b, :n] = ids[1:]
        labels[b, :max(first, 1) - 1] = IGNORE_INDEX
    return inputs.to(device), labels.to(device)


def _not_greedy(model, hidden: Tensor, labels: Tensor) -> Tensor:
    """``[B]`` bool: some scored token of the row is not the argmax of its next-token distribution.
    ``hidden [B, L, d]``, ``labels [B, L]``; full-vocabulary log-probs only at the scored positions."""
    scored = labels != IGNORE_INDEX
    miss = torch.zeros(labels.size(0), dtype=torch.bool, device=labels.device)
    if scored.any():
        best = model.crit.log_probs(hidden[scored]).argmax(-1)  # [N]
        miss[scored.nonzero()[:, 0][best != labels[scored]]] = True
    return miss


def _shrinking_segments(inputs: Tensor, labels: Tensor, lengths: Sequence[int], tgt_len: int):
    """``(inputs, labels)`` of each segment, with only the rows that still have tokens in it (a prefix: the
    longest rows come first)."""
    for s in range(0, inputs.size(1), tgt_len):
        k = sum(1 for n in lengths if n > s)
        yield inputs[:k, s:s + tgt_len], labels[:k, s:s + tgt_len]


@torch.no_grad()
def _score_batch(model, rows: Sequence[Sequence[int]], firsts: Sequence[int], greedy: bool) -> List[RowScore]:
    """Rows sorted longest first (each at least 2 tokens), streamed together (module docstring)."""
    inputs, labels = _padded(rows, firsts, next(model.parameters()).device)
    total = torch.zeros(len(rows), dtype=torch.float64, device=inputs.device)
    missed = torch.zeros(len(rows), dtype=torch.bool, device=inputs.device)
    segments = _shrinking_segments(inputs, labels, [len(r) - 1 for r in rows], model.tgt_len)
    for s, out in zip(range(0, inputs.size(1), model.tgt_len), outputs_with_memory(model, segments)):
        k = out.losses.size(0)
        total[:k] -= out.losses.double().sum(1)
        if greedy:
            missed[:k] |= _not_greedy(model, out.hidden_states, labels[:k, s:s + model.tgt_len])
    counts = [max(0, len(r) - max(f, 1)) for r, f in zip(rows, firsts)]
    return [RowScore(float(t), c, not bool(m)) for t, c, m in zip(total.tolist(), counts, missed.tolist())]


def score_rows(model, rows: Sequence[Sequence[int]], firsts: Sequence[int], batch_size: int = 1,
               greedy: bool = False, on_batch: Optional[Callable[[int], object]] = None) -> List[RowScore]:
    """The log-likelihood of ``rows[i][firsts[i]:]`` given what comes before it, for every row (module docstring).

    ``rows``: token-id lists of any lengths; ``firsts``: the index of each row's first scored token (values
    below 1 count as 1); ``batch_size``: rows per forward pass (the results do not depend on it, within float
    rounding); ``greedy``: also tell whether every scored token was the most likely one (costs a
    full-vocabulary softmax at the scored positions); ``on_batch(n)``: called after each batch of ``n`` rows
    (progress). Results come back in the order of ``rows``.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size: must be at least 1, got {batch_size}")
    results: List[RowScore] = [RowScore(0.0, 0) for _ in rows]
    long_enough = [i for i, r in enumerate(rows) if len(r) >= 2]
    order = sorted(long_enough, key=lambda i: -len(rows[i]))
    with model.inference():
        for chunk in _batches(order, batch_size):
            scores = _score_batch(model, [rows[i] for i in chunk], [firsts[i] for i in chunk], greedy)
            for i, score in zip(chunk, scores):
                results[i] = score
            if on_batch is not None:
                on_batch(len(chunk))
    return results


__all__ = ["RowScore", "score_rows"]
