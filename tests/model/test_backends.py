"""One random model through every registered attention back-end, and through cached decoding, on the same input:
each gives the per-token losses of the literal reference (tests/reference.py), memory carried over 3 segments.

Back-ends that cannot run here (the Triton kernel without CUDA or its interpreter) fall back as documented, so
the test still checks that asking for them is exact; with ``TRITON_INTERPRET=1`` and triton installed the kernel
itself runs.
"""

import dataclasses

import pytest
import torch
from helpers import random_tokens, tiny_model
from reference import reference_losses

from transformer_xl.convert import export_state_dict
from transformer_xl.generation import DecodingCache
from transformer_xl.model.attention import (
    AttentionCall,
    attention_backend,
    backend_names,
    backends,
    register_attention,
    segment_visibility,
)
from transformer_xl.model.attention.backends import masked_softmax_attend, plain_attention
from transformer_xl.model.attention.relative import rel_attn_score

SEG = 4
CONFIG = dict(attn_type=0, tgt_len=SEG, mem_len=6, cutoffs=[15, 35], div_val=2, d_embed=32,
              tie_projs=[False, True, True], clamp_len=5, same_length=True)
BACKENDS = [("plain", 0), ("streamed", 1), ("streamed", 3), ("triton", 0), ("triton", 4)]


def reference(model, x):
    state, args = export_state_dict(model, "original")
    starts = range(0, x.size(1) - 1, SEG)
    segments = [x[:, s:s + SEG] for s in starts]
    targets = [x[:, s + 1:s + 1 + SEG] for s in starts]
    return segments, targets, reference_losses(state, args, segments, targets)


@pytest.fixture(scope="module")
def case():
    model = tiny_model(seed=11, **CONFIG)
    x = random_tokens(2, 3 * SEG + 1, seed=11)
    return model, x, reference(model, x)


def test_every_backend_is_registered():
    assert {"plain", "streamed", "triton"} <= set(backend_names())


@pytest.mark.parametrize("backend,chunk", BACKENDS, ids=[f"{b}-{c}" for b, c in BACKENDS])
def test_backend_equals_reference(case, backend, chunk):
    model, x, (segments, targets, expected) = case
    model.set_attention(backend, chunk)
    try:
        mems = None
        with torch.no_grad():
            for seg, tgt, ref in zip(segments, targets, expected):
                out = model(seg, tgt, mems=mems)
                mems = out.mems
                torch.testing.assert_close(out.losses, ref, rtol=2e-5, atol=2e-5)
    finally:
        model.set_attention("plain")


def test_cached_decoding_equals_reference(case):
    """Token by token through the model's own forward with a DecodingCache: each token's log-probability of
    the next equals the reference's segment pass."""
    model, x, (segments, targets, expected) = case
    cache = DecodingCache(model, x.size(0), decoding="segment")
    got = []
    with torch.no_grad():
        for t in range(x.size(1) - 1):
            out = model(x[:, t:t + 1], cache=cache)
            assert out.cache is cache and out.mems is None
            log_probs = model.crit.log_probs(out.hidden_states[:, -1])  # [B, V]
            got.append(-log_probs.gather(1, x[:, t + 1:t + 2]))
    torch.testing.assert_close(torch.cat(got, dim=1), torch.cat(expected, dim=1), rtol=2e-5, atol=2e-5)


def test_a_registered_backend_is_called_once_per_layer(case):
    """The contract: a new back-end registered by name receives one AttentionCall per layer and is used."""
    model, x, (segments, targets, expected) = case
    calls = []

    def counting(call: AttentionCall):
        calls.append((tuple(call.q.shape), call.vis.klen))
        return plain_attention(call)

    register_attention("counting", counting)
    model.set_attention("counting")
    try:
        with torch.no_grad():
            out = model(segments[0], targets[0])
        torch.testing.assert_close(out.losses, expected[0], rtol=2e-5, atol=2e-5)
        assert calls == [((2, 2, SEG, 8), SEG)] * model.config.n_layer
        assert attention_backend("counting").fn is counting
        with pytest.raises(ValueError, match="counting"):  # the error lists the registered names
            model.set_attention("nosuch")
    finally:
        model.set_attention("plain")
        backends._BACKENDS.pop("counting")


@pytest.mark.parametrize("grad", [True, False], ids=["training", "inference"])
def test_masked_softmax_of_bf16_scores_gives_bf16_and_the_float64_result(grad):
    """bf16 scores and values (a bf16 model without autocast): the result is bf16, within bf16's rounding of the
    masked softmax computed in float64, with and without recorded gradients."""
    gen = torch.Generator().manual_seed(3)
    qlen, mlen = 4, 3
    raw = torch.randn(2, 2, qlen, mlen + qlen, generator=gen, dtype=torch.float64) * 3
    v = torch.randn(2, 2, mlen + qlen, 5, generator=gen, dtype=torch.float64)
    vis = segment_visibility(qlen, mlen, "cpu", 2)
    expected = torch.softmax(raw.masked_fill(vis.mask, float("-inf")), dim=-1) @ v
    score = raw.bfloat16().requires_grad_(grad)
    with torch.set_grad_enabled(grad):
        got = masked_softmax_attend(score * 1, v.bfloat16(), vis, torch.nn.Identity())
    assert got.dtype == torch.bfloat16 and got.requires_grad == grad
    torch.testing.assert_close(got.double(), expected, atol=0.05, rtol=0.02)


# ---------------------------------------------------------------------------------------------- fused inference
def _bf16_call(mlen, qlen, window, hidden, seed=0):
    """An AttentionCall of bf16 tensors in the model's strided head layout, with a position term as large as the
    content term (so that a wrong shift or a lost bias shows)."""
    from transformer_xl.model.attention.relative import distances, sinusoid_table

    g = torch.Generator().manual_seed(seed)
    B, H, D = 2, 3, 8
    K = mlen + qlen
    q, k, v = (torch.randn(B, n, H, D, generator=g).transpose(1, 2) for n in (qlen, K, K))  # [B, H, n, D]
    r_k = torch.randn(H, 1, D, generator=g) * sinusoid_table(distances(K, 0, "cpu"), D)[None] * 2  # [H, K+1, D]
    u, v_bias = torch.randn(H, D, generator=g), torch.randn(H, D, generator=g)
    key_hidden = None
    if hidden:
        key_hidden = torch.zeros(B, K, dtype=torch.bool)
        key_hidden[0, : max(mlen // 2, 1)] = True  # forgotten memory in row 0
        key_hidden[1, -1] = True  # a padded last token in row 1
    vis = segment_visibility(qlen, mlen, "cpu", window, key_hidden)
    bf = [t.bfloat16() for t in (q, k, v, r_k, u, v_bias)]
    return AttentionCall(bf[0], bf[3], bf[4], bf[5], vis, D ** -0.5, torch.nn.Dropout(0.0), k=bf[1], v=bf[2])


def _float64_attention(call):
    """The paper's sums in float64 from the call's own (bf16) values, the distance written out: query i, key j,
    distance M + i - j, position key column K - distance; masked softmax; values."""
    q, k, v, r_k, u, vb = (t.double() for t in (call.q, call.k, call.v, call.r_k, call.u, call.v_bias))
    qlen, klen = q.size(2), k.size(2)
    i, j = torch.arange(qlen)[:, None], torch.arange(klen)[None]
    column = (klen - (klen - qlen + i - j)).clamp(0, klen)  # [L, K]; keys after the query: masked below
    content = torch.einsum("bhid,bhjd->bhij", q + u[:, None], k)
    position = torch.einsum("bhid,hijd->bhij", q + vb[:, None], r_k[:, column])  # r_k[:, column]: [H, L, K, D]
    score = (content + position) * call.scale
    mask = call.vis.mask[:, None] if call.vis.mask.dim() == 3 else call.vis.mask
    return torch.softmax(score.masked_fill(mask, float("-inf")), dim=-1) @ v


FUSED_CASES = [(0, 5, 0, False), (3, 5, 0, False), (9, 5, 0, False), (9, 5, 6, False), (3, 5, 0, True),
               (9, 4, 7, True)]


@pytest.fixture
def amx(monkeypatch):
    """The fused path's CPU rule answered as on a CPU with AMX, whatever CPU runs the test."""
    monkeypatch.setattr(backends, "cpu_has_amx", lambda: True)


@pytest.mark.parametrize("mlen,qlen,window,hidden", FUSED_CASES)
def test_fused_inference_path_equals_the_float64_maths(mlen, qlen, window, hidden, amx):
    """A bf16 segment without gradients goes through scaled_dot_product_attention with the position term as its
    bias; it equals the shift-trick score and masked softmax taken in float64 from the same values, within bf16's
    rounding, for memory 0, < L and > L, same_length windows and hidden keys; the masked-softmax path of the
    same bf16 values is no closer than twice the fused path's error plus bf16's step."""
    call = _bf16_call(mlen, qlen, window, hidden)
    expected = _float64_attention(call)
    with torch.no_grad():
        assert backends.fused_inference_applies(call, call.k, call.v)
        got = plain_attention(call)
        score = rel_attn_score(call.q, call.k, call.r_k, call.u, call.v_bias, call.scale)
        unfused = masked_softmax_attend(score, call.v, call.vis, call.dropatt)
    assert got.dtype == torch.bfloat16 and got.shape == expected.shape
    torch.testing.assert_close(got.double(), expected, atol=0.03, rtol=0.02)
    fused_err = (got.double() - expected).abs().max().item()
    unfused_err = (unfused.double() - expected).abs().max().item()
    assert fused_err <= 2 * unfused_err + 2 ** -7, (fused_err, unfused_err)


def test_fused_inference_path_is_taken_for_16_bit_segments_without_gradients_only(amx):
    call = _bf16_call(3, 5, 0, False)
    with torch.no_grad():
        assert backends.fused_inference_applies(call, call.k, call.v)
        call.dropatt = torch.nn.Dropout(0.5).train()
        assert not backends.fused_inference_applies(call, call.k, call.v)  # attention dropout in training
        call.dropatt.eval()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert not backends.fused_inference_applies(call, call.k, call.v)  # autocast keeps the fp32 softmax
        one = dataclasses.replace(call, q=call.q[:, :, -1:])
        assert not backends.fused_inference_applies(one, call.k, call.v)  # one query at a time: decoding
        f32 = dataclasses.replace(call, q=call.q.float(), k=call.k.float(), v=call.v.float())
        assert not backends.fused_inference_applies(f32, f32.k, f32.v)  # float32: no faster, not taken
    call.q.requires_grad_(True)
    assert not backends.fused_inference_applies(call, call.k, call.v)  # a gradient wanted


def test_without_amx_a_16_bit_segment_keeps_the_masked_softmax(monkeypatch):
    """On a CPU without AMX (an AMD EPYC with avx512_bf16, where bf16 evaluations were slower with the fused path),
    the same call takes the masked softmax, and gives its result exactly."""
    call = _bf16_call(3, 5, 0, False)
    monkeypatch.setattr(backends, "cpu_has_amx", lambda: False)
    with torch.no_grad():
        assert not backends.fused_inference_applies(call, call.k, call.v)
        got = plain_attention(call)
        score = rel_attn_score(call.q, call.k, call.r_k, call.u, call.v_bias, call.scale)
        assert torch.equal(got, masked_softmax_attend(score, call.v, call.vis, call.dropatt))
        monkeypatch.setattr(backends, "cpu_has_amx", lambda: True)
        assert not torch.equal(plain_attention(call), got)  # the fused path rounds differently: it was not taken

