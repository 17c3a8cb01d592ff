"""Small builders shared by the model tests."""

from __future__ import annotations

import torch

from transformer_xl.model import TransformerXL, TransformerXLConfig


def tiny_config(**overrides) -> TransformerXLConfig:
    """A model small enough for brute-force references, with dropout off."""
    values = dict(n_token=60, n_layer=2, n_head=2, d_model=16, d_head=8, d_inner=24, dropout=0.0, dropatt=0.0,
                  tgt_len=5, mem_len=5, ext_len=0, init_std=0.2, proj_init_std=0.2)
    values.update(overrides)
    return TransformerXLConfig(**values)


def tiny_model(seed: int = 0, **overrides) -> TransformerXL:
    torch.manual_seed(seed)
    model = TransformerXL(tiny_config(**overrides)).eval()
    randomize_(model, seed)
    return model


@torch.no_grad()
def randomize_(model: torch.nn.Module, seed: int = 0) -> None:
    """Give every parameter (biases, layer norms, u/v included) a random, non-trivial value."""
    gen = torch.Generator().manual_seed(seed + 1000)
    for p in model.parameters():
        p.copy_(torch.randn(p.shape, generator=gen) * 0.3)


def random_tokens(*shape, n_token: int = 60, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, n_token, shape, generator=torch.Generator().manual_seed(seed))
