"""The central equalities of the model, for random configurations, shapes, segment and memory lengths (hypothesis,
the dev extra; the profile in tests/conftest.py keeps it to a few examples, the same every run):

* segments read with memory equal one long causal pass;
* token-by-token decoding (the decoding cache, left-padded rows of different lengths) equals segment passes;
* the streamed attention equals the plain one, forward and backward, with hidden memory, padding and episodes.
"""

from __future__ import annotations

import pytest

pytest.importorskip("hypothesis")

import torch
from helpers import random_tokens, tiny_model
from hypothesis import given
from hypothesis import strategies as st

from transformer_xl.generation import DecodingCache

N_TOKEN = 30


@st.composite
def configs(draw, attn_types=(0,)):
    """A small model: layers, heads of any size (n_head * d_head need not be d_model), post- or pre-LN, shared or
    per-layer u/v, a clamp of the distances or none, the adaptive softmax or a plain one."""
    cfg = dict(n_token=N_TOKEN, n_layer=draw(st.integers(1, 2)), n_head=draw(st.integers(1, 3)),
               d_head=draw(st.sampled_from([4, 8])), d_model=draw(st.sampled_from([8, 16])),
               d_inner=draw(st.sampled_from([8, 24])), attn_type=draw(st.sampled_from(attn_types)),
               pre_lnorm=draw(st.booleans()), untie_r=draw(st.booleans()), clamp_len=draw(st.sampled_from([-1, 2, 5])))
    if draw(st.booleans()):
        cfg.update(cutoffs=[5, 15], div_val=draw(st.sampled_from([1, 2])))
    return cfg


def close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


@given(cfg=configs(attn_types=(0, 1)), seg=st.integers(1, 5), n_seg=st.integers(1, 4), batch=st.integers(1, 3),
       seed=st.integers(0, 999))
def test_segments_with_memory_equal_one_long_causal_pass(cfg, seg, n_seg, batch, seed):
    """With a memory that holds every earlier position, reading ``n_seg`` segments one after the other gives the
    states, losses and memory of one pass over the whole row."""
    total = seg * n_seg
    model = tiny_model(seed=seed, tgt_len=seg, mem_len=total, **cfg)
    x = random_tokens(batch, total + 1, n_token=N_TOKEN, seed=seed)
    with torch.no_grad():
        long = model(x[:, :-1], labels=x[:, 1:])
        mems, losses, hidden = None, [], []
        for s in range(0, total, seg):
            out = model(x[:, s:s + seg], labels=x[:, s + 1:s + seg + 1], mems=mems)
            mems = out.mems
            losses.append(out.losses)
            hidden.append(out.hidden_states)
    close(torch.cat(hidden, 1), long.hidden_states)
    close(torch.cat(losses, 1), long.losses)
    for layer, full in zip(mems, long.mems):
        close(layer, full)


def segment_pass_log_probs(model, row) -> torch.Tensor:
    """Next-token log-probs after every token of ``row``: the model over segments of tgt_len, memory carried."""
    x, mems, out = torch.tensor([row]), None, []
    for s in range(0, len(row), model.tgt_len):
        step = model(x[:, s:s + model.tgt_len], mems=mems, return_log_probs=True)
        mems = step.mems
        out.append(step.log_probs[0])
    return torch.cat(out)


@given(cfg=configs(), mem_init=st.sampled_from(["empty", "zeros"]), same_length=st.sampled_from([None, 0, 1]),
       tgt_len=st.integers(1, 4), mem_len=st.integers(0, 6), lengths=st.lists(st.integers(1, 9), min_size=1,
                                                                                max_size=3),
       seed=st.integers(0, 999))
def test_token_by_token_decoding_equals_segment_passes(cfg, mem_init, same_length, tgt_len, mem_len, lengths, seed):
    """Rows of different lengths, left-padded into one batch, fed one column at a time through the decoding cache
    (segment decoding): at every token each row's log-probs are those of the model reading the row alone, segment
    by segment with memory (zero memory, the PyTorch and TensorFlow same_length rules, clamped distances)."""
    lengths_rule = {} if same_length is None or mem_len == 0 else dict(same_length=True,
                                                                        same_length_extra=same_length)
    model = tiny_model(seed=seed, tgt_len=tgt_len, mem_len=mem_len, mem_init=mem_init, decoding="segment",
                       **lengths_rule, **cfg)
    rows = [random_tokens(n, n_token=N_TOKEN, seed=seed + i).tolist() for i, n in enumerate(lengths)]
    width = max(lengths)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    pad = torch.ones(len(rows), width, dtype=torch.bool)
    for b, row in enumerate(rows):
        ids[b, width - len(row):] = torch.tensor(row)
        pad[b, width - len(row):] = False
    cache = DecodingCache(model, len(rows))
    with torch.no_grad():
        got = torch.stack([model.crit.log_probs(cache.extend(ids[:, t:t + 1], pad[:, t:t + 1])[:, 0])
                           for t in range(width)], dim=1)  # [B, W, V]
        for b, row in enumerate(rows):
            close(got[b, width - len(row):], segment_pass_log_probs(model, row))


def forward_backward(model, x, y, **inputs):
    model.zero_grad()
    out = model(x, labels=y, **inputs)
    out.loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return out, grads


@given(cfg=configs(), chunk=st.integers(1, 7), mlen=st.integers(0, 6), qlen=st.integers(1, 6),
       batch=st.integers(1, 3), hide=st.booleans(), padding=st.booleans(), episodes=st.booleans(),
       same_length=st.booleans(), seed=st.integers(0, 999))
def test_streamed_attention_equals_plain(cfg, chunk, mlen, qlen, batch, hide, padding, episodes, same_length, seed):
    """Keys ``chunk`` at a time with an online softmax (and its recomputing backward) give the plain attention's
    states, losses, new memory and gradients, with memory slots hidden, padded steps and episodes beginning inside
    the window."""
    model = tiny_model(seed=seed, tgt_len=qlen, mem_len=max(mlen, 1), same_length=same_length, **cfg).train()
    gen = torch.Generator().manual_seed(seed)
    x = random_tokens(batch, mlen + qlen + 1, n_token=N_TOKEN, seed=seed)
    inputs = {}
    if mlen:
        with torch.no_grad(), model.inference(mem_len=mlen):
            inputs["mems"] = model(x[:, :mlen]).mems
        if hide:
            inputs["mems_mask"] = torch.rand(batch, mlen, generator=gen) < 0.4
    y = x[:, mlen + 1:].clone()
    if padding:
        inputs["padding_mask"] = torch.rand(batch, qlen, generator=gen) < 0.3
        y[inputs["padding_mask"]] = -100
    if episodes:
        inputs["starts"] = torch.rand(batch, qlen, generator=gen) < 0.3
    x = x[:, mlen:-1]
    plain, plain_grads = forward_backward(model, x, y, **inputs)
    model.set_attention("streamed", chunk)
    streamed, streamed_grads = forward_backward(model, x, y, **inputs)
    real = (y != -100)[..., None]
    close(streamed.hidden_states * real, plain.hidden_states * real)
    close(streamed.losses, plain.losses)
    for a, b in zip(streamed.mems, plain.mems):
        close(a, b)
    assert (streamed.mems_mask is None) == (plain.mems_mask is None)
    if plain.mems_mask is not None:
        assert torch.equal(streamed.mems_mask, plain.mems_mask)
    assert streamed_grads.keys() == plain_grads.keys()
    for name in plain_grads:
        close(streamed_grads[name], plain_grads[name])
