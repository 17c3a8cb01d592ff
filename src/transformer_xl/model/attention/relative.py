"""The relative attention score of the paper (section 3.3), computed at linear cost: the reference maths.

For query position ``i`` and key position ``j``::

    A_ij = (q_i + u) . k_j  +  (q_i + v) . W_r R_{i-j}

is computed with the shift trick: ``(q + v) . W_r R`` is evaluated once against a table of
``K + 1`` distances ``[K, K-1, ..., 0]`` (cost ``L * (K+1) * d``), then re-indexed so that column
``j`` of row ``i`` holds distance ``M + i - j``. The re-indexing is a view (no copy, no gather).
Layout: queries ``[B, H, L, D]``, keys ``[B, H, K, D]`` with ``K = M + L`` (memory first).
"""

from __future__ import annotations

import torch
from torch import Tensor


def distances(start: int, clamp_len: int, device) -> Tensor:
    """Distances ``start, start-1, ..., 0`` (float), clamped to ``clamp_len`` when it is positive."""
    pos = (start - torch.arange(start + 1, device=device)).float()  # integer steps: exact, and exportable
    if clamp_len > 0:
        pos = pos.clamp(max=clamp_len)
    return pos


def sinusoid_table(pos_seq: Tensor, d_model: int) -> Tensor:
    """Sinusoid encodings ``R`` of the given positions: ``[P] -> [P, d_model]``.

    Same layout as the paper's code: all sines first, then all cosines.
    """
    inv_freq = 1.0 / (10000 ** (torch.arange(0.0, d_model, 2.0, device=pos_seq.device) / d_model))
    sinusoid = torch.outer(pos_seq.float(), inv_freq)  # [P, d_model/2]
    return torch.cat([sinusoid.sin(), sinusoid.cos()], dim=-1)  # [P, d_model]


def rel_shift(x: Tensor) -> Tensor:
    """Re-index position scores from distance columns to key columns.

    ``x[..., i, c]`` holds the score of query ``i`` against distance ``K - c`` (``K + 1`` columns,
    distances ``K .. 0``). The result ``[..., L, K]`` holds at ``[i, j]`` the score for distance
    ``M + i - j`` where ``M = K - L``, exact for every ``j <= M + i`` (all keys a causal query may
    see). Entries with ``j > M + i`` are unspecified and must be masked by the caller.

    Row ``i`` of the result starts ``L - i`` elements into row ``i`` of ``x``; read as one flat
    buffer of length ``L * (K + 1)``, the result is the contiguous run ``[L, L + L*K)``, so this
    is a slice and a view, with no copy.
    """
    *batch, qlen, kplus1 = x.shape
    klen = kplus1 - 1
    flat = x.reshape(*batch, qlen * kplus1)  # a view when x is contiguous  # [..., L*(K+1)]
    return flat[..., qlen: qlen + qlen * klen].view(*batch, qlen, klen)  # [..., L, K]


def rel_attn_score(q: Tensor, k: Tensor, r_k: Tensor, r_w_bias: Tensor, r_r_bias: Tensor,
                   scale: float = 1.0) -> Tensor:
    """Relative attention scores ``scale * ((q_i + u) . k_j + (q_i + v) . r_{i-j})``.

    Args:
        q: queries ``[B, H, L, D]``.
        k: content keys ``[B, H, K, D]``, memory first.
        r_k: position keys ``W_r R`` for distances ``K, K-1, ..., 0``: ``[H, K+1, D]``.
        r_w_bias: ``u``, ``[H, D]``.  r_r_bias: ``v``, ``[H, D]``.
        scale: applied to the ``[B, H, L, D]`` queries rather than to the ``[B, H, L, K]`` scores.
    Returns:
        A new ``[B, H, L, K]`` tensor (callers may modify it in place); entries above the causal
        diagonal (``j > M + i``) are unspecified.
    """
    q_u = (q + r_w_bias[:, None]) * scale  # [B, H, L, D]
    q_v = (q + r_r_bias[:, None]) * scale  # [B, H, L, D]
    # the position term as one product per head over every query of the batch, rather than one per row against
    # the same position keys (which broadcasting would copy B times, and sum back over B in the backward pass)
    bsz, n_head, qlen = q_v.shape[:3]
    pos = torch.matmul(q_v.transpose(0, 1).reshape(n_head, bsz * qlen, -1), r_k.transpose(-1, -2))  # [H, B*L, K+1]
    bd = rel_shift(pos.view(n_head, bsz, qlen, -1)).transpose(0, 1)  # [B, H, L, K], a view of [H, B, L, K+1]
    # add_ into the matmul's own result: no further [B, H, L, K] tensor, and (unlike baddbmm's 3-D output
    # seen through a view) later in-place masking needs no copy in the backward pass.
    return torch.matmul(q_u, k.transpose(-1, -2)).add_(bd)  # [B, H, L, K]
