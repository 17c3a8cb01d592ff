"""Loss against context length, and the paper's Relative Effective Context Length (RECL, sec. 4.3, app. C).

For a group of models, ``l_i(c, t)`` is model i's loss on token t with context length c. With a
short length ``c`` and a longer ``c'``:

* baseline ``b(c, t) = min_i l_i(c, t)``: the best short-context loss of the group;
* ``T``: the fraction ``r`` of tokens with the largest ``b(c, t)`` (the hard ones);
* ``f_i(c, c') = mean_{t in T} min(b(c, t), l_i(c', t))``: only gains over the baseline count;
* relative gain ``g_i(c, c') = (exp f_i(c, c) - exp f_i(c, c')) / exp f_i(c, c)``;
* RECL of model i: starting from the shortest length, step to the next length while
  ``g_i(c, c') >= 0.01``; the RECL is the first ``c`` where the gain falls below it.

``r = 0.1`` is the paper's main setting; ``r = 1`` ("top-1": every token) is the other extreme.
Context length c means: a vanilla model predicts each token from a sliding window of c tokens; a
Transformer-XL model attends over exactly c keys per query (``same_length``, ``mem_len = c``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np

from ..errors import ConfigError
from .token_losses import segment_losses, sliding_losses

Losses = Mapping[int, np.ndarray]  # context length -> per-token losses [N], same tokens for every length


def context_losses(model, data, lengths: Sequence[int], batch_size: int = 10, max_tokens: Optional[int] = None,
                   tgt_len: Optional[int] = None) -> Dict[int, np.ndarray]:
    """Per-token losses of one model at each context length (flattened ``[B * P]``)."""
    out = {}
    for c in lengths:
        if model.config.attn_type == 0 or model.mem_len > 0:
            seg = min(tgt_len or model.tgt_len, c)
            losses = segment_losses(model, data, batch_size, tgt_len=seg, mem_len=c, max_tokens=max_tokens,
                                    same_length=True)
        else:
            losses = sliding_losses(model, data, batch_size, window=c, max_tokens=max_tokens)
        out[c] = losses.double().numpy().reshape(-1)
    return out


def _hard_tokens(baseline: np.ndarray, r: float) -> np.ndarray:
    """Indices of the ``ceil(r * N)`` tokens with the largest baseline loss."""
    k = max(1, math.ceil(r * baseline.size))
    return np.argsort(-baseline, kind="stable")[:k]


def relative_gain(group: Mapping[str, Losses], name: str, c: int, c_long: int, r: float) -> float:
    """``g_i(c, c')`` of model ``name`` within ``group``."""
    baseline = np.min(np.stack([losses[c] for losses in group.values()]), axis=0)  # b(c, t)
    hard = _hard_tokens(baseline, r)
    f_short = baseline[hard].mean()  # f_i(c, c) = mean of min(b, l_i(c)) = mean of b
    f_long = np.minimum(baseline[hard], group[name][c_long][hard]).mean()
    return float((math.exp(f_short) - math.exp(f_long)) / math.exp(f_short))


@dataclass
class RECLResult:
    model: str
    recl: int
    capped: bool  # the gain never fell below the threshold: RECL is at least this value
    gains: List[float]  # g(c_k, c_{k+1}) along the path taken

    def __str__(self) -> str:
        return f">= {self.recl}" if self.capped else str(self.recl)


def recl(group: Mapping[str, Losses], lengths: Sequence[int], r: float = 0.1,
         threshold: float = 0.01) -> Dict[str, RECLResult]:
    """RECL of every model of the group, stepping through ``lengths`` (ascending)."""
    if len(group) < 2:
        raise ConfigError("RECL compares a group: give two or more models")
    lengths = sorted(lengths)
    for name, losses in group.items():
        missing = [c for c in lengths if c not in losses]
        if missing:
            raise ConfigError(f"model {name}: no losses for context length(s) {missing}")
    results = {}
    for name in group:
        gains, c, capped = [], lengths[0], True
        for c_long in lengths[1:]:
            g = relative_gain(group, name, c, c_long, r)
            gains.append(g)
            if g < threshold:
                capped = False
                break
            c = c_long
        results[name] = RECLResult(name, c, capped and len(lengths) > 1, gains)
    return results
