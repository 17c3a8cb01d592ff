"""Exact cached decoding for Transformer-XL (attn_type 0).

The plain model caches each layer's *input states* as memory and, at every call, projects the
whole memory through W_k and W_v again: a decoding step costs O((M + t) * d^2). This cache keeps
each layer's *projected* keys and values instead, plus the position keys ``W_r R`` for every
distance, so a step costs O(d^2) for the new token's projections and O((M + t) * d) for attention.

Which keys a token may see follows the plain segment-by-segment model exactly: token ``i`` of a row
sees the tokens of its own segment up to itself plus the ``mem_len`` tokens before the segment (its
memory), and with ``same_length`` only keys within the model's ``same_length_window`` for the memory the
segment has (``mem_len``; for TensorFlow models the memory present + 1, which grows from an empty start).
Segments are either

* ``segment`` decoding: consecutive runs of ``tgt_len`` tokens, as in training and evaluation; or
* ``sliding`` decoding: the prompt is one segment, and every token after it (see :meth:`end_prompt`)
  is a segment of its own, so it sees exactly the ``mem_len`` tokens before it.

With ``config.mem_init == "zeros"`` a fresh row's memory is ``mem_len`` zero states (token indices
``-mem_len .. -1``), whose projected keys and values are cached like any other. A cache can also begin from a
given memory (``mems``: each layer's input states of the ``M`` steps before, as ``forward(..., fixed_memory=True)``
keeps them, with ``mems_mask`` for hidden slots), projected with the model's weights of now: after the weights
change (an agent's update), the keys and values of steps taken before are stale, and a cache rebuilt this way from
the memory equals the fixed-length memory projected again. Each row keeps its own
segment phase, so rows of a left-padded batch give exactly what they would give alone. ``starts`` (True where an
episode or document begins in a row) hides every earlier key from that step on, per row, as the model's forward
does. Keys no future query can see are dropped.

Layout: keys/values ``[B, H, T, D]``, views of preallocated buffers (:class:`KVBuffer`), so a step
appends in place instead of re-concatenating the whole cache; ``index [B, T]`` holds each cached key's
token index within its row (``PAD`` for padding).

Sliding decoding after the prompt repeats itself: while every row has fed the same tokens (no padding, no
``starts``), each row's keys are consecutive token indices ending just before the new token, so which keys a new
token sees, and which keys are dropped after it, depend only on how many keys are cached and how much memory the
token has. Such a step computes both once (:meth:`begin`, :meth:`end`) and then reads them back: a few operations
instead of some forty.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from .attention import Visibility, distances, forbidden, hide, sinusoid_table
from .config import DECODINGS

PAD = -(1 << 62)  # the token index of padding: below any real index, zero-memory ones included


class KVBuffer:
    """A growing ``[B, H, T, D]`` sequence kept in a preallocated buffer.

    ``append`` writes in place (amortised O(new) instead of O(T) for ``torch.cat``), ``drop_front``
    only moves a start offset; when the buffer is full, the live part moves to the front of a buffer
    at least twice its length. :attr:`tensor` is a view whose ``[T, D]`` blocks are row-contiguous, so
    matmuls read it without a copy.
    """

    def __init__(self, like: Tensor, capacity: int = 64):
        bsz, n_head, _, d_head = like.shape
        self.data = like.new_empty(bsz, n_head, capacity, d_head)  # [B, H, capacity, D]
        self.start = self.end = 0

    @property
    def tensor(self) -> Tensor:
        return self.data[:, :, self.start:self.end]  # [B, H, T, D]

    def append(self, x: Tensor) -> Tensor:
        n = x.size(2)
        if self.end + n > self.data.size(2):
            live = self.end - self.start
            grown = self.data.new_empty(*self.data.shape[:2], max(2 * (live + n), 64), self.data.size(3))
            grown[:, :, :live] = self.tensor
            self.data, self.start, self.end = grown, 0, live
        self.data[:, :, self.end:self.end + n] = x
        self.end += n
        return self.tensor

    def drop_front(self, n: int) -> None:
        self.start += n

    def keep_rows(self, n: int) -> None:
        """The first ``n`` rows only (a view of the buffer)."""
        self.data = self.data[:n]

    def select_rows(self, rows: Tensor) -> None:
        """The rows ``rows [B']`` of the live part, in that order. As many rows as before (beam search): only the
        rows that change are copied, in place; otherwise a new buffer of the same capacity."""
        if rows.numel() == self.data.size(0):
            changed = (rows != torch.arange(rows.numel(), device=rows.device)).nonzero().flatten()  # [C]
            if changed.numel():
                live = self.tensor  # a view of the buffer: the assignment writes into it
                live[changed] = live.index_select(0, rows[changed])  # sources read before any row is written
            return
        live = self.tensor.index_select(0, rows)  # [B', H, T, D]
        self.data = self.data.new_empty(rows.numel(), *self.data.shape[1:])
        self.data[:, :, :live.size(2)] = live
        self.start, self.end = 0, live.size(2)

    def reorder(self, order: Tensor) -> Tensor:
        """Put each row's positions in the order ``order [B, T]`` (in place)."""
        live = self.tensor
        self.data[:, :, self.start:self.end] = live.gather(2, order[:, None, :, None].expand_as(live))
        return self.tensor


class DecodingCache:
    """Projected keys and values of every layer for a batch being decoded.

    A value the model's forward takes and extends, as HuggingFace's ``past_key_values``:
    ``model(ids, cache=cache)`` runs the model's own layers, each of which appends its keys and values
    (:meth:`layer`) and attends over what this cache lets each token see (:meth:`begin`). :meth:`extend` is that
    call for any number of new tokens per row (a prompt, then one at a time); it returns the last layer's
    states, which ``model.crit.log_probs`` turns into next-token log-probabilities.
    """

    def __init__(self, model, batch_size: int, max_distance: Optional[int] = None, decoding: Optional[str] = None,
                 mems: Optional[List[Tensor]] = None, mems_mask: Optional[Tensor] = None):
        cfg = model.config
        if cfg.attn_type != 0:
            raise ValueError("DecodingCache supports attn_type 0 (use generate(..., method='segment') otherwise)")
        self.model = model
        self.batch_size = batch_size
        self.tgt_len, self.mem_len = model.tgt_len, model.mem_len
        decoding = decoding or cfg.decoding
        if decoding not in DECODINGS:
            raise ValueError(f"decoding: must be 'segment' or 'sliding', got {decoding!r}")
        p = next(model.parameters())
        self.device, self.dtype = p.device, p.dtype
        n_head, d_head = cfg.n_head, cfg.d_head
        like = p.new_zeros(batch_size, n_head, 0, d_head)
        self.oldest = -self.mem_len if cfg.mem_init == "zeros" else 0  # token index of a row's first state
        self.keys: List[KVBuffer] = [KVBuffer(like) for _ in model.layers]
        self.values: List[KVBuffer] = [KVBuffer(like) for _ in model.layers]
        self.index = torch.zeros(batch_size, 0, dtype=torch.long, device=self.device)  # [B, T]
        self.count = torch.zeros(batch_size, dtype=torch.long, device=self.device)  # real tokens per row
        # sliding: token indices >= prompt_end are segments of their own (PAD until end_prompt)
        self.prompt_end = torch.full_like(self.count, PAD) if decoding == "sliding" else None
        self.episode_first = torch.full_like(self.count, PAD)  # token index of each row's current episode start
        self._r_k: List[Optional[Tensor]] = [None] * len(model.layers)
        self._order: Optional[Tensor] = None  # [B, T+n]: how the current forward reorders each row's keys (begin)
        # sliding steps that repeat (module docstring): rows in lockstep, tokens fed per row, and for each
        # (rows, cached keys, memory present) the step's mask (None: nothing hidden) and the keys it drops
        self._lockstep, self._steps, self._prompt_over = True, 0, False
        self._repeats: Dict[Tuple[int, int, int], Tuple[Optional[Tensor], int]] = {}
        self._repeat_key: Optional[Tuple[int, int, int]] = None
        self._r_len = 0
        self._ensure_positions(max_distance or (self.mem_len + 2 * self.tgt_len + 1))
        if mems is not None:
            self._add_memory(mems, mems_mask)
        elif cfg.mem_init == "zeros" and self.mem_len > 0:
            self._add_zero_memory()

    # ------------------------------------------------------------------ position keys
    @torch.no_grad()
    def _ensure_positions(self, n_dist: int) -> None:
        """Position keys W_r R for distances ``n_dist-1 .. 0`` (descending), per layer: ``[H, n_dist, D]``."""
        if n_dist <= self._r_len:
            return
        n_dist = max(n_dist, 2 * self._r_len)
        pos = distances(n_dist - 1, self.model.clamp_len, self.device)  # distances n_dist-1 .. 0, clamped
        r = sinusoid_table(pos, self.model.config.d_model).to(self.dtype)  # [n_dist, d]
        for i, layer in enumerate(self.model.layers):
            self._r_k[i] = layer.dec_attn.position_keys(r).contiguous()  # [H, n_dist, D]
        self._r_len = n_dist

    @torch.no_grad()
    def _add_memory(self, mems: List[Tensor], mems_mask: Optional[Tensor]) -> None:
        """Cache the keys and values of the given memory, ``n_layer x [B, M, d]`` (token indices -M .. -1; a slot
        hidden by ``mems_mask [B, M]`` becomes padding, which no query sees)."""
        if len(mems) != len(self.model.layers) or mems[0].size(0) != self.batch_size:
            raise ValueError(f"mems: expected {len(self.model.layers)} tensors of [{self.batch_size}, M, d]")
        m = mems[0].size(1)
        for i, layer in enumerate(self.model.layers):
            _, k, v = layer.dec_attn.project(mems[i].to(self.dtype))  # [B, H, M, D]
            self.keys[i].append(k)
            self.values[i].append(v)
        index = torch.arange(-m, 0, device=self.device).expand(self.batch_size, -1)
        self.index = index if mems_mask is None else torch.where(mems_mask.to(self.device), PAD, index)  # [B, M]
        self.oldest = -m
        self._lockstep = mems_mask is None

    @torch.no_grad()
    def _add_zero_memory(self) -> None:
        """Cache the keys and values of ``mem_len`` zero states per layer (token indices -mem_len .. -1)."""
        zeros = next(self.model.parameters()).new_zeros(self.batch_size, self.mem_len, self.model.config.d_model)
        for i, layer in enumerate(self.model.layers):
            _, k, v = layer.dec_attn.project(zeros)  # [B, H, mem_len, D]
            self.keys[i].append(k)
            self.values[i].append(v)
        index = torch.arange(-self.mem_len, 0, device=self.device)
        self.index = index.expand(self.batch_size, -1).clone()  # [B, mem_len]

    def end_prompt(self) -> None:
        """Sliding decoding: every token fed from now on is a segment of its own."""
        if self.prompt_end is not None:
            self.prompt_end = self.count.clone()
            self._prompt_over = True

    @property
    def prompt_over(self) -> bool:
        """Whether :meth:`end_prompt` was called (sliding decoding)."""
        return self._prompt_over

    # ------------------------------------------------------------------ visibility
    def _segment_start(self, q: Tensor) -> Tensor:
        """Token index of the first token of each query's segment: ``[B, n] -> [B, n]``."""
        if self.prompt_end is None:
            return torch.div(q, self.tgt_len, rounding_mode="floor") * self.tgt_len
        end = self.prompt_end[:, None]  # [B, 1]
        return torch.where((end == PAD) | (q < end), torch.zeros_like(q), q)

    def _episode_first(self, q_index: Tensor, starts: Optional[Tensor]) -> Tensor:
        """Token index of the first step of each query's episode: ``[B, n]`` (PAD: no start seen)."""
        if starts is None:
            return self.episode_first[:, None].expand_as(q_index)
        began = torch.where(starts & (q_index != PAD), q_index, torch.full_like(q_index, PAD))  # [B, n]
        return torch.maximum(began.cummax(dim=1).values, self.episode_first[:, None])

    def _forbidden(self, q_index: Tensor, k_index: Tensor, episode_first: Tensor) -> Tensor:
        """``[B, n, T]`` bool: True where query (token index ``q_index [B, n]``) may not see key ``k_index [B, T]``.

        The rule of :mod:`transformer_xl.model.attention.visibility`, with each query's segment memory as the
        oldest key it sees (and no key before its episode's first step, ``episode_first [B, n]``), and padding as
        hidden keys (a padding query sees itself only: a finite, ignored output).
        """
        start = self._segment_start(q_index)[:, :, None]  # [B, n, 1]
        first = start - self.mem_len  # [B, n, 1]
        window = self.model.same_length_window(start - first.clamp(min=self.oldest))  # memory present: [B, n, 1]
        first = torch.maximum(first, episode_first[:, :, None])
        mask = forbidden(q_index[:, :, None], k_index[:, None, :], window, first)  # [B, n, T]
        n, klen = q_index.size(1), k_index.size(1)
        keys = torch.arange(klen, device=q_index.device)
        own = keys[None, :] == torch.arange(klen - n, klen, device=q_index.device)[:, None]
        return hide(mask, k_index == PAD, own)

    def _trim(self) -> int:
        """Drop leading keys that no future query of any row can see; how many were dropped."""
        next_start = self._segment_start(self.count[:, None])[:, 0] - self.mem_len  # [B]
        oldest = torch.maximum(next_start, self.episode_first)  # [B]: nothing before an episode is seen again
        needed = (self.index != PAD) & (self.index >= oldest[:, None])  # [B, T]
        if self.model.same_length:  # the widest window: a segment's memory holds at most mem_len states
            needed &= self.index > (self.count[:, None] - self.model.same_length_window(self.mem_len))
        keep_from = int(needed.any(0).nonzero()[0]) if needed.any() else self.index.size(1)
        self._drop_front(keep_from)
        return keep_from

    def _drop_front(self, n: int) -> None:
        if n > 0:
            self.index = self.index[:, n:]
            for buf in self.keys + self.values:
                buf.drop_front(n)

    def _repeat_of(self, n: int, padding_mask: Optional[Tensor], starts: Optional[Tensor]):
        """The key of a sliding step that repeats (module docstring), or None: one new token per row, after the
        prompt, every row in lockstep."""
        if n != 1 or padding_mask is not None or starts is not None or not (self._lockstep and self._prompt_over):
            return None
        return self.batch_size, self.index.size(1), min(self.mem_len, self._steps - self.oldest)

    # ------------------------------------------------------------------ the cache protocol of the model's forward
    def begin(self, shape, padding_mask: Optional[Tensor] = None, starts: Optional[Tensor] = None) -> Visibility:
        """Start a forward over ``shape = (B, n)`` new steps (True in ``padding_mask [B, n]`` = padding, in
        ``starts [B, n]`` = an episode begins): the keys each new step may see, as a :class:`Visibility` with mask
        ``[B, n, T+n]`` over the cached and new keys."""
        bsz, n = shape
        if bsz != self.batch_size:
            raise ValueError(f"cache: holds {self.batch_size} rows, got a batch of {bsz}")
        self._repeat_key = self._repeat_of(n, padding_mask, starts)
        seen = self._repeats.get(self._repeat_key) if self._repeat_key is not None else None
        if seen is not None:
            self._order, self._pending = None, None
            self._ensure_positions(self.index.size(1) + 2)
            return Visibility(1, self.index.size(1), seen[0], 0, kernel_rule=False)
        if starts is not None or (padding_mask is not None and self._lockstep and bool(padding_mask.any())):
            self._lockstep = False
        pad = padding_mask if padding_mask is not None else torch.zeros(bsz, n, dtype=torch.bool, device=self.device)
        real = (~pad).long()
        q_index = torch.where(pad, torch.full_like(real, PAD), self.count[:, None] + real.cumsum(1) - 1)  # [B, n]
        k_index = torch.cat([self.index, q_index], dim=1)  # [B, T+n]
        # Distances are counted in key columns. With zero memory, a left-padded row's padding would come between its
        # zero states and its tokens: each row's keys are kept in token order instead (padding first).
        self._order = None
        if self.oldest < 0 and bool(pad.any()):
            self._order = k_index.argsort(dim=1, stable=True)  # [B, T+n]
            k_index = k_index.gather(1, self._order)
        self._ensure_positions(k_index.size(1) + 1)
        episode_first = self._episode_first(q_index, starts)  # [B, n]
        mask = self._forbidden(q_index, k_index, episode_first)  # [B, n, T+n]
        self._pending = (k_index, real.sum(1), episode_first[:, -1], n, mask)
        return Visibility(n, k_index.size(1) - n, mask, 0, kernel_rule=False)

    def layer(self, i: int) -> "LayerCache":
        """The view of layer ``i`` that its attention extends (:class:`LayerCache`)."""
        return LayerCache(self, i)

    def end(self) -> None:
        """Finish the forward begun by :meth:`begin`: count the new tokens and drop keys no one will see."""
        if self._pending is None:  # a step seen before: its token index is the count, its drop is known
            self.index = torch.cat([self.index, self.count[:, None]], dim=1)  # [B, T+1]
            self.count = self.count + 1
            self._steps += 1
            self._drop_front(self._repeats[self._repeat_key][1])
            return
        self.index, added, self.episode_first, n, mask = self._pending
        self.count = self.count + added
        self._steps += n
        dropped = self._trim()
        if self._repeat_key is not None:
            self._repeats[self._repeat_key] = (mask if bool(mask.any()) else None, dropped)

    @torch.no_grad()
    def extend(self, input_ids: Tensor, padding_mask: Optional[Tensor] = None,
               starts: Optional[Tensor] = None) -> Tensor:
        """Feed ``input_ids [B, n]`` (True in ``padding_mask [B, n]`` = padding) through the model with this cache;
        returns the last layer's states ``[B, n, d_model]``."""
        return self.model.cached_transformer(input_ids, self, padding_mask, starts=starts)

    def keep_rows(self, n: int) -> None:
        """Keep the first ``n`` rows only (the others left the batch, e.g. documents that ended)."""
        if not 0 < n <= self.batch_size:
            raise ValueError(f"keep_rows: expected 1..{self.batch_size} rows, got {n}")
        for buf in self.keys + self.values:
            buf.keep_rows(n)
        self.index, self.count, self.episode_first = self.index[:n], self.count[:n], self.episode_first[:n]
        if self.prompt_end is not None:
            self.prompt_end = self.prompt_end[:n]
        self.batch_size = n

    def select_rows(self, rows: Tensor) -> None:
        """Keep the rows ``rows [B']`` (indices into the batch, repeats allowed), in that order: beam search keeps
        the rows of the beams that go on."""
        rows = rows.to(self.device)
        for buf in self.keys + self.values:
            buf.select_rows(rows)
        self.index, self.count = self.index.index_select(0, rows), self.count.index_select(0, rows)
        self.episode_first = self.episode_first.index_select(0, rows)
        if self.prompt_end is not None:
            self.prompt_end = self.prompt_end.index_select(0, rows)
        self.batch_size = rows.numel()

    def __len__(self) -> int:
        """Number of cached key positions (memory plus current segment, padding included)."""
        return self.index.size(1)


class LayerCache:
    """One layer's part of a :class:`DecodingCache`, as the layer's attention uses it: ``update`` appends the
    new tokens' projected keys and values and returns all of them; ``position_keys`` gives ``W_r R`` for the
    distances ``klen .. 0``."""

    def __init__(self, cache: DecodingCache, i: int):
        self.cache, self.i = cache, i

    def update(self, k: Tensor, v: Tensor):
        """``k, v [B, H, n, D]`` -> every cached key and value, these last (each row in token order): 2 x
        ``[B, H, T+n, D]``."""
        c = self.cache
        keys, values = c.keys[self.i].append(k), c.values[self.i].append(v)
        if c._order is not None:
            keys, values = c.keys[self.i].reorder(c._order), c.values[self.i].reorder(c._order)
        return keys, values

    def position_keys(self, klen: int) -> Tensor:
        """``[H, klen+1, D]`` for distances ``klen .. 0``."""
        return self.cache._r_k[self.i][:, self.cache._r_len - klen - 1:]
