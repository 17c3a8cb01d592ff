"""The graph of cached decoding: one token per row, with the projected keys and values as state.

The segment graph (:mod:`.graph`) re-projects its whole memory through ``W_k`` and ``W_v`` at every call, so a
token costs O(mem_len * d^2). This graph keeps what ``generate`` keeps (:class:`~transformer_xl.generation.DecodingCache`):
every layer's projected keys and values of the last ``S`` positions, and the position keys ``W_r R`` of every
distance (constants of the graph), so a token costs O(d^2 + S * d)::

    log_probs, new_keys, new_values, new_hidden = graph(input_ids, keys, values, hidden, position, segment_start)

    input_ids       [B, 1]                     int64    the new token of each row
    keys, values    [n_layer, B, H, S, D]      float32  the state: projections of the last S positions
    hidden          [B, S]                     bool     True where a slot holds no position (yet)
    position        [B]                        int64    the new token's index in its row (0 for the first)
    segment_start   [B]                        int64    index of the first token of its segment
    log_probs       [B, V]                     float32  next-token log-probabilities
    new_keys, new_values, new_hidden                    the state shifted by one slot, the new token's last

Which keys a token sees is the rule of the model (:mod:`transformer_xl.model.attention.visibility`): its segment
so far and the ``mem_len`` positions before the segment, within the ``same_length`` window. The caller says
where segments start: ``segment`` decoding (models trained here) starts one every ``tgt_len`` tokens from the
row's first; ``sliding`` (HuggingFace's) makes the prompt one segment and every later token a segment of its
own. ``S`` must hold the longest such view (``mem_len`` plus the longest segment; by default
``mem_len + tgt_len``). The fresh state: zeros, every slot hidden, except for ``mem_init == "zeros"`` models,
whose last ``mem_len`` slots hold the projections of zero states (``fresh_state``; in ``OUT.json``).
"""

from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor, nn

from ..model import TransformerXL
from ..model.attention import Visibility
from ..model.attention.backends import masked_softmax_attend
from ..model.attention.layers import merge_heads
from ..model.attention.relative import distances, sinusoid_table


class DecodeGraph(nn.Module):
    """One cached decoding step (module docstring) of a Transformer-XL (attn_type 0) with ``slots`` positions."""

    def __init__(self, model: TransformerXL, slots: int):
        super().__init__()
        if model.config.attn_type != 0:
            raise ValueError("decoding graph: needs attn_type 0 (the relative attention)")
        self.model, self.slots = model, slots
        with torch.no_grad():
            r = sinusoid_table(distances(slots, model.clamp_len, "cpu"), model.config.d_model)  # [S+1, d]
            r_k = torch.stack([layer.dec_attn.position_keys(r) for layer in model.layers])  # [n_layer, H, S+1, D]
        self.register_buffer("r_k", r_k.contiguous(), persistent=False)
        self.oldest = -model.mem_len if model.config.mem_init == "zeros" else 0  # a row's first state

    def visible(self, position: Tensor, segment_start: Tensor) -> Tensor:
        """How many of the last slots the new token sees, itself included: ``[B]``."""
        m = self.model
        count = m.mem_len + (position - segment_start) + 1  # its segment's memory, the segment so far, itself
        if m.same_length:
            present = torch.clamp(segment_start - self.oldest, max=m.mem_len)  # memory before the segment
            window = m.same_length_window(present)  # mem_len, or (TensorFlow) one per row
            count = count.clamp(max=window) if isinstance(window, int) else torch.minimum(count, window)
        return count

    def forward(self, input_ids: Tensor, keys: Tensor, values: Tensor, hidden: Tensor, position: Tensor,
                segment_start: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        m, s = self.model, self.slots
        new_hidden = torch.cat([hidden[:, 1:], torch.zeros_like(hidden[:, :1])], dim=1)  # [B, S]
        slot = torch.arange(s, device=input_ids.device)  # [S]
        unseen = (slot[None, :] < s - self.visible(position, segment_start)[:, None]) | new_hidden  # [B, S]
        vis = Visibility(1, s - 1, unseen[:, None, :], 0, kernel_rule=False)  # mask [B, 1, S]
        h = m.drop(m.word_emb(input_ids))  # [B, 1, d]
        u, v_bias = getattr(m, "r_w_bias", None), getattr(m, "r_r_bias", None)
        new_keys, new_values = [], []
        for i, layer in enumerate(m.layers):
            attn = layer.dec_attn
            u_i, v_i = attn.biases(u, v_bias)
            q, k, v = attn.project(h)  # [B, H, 1, D]
            k_all = torch.cat([keys[i][:, :, 1:], k], dim=2)  # [B, H, S, D]
            v_all = torch.cat([values[i][:, :, 1:], v], dim=2)
            score = attn.score(q, k_all, self.r_k[i], u_i, v_i)  # [B, H, 1, S]
            h = layer.pos_ff(attn.output(h, merge_heads(masked_softmax_attend(score, v_all, vis, attn.dropatt))))
            new_keys.append(k_all)
            new_values.append(v_all)
        log_probs = m.crit.log_probs(m.drop(h)[:, -1])  # [B, V]
        return log_probs, torch.stack(new_keys), torch.stack(new_values), new_hidden


@torch.no_grad()
def fresh_state(model: TransformerXL, batch_size: int, slots: int) -> Tuple[Tensor, Tensor, Tensor]:
    """``(keys, values, hidden)`` of a fresh start: zeros and every slot hidden; for ``mem_init == "zeros"`` the
    last ``mem_len`` slots hold the projections of zero states (each layer's own)."""
    cfg = model.config
    keys = torch.zeros(cfg.n_layer, batch_size, cfg.n_head, slots, cfg.d_head)
    values = torch.zeros_like(keys)
    hidden = torch.ones(batch_size, slots, dtype=torch.bool)
    if cfg.mem_init == "zeros" and model.mem_len > 0:
        zeros = torch.zeros(batch_size, 1, cfg.d_model)
        for i, layer in enumerate(model.layers):
            _, k, v = layer.dec_attn.project(zeros)  # [B, H, 1, D]: the same for every zero state
            keys[i, :, :, slots - model.mem_len:] = k
            values[i, :, :, slots - model.mem_len:] = v
        hidden[:, slots - model.mem_len:] = False
    return keys, values, hidden


__all__ = ["DecodeGraph", "fresh_state"]
