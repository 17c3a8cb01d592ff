"""Export equals eager, for random inputs (hypothesis, the dev extra): each graph is exported once with
``torch.export`` (dynamic batch and segment length), then run on random batches, segment lengths, memory contents,
hidden slots and episode starts, against the same graph run eagerly.
"""

from __future__ import annotations

import pytest

pytest.importorskip("hypothesis")

import torch
from helpers import assert_real_signal, random_tokens, tiny_model
from hypothesis import given
from hypothesis import strategies as st

from transformer_xl.export import DecodeGraph, SegmentGraph, export_program

MODELS = {
    # adaptive softmax, same_length (PyTorch rule) with clamped distances; episodes as an input
    "word": dict(n_token=40, cutoffs=[8, 20], div_val=2, d_embed=16, tgt_len=4, mem_len=5, same_length=True,
                 clamp_len=3),
    # a fresh start of zero states, the TensorFlow same_length rule
    "zeros": dict(n_token=40, mem_init="zeros", same_length=True, same_length_extra=1, tgt_len=3, mem_len=4),
}
SLOTS = 7


@pytest.fixture(scope="module")
def programs():
    out = {}
    for name, cfg in MODELS.items():
        model = tiny_model(seed=len(name), **cfg)
        assert_real_signal(model, random_tokens(2, 12, n_token=40, seed=1))
        starts = model.config.mem_init == "empty"
        out[name] = (model, export_program(model, "segment", starts=starts).module(), starts)
    model = out["word"][0]
    out["decode"] = (model, export_program(model, "decode", SLOTS).module(), False)
    return out


@given(name=st.sampled_from(sorted(MODELS)), batch=st.integers(1, 3), seq=st.integers(1, 7),
       hidden_fraction=st.sampled_from([0.0, 0.3, 1.0]), with_starts=st.booleans(), seed=st.integers(0, 999))
def test_the_exported_segment_graph_equals_eager(programs, name, batch, seq, hidden_fraction, with_starts, seed):
    model, program, takes_starts = programs[name]
    cfg, gen = model.config, torch.Generator().manual_seed(seed)
    mems = torch.randn(cfg.n_layer, batch, model.mem_len, cfg.d_model, generator=gen)
    mask = torch.rand(batch, model.mem_len, generator=gen) < hidden_fraction
    args = [random_tokens(batch, seq, n_token=cfg.n_token, seed=seed), mems, mask]
    if takes_starts:
        args.append(torch.rand(batch, seq, generator=gen) < (0.3 if with_starts else 0.0))
    with torch.no_grad():
        expected = SegmentGraph(model)(*args)
        got = program(*args)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


@given(batch=st.integers(1, 3), position=st.integers(0, 12), back=st.integers(0, 12),
       hidden_fraction=st.sampled_from([0.0, 0.5, 1.0]), seed=st.integers(0, 999))
def test_the_exported_decoding_graph_equals_eager(programs, batch, position, back, hidden_fraction, seed):
    model, program, _ = programs["decode"]
    cfg, gen = model.config, torch.Generator().manual_seed(seed)
    shape = (cfg.n_layer, batch, cfg.n_head, SLOTS, cfg.d_head)
    keys, values = torch.randn(*shape, generator=gen), torch.randn(*shape, generator=gen)
    hidden = torch.rand(batch, SLOTS, generator=gen) < hidden_fraction
    pos = torch.full((batch,), position, dtype=torch.long) + torch.arange(batch)
    args = (random_tokens(batch, 1, n_token=cfg.n_token, seed=seed), keys, values, hidden, pos,
            (pos - back).clamp(min=0))
    with torch.no_grad():
        expected = DecodeGraph(model, SLOTS)(*args)
        got = program(*args)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
