"""A slow, independent reference of the paper's language model, for tests only.

It reads a state dict in the ORIGINAL code's naming (``MemTransformerLM``) and evaluates the
paper's equations literally: one batch row at a time, one (query, key) pair at a time, with the
relative distance ``i - j`` written out, and the adaptive softmax as an explicit full
distribution. Nothing here is shared with ``transformer_xl.model``; it exists so that the fast
model can be checked against mathematics rather than against itself.

Semantics of the paper's code that this reference reproduces on purpose:
* memory of layer l = the inputs of layer l over the last ``mem_len`` positions;
* ``same_length``: a query sees keys at distance < ``mem_len`` only;
* ``clamp_len > 0``: sinusoid distances above it use ``clamp_len``;
* attn_type 1: learned tables whose last row is distance 0, far distances use row 0;
* attn_type 2/3: absolute positions counted back from the end of the current window; the cached
  states already carry their positions from when they were current, as in the paper's code;
* adaptive softmax: tail cluster c's head log-prob is head column ``-c``.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional

import torch

Tensor = torch.Tensor


def sinusoid(pos: float, d: int) -> Tensor:
    """R_pos, [d]: sines of pos / 10000^(2k/d) then cosines."""
    k = torch.arange(0, d, 2, dtype=torch.float64)
    angle = pos / (10000 ** (k / d))
    return torch.cat([torch.sin(angle), torch.cos(angle)]).float()


def layer_norm(x: Tensor, sd: Dict[str, Tensor], prefix: str, eps: float = 1e-5) -> Tensor:
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * sd[prefix + ".weight"] + sd[prefix + ".bias"]


def brute_force_rel_scores(q: Tensor, k: Tensor, w_r: Tensor, u: Tensor, v: Tensor, mem_len_window: Optional[int],
                           clamp_len: int, d_model: int) -> Tensor:
    """The paper's score for one batch row, pair by pair (unscaled).

    q [H, L, D], k [H, K, D], w_r [H*D, d_model] (W_r), u, v [H, D].
    Returns [H, L, K] with -inf where the key is not visible (future, or outside the same-length window).
    """
    n_head, qlen, d_head = q.shape
    klen = k.size(1)
    mlen = klen - qlen
    out = torch.full((n_head, qlen, klen), float("-inf"))
    for i in range(qlen):
        for j in range(klen):
            dist = (mlen + i) - j
            if dist < 0 or (mem_len_window is not None and dist >= mem_len_window):
                continue
            pos = min(dist, clamp_len) if clamp_len > 0 else dist
            r = (w_r @ sinusoid(pos, d_model)).view(n_head, d_head)  # W_r R_{i-j}
            for n in range(n_head):
                out[n, i, j] = (q[n, i] + u[n]) @ k[n, j] + (q[n, i] + v[n]) @ r[n]
    return out


def _softmax_attend(score: Tensor, vals: Tensor, d_head: int) -> Tensor:
    """score [H, L, K] unscaled, vals [H, K, D] -> [L, H*D]."""
    prob = torch.softmax(score / math.sqrt(d_head), dim=-1)
    return (prob @ vals).transpose(0, 1).reshape(score.size(1), -1)


def _split_heads(x: Tensor, n_head: int) -> Tensor:  # [T, H*D] -> [H, T, D]
    return x.view(x.size(0), n_head, -1).transpose(0, 1)


def _attention(sd, a, l, h: Tensor, mem: Optional[Tensor], mem_for_kv: Optional[Tensor]) -> Tensor:
    """One attention block for one row. h [L, d]; mem [M, d] (for attn 2/3, positions already added)."""
    p = f"layers.{l}.dec_attn"
    n_head, d_head = a["n_head"], a["d_head"]
    qlen = h.size(0)
    mem = mem_for_kv if mem_for_kv is not None else mem
    cat = h if mem is None else torch.cat([mem, h], 0)  # [K, d]
    mlen = cat.size(0) - qlen
    window = a["mem_len"] if a.get("same_length") else None
    at = a["attn_type"]
    if at in (0, 1):
        x = layer_norm(cat, sd, p + ".layer_norm") if a["pre_lnorm"] else cat
        q_all, k_all, v_all = (x @ sd[p + ".qkv_net.weight"].t()).chunk(3, -1)
        q, k, vals = (_split_heads(t, n_head) for t in (q_all[-qlen:], k_all, v_all))
    else:
        x = layer_norm(cat, sd, p + ".layer_norm") if a["pre_lnorm"] else cat
        q = _split_heads(h @ sd[p + ".q_net.weight"].t(), n_head)  # queries from the un-normalised states
        k_all, v_all = (x @ sd[p + ".kv_net.weight"].t()).chunk(2, -1)
        k, vals = _split_heads(k_all, n_head), _split_heads(v_all, n_head)
    if at == 0:
        u = sd[p + ".r_w_bias"] if p + ".r_w_bias" in sd else sd["r_w_bias"]
        v = sd[p + ".r_r_bias"] if p + ".r_r_bias" in sd else sd["r_r_bias"]
        score = brute_force_rel_scores(q, k, sd[p + ".r_net.weight"], u, v, window, a["clamp_len"], a["d_model"])
    else:
        score = torch.full((n_head, qlen, cat.size(0)), float("-inf"))
        table_e, table_b = None, None
        if at == 1:
            table_e, table_b = sd["r_emb"][l], sd["r_bias"][l]
            if a["clamp_len"] > 0:
                table_e, table_b = table_e[-a["clamp_len"]:], table_b[-a["clamp_len"]:]
        for i in range(qlen):
            for j in range(cat.size(0)):
                dist = mlen + i - j
                if dist < 0 or (window is not None and dist >= window):
                    continue
                for n in range(n_head):
                    s = q[n, i] @ k[n, j]
                    if at == 1:
                        row = max(0, table_e.size(0) - 1 - dist)
                        s = (q[n, i] + sd["r_w_bias"][l, n]) @ k[n, j] + q[n, i] @ table_e[row, n] + table_b[row, n]
                    score[n, i, j] = s
    vec = _softmax_attend(score, vals, d_head)  # [L, H*D]
    out = vec @ sd[p + ".o_net.weight"].t()
    return h + out if a["pre_lnorm"] else layer_norm(h + out, sd, p + ".layer_norm")


def _feed_forward(sd, a, l, h: Tensor) -> Tensor:
    p = f"layers.{l}.pos_ff"

    def core(x):
        x = torch.relu(x @ sd[p + ".CoreNet.0.weight"].t() + sd[p + ".CoreNet.0.bias"])
        return x @ sd[p + ".CoreNet.3.weight"].t() + sd[p + ".CoreNet.3.bias"]

    if a["pre_lnorm"]:
        return h + core(layer_norm(h, sd, p + ".layer_norm"))
    return layer_norm(h + core(h), sd, p + ".layer_norm")


def _bounds(a) -> List[int]:
    return [0] + list(a.get("cutoffs") or []) + [a["n_token"]]


def embed(sd, a, token: int) -> Tensor:
    """Adaptive input embedding of one token, scaled by sqrt(d_model)."""
    bounds, d_model = _bounds(a), a["d_model"]
    if a.get("div_val", 1) == 1:
        e = sd["word_emb.emb_layers.0.weight"][token]
        if "word_emb.emb_projs.0" in sd:
            e = sd["word_emb.emb_projs.0"] @ e
    else:
        c = max(i for i in range(len(bounds) - 1) if bounds[i] <= token)
        e = sd[f"word_emb.emb_projs.{c}"] @ sd[f"word_emb.emb_layers.{c}.weight"][token - bounds[c]]
    return e * math.sqrt(d_model)


def full_log_probs(sd, a, hid: Tensor) -> Tensor:
    """Adaptive softmax as an explicit distribution over the vocabulary: hid [d_model] -> [V]."""
    bounds = _bounds(a)
    n_clusters = len(bounds) - 2
    div1 = a.get("div_val", 1) == 1

    def cluster_logits(c):
        if div1:
            w = sd["crit.out_layers.0.weight"][bounds[c]:bounds[c + 1]]
            b = sd["crit.out_layers.0.bias"][bounds[c]:bounds[c + 1]]
        else:
            w, b = sd[f"crit.out_layers.{c}.weight"], sd[f"crit.out_layers.{c}.bias"]
        proj = sd.get(f"crit.out_projs.{c}")
        x = hid if proj is None else proj.t() @ hid
        return w, b, x

    w, b, x = cluster_logits(0)
    if n_clusters:
        w = torch.cat([w, sd["crit.cluster_weight"]])
        b = torch.cat([b, sd["crit.cluster_bias"]])
    head = torch.log_softmax(w @ x + b, -1)
    parts = [head[: bounds[1]]]
    for c in range(1, n_clusters + 1):
        w, b, x = cluster_logits(c)
        parts.append(head[-c] + torch.log_softmax(w @ x + b, -1))
    return torch.cat(parts)


def _absolute_rows(table: Tensor, n: int) -> Tensor:
    if table.size(0) >= n:
        return table[table.size(0) - n:]
    return torch.cat([table[:1].expand(n - table.size(0), -1), table])


def reference_losses(sd: Dict[str, Tensor], a: dict, segments: List[Tensor], targets: List[Tensor],
                     memories: Optional[list] = None) -> List[Tensor]:
    """Per-token NLL ``[B, L]`` for each segment, carrying memory from segment to segment.

    ``sd`` is a state dict in the original naming; ``a`` holds the original constructor arguments
    (``n_token, d_model, n_head, d_head, n_layer, attn_type, pre_lnorm, mem_len, clamp_len,
    same_length, cutoffs, div_val``). ``segments[s]`` and ``targets[s]`` are ``[B, L]``. ``memories``, when
    given, receives the memory left after each segment: ``n_layer x [B, M, d_model]``.
    """
    sd = {k: v.double().float() for k, v in sd.items()}
    n_layer, d_model, at = a["n_layer"], a["d_model"], a["attn_type"]
    bsz = segments[0].size(0)
    mems: List[List[Tensor]] = [[torch.zeros(0, d_model) for _ in range(n_layer)] for _ in range(bsz)]
    results = []
    for inp, tgt in zip(segments, targets):
        qlen = inp.size(1)
        seg_losses = torch.zeros(bsz, qlen)
        for b in range(bsz):
            h = torch.stack([embed(sd, a, int(t)) for t in inp[b]])  # [L, d]
            mlen = mems[b][0].size(0)
            klen = mlen + qlen
            if at == 2:
                clamp = a["clamp_len"]
                pos = [min(p, clamp) if clamp > 0 else p for p in range(klen - 1, -1, -1)]
                table = torch.stack([sinusoid(p, d_model) for p in pos])  # [K, d]
                h = h + table[mlen:]
            inputs = []
            for l in range(n_layer):
                mem = mems[b][l] if mlen > 0 else None
                mem_kv = None
                if at == 2 and l == 0 and mem is not None:
                    mem_kv = mem + table[:mlen]
                if at == 3:
                    r = sd["r_emb"][l].flatten(1)  # [T, d]
                    if mem is not None:
                        mem_kv = mem + _absolute_rows(r[: r.size(0) - qlen], mlen)
                    h = h + r[r.size(0) - qlen:]
                inputs.append(h)
                h = _feed_forward(sd, a, l, _attention(sd, a, l, h, mem, mem_kv))
            logp = torch.stack([full_log_probs(sd, a, h[t]) for t in range(qlen)])  # [L, V]
            seg_losses[b] = -logp.gather(1, tgt[b][:, None]).squeeze(1)
            mem_len = a["mem_len"]
            mems[b] = [torch.cat([mems[b][l], inputs[l]])[max(0, klen - mem_len):] if mem_len > 0
                       else torch.zeros(0, d_model) for l in range(n_layer)]
        results.append(seg_losses)
        if memories is not None:
            memories.append([torch.stack([mems[b][l] for b in range(bsz)]) for l in range(n_layer)])
    return results
