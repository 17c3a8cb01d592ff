"""Fused Transformer-XL relative attention in Triton (forward and backward, flash-attention style).

What it computes, per batch ``b`` and head ``h``, for query ``i in [0, L)`` and key ``j in [0, K)``
with ``K = M + L`` keys, memory first::

    s[i, j] = scale * ((q_i + u) . k_j  +  (q_i + v) . r_k[K - (M + i - j)])    # [B, H, L, K]
    p[i, :] = softmax of s[i, :] over the keys that query i may see
    out_i   = sum_j p[i, j] v_j                                                # [B, H, L, D]

the same numbers as :func:`~.relative.rel_attn_score` followed by the masked
softmax of ``AttentionBase.attend`` (without attention dropout). The visible keys are those of the rule in
:mod:`.visibility`:

* causal with memory: ``j <= M + i``;
* ``window > 0`` (the paper code's ``same_length`` with ``mem_len = window``): also ``j > M + i - window``,
  i.e. only the distances ``0 .. window-1``;
* ``episode [B, K]`` (int32 episode number of each key, :func:`~..attention.visibility.episode_ids`): only keys of
  the query's own episode (the number of key ``M + i``);
* ``key_hidden [B, K]`` (True = hidden from every query), except that a query always sees its own key
  ``j = M + i``, so no row is empty.

Shapes::

    q           [B, H, L, D]     queries of the current segment
    k, v        [B, H, K, D]     keys and values, memory first (K = M + L, M inferred as K - L)
    r_k         [H, K + 1, D]    position keys W_r R; row c holds distance K - c (rows K .. 0)
    r_w_bias    [H, D]           u (content bias)
    r_r_bias    [H, D]           v (position bias)
    key_hidden  [B, K] bool      optional
    episode     [B, K] int32     optional
    out         [B, H, L, D]
    lse         [B, H, L] fp32   log-sum-exp of each row, saved for the backward pass

No ``[B, H, L, K]`` tensor is ever written to memory: each program owns ``BLOCK`` queries and walks
over ``BLOCK``-wide key blocks with an online softmax, skipping blocks that the causal mask (and the
window) hide entirely.

The relative shift inside a block. For queries ``i0 + a`` and keys ``j0 + b`` (``a, b in [0, BLOCK)``)
the distance row is ``c = L + j - i = c0 + (b - a + BLOCK - 1)`` with ``c0 = L + j0 - i0 - (BLOCK - 1)``,
so the whole ``[BLOCK, BLOCK]`` block reads one band of ``2 * BLOCK - 1`` consecutive rows of ``r_k``.
The kernel takes the band as two halves, ``lo = rows c0 .. c0+BLOCK-1`` and ``hi = the next BLOCK``,
forms ``(q + v) . r_k^T`` against each (``[BLOCK, BLOCK]`` matmuls on the tensor cores), and picks
for entry ``(a, b)`` column ``t = b - a + BLOCK - 1`` of ``lo`` (``t < BLOCK``) or column ``t - BLOCK``
of ``hi`` with ``tl.gather`` along the columns: the shift of ``rel_shift`` done in registers. Moving
to the next key block moves the band by exactly ``BLOCK`` rows, so ``hi`` becomes the next ``lo``:
one new ``[BLOCK, BLOCK]`` position matmul per key block, as many FLOPs as the content term.

The backward pass recomputes the scores block by block from ``lse``. The gradient of a position
score ``ds[a, b]`` flows to band column ``t = b - a + BLOCK - 1``; the inverse gathers build the
``[BLOCK, BLOCK]`` halves ``ds_lo`` / ``ds_hi`` of the band gradient, then ``d(q + v) += ds_band @ r_k_band``
and ``d r_k[band] += ds_band^T @ (q + v)``. Again ``ds_hi`` of one key block and ``ds_lo`` of the
next one cover the same rows, so they are added before the matmuls. Two kernels:

* ``_bwd_dkdv_kernel``: one program per key block, looping over the query blocks that see it: ``dk``, ``dv``.
* ``_bwd_dq_kernel``: one program per query block, looping over its visible key blocks: ``d(q + u)``,
  ``d(q + v)`` (``[B, H, L, D]`` fp32) and ``d r_k`` (``[H, K+1, D]`` fp32, by atomic adds: a row of
  ``r_k`` gets contributions from every batch element and query block, so its summation order, and
  the last bits of ``d r_k``, vary from run to run). ``dq``, ``d r_w_bias`` and ``d r_r_bias`` are
  sums of the first two.

Inputs may be float32, bfloat16 or float16 (``q``, ``k``, ``v`` and ``r_k`` of one dtype); products
are accumulated in float32, the softmax is float32. Float32 matmuls use full IEEE precision unless
TF32 is allowed (``torch.set_float32_matmul_precision("high")`` or ``torch.backends.cuda.matmul.allow_tf32``).

Triton is imported on import of this module, and only if it is installed: ``import transformer_xl``
never needs it. :func:`is_available` says whether :func:`rel_attention` can run on given tensors.
"""

from __future__ import annotations

import os
from typing import Optional

import torch
from torch import Tensor

try:  # optional dependency
    import triton
    import triton.language as tl
except Exception:  # ImportError, or a broken install
    triton = None
    tl = None

__all__ = ["is_available", "rel_attention"]

_HAS_GATHER = tl is not None and hasattr(tl, "gather")


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def is_available(*tensors: Tensor) -> bool:
    """True when Triton (with ``tl.gather``, Triton >= 3.2) can run the kernels on ``tensors``.

    That is: on CUDA tensors, or on any device when ``TRITON_INTERPRET=1`` (Triton's CPU interpreter,
    slow, for tests). With no tensors, whether a CUDA device or the interpreter is there.
    """
    if triton is None or not _HAS_GATHER:
        return False
    if _interpreting():
        return True
    if not tensors:
        return torch.cuda.is_available()
    return all(t.is_cuda for t in tensors)


def pays_off(q: Tensor) -> bool:
    """Whether the kernel is the fast choice for inputs of ``q``'s dtype: bfloat16 and float16, or float32 with
    TF32 allowed. With IEEE float32 its dot products ran 2x (M = 128) to 14x (M = 8192) slower than the plain
    path's cuBLAS on an H100 (``benchmarks/gpu_attention.py --dtype float32``); the model then uses the other
    paths. Under Triton's interpreter (tests) it always runs."""
    return q.dtype != torch.float32 or _interpreting() or torch.get_float32_matmul_precision() != "highest"


if triton is not None and _HAS_GATHER:

    @triton.jit
    def _load_rows(base, row0, n_rows, stride_row, offs_r, offs_d, head_dim):
        """Rows ``row0 .. row0+BLOCK-1`` of a ``[n_rows, D]`` matrix, zero outside: ``[BLOCK, BLOCK_D]``."""
        rows = row0 + offs_r
        ptrs = base + rows[:, None].to(tl.int64) * stride_row + offs_d[None, :]
        mask = (rows[:, None] >= 0) & (rows[:, None] < n_rows) & (offs_d[None, :] < head_dim)
        return tl.load(ptrs, mask=mask, other=0.0)

    @triton.jit
    def _visible(offs_m, offs_n, kh_row, ep_row, qlen, klen, mlen, window,
                 HAS_WINDOW: tl.constexpr, HAS_KH: tl.constexpr, HAS_EP: tl.constexpr):
        """``[BLOCK, BLOCK]`` bool: query ``offs_m`` may attend key ``offs_n`` (the rule of :mod:`.visibility`)."""
        i = offs_m[:, None]
        j = offs_n[None, :]
        vis = (j <= mlen + i) & (j < klen) & (i < qlen)
        if HAS_WINDOW:
            vis = vis & (j > mlen + i - window)
        if HAS_EP:
            ep_k = tl.load(ep_row + offs_n, mask=offs_n < klen, other=-1)  # [BLOCK]
            ep_q = tl.load(ep_row + mlen + offs_m, mask=offs_m < qlen, other=-2)  # [BLOCK]
            vis = vis & (ep_k[None, :] == ep_q[:, None])
        if HAS_KH:
            shown = tl.load(kh_row + offs_n, mask=offs_n < klen, other=0) == 0  # [BLOCK]
            vis = vis & (shown[None, :] | (j == mlen + i))
        return vis

    @triton.jit
    def _band_index(offs_r, BLOCK: tl.constexpr):
        """Band column of entry (a, b) of a ``[BLOCK, BLOCK]`` block, and where to find it (lo or hi half)."""
        t = offs_r[None, :] - offs_r[:, None] + (BLOCK - 1)  # [BLOCK, BLOCK] in [0, 2*BLOCK-2]
        return t < BLOCK, tl.minimum(t, BLOCK - 1), tl.maximum(t - BLOCK, 0)

    @triton.jit
    def _load_biases(U, VB, h, s_uh, s_vbh, offs_d, dmask):
        """This head's ``u`` and ``v``, fp32 ``[BLOCK_D]`` each."""
        u = tl.load(U + h * s_uh + offs_d, mask=dmask, other=0.0).to(tl.float32)
        vb = tl.load(VB + h * s_vbh + offs_d, mask=dmask, other=0.0).to(tl.float32)
        return u, vb

    @triton.jit
    def _biased_queries(q, u, vb, scale, dtype: tl.constexpr):
        """``(q + u) * scale`` and ``(q + v) * scale`` in the input dtype: ``[BLOCK, BLOCK_D]`` each."""
        return ((q + u[None, :]) * scale).to(dtype), ((q + vb[None, :]) * scale).to(dtype)

    @triton.jit
    def _position_scores(p_lo, p_hi, from_lo, idx_lo, idx_hi):
        """Shift the band scores ``[BLOCK, 2*BLOCK]`` (two halves) to key columns: ``[BLOCK, BLOCK]``."""
        return tl.where(from_lo, tl.gather(p_lo, idx_lo, 1), tl.gather(p_hi, idx_hi, 1))

    @triton.jit
    def _fwd_kernel(Q, Kk, V, RK, U, VB, KH, EP, O, LSE,
                    s_qb, s_qh, s_ql, s_kb, s_kh, s_kl, s_vb, s_vh, s_vl,
                    s_rh, s_rl, s_uh, s_vbh, s_khb, s_epb, s_ob, s_oh, s_ol,
                    n_head, qlen, klen, head_dim, window, scale,
                    HAS_WINDOW: tl.constexpr, HAS_KH: tl.constexpr, HAS_EP: tl.constexpr,
                    BLOCK: tl.constexpr, BLOCK_D: tl.constexpr, PREC: tl.constexpr):
        pid_m = tl.program_id(0)
        pid_bh = tl.program_id(1)
        b = (pid_bh // n_head).to(tl.int64)
        h = (pid_bh % n_head).to(tl.int64)
        mlen = klen - qlen
        i0 = pid_m * BLOCK
        offs_r = tl.arange(0, BLOCK)
        offs_d = tl.arange(0, BLOCK_D)
        offs_m = i0 + offs_r
        dmask = offs_d < head_dim
        dtype = Q.dtype.element_ty

        q = _load_rows(Q + b * s_qb + h * s_qh, i0, qlen, s_ql, offs_r, offs_d, head_dim).to(tl.float32)
        u, vb = _load_biases(U, VB, h, s_uh, s_vbh, offs_d, dmask)
        q_u, q_v = _biased_queries(q, u, vb, scale, dtype)  # [BLOCK, BLOCK_D] each

        k_base = Kk + b * s_kb + h * s_kh
        v_base = V + b * s_vb + h * s_vh
        rk_base = RK + h * s_rh
        kh_row = KH + b * s_khb
        ep_row = EP + b * s_epb

        from_lo, idx_lo, idx_hi = _band_index(offs_r, BLOCK)

        # key blocks that can hold a visible key for these rows
        j_end = tl.minimum(mlen + i0 + BLOCK, klen)
        j_start = 0
        if HAS_WINDOW:
            j_start = (tl.maximum(mlen + i0 - window + 1, 0) // BLOCK) * BLOCK

        c0 = qlen + j_start - i0 - (BLOCK - 1)
        rk_lo = _load_rows(rk_base, c0, klen + 1, s_rl, offs_r, offs_d, head_dim)
        p_lo = tl.dot(q_v, tl.trans(rk_lo), input_precision=PREC)  # [BLOCK, BLOCK] band rows c0..

        m_i = tl.full([BLOCK], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK], tl.float32)
        acc = tl.zeros([BLOCK, BLOCK_D], tl.float32)
        for j0 in range(j_start, j_end, BLOCK):
            c0 = qlen + j0 - i0 - (BLOCK - 1)
            rk_hi = _load_rows(rk_base, c0 + BLOCK, klen + 1, s_rl, offs_r, offs_d, head_dim)
            p_hi = tl.dot(q_v, tl.trans(rk_hi), input_precision=PREC)
            k = _load_rows(k_base, j0, klen, s_kl, offs_r, offs_d, head_dim)  # [BLOCK, BLOCK_D]
            s = tl.dot(q_u, tl.trans(k), input_precision=PREC)
            s += _position_scores(p_lo, p_hi, from_lo, idx_lo, idx_hi)  # [BLOCK, BLOCK]
            vis = _visible(offs_m, j0 + offs_r, kh_row, ep_row, qlen, klen, mlen, window, HAS_WINDOW, HAS_KH, HAS_EP)
            s = tl.where(vis, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing visible yet
            alpha = tl.exp(m_i - m_safe)
            p = tl.exp(s - m_safe[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            v = _load_rows(v_base, j0, klen, s_vl, offs_r, offs_d, head_dim)
            acc = acc * alpha[:, None] + tl.dot(p.to(dtype), v, input_precision=PREC)
            m_i = m_new
            p_lo = p_hi

        l_safe = tl.where(l_i > 0.0, l_i, 1.0)  # only padding rows (i >= L) have l_i == 0
        out = acc / l_safe[:, None]
        row_ok = offs_m < qlen
        o_ptrs = O + b * s_ob + h * s_oh + offs_m[:, None].to(tl.int64) * s_ol + offs_d[None, :]
        tl.store(o_ptrs, out.to(dtype), mask=row_ok[:, None] & dmask[None, :])
        lse = m_i + tl.log(l_safe)
        tl.store(LSE + pid_bh.to(tl.int64) * qlen + offs_m, lse, mask=row_ok)

    @triton.jit
    def _bwd_dkdv_kernel(Q, Kk, V, RK, U, VB, KH, EP, DO, LSE, DELTA, DK, DV,
                         s_qb, s_qh, s_ql, s_kb, s_kh, s_kl, s_vb, s_vh, s_vl,
                         s_rh, s_rl, s_uh, s_vbh, s_khb, s_epb, s_db, s_dh, s_dl,
                         s_dkb, s_dkh, s_dkl, s_dvb, s_dvh, s_dvl,
                         n_head, qlen, klen, head_dim, window, scale,
                         HAS_WINDOW: tl.constexpr, HAS_KH: tl.constexpr, HAS_EP: tl.constexpr,
                         BLOCK: tl.constexpr, BLOCK_D: tl.constexpr, PREC: tl.constexpr):
        pid_n = tl.program_id(0)
        pid_bh = tl.program_id(1)
        b = (pid_bh // n_head).to(tl.int64)
        h = (pid_bh % n_head).to(tl.int64)
        mlen = klen - qlen
        j0 = pid_n * BLOCK
        offs_r = tl.arange(0, BLOCK)
        offs_d = tl.arange(0, BLOCK_D)
        offs_n = j0 + offs_r
        dmask = offs_d < head_dim
        dtype = Q.dtype.element_ty

        k = _load_rows(Kk + b * s_kb + h * s_kh, j0, klen, s_kl, offs_r, offs_d, head_dim)  # [BLOCK, BLOCK_D]
        v = _load_rows(V + b * s_vb + h * s_vh, j0, klen, s_vl, offs_r, offs_d, head_dim)
        u, vb = _load_biases(U, VB, h, s_uh, s_vbh, offs_d, dmask)
        q_base = Q + b * s_qb + h * s_qh
        do_base = DO + b * s_db + h * s_dh
        rk_base = RK + h * s_rh
        kh_row = KH + b * s_khb
        ep_row = EP + b * s_epb
        stat_base = pid_bh.to(tl.int64) * qlen

        from_lo, idx_lo, idx_hi = _band_index(offs_r, BLOCK)

        # query blocks holding a row that may see one of these keys
        i_start = (tl.maximum(j0 - mlen, 0) // BLOCK) * BLOCK
        i_end = qlen
        if HAS_WINDOW:
            i_end = tl.minimum(qlen, j0 + BLOCK - 1 - mlen + window)

        acc_k = tl.zeros([BLOCK, BLOCK_D], tl.float32)
        acc_v = tl.zeros([BLOCK, BLOCK_D], tl.float32)
        for i0 in range(i_start, i_end, BLOCK):
            offs_m = i0 + offs_r
            row_ok = offs_m < qlen
            q = _load_rows(q_base, i0, qlen, s_ql, offs_r, offs_d, head_dim).to(tl.float32)
            q_u, q_v = _biased_queries(q, u, vb, scale, dtype)
            do = _load_rows(do_base, i0, qlen, s_dl, offs_r, offs_d, head_dim).to(dtype)
            lse = tl.load(LSE + stat_base + offs_m, mask=row_ok, other=0.0)
            delta = tl.load(DELTA + stat_base + offs_m, mask=row_ok, other=0.0)

            c0 = qlen + j0 - i0 - (BLOCK - 1)
            rk_lo = _load_rows(rk_base, c0, klen + 1, s_rl, offs_r, offs_d, head_dim)
            rk_hi = _load_rows(rk_base, c0 + BLOCK, klen + 1, s_rl, offs_r, offs_d, head_dim)
            p_lo = tl.dot(q_v, tl.trans(rk_lo), input_precision=PREC)
            p_hi = tl.dot(q_v, tl.trans(rk_hi), input_precision=PREC)
            s = tl.dot(q_u, tl.trans(k), input_precision=PREC)
            s += _position_scores(p_lo, p_hi, from_lo, idx_lo, idx_hi)
            vis = _visible(offs_m, offs_n, kh_row, ep_row, qlen, klen, mlen, window, HAS_WINDOW, HAS_KH, HAS_EP)
            p = tl.where(vis, tl.exp(s - lse[:, None]), 0.0)  # [BLOCK, BLOCK]
            acc_v += tl.dot(tl.trans(p.to(dtype)), do, input_precision=PREC)
            dp = tl.dot(do, tl.trans(v), input_precision=PREC)
            ds = p * (dp - delta[:, None])  # d loss / d s
            acc_k += tl.dot(tl.trans(ds.to(dtype)), q_u, input_precision=PREC)

        col_ok = (offs_n[:, None] < klen) & dmask[None, :]
        dk_ptrs = DK + b * s_dkb + h * s_dkh + offs_n[:, None].to(tl.int64) * s_dkl + offs_d[None, :]
        tl.store(dk_ptrs, acc_k.to(DK.dtype.element_ty), mask=col_ok)
        dv_ptrs = DV + b * s_dvb + h * s_dvh + offs_n[:, None].to(tl.int64) * s_dvl + offs_d[None, :]
        tl.store(dv_ptrs, acc_v.to(DV.dtype.element_ty), mask=col_ok)

    @triton.jit
    def _bwd_dq_kernel(Q, Kk, V, RK, U, VB, KH, EP, DO, LSE, DELTA, DQU, DQV, DRK,
                       s_qb, s_qh, s_ql, s_kb, s_kh, s_kl, s_vb, s_vh, s_vl,
                       s_rh, s_rl, s_uh, s_vbh, s_khb, s_epb, s_db, s_dh, s_dl,
                       n_head, qlen, klen, head_dim, window, scale,
                       HAS_WINDOW: tl.constexpr, HAS_KH: tl.constexpr, HAS_EP: tl.constexpr,
                       BLOCK: tl.constexpr, BLOCK_D: tl.constexpr, PREC: tl.constexpr):
        pid_m = tl.program_id(0)
        pid_bh = tl.program_id(1)
        b = (pid_bh // n_head).to(tl.int64)
        h = (pid_bh % n_head).to(tl.int64)
        mlen = klen - qlen
        i0 = pid_m * BLOCK
        offs_r = tl.arange(0, BLOCK)
        offs_d = tl.arange(0, BLOCK_D)
        offs_m = i0 + offs_r
        row_ok = offs_m < qlen
        dmask = offs_d < head_dim
        dtype = Q.dtype.element_ty
        stat_base = pid_bh.to(tl.int64) * qlen

        q = _load_rows(Q + b * s_qb + h * s_qh, i0, qlen, s_ql, offs_r, offs_d, head_dim).to(tl.float32)
        u, vb = _load_biases(U, VB, h, s_uh, s_vbh, offs_d, dmask)
        q_u, q_v = _biased_queries(q, u, vb, scale, dtype)  # [BLOCK, BLOCK_D] each
        do = _load_rows(DO + b * s_db + h * s_dh, i0, qlen, s_dl, offs_r, offs_d, head_dim).to(dtype)
        lse = tl.load(LSE + stat_base + offs_m, mask=row_ok, other=0.0)
        delta = tl.load(DELTA + stat_base + offs_m, mask=row_ok, other=0.0)

        k_base = Kk + b * s_kb + h * s_kh
        v_base = V + b * s_vb + h * s_vh
        rk_base = RK + h * s_rh
        drk_base = DRK + h * (klen + 1) * head_dim  # fp32 [H, K+1, D], contiguous
        kh_row = KH + b * s_khb
        ep_row = EP + b * s_epb

        from_lo, idx_lo, idx_hi = _band_index(offs_r, BLOCK)
        # inverse: band column w of the lo half takes ds[a, w - (BLOCK-1) + a], of the hi half ds[a, w + 1 + a]
        w_lo = offs_r[None, :] + offs_r[:, None] - (BLOCK - 1)
        ok_lo = w_lo >= 0
        w_lo = tl.maximum(w_lo, 0)
        w_hi = offs_r[None, :] + offs_r[:, None] + 1
        ok_hi = w_hi < BLOCK
        w_hi = tl.minimum(w_hi, BLOCK - 1)

        j_end = tl.minimum(mlen + i0 + BLOCK, klen)
        j_start = 0
        if HAS_WINDOW:
            j_start = (tl.maximum(mlen + i0 - window + 1, 0) // BLOCK) * BLOCK

        c0 = qlen + j_start - i0 - (BLOCK - 1)
        rk_lo = _load_rows(rk_base, c0, klen + 1, s_rl, offs_r, offs_d, head_dim)
        p_lo = tl.dot(q_v, tl.trans(rk_lo), input_precision=PREC)

        acc_u = tl.zeros([BLOCK, BLOCK_D], tl.float32)
        acc_v = tl.zeros([BLOCK, BLOCK_D], tl.float32)
        carry = tl.zeros([BLOCK, BLOCK], tl.float32)  # hi half of the previous block's band gradient
        for j0 in range(j_start, j_end, BLOCK):
            c0 = qlen + j0 - i0 - (BLOCK - 1)
            rk_hi = _load_rows(rk_base, c0 + BLOCK, klen + 1, s_rl, offs_r, offs_d, head_dim)
            p_hi = tl.dot(q_v, tl.trans(rk_hi), input_precision=PREC)
            k = _load_rows(k_base, j0, klen, s_kl, offs_r, offs_d, head_dim)
            s = tl.dot(q_u, tl.trans(k), input_precision=PREC)
            s += _position_scores(p_lo, p_hi, from_lo, idx_lo, idx_hi)
            vis = _visible(offs_m, j0 + offs_r, kh_row, ep_row, qlen, klen, mlen, window, HAS_WINDOW, HAS_KH, HAS_EP)
            p = tl.where(vis, tl.exp(s - lse[:, None]), 0.0)
            v = _load_rows(v_base, j0, klen, s_vl, offs_r, offs_d, head_dim)
            dp = tl.dot(do, tl.trans(v), input_precision=PREC)
            ds = p * (dp - delta[:, None])  # [BLOCK, BLOCK]
            acc_u += tl.dot(ds.to(dtype), k, input_precision=PREC)
            band = carry + tl.where(ok_lo, tl.gather(ds, w_lo, 1), 0.0)  # gradient of band rows c0 ..
            band_c = band.to(dtype)
            acc_v += tl.dot(band_c, rk_lo, input_precision=PREC)
            d_rk = tl.dot(tl.trans(band_c), q_v, input_precision=PREC)  # [BLOCK, BLOCK_D]
            rows = c0 + offs_r
            tl.atomic_add(drk_base + rows[:, None].to(tl.int64) * head_dim + offs_d[None, :], d_rk,
                          mask=(rows[:, None] >= 0) & (rows[:, None] <= klen) & dmask[None, :])
            carry = tl.where(ok_hi, tl.gather(ds, w_hi, 1), 0.0)
            rk_lo = rk_hi
            p_lo = p_hi

        # the last block's hi half: rows of the band one block further on
        n_blocks = (j_end - j_start + BLOCK - 1) // BLOCK
        c0 = qlen + j_start + n_blocks * BLOCK - i0 - (BLOCK - 1)
        band_c = carry.to(dtype)
        acc_v += tl.dot(band_c, rk_lo, input_precision=PREC)
        d_rk = tl.dot(tl.trans(band_c), q_v, input_precision=PREC)
        rows = c0 + offs_r
        tl.atomic_add(drk_base + rows[:, None].to(tl.int64) * head_dim + offs_d[None, :], d_rk,
                      mask=(rows[:, None] >= 0) & (rows[:, None] <= klen) & dmask[None, :])

        out_mask = row_ok[:, None] & dmask[None, :]
        offs = pid_bh.to(tl.int64) * qlen * head_dim + offs_m[:, None].to(tl.int64) * head_dim + offs_d[None, :]
        tl.store(DQU + offs, acc_u * scale, mask=out_mask)
        tl.store(DQV + offs, acc_v * scale, mask=out_mask)


def _launch_config(q: Tensor, head_dim: int, block: Optional[int]):
    block_d = max(16, triton.next_power_of_2(head_dim))
    if block is None:
        block = 16 if (_interpreting() or not q.is_cuda) else 64
    num_warps = 4 if block_d <= 64 else 8
    if q.dtype == torch.float32 and torch.get_float32_matmul_precision() == "highest":
        prec = "ieee"
    else:
        prec = "tf32"  # ignored for 16-bit inputs
    return block, block_d, num_warps, prec


def _last_dim_contiguous(t: Tensor) -> Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


class _RelAttention(torch.autograd.Function):

    @staticmethod
    def forward(ctx, q, k, v, r_k, r_w_bias, r_r_bias, scale, window, key_hidden, episode, block):
        bsz, n_head, qlen, head_dim = q.shape
        klen = k.size(2)
        q, k, v, r_k = (_last_dim_contiguous(t) for t in (q, k, v, r_k))
        r_w_bias, r_r_bias = _last_dim_contiguous(r_w_bias), _last_dim_contiguous(r_r_bias)
        has_kh = key_hidden is not None
        kh = (key_hidden.to(torch.uint8).contiguous() if has_kh
              else torch.zeros(1, 1, dtype=torch.uint8, device=q.device))
        has_ep = episode is not None
        ep = episode.to(torch.int32).contiguous() if has_ep else torch.zeros(1, 1, dtype=torch.int32, device=q.device)
        block, block_d, num_warps, prec = _launch_config(q, head_dim, block)

        out = torch.empty(bsz, n_head, qlen, head_dim, dtype=q.dtype, device=q.device)  # [B, H, L, D]
        lse = torch.empty(bsz, n_head, qlen, dtype=torch.float32, device=q.device)  # [B, H, L]
        grid = (triton.cdiv(qlen, block), bsz * n_head)
        _fwd_kernel[grid](
            q, k, v, r_k, r_w_bias, r_r_bias, kh, ep, out, lse,
            q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2), r_k.stride(0), r_k.stride(1),
            r_w_bias.stride(0), r_r_bias.stride(0), kh.stride(0), ep.stride(0), out.stride(0), out.stride(1),
            out.stride(2), n_head, qlen, klen, head_dim, window, scale,
            HAS_WINDOW=window > 0, HAS_KH=has_kh, HAS_EP=has_ep, BLOCK=block, BLOCK_D=block_d, PREC=prec,
            num_warps=num_warps, num_stages=2)
        ctx.save_for_backward(q, k, v, r_k, r_w_bias, r_r_bias, kh, ep, out, lse)
        ctx.cfg = (scale, window, has_kh, has_ep, block, block_d, num_warps, prec)
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, r_k, r_w_bias, r_r_bias, kh, ep, out, lse = ctx.saved_tensors
        scale, window, has_kh, has_ep, block, block_d, num_warps, prec = ctx.cfg
        bsz, n_head, qlen, head_dim = q.shape
        klen = k.size(2)
        d_out = _last_dim_contiguous(d_out)
        delta = (d_out.float() * out.float()).sum(-1).contiguous()  # [B, H, L]: rowsum(dO * O)

        dk = torch.empty_like(k)  # [B, H, K, D]
        dv = torch.empty_like(v)
        common = (q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
                  v.stride(0), v.stride(1), v.stride(2), r_k.stride(0), r_k.stride(1),
                  r_w_bias.stride(0), r_r_bias.stride(0), kh.stride(0), ep.stride(0),
                  d_out.stride(0), d_out.stride(1), d_out.stride(2))
        tail = (n_head, qlen, klen, head_dim, window, scale)
        meta = dict(HAS_WINDOW=window > 0, HAS_KH=has_kh, HAS_EP=has_ep, BLOCK=block, BLOCK_D=block_d, PREC=prec,
                    num_warps=max(num_warps, 8 if block >= 64 else 4), num_stages=2)  # more live tiles
        _bwd_dkdv_kernel[(triton.cdiv(klen, block), bsz * n_head)](
            q, k, v, r_k, r_w_bias, r_r_bias, kh, ep, d_out, lse, delta, dk, dv, *common,
            dk.stride(0), dk.stride(1), dk.stride(2), dv.stride(0), dv.stride(1), dv.stride(2), *tail, **meta)

        dqu = torch.empty(bsz, n_head, qlen, head_dim, dtype=torch.float32, device=q.device)  # d(q+u)
        dqv = torch.empty_like(dqu)  # d(q+v)
        drk = torch.zeros(n_head, klen + 1, head_dim, dtype=torch.float32, device=q.device)  # [H, K+1, D]
        _bwd_dq_kernel[(triton.cdiv(qlen, block), bsz * n_head)](
            q, k, v, r_k, r_w_bias, r_r_bias, kh, ep, d_out, lse, delta, dqu, dqv, drk, *common, *tail, **meta)

        dq = (dqu + dqv).to(q.dtype)
        du = dqu.sum((0, 2)).to(r_w_bias.dtype)  # [H, D]
        dvb = dqv.sum((0, 2)).to(r_r_bias.dtype)
        return dq, dk, dv, drk.to(r_k.dtype), du, dvb, None, None, None, None, None


def rel_attention(q: Tensor, k: Tensor, v: Tensor, r_k: Tensor, r_w_bias: Tensor, r_r_bias: Tensor,
                  scale: float, window: int = 0, key_hidden: Optional[Tensor] = None,
                  dropatt: float = 0.0, block: Optional[int] = None, episode: Optional[Tensor] = None) -> Tensor:
    """Fused relative attention: ``softmax(rel_attn_score(...) masked) @ v`` without the score tensor.

    Args:
        q: ``[B, H, L, D]``. k, v: ``[B, H, K, D]`` with ``K = M + L``, memory first.
        r_k: ``[H, K+1, D]``, row ``c`` for distance ``K - c``. r_w_bias (u), r_r_bias (v): ``[H, D]``.
        scale: multiplies both score terms (``1/sqrt(D)`` in the model).
        window: ``0`` for the causal mask with memory; ``> 0`` also hides keys ``window`` or more
            positions back, like ``same_length`` with ``mem_len = window``.
        key_hidden: optional ``[B, K]`` bool, True for keys hidden from every query (a query still
            sees its own key).
        episode: optional ``[B, K]`` integer episode number of each key: a query sees only its own episode's keys.
        dropatt: attention dropout; only ``0`` is supported (ValueError otherwise).
        block: query/key block size (power of two >= 16); default 64 on CUDA, 16 in the interpreter.
    Returns:
        ``[B, H, L, D]`` in the dtype of ``q``; differentiable in q, k, v, r_k, r_w_bias, r_r_bias.
    """
    _check_arguments(q, k, v, r_k, r_w_bias, r_r_bias, window, key_hidden, dropatt, block, episode)
    if triton is None or not _HAS_GATHER:
        raise RuntimeError("rel_attention: needs Triton >= 3.2 (for tl.gather), which is not installed")
    if not is_available(q, k, v, r_k):
        raise RuntimeError("rel_attention: needs CUDA tensors (or TRITON_INTERPRET=1 for Triton's CPU interpreter)")
    return _RelAttention.apply(q, k, v, r_k, r_w_bias, r_r_bias, float(scale), int(window), key_hidden, episode, block)


def _check_arguments(q, k, v, r_k, r_w_bias, r_r_bias, window, key_hidden, dropatt, block, episode) -> None:
    """One ValueError naming the argument whose shape, dtype or value :func:`rel_attention` cannot take."""
    if dropatt:
        raise ValueError(f"dropatt: the fused Triton attention has no attention dropout, got {dropatt}")
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v: expected [B, H, L|K, D], got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    bsz, n_head, qlen, head_dim = q.shape
    klen = k.size(2)
    if k.shape != (bsz, n_head, klen, head_dim) or v.shape != k.shape:
        raise ValueError(f"k, v: expected [{bsz}, {n_head}, K, {head_dim}], got {tuple(k.shape)}, {tuple(v.shape)}")
    if qlen == 0 or klen < qlen:
        raise ValueError(f"q, k: expected L >= 1 queries and K = M + L >= L keys, got L = {qlen}, K = {klen}")
    if r_k.shape != (n_head, klen + 1, head_dim):
        raise ValueError(f"r_k: expected [{n_head}, {klen + 1}, {head_dim}], got {tuple(r_k.shape)}")
    for name, bias in (("r_w_bias", r_w_bias), ("r_r_bias", r_r_bias)):
        if bias.shape != (n_head, head_dim):
            raise ValueError(f"{name}: expected [{n_head}, {head_dim}], got {tuple(bias.shape)}")
    if len({t.dtype for t in (q, k, v, r_k)}) != 1 or q.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"q, k, v, r_k: expected one dtype of float32/bfloat16/float16, got "
                         f"{q.dtype}, {k.dtype}, {v.dtype}, {r_k.dtype}")
    if window < 0:
        raise ValueError(f"window: expected >= 0, got {window}")
    if key_hidden is not None and (key_hidden.shape != (bsz, klen) or key_hidden.dtype != torch.bool):
        raise ValueError(f"key_hidden: expected bool [{bsz}, {klen}], got {key_hidden.dtype} {tuple(key_hidden.shape)}")
    if episode is not None and (episode.shape != (bsz, klen) or episode.is_floating_point()
                                or episode.dtype == torch.bool):
        raise ValueError(f"episode: expected integer [{bsz}, {klen}], got {episode.dtype} {tuple(episode.shape)}")
    if block is not None and (block < 16 or block & (block - 1)):
        raise ValueError(f"block: expected a power of two >= 16, got {block}")
