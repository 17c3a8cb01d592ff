"""Attention: the relative score (the reference maths), the one visibility rule, the layers of the four
position schemes, and the streamed and Triton back-ends of the Transformer-XL attention.

Reading order: :mod:`.relative` (the paper's score and the shift trick), :mod:`.visibility` (which keys a
query sees), :mod:`.backends` (the contract: one call per layer, back-ends by name), :mod:`.layers` (the modules).
The kernels of :mod:`transformer_xl.model.ops` (``streamed``, ``triton_kernel``) compute what
:class:`~.layers.RelativeAttention`'s plain path computes, with less memory or fused on a GPU.
"""

from .backends import (
    AttentionCall,
    AttentionChoice,
    Backend,
    KeyValueRows,
    attention_backend,
    backend_names,
    register_attention,
)
from .layers import AbsoluteAttention, AttentionBase, QKVAttention, RelativeAttention, ShawAttention
from .relative import distances, rel_attn_score, rel_shift, sinusoid_table
from .visibility import Visibility, block_mask, episode_ids, forbidden, hide, other_episode, segment_visibility

__all__ = ["AttentionCall", "AttentionChoice", "Backend", "KeyValueRows", "attention_backend", "backend_names",
           "register_attention",
           "AttentionBase", "AbsoluteAttention", "QKVAttention", "ShawAttention",
           "RelativeAttention", "Visibility", "block_mask", "episode_ids", "other_episode", "distances", "forbidden",
           "hide",
           "rel_attn_score", "rel_shift", "segment_visibility", "sinusoid_table"]
