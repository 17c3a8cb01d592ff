"""Evaluation carries the memory as projected keys and values (a decoding cache in segment decoding) where the model
allows it: the same per-token losses as the memory of states, and fewer FLOPs by exactly the memory's projections.

The judge of the losses is the memory of states (the path training runs, itself held to the original code and
HuggingFace elsewhere), over several segments, for same_length with clamp_len, a fresh start of zero states,
pre-LN with untied biases, and rows that leave the batch as they end (lm-eval's rolling requests).
"""

from __future__ import annotations

import pytest
import torch
from helpers import randomize_, tiny_model
from torch.utils.flop_counter import FlopCounterMode

from transformer_xl.evaluation import segments as seg

CONFIGS = {
    "same-length-clamp": dict(tgt_len=5, mem_len=7, same_length=True, clamp_len=4),
    "mem-init-zeros": dict(tgt_len=4, mem_len=6, mem_init="zeros"),
    "pre-ln-untied": dict(tgt_len=6, mem_len=3, pre_lnorm=True, untie_r=True),
    "memory-longer-than-segment": dict(tgt_len=3, mem_len=10),
}


def states_path(model, pieces):
    """The memory of states: what the loop does for other back-ends and attention types."""
    mems, out = None, []
    with torch.no_grad():
        for inp, tgt in pieces:
            if mems is not None and mems[0].size(0) > inp.size(0):
                mems = [m[:inp.size(0)] for m in mems]
            o = model(inp, tgt, mems=mems)
            mems = o.mems
            out.append(o.losses)
    return out


def pieces_of(x, tgt_len, rows_left=None):
    """Segments of ``tgt_len`` of ``x [B, N+1]``; with ``rows_left`` [k per segment], the rows that go on."""
    out = []
    for i, s in enumerate(range(0, x.size(1) - 1, tgt_len)):
        k = x.size(0) if rows_left is None else rows_left[i]
        out.append((x[:k, s:s + tgt_len], x[:k, s + 1:s + 1 + tgt_len]))
    return [(a[:, :b.size(1)], b) for a, b in out]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_projected_memory_equals_the_memory_of_states(name):
    model = tiny_model(seed=7, n_token=40, **CONFIGS[name])
    randomize_(model, seed=7)
    model.eval()
    x = torch.randint(0, 40, (3, 5 * model.tgt_len + 2), generator=torch.Generator().manual_seed(1))
    pieces = pieces_of(x, model.tgt_len)
    assert seg.carries_projections(model)
    with torch.no_grad():
        got = [out.losses for out in seg.outputs_with_memory(model, pieces)]
    want = states_path(model, pieces)
    assert len(got) == len(want) == 6 and got[-1].size(1) == 1  # the last segment is shorter
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=2e-5, atol=2e-5)


def test_rows_leaving_the_batch():
    model = tiny_model(seed=8, n_token=40, tgt_len=4, mem_len=6)
    randomize_(model, seed=8)
    model.eval()
    x = torch.randint(0, 40, (4, 17), generator=torch.Generator().manual_seed(2))
    pieces = pieces_of(x, 4, rows_left=[4, 4, 3, 1])
    with torch.no_grad():
        got = [out.losses for out in seg.outputs_with_memory(model, pieces)]
    for g, w in zip(got, states_path(model, pieces)):
        torch.testing.assert_close(g, w, rtol=2e-5, atol=2e-5)


def test_projections_of_the_memory_are_not_computed_again():
    """FLOPs of 5 segments: the projected path saves exactly the keys and values of the memory,
    ``2 * (2 * M * d * H*D)`` per layer, row and segment after the first (a multiply-add counted as 2), and computes
    the position keys ``W_r R`` once for ``M + 2L + 1`` distances instead of ``K + 1`` per segment."""
    model = tiny_model(seed=9, n_token=40, tgt_len=8, mem_len=8)
    model.eval()
    cfg, B = model.config, 2
    x = torch.randint(0, 40, (B, 5 * 8 + 1), generator=torch.Generator().manual_seed(3))
    pieces = pieces_of(x, 8)

    def flops(run):
        counter = FlopCounterMode(display=False)
        with torch.no_grad(), counter:
            run()
        return counter.get_total_flops()

    def projected():
        list(seg.outputs_with_memory(model, pieces))

    states = flops(lambda: states_path(model, pieces))
    d_hd = cfg.d_model * cfg.n_head * cfg.d_head
    memory_kv = 4 * cfg.n_layer * B * 2 * (2 * 8 * d_hd)
    positions_per_segment = [(8 + 1) if s == 0 else (8 + 8 + 1) for s in range(5)]  # K + 1 distances
    positions = cfg.n_layer * 2 * d_hd * (sum(positions_per_segment) - (8 + 2 * 8 + 1))
    assert states - flops(projected) == memory_kv + positions


def test_other_models_keep_the_memory_of_states():
    model = tiny_model(seed=10, n_token=40, tgt_len=4, mem_len=4)
    model.set_attention("streamed", 2)
    assert not seg.carries_projections(model)
    model.set_attention("plain")
    model.reset_length(4, 2, 4)  # extended context
    assert not seg.carries_projections(model)
    assert not seg.carries_projections(tiny_model(seed=10, n_token=40, attn_type=2, tgt_len=4, mem_len=4).eval())
