"""The fast model, loaded through the converter, equals a literal evaluation of the paper's
equations (tests/reference.py) on a state dict in the original code's naming, with memory
carried across segments, for every attention type."""

import pytest
import torch
from helpers import random_tokens, tiny_model
from reference import reference_losses

from transformer_xl.convert import config_from_args, convert_state_dict, export_state_dict

CASES = {
    "rel-partial": dict(attn_type=0),
    "rel-partial-prelnorm-clamp": dict(attn_type=0, pre_lnorm=True, clamp_len=3),
    "rel-partial-same-length": dict(attn_type=0, same_length=True),
    "rel-partial-adaptive-div2": dict(attn_type=0, cutoffs=[15, 35], div_val=2, d_embed=32,
                                      tie_projs=[False, True, True]),
    "rel-partial-adaptive-div1-proj": dict(attn_type=0, cutoffs=[15, 35], div_val=1, d_embed=12,
                                           tie_projs=[False, True, False]),
    "shaw-learnable": dict(attn_type=1),
    "shaw-learnable-clamp": dict(attn_type=1, clamp_len=4, pre_lnorm=True),
    "vanilla-absolute": dict(attn_type=2),
    "vanilla-absolute-prelnorm": dict(attn_type=2, pre_lnorm=True, clamp_len=6),
    "al-rfou-learned-absolute": dict(attn_type=3),
}


def original_args(model):
    state, args = export_state_dict(model, "original")
    return state, args


def assert_matches_reference(model, state, args, x, seg_len):
    """Per-token losses of ``model`` over consecutive segments, memory carried, equal the reference's."""
    starts = range(0, x.size(1) - 1, seg_len)
    segments = [x[:, s:s + seg_len] for s in starts]
    targets = [x[:, s + 1:s + 1 + seg_len] for s in starts]
    expected = reference_losses(state, args, segments, targets)
    mems = None
    with torch.no_grad():
        for seg, tgt, ref in zip(segments, targets, expected):
            out = model(seg, tgt, mems=mems)
            mems = out.mems
            torch.testing.assert_close(out.losses, ref, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("case", sorted(CASES))
def test_converted_model_equals_reference(case):
    """Memory refreshed each segment (mem_len == tgt_len), three segments."""
    model = tiny_model(seed=len(case), tgt_len=5, mem_len=5, **CASES[case])
    state, args = original_args(model)
    converted = convert_state_dict(state, config_from_args(args, "original"), "original")
    assert_matches_reference(converted, state, args, random_tokens(2, 16, seed=len(case)), 5)


# d_model not divisible by n_head: 3 heads of 40 (n_head * d_head = 120) on states of 100, adaptive softmax.
HEADS_3X40 = dict(d_model=100, n_head=3, d_head=40, cutoffs=[15, 35], div_val=2, tie_projs=[False, True, False])


@pytest.mark.parametrize("attn_type", [0, 1, 2])  # attn_type 3 adds n_head*d_head-wide embeddings to the states
def test_heads_not_dividing_d_model_equal_reference(attn_type):
    model = tiny_model(seed=11 + attn_type, attn_type=attn_type, tgt_len=4, mem_len=6, **HEADS_3X40)
    state, args = original_args(model)
    assert (args["d_model"], args["n_head"], args["d_head"]) == (100, 3, 40)
    converted = convert_state_dict(state, config_from_args(args, "original"), "original")
    assert_matches_reference(converted, state, args, random_tokens(2, 13, seed=attn_type), 4)


@pytest.mark.parametrize("attn_type", [0, 1])
def test_longer_memory_than_segment_equals_reference(attn_type):
    model = tiny_model(seed=7, attn_type=attn_type, tgt_len=3, mem_len=7)
    state, args = original_args(model)
    assert_matches_reference(model, state, args, random_tokens(2, 13, seed=7), 3)
