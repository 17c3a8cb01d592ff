"""The Transformer-XL language model: embedding, layer stack with memory, adaptive softmax.

Public API is batch-first::

    out = model(input_ids, labels=labels, mems=out.mems)   # input_ids, labels: [B, L]
    out.loss       # mean NLL over non-ignored tokens
    out.losses     # [B, L] per-token NLL (0 where labels == -100)
    out.mems       # new memory, n_layer x [B, M, d_model]

``labels[b, t]`` is the token that follows ``input_ids[b, t]`` (the paper's code feeds targets the
same way); positions labelled ``-100`` are ignored.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import List, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

from ..labels import IGNORE_INDEX
from .adaptive import AdaptiveEmbedding, ProjectedAdaptiveLogSoftmax
from .attention import RelativeAttention, Visibility, attention_backend, segment_visibility
from .config import RunLengths, TransformerXLConfig
from .memory import Mems, empty_mems, shift_mems, update_mems, update_mems_mask
from .ops.dropout import Dropout
from .ops.linear import Linear
from .positions import position_scheme
from .saving import PretrainedMixin


@dataclasses.dataclass
class TransformerXLOutput:
    """What a forward pass returns. ``loss``/``losses`` are None without labels."""

    loss: Optional[Tensor]
    losses: Optional[Tensor]  # [B, L]
    mems: Mems  # n_layer x [B, M, d_model]
    mems_mask: Optional[Tensor] = None  # [B, M] bool, True = hidden; None when nothing is hidden
    log_probs: Optional[Tensor] = None  # [B, L, V], when asked for
    hidden_states: Optional[Tensor] = None  # [B, L, d_model], the last layer's output
    all_hidden_states: Optional[List[Tensor]] = None  # n_layer + 1 x [B, L, d_model], when asked for
    cache: Optional[object] = None  # the decoding cache passed in, extended by this call


class PositionwiseFF(nn.Module):
    """Position-wise feed-forward block with residual and layer norm (``CoreNet`` as in the paper's code)."""

    def __init__(self, d_model: int, d_inner: int, dropout: float, pre_lnorm: bool, eps: float = 1e-5):
        super().__init__()
        self.pre_lnorm = pre_lnorm
        self.CoreNet = nn.Sequential(
            # ReLU out of place: in place on the Linear's 3-D output (a view) costs three copies in backward.
            Linear(d_model, d_inner), nn.ReLU(), Dropout(dropout),
            Linear(d_inner, d_model), Dropout(dropout),
        )
        self.layer_norm = nn.LayerNorm(d_model, eps=eps)

    def forward(self, inp: Tensor) -> Tensor:  # [B, L, d] -> [B, L, d]
        if self.pre_lnorm:
            return inp + self.CoreNet(self.layer_norm(inp))
        return self.layer_norm(inp + self.CoreNet(inp))


class DecoderLayer(nn.Module):
    """One layer: attention over memory + segment, then the feed-forward block."""

    def __init__(self, cfg: TransformerXLConfig):
        super().__init__()
        self.dec_attn = position_scheme(cfg.attn_type).attention(cfg)
        self.pos_ff = PositionwiseFF(cfg.d_model, cfg.d_inner, cfg.dropout, cfg.pre_lnorm, cfg.layer_norm_epsilon)

    def forward(self, h: Tensor, pos, vis: Visibility, mems: Optional[Tensor] = None, cache=None) -> Tensor:
        """h ``[B, L, d]``, ``pos`` from the position scheme, mems ``[B, M, d]`` -> ``[B, L, d]``; ``cache``: the
        decoding cache's view of this layer (attn_type 0), instead of ``mems``."""
        if cache is None:
            return self.pos_ff(self.dec_attn(h, pos, vis, mems))
        return self.pos_ff(self.dec_attn(h, pos, vis, cache=cache))


class TransformerXL(PretrainedMixin, nn.Module):
    """Transformer-XL language model (``MemTransformerLM`` of the paper's code), batch-first.

    Parameter names equal the original release's, so its state dicts load after only the
    renames described in :mod:`transformer_xl.convert`.
    """

    def __init__(self, config: TransformerXLConfig):
        super().__init__()
        config.validate()
        self.config = cfg = config
        # Lengths used at run time; reset_length changes them (e.g. for evaluation), the saved
        # config keeps the training values (which size attn_type 1/3's learned tables).
        self.tgt_len, self.ext_len, self.mem_len = cfg.tgt_len, cfg.ext_len, cfg.mem_len
        self.clamp_len, self.same_length = cfg.clamp_len, cfg.same_length
        self.positions = position_scheme(cfg.attn_type)
        self.word_emb = AdaptiveEmbedding(cfg.n_token, cfg.d_embed, cfg.d_model, cfg.cutoffs, cfg.div_val)
        self.drop = Dropout(cfg.dropout)
        self.layers = nn.ModuleList([DecoderLayer(cfg) for _ in range(cfg.n_layer)])
        self.positions.create(self, cfg)
        self.crit = ProjectedAdaptiveLogSoftmax(cfg.n_token, cfg.d_embed, cfg.d_model, cfg.cutoffs, cfg.div_val)
        self._tie_weights()
        self.init_weights()

    # ------------------------------------------------------------------ construction
    def _tie_weights(self) -> None:
        cfg = self.config
        if cfg.tie_weight:
            for i, layer in enumerate(self.crit.out_layers):
                layer.weight = self.word_emb.emb_layers[i].weight
        for i, tie in enumerate(cfg.tie_projs):
            if tie and cfg.div_val == 1 and cfg.d_model != cfg.d_embed:
                self.crit.out_projs[i] = self.word_emb.emb_projs[0]
            elif tie and cfg.div_val != 1:
                self.crit.out_projs[i] = self.word_emb.emb_projs[i]

    @torch.no_grad()
    def init_weights(self) -> None:
        """Initialise as the paper's code (``weights_init`` in its ``train.py``) does."""
        cfg = self.config

        def init_weight(w: Tensor) -> None:
            if cfg.init == "uniform":
                nn.init.uniform_(w, -cfg.init_range, cfg.init_range)
            else:
                nn.init.normal_(w, 0.0, cfg.init_std)

        for module in self.modules():
            if isinstance(module, nn.Linear):
                init_weight(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                init_weight(module.weight)
            elif isinstance(module, nn.LayerNorm):
                nn.init.normal_(module.weight, 1.0, cfg.init_std)
                nn.init.zeros_(module.bias)
            elif isinstance(module, (AdaptiveEmbedding, ProjectedAdaptiveLogSoftmax)):
                for proj in (module.emb_projs if isinstance(module, AdaptiveEmbedding) else module.out_projs):
                    if proj is not None:
                        nn.init.normal_(proj, 0.0, cfg.proj_init_std)
            elif isinstance(module, RelativeAttention) and cfg.untie_r:
                init_weight(module.r_w_bias)
                init_weight(module.r_r_bias)
        if self.crit.n_clusters > 0:
            init_weight(self.crit.cluster_weight)
            nn.init.zeros_(self.crit.cluster_bias)
        self.positions.init(self, init_weight)
        # The embedding is tied to the output layer; the paper's code initialises it last.
        for emb in self.word_emb.emb_layers:
            init_weight(emb.weight)

    # ------------------------------------------------------------------ lengths and memory
    def reset_length(self, tgt_len: int, ext_len: int, mem_len: int, clamp_len: Optional[int] = None,
                     same_length: Optional[bool] = None) -> None:
        """Change the lengths used at run time, e.g. to evaluate with a longer memory.

        The paper evaluates WT103 with tgt_len 128, mem_len 1600, clamp_len 1000. The saved
        config keeps the training values. Raises ConfigError for values out of range.
        """
        self.set_lengths(self.lengths.replace(tgt_len=tgt_len, ext_len=ext_len, mem_len=mem_len,
                                              clamp_len=clamp_len, same_length=same_length))

    @property
    def lengths(self) -> RunLengths:
        """The run-time lengths now in use."""
        return RunLengths(self.tgt_len, self.ext_len, self.mem_len, self.clamp_len, self.same_length)

    def set_lengths(self, lengths: RunLengths) -> None:
        """Use ``lengths`` at run time (validated against the config; ConfigError naming the field)."""
        lengths.check(self.config)
        self.tgt_len, self.ext_len, self.mem_len = lengths.tgt_len, lengths.ext_len, lengths.mem_len
        self.clamp_len, self.same_length = lengths.clamp_len, lengths.same_length

    @contextlib.contextmanager
    def inference(self, tgt_len: Optional[int] = None, ext_len: Optional[int] = None, mem_len: Optional[int] = None,
                  clamp_len: Optional[int] = None, same_length: Optional[bool] = None):
        """Evaluation mode with run-time lengths changed (None keeps the current value); both are
        restored on exit."""
        saved, was_training = self.lengths, self.training
        self.set_lengths(saved.replace(tgt_len=tgt_len, ext_len=ext_len, mem_len=mem_len, clamp_len=clamp_len,
                                       same_length=same_length))
        self.eval()
        try:
            yield self
        finally:
            self.set_lengths(saved)
            self.train(was_training)

    @property
    def attn_backend(self) -> Tuple[str, int]:
        """``(back-end, chunk)`` of the Transformer-XL attention (attn_type 0); ``("plain", 0)`` for the others."""
        attn = self.layers[0].dec_attn
        return (attn.backend, attn.chunk) if isinstance(attn, RelativeAttention) else ("plain", 0)

    def set_attention(self, backend: str = "plain", chunk: int = 0) -> None:
        """Choose how the Transformer-XL attention (attn_type 0) is computed; every choice gives the same results.

        ``plain``: the reference path. ``streamed``: keys ``chunk`` at a time with an online softmax, recomputed
        block by block in the backward pass, so peak memory no longer grows as B*H*L*(M+L). ``triton``: the fused
        kernel where it can run (CUDA tensors, no attention dropout in training), elsewhere streamed with
        ``chunk > 0``, else plain.
        Other attention types only have the plain path and ignore the choice. A run-time choice like the lengths
        of :meth:`reset_length`: it is not saved with the model.
        """
        attention_backend(backend)  # ValueError naming the registered back-ends
        if chunk < 0:
            raise ValueError(f"attention chunk: must be >= 0, got {chunk}")
        for layer in self.layers:
            if isinstance(layer.dec_attn, RelativeAttention):
                layer.dec_attn.set_backend(backend, chunk)

    def init_mems(self, batch_size: int) -> Mems:
        """The memory of a fresh start for ``batch_size`` rows: ``n_layer x [B, 0 or mem_len, d_model]``.

        Empty, or ``mem_len`` zero states with ``config.mem_init == "zeros"`` (TensorFlow/HuggingFace models).
        """
        p = next(self.parameters())
        if self.config.mem_init == "zeros" and self.mem_len > 0:
            return [p.new_zeros(batch_size, self.mem_len, self.config.d_model) for _ in range(self.config.n_layer)]
        return empty_mems(self.config.n_layer, batch_size, self.config.d_model, dtype=p.dtype, device=p.device)

    # ------------------------------------------------------------------ masks and positions
    def same_length_window(self, mlen):
        """How many positions back a query after ``mlen`` memory states sees, itself included (0: all, no
        ``same_length``). The one place the ``same_length`` rule is decided, for every back-end and the cache.

        ``same_length_extra == 0`` (the PyTorch code, HuggingFace): ``mem_len``, whatever memory is present.
        ``same_length_extra == 1`` (the authors' TensorFlow code, whose ``_create_mask`` takes the length of
        the memory fed, not ``mem_len``): query ``i`` sees keys ``i .. mlen+i``, i.e. ``mlen + 1`` positions,
        so from an empty memory a query sees only itself. ``mlen``: an int, or a tensor of one memory length
        per query (the decoding cache).
        """
        if not self.same_length:
            return 0
        return mlen + 1 if self.config.same_length_extra else self.mem_len

    # ------------------------------------------------------------------ the layer stack
    def cached_transformer(self, input_ids: Tensor, cache, padding_mask: Optional[Tensor] = None) -> Tensor:
        """The stack over new tokens ``input_ids [B, n]`` given a decoding cache (attn_type 0): the cache holds
        the projected keys and values of earlier tokens and decides which keys each new token sees; it is
        extended in place. Returns the last layer's states ``[B, n, d]``."""
        if self.config.attn_type != 0:
            raise ValueError("cache: cached decoding needs attn_type 0 (the relative attention)")
        vis = cache.begin(input_ids, padding_mask)
        core = self.drop(self.word_emb(input_ids))  # [B, n, d]
        pos = (None, getattr(self, "r_w_bias", None), getattr(self, "r_r_bias", None))
        for i, layer in enumerate(self.layers):
            core = layer(core, pos, vis, cache=cache.layer(i))
        cache.end()
        return self.drop(core)

    def transformer(self, input_ids: Tensor, mems: Optional[Sequence[Tensor]] = None,
                    mems_mask: Optional[Tensor] = None, padding_mask: Optional[Tensor] = None,
                    fixed_memory: bool = False):
        """Run the stack: ``input_ids [B, L]`` -> ``(hidden [B, L, d], new_mems, new_mask, hids)``.

        ``hids`` holds the n_layer + 1 intermediate states (each layer's input, then the output).
        ``fixed_memory``: the memory keeps the length of ``mems`` (with ``mems_mask``; ext_len 0), updated without
        a branch on the segment length (:func:`~.memory.shift_mems`), as an exported graph needs.
        """
        cfg = self.config
        bsz, qlen = input_ids.shape
        if mems is not None and len(mems) == 0:
            mems = None
        if mems is None and cfg.mem_init == "zeros" and self.mem_len > 0:
            mems = self.init_mems(bsz)  # a fresh start attends to mem_len zero states
        if mems is not None and len(mems) != cfg.n_layer:
            raise ValueError(f"mems: expected {cfg.n_layer} tensors (one per layer), got {len(mems)}")
        mlen = 0 if mems is None else mems[0].size(1)
        device = input_ids.device
        key_hidden = _key_hidden(mems_mask, padding_mask, bsz, mlen, qlen, device)
        vis = segment_visibility(qlen, mlen, device, self.same_length_window(mlen), key_hidden)

        hids: List[Tensor] = []
        core, state = self.positions.start(self, self.word_emb(input_ids), mlen, qlen)  # [B, L, d]
        for i, layer in enumerate(self.layers):
            core, mem_i, pos = self.positions.layer_input(self, i, core, None if mems is None else mems[i], state)
            hids.append(core)
            core = layer(core, pos, vis, mem_i)
        core = self.drop(core)
        hids.append(core)
        if fixed_memory:
            new_mems, new_mask = shift_mems(hids[:-1], mems, mems_mask, padding_mask)
        else:
            new_mems = update_mems(hids[:-1], mems, self.mem_len, self.ext_len)
            new_mask = update_mems_mask(mems_mask, padding_mask, bsz, mlen, qlen, self.mem_len, self.ext_len, device)
        return core, new_mems, new_mask, hids

    # ------------------------------------------------------------------ the language model
    def forward(self, input_ids: Tensor, labels: Optional[Tensor] = None, mems: Optional[Sequence[Tensor]] = None,
                mems_mask: Optional[Tensor] = None, padding_mask: Optional[Tensor] = None,
                return_log_probs: bool = False, output_hidden_states: bool = False, cache=None) -> TransformerXLOutput:
        """Language-model forward pass.

        Args:
            input_ids: ``[B, L]`` token ids.
            labels: ``[B, L]`` next-token ids, or None; ``-100`` marks positions to ignore.
            mems: memory from the previous call (``out.mems``), or None to start fresh (no memory, or
                ``mem_len`` zero states with ``config.mem_init == "zeros"``).
            mems_mask: ``[B, M]`` bool, memory positions to hide (see :func:`reset_mems`).
            padding_mask: ``[B, L]`` bool, True on padding tokens: hidden as keys and as memory.
            return_log_probs: also return full-vocabulary log-probs ``[B, L, V]``.
            cache: a :class:`~transformer_xl.generation.DecodingCache` (attn_type 0) instead of ``mems``: the
                projected keys and values of every earlier token, extended in place by this call (as
                HuggingFace's ``past_key_values``); returned as ``out.cache``. ``mems`` is then unused.
        """
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids: expected [B, L], got shape {list(input_ids.shape)}")
        if cache is not None:
            if mems is not None or mems_mask is not None:
                raise ValueError("cache: give the decoding cache or mems/mems_mask, not both")
            hidden, new_mems, new_mask, hids = self.cached_transformer(input_ids, cache, padding_mask), None, None, None
        else:
            hidden, new_mems, new_mask, hids = self.transformer(input_ids, mems, mems_mask, padding_mask)
        bsz, qlen, d = hidden.shape
        flat = hidden.reshape(-1, d)  # [B*L, d]
        loss = losses = log_probs = None
        if labels is not None:
            if labels.shape != input_ids.shape:
                raise ValueError(f"labels: expected shape {list(input_ids.shape)}, got {list(labels.shape)}")
            target = labels.reshape(-1)
            ignore = target == IGNORE_INDEX
            logp = self.crit(flat, target.masked_fill(ignore, 0))  # [B*L]
            losses = (-logp).masked_fill(ignore, 0.0).view(bsz, qlen)
            n = (~ignore).sum()
            loss = losses.sum() / n.clamp(min=1)
        if return_log_probs:
            log_probs = self.crit.log_probs(flat).view(bsz, qlen, -1)
        return TransformerXLOutput(loss=loss, losses=losses, mems=new_mems, mems_mask=new_mask, log_probs=log_probs,
                                   hidden_states=hidden, all_hidden_states=hids if output_hidden_states else None,
                                   cache=cache)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def _key_hidden(mems_mask: Optional[Tensor], padding_mask: Optional[Tensor], bsz: int, mlen: int, qlen: int,
                device) -> Optional[Tensor]:
    """``[B, M+L]`` bool of keys hidden from every query, or None."""
    if mems_mask is None and padding_mask is None:
        return None
    if mems_mask is None:
        mems_mask = torch.zeros(bsz, mlen, dtype=torch.bool, device=device)
    if padding_mask is None:
        padding_mask = torch.zeros(bsz, qlen, dtype=torch.bool, device=device)
    if mems_mask.shape != (bsz, mlen):
        raise ValueError(f"mems_mask: expected shape [{bsz}, {mlen}], got {list(mems_mask.shape)}")
    if padding_mask.shape != (bsz, qlen):
        raise ValueError(f"padding_mask: expected shape [{bsz}, {qlen}], got {list(padding_mask.shape)}")
    return torch.cat([mems_mask.bool(), padding_mask.bool()], dim=1)

