"""Multi-head attention for the four position schemes of the paper's ablation.

Layout is batch-first throughout: hidden states ``[B, L, d_model]``, memory ``[B, M, d_model]``,
scores ``[B, H, L, K]`` with ``K = M + L`` keys. Module and parameter names follow the original
release (``qkv_net``, ``r_net``, ``o_net``, ``r_w_bias`` ...) so checkpoints map one to one.

The relative score of the paper (section 3.3), for query position ``i`` and key position ``j``::

    A_ij = (q_i + u) . k_j  +  (q_i + v) . W_r R_{i-j}

is computed with the shift trick: ``(q + v) . W_r R`` is evaluated once against a table of
``K + 1`` distances ``[K, K-1, ..., 0]`` (cost ``L * (K+1) * d``), then re-indexed so that column
``j`` of row ``i`` holds distance ``M + i - j``. The re-indexing is a view (no copy, no gather).
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import triton_attention
from .dropout import Dropout
from .streamed_attention import streamed_rel_attention


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
    bd = rel_shift(torch.matmul(q_v, r_k.transpose(-1, -2)))  # [B, H, L, K], a view of [B, H, L, K+1]
    # add_ into the matmul's own result: no further [B, H, L, K] tensor, and (unlike baddbmm's 3-D output
    # seen through a view) later in-place masking needs no copy in the backward pass.
    return torch.matmul(q_u, k.transpose(-1, -2)).add_(bd)  # [B, H, L, K]


class _AttentionBase(nn.Module):
    """Shared parts: dropout, output projection, residual and layer norm (post- or pre-LN)."""

    def __init__(self, n_head: int, d_model: int, d_head: int, dropout: float, dropatt: float,
                 pre_lnorm: bool, layer_norm_epsilon: float = 1e-5):
        super().__init__()
        self.n_head, self.d_model, self.d_head = n_head, d_model, d_head
        self.scale = 1.0 / math.sqrt(d_head)
        self.pre_lnorm = pre_lnorm
        self.drop = Dropout(dropout)
        self.dropatt = Dropout(dropatt)
        self.o_net = nn.Linear(n_head * d_head, d_model, bias=False)
        self.layer_norm = nn.LayerNorm(d_model, eps=layer_norm_epsilon)

    def _heads(self, x: Tensor) -> Tensor:
        """``[B, T, H*D] -> [B, H, T, D]``."""
        return x.view(x.size(0), x.size(1), self.n_head, self.d_head).transpose(1, 2)

    def _attend(self, score: Tensor, v: Tensor, attn_mask: Optional[Tensor], mask_start: int = 0) -> Tensor:
        """Masked softmax over keys, then the weighted sum of values.

        score ``[B, H, L, K]``, already scaled and a fresh tensor (it is masked in place), v
        ``[B, H, K, D]``, attn_mask ``[L, K]`` or ``[B, L, K]`` bool with True where attention is
        forbidden; key columns before ``mask_start`` hold no True and are left alone (without
        same_length or hidden keys only the last L columns are masked). Returns ``[B, L, H*D]``.
        """
        score = score.float()  # softmax in float32 also under autocast (a copy only then)
        if attn_mask is not None:
            mask = attn_mask[:, None] if attn_mask.dim() == 3 else attn_mask  # [B|1, 1|L, L, K]
            # Not recorded by autograd: softmax's backward is already 0 at a masked entry (its probability
            # is 0), so the masked_fill backward (a clone and a second masking pass) would change nothing.
            with torch.no_grad():
                score[..., mask_start:].masked_fill_(mask[..., mask_start:], float("-inf"))
        prob = torch.softmax(score, dim=-1).to(v.dtype)  # [B, H, L, K]
        prob = self.dropatt(prob)
        vec = torch.matmul(prob, v)  # [B, H, L, D]
        return vec.transpose(1, 2).reshape(v.size(0), -1, self.n_head * self.d_head)  # [B, L, H*D]

    def _output(self, h: Tensor, attn_vec: Tensor) -> Tensor:
        out = self.drop(self.o_net(attn_vec))  # [B, L, d_model]
        return h + out if self.pre_lnorm else self.layer_norm(h + out)


def _with_memory(h: Tensor, mems: Optional[Tensor]) -> Tensor:
    """``[B, M, d] + [B, L, d] -> [B, M+L, d]`` (no copy when there is no memory)."""
    if mems is None or mems.size(1) == 0:
        return h
    return torch.cat([mems, h], dim=1)


class _QKVAttention(_AttentionBase):
    """Attention whose query, key and value come from one ``qkv_net`` (attn_type 0 and 1)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.qkv_net = nn.Linear(self.d_model, 3 * self.n_head * self.d_head, bias=False)

    def _qkv(self, h: Tensor, mems: Optional[Tensor]):
        """Queries for the current segment only; keys and values for memory + segment.

        Returns q ``[B, H, L, D]``, k and v ``[B, H, K, D]``. With memory, the query rows of
        ``qkv_net`` are applied to the L current states only (the original projects all K).
        """
        qlen = h.size(1)
        cat = _with_memory(h, mems)  # [B, K, d]
        if self.pre_lnorm:
            cat = self.layer_norm(cat)
        hd = self.n_head * self.d_head
        if cat.size(1) == qlen:
            q, k, v = self.qkv_net(cat).split(hd, dim=-1)  # 3 x [B, L, H*D]
        else:
            weight = self.qkv_net.weight  # [3*H*D, d]
            q = F.linear(cat[:, -qlen:], weight[:hd])  # [B, L, H*D]
            k, v = F.linear(cat, weight[hd:]).split(hd, dim=-1)  # 2 x [B, K, H*D]
        return self._heads(q), self._heads(k), self._heads(v)


class RelPartialLearnableMultiHeadAttn(_QKVAttention):
    """attn_type 0: the Transformer-XL attention with global content/position biases u, v.

    With ``untie_r`` each layer owns its ``r_w_bias`` (u) and ``r_r_bias`` (v); otherwise the
    model passes the shared pair to every layer.
    """

    def __init__(self, n_head, d_model, d_head, dropout, dropatt, pre_lnorm,
                 layer_norm_epsilon=1e-5, untie_r: bool = False):
        super().__init__(n_head, d_model, d_head, dropout, dropatt, pre_lnorm, layer_norm_epsilon)
        self.r_net = nn.Linear(d_model, n_head * d_head, bias=False)
        if untie_r:
            self.r_w_bias = nn.Parameter(torch.zeros(n_head, d_head))
            self.r_r_bias = nn.Parameter(torch.zeros(n_head, d_head))

    def forward(self, h: Tensor, pos_emb: Tensor, r_w_bias: Optional[Tensor], r_r_bias: Optional[Tensor],
                attn_mask: Optional[Tensor] = None, mems: Optional[Tensor] = None, chunk: int = 0,
                fused: Optional[tuple] = None, mask_start: int = 0) -> Tensor:
        """h ``[B, L, d]``, pos_emb ``R`` for distances ``K..0``: ``[K+1, d]``, mems ``[B, M, d]``.

        ``chunk > 0`` selects the memory-efficient path (:meth:`_attend_streamed`): keys streamed ``chunk``
        at a time, with and without gradients. ``fused = (window, key_hidden)`` (the mask as parameters)
        selects the fused Triton kernel where it can run (CUDA, no attention dropout). All give the plain
        path's result.
        """
        if hasattr(self, "r_w_bias"):
            r_w_bias, r_r_bias = self.r_w_bias, self.r_r_bias
        r_k = self.r_net(pos_emb).view(-1, self.n_head, self.d_head).transpose(0, 1)  # [H, K+1, D]
        if (fused is not None and triton_attention.is_available(h)
                and not (self.training and self.dropatt.p > 0)):
            q, k, v = self._qkv(h, mems)
            vec = triton_attention.rel_attention(q, k, v, r_k, r_w_bias, r_r_bias, self.scale, window=fused[0],
                                                 key_hidden=fused[1])  # [B, H, L, D]
            return self._output(h, vec.transpose(1, 2).reshape(h.size(0), h.size(1), -1))
        if chunk > 0:
            return self._output(h, self._attend_streamed(h, mems, r_k, r_w_bias, r_r_bias, attn_mask, chunk))
        q, k, v = self._qkv(h, mems)
        score = rel_attn_score(q, k, r_k, r_w_bias, r_r_bias, self.scale)  # [B, H, L, K]
        return self._output(h, self._attend(score, v, attn_mask, mask_start))

    def _attend_streamed(self, h, mems, r_k, r_w_bias, r_r_bias, attn_mask, block: int) -> Tensor:
        """Attention with keys ``block`` at a time (:func:`~.streamed_attention.streamed_rel_attention`).

        Each block's keys and values are projected from its rows of ``[mems, h]`` when it is reached, an
        online softmax accumulates the result, and the backward pass recomputes block by block: neither the
        ``[B, H, L, M+L]`` scores nor the ``[B, M+L, 2*H*D]`` projected memory are ever held whole, in
        training as in evaluation. Returns ``[B, L, H*D]``.
        """
        bsz, qlen, _ = h.shape
        hd = self.n_head * self.d_head
        w_q, w_kv = self.qkv_net.weight[:hd], self.qkv_net.weight[hd:]  # [H*D, d], [2*H*D, d]
        q = self._heads(F.linear(self.layer_norm(h) if self.pre_lnorm else h, w_q))  # [B, H, L, D]
        q_u = (q + r_w_bias[:, None]) * self.scale  # [B, H, L, D]
        q_v = (q + r_r_bias[:, None]) * self.scale
        ln = (self.layer_norm.weight, self.layer_norm.bias, self.layer_norm.eps) if self.pre_lnorm else None
        vec = streamed_rel_attention(q_u, q_v, r_k, mems, h, w_kv, ln, attn_mask, block=block,
                                     dropatt=self.dropatt.p, training=self.training)  # [B, H, L, D]
        return vec.transpose(1, 2).reshape(bsz, qlen, hd)  # [B, L, H*D]


class RelLearnableMultiHeadAttn(_QKVAttention):
    """attn_type 1 (Shaw et al. 2018): learned per-layer embedding and bias for each distance.

    score = (q_i + u) . k_j + q_i . e_{i-j} + b_{i-j}, where ``e`` (``r_emb``) and ``b``
    (``r_bias``) are tables whose last row is distance 0; distances beyond the table use its
    first row, as in the paper's code.
    """

    def forward(self, h: Tensor, r_emb: Tensor, r_w_bias: Tensor, r_bias: Tensor,
                attn_mask: Optional[Tensor] = None, mems: Optional[Tensor] = None, mask_start: int = 0) -> Tensor:
        """h ``[B, L, d]``, r_emb ``[T, H, D]``, r_w_bias ``[H, D]``, r_bias ``[T, H]``."""
        q, k, v = self._qkv(h, mems)
        klen = k.size(2)
        rows = _distance_rows(r_emb.size(0), klen, h.device)  # [K+1], distances K..0
        e = r_emb.index_select(0, rows).permute(1, 0, 2)  # [H, K+1, D]
        b = r_bias.index_select(0, rows).t()  # [H, K+1]
        ac = torch.matmul(q + r_w_bias[:, None], k.transpose(-1, -2))  # [B, H, L, K]
        bd = torch.matmul(q, e.transpose(-1, -2)) + b[:, None, :]  # [B, H, L, K+1]
        score = (ac + rel_shift(bd.contiguous())).mul_(self.scale)
        return self._output(h, self._attend(score, v, attn_mask, mask_start))


def _distance_rows(table_len: int, klen: int, device) -> Tensor:
    """Row of a learned distance table (last row = distance 0) for distances ``klen, ..., 0``."""
    dist = torch.arange(klen, -1, -1, device=device)  # [K+1]
    return (table_len - 1 - dist).clamp(min=0)


class MultiHeadAttn(_AttentionBase):
    """attn_type 2 and 3: standard attention; positions are added to the states beforehand.

    As in the paper's code, with ``pre_lnorm`` the layer norm is applied to the keys/values'
    input only and the queries are projected from the un-normalised states.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.q_net = nn.Linear(self.d_model, self.n_head * self.d_head, bias=False)
        self.kv_net = nn.Linear(self.d_model, 2 * self.n_head * self.d_head, bias=False)

    def forward(self, h: Tensor, attn_mask: Optional[Tensor] = None, mems: Optional[Tensor] = None,
                mask_start: int = 0) -> Tensor:
        """h ``[B, L, d]``, mems ``[B, M, d]`` (positions already added) -> ``[B, L, d]``."""
        cat = _with_memory(h, mems)  # [B, K, d]
        if self.pre_lnorm:
            cat = self.layer_norm(cat)
        q = self._heads(self.q_net(h))  # [B, H, L, D]
        k, v = (self._heads(t) for t in self.kv_net(cat).chunk(2, dim=-1))  # [B, H, K, D]
        score = torch.matmul(q * self.scale, k.transpose(-1, -2))  # [B, H, L, K]
        return self._output(h, self._attend(score, v, attn_mask, mask_start))
