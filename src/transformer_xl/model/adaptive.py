"""Adaptive input embeddings (Baevski & Auli, 2019) and the projected adaptive log-softmax
(Grave et al., 2017), as the paper uses them for large vocabularies.

The vocabulary is split by ``cutoffs`` into clusters ``[0, c_1), [c_1, c_2), ..., [c_n, V)``.
Cluster ``i`` has embedding size ``d_embed // div_val**i`` and its own projection to
``d_proj = d_model``. The softmax head holds the shortlist (cluster 0) plus one logit per tail
cluster; a tail token's log-probability is its cluster's head log-probability plus its
log-probability within the cluster.

Layout note, kept for checkpoint compatibility: the paper's code reads the head log-probability
of tail cluster ``i`` (1-based) from head column ``-i``, i.e. from ``cluster_weight`` row
``n_clusters - i``. This module does the same, so converted weights give identical results.
"""

from __future__ import annotations

from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .ops.linear import FEW_ROWS, linear

#: Rows of the output layer computed at a time without gradients: ``[64, V]`` float32 logits of a 10k vocabulary
#: are 2.5 MB, about a core's L2 cache.
ROW_BLOCK = 64
#: Logits of one output-layer product in 16-bit weights (32 MB): bf16 products of 64 rows run far below the matrix
#: units' rate (the weight is re-laid for each call), so the product takes up to this many logits at once and its
#: log-softmax still goes ``ROW_BLOCK`` rows at a time.
PRODUCT_LOGITS_16BIT = 1 << 24


def _cluster_bounds(n_token: int, cutoffs: List[int]) -> List[int]:
    """``[0, c_1, ..., c_n, V]``."""
    return [0] + list(cutoffs) + [n_token]


class AdaptiveEmbedding(nn.Module):
    """Token ids ``[...]`` -> embeddings ``[..., d_proj]``, scaled by ``sqrt(d_proj)``."""

    def __init__(self, n_token: int, d_embed: int, d_proj: int, cutoffs: List[int], div_val: int = 1):
        super().__init__()
        self.n_token, self.d_embed, self.d_proj, self.div_val = n_token, d_embed, d_proj, div_val
        self.bounds = _cluster_bounds(n_token, cutoffs)
        self.emb_scale = d_proj ** 0.5
        self.emb_layers = nn.ModuleList()
        self.emb_projs = nn.ParameterList()
        if div_val == 1:
            self.emb_layers.append(nn.Embedding(n_token, d_embed))
            if d_proj != d_embed:
                self.emb_projs.append(nn.Parameter(torch.zeros(d_proj, d_embed)))
        else:
            for i in range(len(self.bounds) - 1):
                d_emb_i = d_embed // (div_val ** i)
                self.emb_layers.append(nn.Embedding(self.bounds[i + 1] - self.bounds[i], d_emb_i))
                self.emb_projs.append(nn.Parameter(torch.zeros(d_proj, d_emb_i)))

    def forward(self, inp: Tensor) -> Tensor:
        if self.div_val == 1:
            embed = self.emb_layers[0](inp)  # [..., d_embed]
            if self.d_proj != self.d_embed:
                embed = F.linear(embed, self.emb_projs[0])  # [..., d_proj]
            return embed * self.emb_scale
        flat = inp.reshape(-1)  # [N]
        weight_dtype = self.emb_projs[0].dtype
        if torch.compiler.is_exporting():
            return self._dense(flat, weight_dtype).view(*inp.shape, self.d_proj) * self.emb_scale
        out = torch.zeros(flat.size(0), self.d_proj, dtype=weight_dtype, device=flat.device)  # [N, d_proj]
        for i, (lo, hi) in enumerate(zip(self.bounds[:-1], self.bounds[1:])):
            idx = ((flat >= lo) & (flat < hi)).nonzero().squeeze(1)  # [N_i]
            if idx.numel() == 0:
                continue
            emb_i = self.emb_layers[i](flat.index_select(0, idx) - lo)  # [N_i, d_emb_i]
            emb_i = F.linear(emb_i, self.emb_projs[i])  # [N_i, d_proj]
            out = out.index_copy(0, idx, emb_i.to(out.dtype))
        return out.view(*inp.shape, self.d_proj) * self.emb_scale

    def _dense(self, flat: Tensor, dtype) -> Tensor:
        """The same embeddings without data-dependent shapes (for ``torch.export``): every cluster embeds every
        token (its id clamped into the cluster) and each token keeps its own cluster's row. ``[N] -> [N, d_proj]``."""
        out = torch.zeros(flat.size(0), self.d_proj, dtype=dtype, device=flat.device)  # [N, d_proj]
        for i, (lo, hi) in enumerate(zip(self.bounds[:-1], self.bounds[1:])):
            inside = ((flat >= lo) & (flat < hi))[:, None]  # [N, 1]
            emb_i = F.linear(self.emb_layers[i]((flat - lo).clamp(0, hi - lo - 1)), self.emb_projs[i])  # [N, d_proj]
            out = torch.where(inside, emb_i.to(dtype), out)
        return out


class ProjectedAdaptiveLogSoftmax(nn.Module):
    """Hidden states ``[N, d_proj]`` -> log-probabilities of targets ``[N]`` or of the full vocabulary.

    Log-softmax is always computed in float32, also under autocast.
    """

    def __init__(self, n_token: int, d_embed: int, d_proj: int, cutoffs: List[int], div_val: int = 1):
        super().__init__()
        self.n_token, self.d_embed, self.d_proj, self.div_val = n_token, d_embed, d_proj, div_val
        self.bounds = _cluster_bounds(n_token, cutoffs)
        self.n_clusters = len(cutoffs)
        self.shortlist_size = self.bounds[1]
        self.head_size = self.shortlist_size + self.n_clusters
        if self.n_clusters > 0:
            self.cluster_weight = nn.Parameter(torch.zeros(self.n_clusters, d_embed))
            self.cluster_bias = nn.Parameter(torch.zeros(self.n_clusters))
        self.out_layers = nn.ModuleList()
        self.out_projs = nn.ParameterList()
        if div_val == 1:
            for _ in range(self.n_clusters + 1):
                self.out_projs.append(nn.Parameter(torch.zeros(d_proj, d_embed)) if d_proj != d_embed else None)
            self.out_layers.append(nn.Linear(d_embed, n_token))
        else:
            for i in range(self.n_clusters + 1):
                d_emb_i = d_embed // (div_val ** i)
                self.out_projs.append(nn.Parameter(torch.zeros(d_proj, d_emb_i)))
                self.out_layers.append(nn.Linear(d_emb_i, self.bounds[i + 1] - self.bounds[i]))

    # ------------------------------------------------------------------ per-cluster pieces
    def _cluster_params(self, i: int):
        """Output weight ``[V_i, d_emb_i]``, bias and projection of cluster i (the head's words only for i=0)."""
        if self.div_val == 1 and self.n_clusters == 0:
            weight, bias = self.out_layers[0].weight, self.out_layers[0].bias  # no slice: its backward is a copy
        elif self.div_val == 1:
            lo, hi = self.bounds[i], self.bounds[i + 1]
            weight, bias = self.out_layers[0].weight[lo:hi], self.out_layers[0].bias[lo:hi]
        else:
            weight, bias = self.out_layers[i].weight, self.out_layers[i].bias
        return weight, bias, self.out_projs[i]

    def _logit(self, hidden: Tensor, i: int) -> Tensor:
        """Logits of cluster ``i`` (the head for i=0, its words then one column per tail cluster):
        ``[N, d_proj] -> [N, V_i (+n_clusters)]``."""
        weight, bias, proj = self._cluster_params(i)
        if proj is not None:
            hidden = F.linear(hidden, proj.t())  # [N, d_emb_i]
        if i > 0 or self.n_clusters == 0:
            return linear(hidden, weight, bias)  # [N, V_i] (threads split the few-row products of decoding)
        if not torch.compiler.is_compiling() and hidden.numel() // hidden.size(-1) <= FEW_ROWS:
            # few rows (decoding): two products and a copy of their [N, head_size] outputs, rather than a copy of
            # the [head_size, d_emb] weight at every step (not in a graph: its row count may be symbolic)
            return torch.cat([linear(hidden, weight, bias), F.linear(hidden, self.cluster_weight, self.cluster_bias)],
                             dim=-1)  # [N, head_size]
        return linear(hidden, torch.cat([weight, self.cluster_weight]), torch.cat([bias, self.cluster_bias]))

    def _logprob(self, hidden: Tensor, i: int) -> Tensor:
        """Float32 log-softmax over cluster ``i`` (the head for i=0): ``[N, d_proj] -> [N, V_i]``."""
        return F.log_softmax(self._logit(hidden, i).float(), dim=-1)

    def _head_column(self, i: int) -> int:
        """Head column of tail cluster ``i >= 1`` (the original code's ``[:, -i]``)."""
        return self.head_size - i

    # ------------------------------------------------------------------ public API
    def forward(self, hidden: Tensor, target: Tensor) -> Tensor:
        """Log-probabilities of ``target`` ``[N]`` given ``hidden`` ``[N, d_proj]``: ``[N]`` float32.

        Only the head and the tail clusters that contain targets are evaluated, each on the
        rows whose target falls in it.
        """
        if self.n_clusters == 0:
            if not torch.is_grad_enabled():
                return self._target_log_probs_by_rows(hidden, target)
            logits = self._logit(hidden, 0)  # [N, V]
            if logits.dtype in (torch.bfloat16, torch.float16):  # autocast's product
                return _BlockedTargetLogSoftmax.apply(logits, target)
            return _TargetLogSoftmax.apply(logits.float(), target)
        head = self._logprob(hidden, 0)  # [N, head_size]
        out = torch.zeros(target.shape, dtype=head.dtype, device=head.device)  # [N]
        for i, (lo, hi) in enumerate(zip(self.bounds[:-1], self.bounds[1:])):
            idx = ((target >= lo) & (target < hi)).nonzero().squeeze(1)  # [N_i]
            if idx.numel() == 0:
                continue
            tgt_i = (target.index_select(0, idx) - lo)[:, None]  # [N_i, 1]
            head_i = head.index_select(0, idx)  # [N_i, head_size]
            if i == 0:
                lp = head_i.gather(1, tgt_i).squeeze(1)
            else:
                tail = self._logprob(hidden.index_select(0, idx), i)  # [N_i, V_i]
                lp = head_i[:, self._head_column(i)] + tail.gather(1, tgt_i).squeeze(1)
            out = out.index_copy(0, idx, lp)
        return out

    def _target_log_probs_by_rows(self, hidden: Tensor, target: Tensor) -> Tensor:
        """Without gradients and with one cluster: the target log-probabilities ``[N]`` (float32), ``ROW_BLOCK`` rows
        at a time, so that each block's logits, their float32 copy and their log-softmax stay in cache instead of
        going through memory as ``[N, V]`` tensors (16-bit logits: products of up to ``PRODUCT_LOGITS_16BIT``, their
        log-softmax by ``ROW_BLOCK`` rows). The same numbers as the whole at once."""
        out = torch.empty(target.shape, dtype=torch.float32, device=hidden.device)  # [N]
        rows = ROW_BLOCK
        if hidden.dtype in (torch.bfloat16, torch.float16):
            rows = max(ROW_BLOCK, PRODUCT_LOGITS_16BIT // self.n_token // ROW_BLOCK * ROW_BLOCK)
        for lo in range(0, hidden.size(0), rows):
            _target_log_probs_in_blocks(self._logit(hidden[lo:lo + rows], 0), target[lo:lo + rows], out[lo:lo + rows])
        return out

    def log_probs(self, hidden: Tensor) -> Tensor:
        """Full-vocabulary log-probabilities: ``[N, d_proj] -> [N, V]`` float32."""
        head = self._logprob(hidden, 0)  # [N, head_size]
        parts = [head[:, : self.shortlist_size]]
        for i in range(1, self.n_clusters + 1):
            parts.append(head[:, self._head_column(i), None] + self._logprob(hidden, i))  # [N, V_i]
        return torch.cat(parts, dim=-1)  # [N, V]


def _target_log_probs_in_blocks(logits: Tensor, target: Tensor, out: Tensor, lse: Optional[Tensor] = None) -> None:
    """``out[n] = log_softmax(logits.float())[n, target[n]]`` for logits ``[N, V]``, ``ROW_BLOCK`` rows at a time (each
    block's float32 copy and log-softmax stay in cache); with ``lse``, each row's log-sum-exp too."""
    for lo in range(0, logits.size(0), ROW_BLOCK):
        block = logits[lo:lo + ROW_BLOCK].float()  # [rows, V]
        logp = F.log_softmax(block, dim=-1)
        out[lo:lo + ROW_BLOCK] = logp.gather(1, target[lo:lo + ROW_BLOCK, None]).squeeze(1)
        if lse is not None:
            lse[lo:lo + ROW_BLOCK] = block[:, 0] - logp[:, 0]  # logsumexp = x - log_softmax(x), any column


class _TargetLogSoftmax(torch.autograd.Function):
    """``log_softmax(logits)[n, target[n]]``, ``[N, V], [N] -> [N]``, with a one-pass backward.

    The composed ops' backward builds a zero ``[N, V]`` gradient, scatters into it, then runs the
    log-softmax backward (three passes over ``[N, V]`` plus a copy); here the gradient
    ``g * (onehot - softmax)`` is written in one pass from the saved log-probabilities.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor) -> Tensor:
        logp = torch.log_softmax(logits, dim=-1)  # [N, V]
        ctx.save_for_backward(logp, target)
        return logp.gather(1, target[:, None]).squeeze(1)  # [N]

    @staticmethod
    def backward(ctx, grad: Tensor):
        logp, target = ctx.saved_tensors
        grad_logits = logp.exp().mul_(-grad[:, None])  # [N, V]: -g * softmax
        grad_logits.scatter_add_(1, target[:, None], grad[:, None])  # + g at the target
        return grad_logits, None


class _BlockedTargetLogSoftmax(torch.autograd.Function):
    """``log_softmax(logits.float())[n, target[n]]`` of 16-bit logits ``[N, V]`` (autocast's output product),
    float32 ``[N]``, ``ROW_BLOCK`` rows at a time in both passes.

    :class:`_TargetLogSoftmax` over the float32 copy of the logits writes and reads five ``[N, V]`` float32 tensors
    (the copy, the log-probabilities, their exponential, the gradient, its 16-bit cast) through memory: 200 MB
    each step for the base-like model's 1024 x 10k logits. Here each block's float32 copy, log-softmax and gradient
    stay in cache; the backward keeps only the log-sum-exp ``[N]`` and recomputes the softmax from the logits. The
    gradient ``g * (onehot - softmax)`` is computed in float32 and rounded once to the logits' dtype, as the
    16-bit product's backward would round the float32 one.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor) -> Tensor:
        out = torch.empty(target.shape, dtype=torch.float32, device=logits.device)  # [N]
        lse = torch.empty(target.shape, dtype=torch.float32, device=logits.device)  # [N]
        _target_log_probs_in_blocks(logits, target, out, lse)
        ctx.save_for_backward(logits, target, lse)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        logits, target, lse = ctx.saved_tensors
        grad_logits = torch.empty_like(logits)  # [N, V], the logits' dtype
        for lo in range(0, logits.size(0), ROW_BLOCK):
            hi = lo + ROW_BLOCK
            g = grad[lo:hi, None]  # [rows, 1]
            block = logits[lo:hi].float().sub_(lse[lo:hi, None]).exp_().mul_(-g)  # -g * softmax
            block.scatter_add_(1, target[lo:hi, None], g)  # + g at the target
            grad_logits[lo:hi] = block
        return grad_logits, None
