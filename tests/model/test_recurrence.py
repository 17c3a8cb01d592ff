"""Segment + memory equals one long causal pass; token-by-token equals a segment."""

import pytest
import torch
from helpers import random_tokens, tiny_model
from reference import reference_losses

from transformer_xl.convert import export_state_dict


def run_segments(model, tokens, labels, seg_len):
    mems, losses, hidden = None, [], []
    for s in range(0, tokens.size(1), seg_len):
        out = model(tokens[:, s:s + seg_len], labels[:, s:s + seg_len], mems=mems)
        mems = out.mems
        losses.append(out.losses)
        hidden.append(out.hidden_states)
    return torch.cat(losses, 1), torch.cat(hidden, 1), mems


@pytest.mark.parametrize("k", [2, 3, 5])
@pytest.mark.parametrize("pre_lnorm", [False, True])
def test_k_segments_with_memory_equal_one_long_pass(k, pre_lnorm):
    seg = 4
    total = k * seg
    model = tiny_model(seed=k, pre_lnorm=pre_lnorm, tgt_len=seg, mem_len=total)  # memory holds every prefix
    x = random_tokens(3, total + 1, seed=k)
    tokens, labels = x[:, :-1], x[:, 1:]
    with torch.no_grad():
        long = model(tokens, labels)
        seg_losses, seg_hidden, _ = run_segments(model, tokens, labels, seg)
    torch.testing.assert_close(seg_hidden, long.hidden_states, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(seg_losses, long.losses, rtol=1e-5, atol=1e-5)


def test_segment_two_uses_memory_of_segment_one():
    """With memory, segment 2's losses differ from a fresh start (the memory is really used)."""
    model = tiny_model(seed=3, tgt_len=4, mem_len=4)
    x = random_tokens(2, 9, seed=3)
    with torch.no_grad():
        first = model(x[:, :4], x[:, 1:5])
        with_mem = model(x[:, 4:8], x[:, 5:9], mems=first.mems)
        fresh = model(x[:, 4:8], x[:, 5:9])
    assert (with_mem.losses - fresh.losses).abs().max() > 1e-3


@pytest.mark.parametrize("attn_type", [0, 1])
def test_token_by_token_equals_segment_pass(attn_type):
    qlen = 7
    model = tiny_model(seed=5, attn_type=attn_type, tgt_len=qlen, mem_len=qlen)
    x = random_tokens(2, qlen + 1, seed=5)
    tokens, labels = x[:, :-1], x[:, 1:]
    with torch.no_grad():
        whole = model(tokens, labels)
        model.reset_length(tgt_len=1, ext_len=0, mem_len=qlen)
        step_losses, _, mems = run_segments(model, tokens, labels, 1)
    torch.testing.assert_close(step_losses, whole.losses, rtol=1e-5, atol=1e-5)
    assert mems[0].shape == (2, qlen, 16)


def test_memory_trimmed_to_mem_len_and_ext_len():
    model = tiny_model(tgt_len=4, mem_len=6, ext_len=1)
    x = random_tokens(2, 4)
    first = model(x, output_hidden_states=True)
    assert [m.size(1) for m in first.mems] == [3, 3]  # the last ext_len=1 position is not cached
    second = model(x, mems=first.mems, output_hidden_states=True)
    assert [m.size(1) for m in second.mems] == [6, 6]  # 3 + (4 - 1) = 6 <= mem_len
    third = model(x, mems=second.mems, output_hidden_states=True)
    # The kept window is the most recent mem_len positions, ending ext_len before the segment end:
    # the last 3 cached of segment 2 then the first 3 of segment 3.
    for layer in range(2):
        expected = torch.cat([second.all_hidden_states[layer][:, :3], third.all_hidden_states[layer][:, :3]], 1)
        torch.testing.assert_close(third.mems[layer], expected, rtol=0, atol=0)


@pytest.mark.parametrize("mem_len", [3, 6])
@pytest.mark.parametrize("attn_type", [0, 2])
def test_memory_is_the_layer_inputs_of_the_last_positions(attn_type, mem_len):
    """Judged by the independent reference (tests/reference.py), which computes each layer's input itself: the
    memory after every segment holds the inputs of each layer for the last mem_len positions (a memory shorter
    than a segment, and one longer, which keeps states of two segments)."""
    model = tiny_model(seed=attn_type, attn_type=attn_type, tgt_len=4, mem_len=mem_len)
    state, args = export_state_dict(model, "original")
    x = random_tokens(2, 13, seed=1)
    segments = [x[:, s:s + 4] for s in range(0, 12, 4)]
    targets = [x[:, s + 1:s + 5] for s in range(0, 12, 4)]
    memories = []
    reference_losses(state, args, segments, targets, memories)
    mems = None
    with torch.no_grad():
        for seg, expected in zip(segments, memories):
            mems = model(seg, mems=mems).mems
            for layer in range(model.config.n_layer):
                torch.testing.assert_close(mems[layer], expected[layer], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("eval_mem_len", [0, 2, 12])
def test_evaluation_memory_length_may_differ_from_training(eval_mem_len):
    """mem_len changes at evaluation time: memory is trimmed to the new length, and a
    longer memory still matches the one-long-pass reference."""
    model = tiny_model(seed=2, tgt_len=4, mem_len=4)
    model.reset_length(tgt_len=4, ext_len=0, mem_len=eval_mem_len)
    x = random_tokens(2, 13, seed=2)
    tokens, labels = x[:, :-1], x[:, 1:]
    with torch.no_grad():
        losses, _, mems = run_segments(model, tokens, labels, 4)
    assert all(m.size(1) == min(eval_mem_len, 12) for m in mems)
    if eval_mem_len >= 8:  # the whole prefix stays in memory
        torch.testing.assert_close(losses, model(tokens, labels).losses, rtol=1e-5, atol=1e-5)
    if eval_mem_len == 0:  # no memory: each segment is independent
        torch.testing.assert_close(losses[:, 4:8], model(tokens[:, 4:8], labels[:, 4:8]).losses, rtol=1e-6, atol=1e-6)
