"""The graph of cached decoding: one token per row, with the projected keys and values as state.

The segment graph (:mod:`.graph`) re-projects its whole memory through ``W_k`` and ``W_v`` at every call, so a
token costs O(mem_len * d^2). This graph keeps what ``generate`` keeps
(:class:`~transformer_xl.generation.DecodingCache`):
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
        s = self.slots
        new_hidden = torch.cat([hidden[:, 1:], torch.zeros_like(hidden[:, :1])], dim=1)  # [B, S]
        slot = torch.arange(s, device=input_ids.device)  # [S]
        unseen = (slot[None, :] < s - self.visible(position, segment_start)[:, None]) | new_hidden  # [B, S]
        cache = SlotCache(keys, values, self.r_k, Visibility(1, s - 1, unseen[:, None, :], 0, kernel_rule=False))
        out = self.model(input_ids, cache=cache)  # the model's own layers and attention back-end
        log_probs = self.model.crit.log_probs(out.hidden_states[:, -1])  # [B, V]
        return log_probs, torch.stack(cache.new_keys), torch.stack(cache.new_values), new_hidden


class SlotCache:
    """The decoding-cache protocol of the model's forward (as :class:`~transformer_xl.generation.DecodingCache`)
    over a fixed number of slots: each layer's state ``keys[i], values[i] [B, H, S, D]`` loses its oldest slot
    and takes the new token's projections last; the position keys are the graph's constants ``r_k [n_layer, H,
    S+1, D]``; which slots the token sees is ``vis``, decided by the graph."""

    def __init__(self, keys: Tensor, values: Tensor, r_k: Tensor, vis: Visibility):
        self.keys, self.values, self.r_k, self.vis = keys, values, r_k, vis
        self.new_keys, self.new_values = [], []

    def begin(self, shape, padding_mask=None, starts=None) -> Visibility:
        return self.vis

    def layer(self, i: int) -> "SlotCache._Layer":
        return SlotCache._Layer(self, i)

    def end(self) -> None:
        pass

    class _Layer:
        def __init__(self, cache: "SlotCache", i: int):
            self.cache, self.i = cache, i

        def update(self, k: Tensor, v: Tensor) -> Tuple[Tensor, Tensor]:
            """``k, v [B, H, 1, D]`` -> the shifted state with them last: 2 x ``[B, H, S, D]``."""
            c = self.cache
            k_all = torch.cat([c.keys[self.i][:, :, 1:], k], dim=2)
            v_all = torch.cat([c.values[self.i][:, :, 1:], v], dim=2)
            c.new_keys.append(k_all)
            c.new_values.append(v_all)
            return k_all, v_all

        def position_keys(self, klen: int) -> Tensor:
            """``[H, S+1, D]`` for distances ``S .. 0`` (``klen`` is ``S``)."""
            return self.cache.r_k[self.i]


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


__all__ = ["DecodeGraph", "SlotCache", "fresh_state"]
