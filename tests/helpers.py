"""Small builders shared by the model tests."""

from __future__ import annotations

import copy
import os

import torch

from transformer_xl.model import TransformerXL, TransformerXLConfig

#: Torch threads of a test process: its share of the cores under pytest-xdist (``-n 2`` on 2 cores: one each),
#: up to 2. Two workers of two threads each on two cores wait on each other's threads: the model, fast-path and
#: generation tests took 5.4 min so, against 1.0 min at one thread each. conftest.py sets it, and the commands
#: the tests start get it through ``OMP_NUM_THREADS``; a test that needs other counts sets them itself.
TEST_THREADS = max(1, min(2, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))


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


@torch.no_grad()
def attention_effect(model, ids: torch.Tensor) -> float:
    """How much the model's numbers depend on attention: the mean absolute change of the per-token losses of
    ``ids [B, T]`` (next-token losses, one pass, no memory) when every layer's attention output projection
    (``o_net``) is zeroed, relative to their mean.

    Per token, not of the mean: for random weights the tokens whose loss rises and those whose loss falls cancel
    in the mean (a 10,000-word model of std 0.3 moves its mean loss by 0.3% and its token losses by far more),
    while what the tests compare (log-probabilities, per-token and per-document losses, greedy tokens) moves
    with each token's."""
    def losses(m) -> torch.Tensor:
        with m.inference(mem_len=0, same_length=False):
            return m(ids[:, :-1], labels=ids[:, 1:]).losses.double()

    muted = copy.deepcopy(model)
    for layer in muted.layers:
        layer.dec_attn.o_net.weight.zero_()
    full = losses(model)
    return float((losses(muted) - full).abs().mean() / full.mean())


def assert_real_signal(model, ids: torch.Tensor, at_least: float = 0.01) -> None:
    """A fixture's check that it can show what its tests claim: zeroing attention changes its per-token losses by
    more than ``at_least`` (1%) of the loss (:func:`attention_effect`), so a broken attention, memory or position
    path changes the numbers the tests compare."""
    effect = attention_effect(model, ids)
    assert effect > at_least, f"zeroing attention changes this fixture's losses by only {effect:.2e} (relative)"


def randomize_checkpoint(directory, seed: int = 0):
    """Replace the weights saved in ``directory`` (``config.json`` + ``model.safetensors``, e.g. a run's ``best/``)
    by random ones of std 0.3 (:func:`randomize_`), far from any trivial state; returns the model."""
    from transformer_xl.model import TransformerXL

    model = TransformerXL.from_pretrained(directory).eval()
    randomize_(model, seed)
    model.save_pretrained(directory)
    return model
