"""The GRU-type gate of the Gated Transformer-XL (GTrXL: Parisotto et al. 2020, "Stabilizing Transformers for
Reinforcement Learning", section 3), in place of a residual connection.

For a sub-layer's input ``x`` (the stream) and its output ``y`` (after the ReLU of the identity-map reordering)::

    r = sigma(W_r y + U_r x)
    z = sigma(W_z y + U_z x - b_g)
    h = tanh(W_g y + U_g (r * x))
    g(x, y) = (1 - z) * x + z * h

``b_g`` is learned, one value per feature, and starts at ``config.gate_bias`` (the paper's 2): ``z`` starts near
``sigma(-2) = 0.12``, so each layer starts close to the identity and the agent first learns as a reactive policy.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .ops.linear import Linear


class GRUGate(nn.Module):
    """``g(x, y)`` of the module docstring, ``x, y [..., d] -> [..., d]``.

    ``w`` holds ``[W_r; W_z; W_g]`` (applied to ``y``), ``u`` holds ``[U_r; U_z]`` and ``u_g`` is ``U_g``
    (applied to ``x`` and to ``r * x``); none has a bias except ``b_g``.
    """

    def __init__(self, d_model: int, gate_bias: float = 2.0):
        super().__init__()
        self.w = Linear(d_model, 3 * d_model, bias=False)
        self.u = Linear(d_model, 2 * d_model, bias=False)
        self.u_g = Linear(d_model, d_model, bias=False)
        self.b_g = nn.Parameter(torch.full((d_model,), float(gate_bias)))
        self.gate_bias = float(gate_bias)

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        w_r, w_z, w_g = self.w(y).chunk(3, dim=-1)  # 3 x [..., d]
        u_r, u_z = self.u(x).chunk(2, dim=-1)  # 2 x [..., d]
        r = torch.sigmoid(w_r + u_r)
        z = torch.sigmoid(w_z + u_z - self.b_g)
        h = torch.tanh(w_g + self.u_g(r * x))
        return x + z * (h - x)  # (1 - z) * x + z * h

    def reset_bias(self) -> None:
        """Set ``b_g`` back to its initial value (the model's ``init_weights`` calls this after the Linears)."""
        with torch.no_grad():
            self.b_g.fill_(self.gate_bias)


def residual(x: Tensor, y: Tensor, gate: "GRUGate | None") -> Tensor:
    """The identity-map connection: ``x + y``, or with a gate ``g(x, relu(y))`` (the ReLU of the reordering)."""
    if gate is None:
        return x + y
    return gate(x, torch.relu(y))
