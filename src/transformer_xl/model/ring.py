"""One step per row over a fixed memory, in few operations: the step of an agent's memory (GTrXL).

An agent steps its memory one observation at a time, each step seeing the ``M`` steps of its episode before it
and itself (:meth:`~.config.TransformerXLConfig.gtrxl`: ``same_length`` with the TensorFlow rule over a fixed
memory). :class:`~.kv_cache.DecodingCache` computes that exactly for any model and any decoding, at the price of
its generality (segment phases, padding, growing buffers, trimming): about a hundred small operations a layer.
:class:`RingStepper` computes the same step for this one case with a ring of ``M`` slots per layer:

* the slots hold each layer's projected keys and values of the last ``M`` steps (and the layer inputs they came
  from, the memory the update replays windows from, :attr:`RingStepper.state`);
* slot ``j`` is at distance ``((p - 1 - j) mod M) + 1`` from the step now (``p``: the slot this step writes), so
  the position term of every slot is one product with the ``M + 1`` position keys ``W_r R`` and a gather by a
  precomputed index; the step itself is key ``M`` (distance 0);
* a start hides every slot of its row; a written slot is visible.

Per layer: the layer norm, one projection for ``q, k, v``, two products for the scores, a masked softmax, one
product for the values, the output projection, the gate (or residual) and the feed-forward block. Equal to the
decoding cache and to a window replayed from the same memory (tests/model/test_ring.py). Supported:
``attn_type`` 0, pre-LN, ``same_length`` with ``same_length_extra=1``, no dropout at run time; :func:`supports`
says whether a backbone qualifies (otherwise use the decoding cache).
"""

from __future__ import annotations

import functools
from typing import List, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .attention.relative import distances, sinusoid_table
from .backbone import PositionwiseFF
from .gating import GRUGate


@functools.lru_cache(maxsize=32)
def _columns(m: int, device) -> Tensor:
    """``[M, M+1]``: for the slot ``p`` the next step writes, the column among the position keys (distances
    ``M..0``) of each slot's distance, ``((p - 1 - j) mod M) + 1``, then distance 0 for the step itself."""
    p, j = torch.arange(m)[:, None], torch.arange(m + 1)[None]
    return torch.where(j < m, m - (((p - 1 - j) % m) + 1), m).to(device)


def _connect(x: Tensor, y: Tensor, gate) -> Tensor:
    """:func:`~.gating.residual` with the gate's products written out (no module calls): ``x + y``, or GTrXL's
    ``g(x, relu(y))``."""
    if gate is None:
        return x + y
    y = torch.relu(y)
    w_r, w_z, w_g = F.linear(y, gate.w.weight).chunk(3, dim=-1)
    u_r, u_z = F.linear(x, gate.u.weight).chunk(2, dim=-1)
    r = torch.sigmoid(w_r + u_r)
    z = torch.sigmoid(w_z + u_z - gate.b_g)
    return x + z * (torch.tanh(w_g + F.linear(r * x, gate.u_g.weight)) - x)


def versions(tensors) -> tuple:
    """Which tensors these are and how often each was changed in place (an optimizer step changes a parameter's):
    what a cache of keys projected with them, or of a pass over them, is valid for."""
    return tuple((id(t), t._version) for t in tensors)


def supports(backbone) -> bool:
    """Whether :class:`RingStepper` computes this backbone's step (module docstring)."""
    cfg = backbone.config
    layers_known = all(isinstance(layer.pos_ff, PositionwiseFF) and len(layer.pos_ff.CoreNet) == 5
                       and isinstance(layer.pos_ff.gate, (GRUGate, type(None))) for layer in backbone.layers)
    return (layers_known and cfg.attn_type == 0 and cfg.pre_lnorm and backbone.same_length
            and cfg.same_length_extra == 1 and backbone.mem_len > 0
            and not (backbone.training and (cfg.dropout > 0 or cfg.dropatt > 0)))


class RingStepper:
    """Steps ``n`` rows of ``backbone`` from a memory ``mems [n, n_layer, M, d]`` (oldest first) with ``hidden
    [n, M]`` (True: a slot no step may see), as ``forward(..., fixed_memory=True)`` keeps them."""

    def __init__(self, backbone, mems: Tensor, hidden: Tensor):
        if not supports(backbone):
            raise ValueError("RingStepper: needs attn_type 0, pre-LN, same_length over a fixed memory "
                             "(TransformerXLConfig.gtrxl) and no dropout")
        self.backbone = backbone
        self.inputs = mems.detach().clone()  # [n, L, M, d] layer inputs, in ring order
        self.hidden = hidden.clone()  # [n, M]
        self.slot = 0  # the slot the next step writes (the oldest)
        self.mem_len = mems.size(2)
        self._columns = _columns(self.mem_len, mems.device)
        self.sync()

    @torch.no_grad()
    def sync(self) -> None:
        """Project the memory's keys and values and the position keys with the weights of now (after an
        update: what the steps before projected is stale)."""
        bb, m = self.backbone, self.mem_len
        n = self.inputs.size(0)
        self.keys: List[Tensor] = []
        self.values: List[Tensor] = []
        self.pos_keys: List[Tensor] = []
        r = sinusoid_table(distances(m, bb.clamp_len, self.inputs.device), bb.config.d_model)  # [M+1, d]
        for i, layer in enumerate(bb.layers):
            attn = layer.dec_attn
            h, d = attn.n_head, attn.d_head
            x = attn.layer_norm(self.inputs[:, i])  # [n, M, d]
            kv = F.linear(x, attn.qkv_net.weight[h * d:])  # [n, M, 2*H*D]
            k, v = kv.view(n, m, 2, h, d).permute(2, 0, 3, 1, 4).unbind(0)  # 2 x [n, H, M, D]
            self.keys.append(k.contiguous())
            self.values.append(v.contiguous())
            pos = attn.r_net(r.to(x.dtype)).view(m + 1, h, d).permute(1, 2, 0)  # [H, D, M+1]: distances M..0
            # for each slot the next step may write, the position keys of the slots' distances, then distance 0
            self.pos_keys.append(pos[..., self._columns].permute(2, 0, 1, 3).contiguous())  # [M, H, D, M+1]

    def copy(self) -> "RingStepper":
        """An independent copy (the same backbone): its rings step apart from this one's."""
        out = object.__new__(RingStepper)
        out.__dict__.update(self.__dict__)
        out.inputs, out.hidden = self.inputs.clone(), self.hidden.clone()
        out.keys, out.values = [k.clone() for k in self.keys], [v.clone() for v in self.values]
        return out

    @property
    def state(self) -> Tuple[Tensor, Tensor]:
        """``(mems [n, n_layer, M, d], hidden [n, M])``, oldest step first."""
        order = (torch.arange(self.mem_len, device=self.inputs.device) + self.slot) % self.mem_len
        return self.inputs[:, :, order], self.hidden[:, order]

    @torch.no_grad()
    def step(self, x: Tensor, starts: Tensor) -> Tuple[Tensor, Tensor]:
        """``x [n, d_input]`` (``[n, d_model]`` for a token backbone's embeddings), ``starts [n]`` bool ->
        ``(hidden [n, d], layer inputs [n, n_layer, d])``; every ring moves one step."""
        bb, p, m = self.backbone, self.slot, self.mem_len
        core = bb.drop(bb.embed(inputs_embeds=x[:, None]))[:, 0]  # [n, d]
        n = core.size(0)
        self.hidden |= starts[:, None]
        shown = torch.cat([self.hidden, self.hidden.new_zeros(n, 1)], dim=1)[:, None]  # [n, 1, M+1]
        u_all, v_all = getattr(bb, "r_w_bias", None), getattr(bb, "r_r_bias", None)
        layer_inputs = []
        for i, layer in enumerate(bb.layers):
            attn = layer.dec_attn
            h, d = attn.n_head, attn.d_head
            layer_inputs.append(core)
            u, vb = attn.biases(u_all, v_all)
            q, k, v = F.linear(attn.layer_norm(core), attn.qkv_net.weight).view(n, 3, h, d).unbind(1)  # [n, H, D]
            q_u, q_v = (q + u) * attn.scale, (q + vb) * attn.scale
            content = torch.cat([(self.keys[i] * q_u[:, :, None]).sum(-1), (q_u * k).sum(-1, keepdim=True)], -1)
            score = content + torch.matmul(q_v.transpose(0, 1), self.pos_keys[i][p]).transpose(0, 1)  # [n, H, M+1]
            prob = torch.softmax(score.float().masked_fill_(shown, float("-inf")), dim=-1).to(v.dtype)
            out = (prob[..., :m, None] * self.values[i]).sum(-2) + prob[..., m:] * v  # [n, H, D]
            core = _connect(core, F.linear(out.reshape(n, h * d), attn.o_net.weight), attn.gate)
            ff = layer.pos_ff
            inner = torch.relu(F.linear(F.layer_norm(core, ff.layer_norm.normalized_shape, ff.layer_norm.weight,
                                                     ff.layer_norm.bias, ff.layer_norm.eps),
                                        ff.CoreNet[0].weight, ff.CoreNet[0].bias))
            core = _connect(core, F.linear(inner, ff.CoreNet[3].weight, ff.CoreNet[3].bias), ff.gate)
            self.keys[i][:, :, p] = k
            self.values[i][:, :, p] = v
        inputs = torch.stack(layer_inputs, dim=1)  # [n, L, d]
        self.inputs[:, :, p] = inputs
        self.hidden[:, p] = False
        self.slot = (p + 1) % m
        return bb.drop(core), inputs
