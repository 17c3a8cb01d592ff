"""One random model through every registered attention back-end, and through cached decoding, on the same input:
each gives the per-token losses of the literal reference (tests/reference.py), memory carried over 3 segments.

Back-ends that cannot run here (the Triton kernel without CUDA or its interpreter) fall back as documented, so
the test still checks that asking for them is exact; with ``TRITON_INTERPRET=1`` and triton installed the kernel
itself runs.
"""

import pytest
import torch

from helpers import random_tokens, tiny_model
from reference import reference_losses
from transformer_xl.convert import export_state_dict
from transformer_xl.generation import DecodingCache
from transformer_xl.model.attention import AttentionCall, attention_backend, backend_names, register_attention
from transformer_xl.model.attention import backends
from transformer_xl.model.attention.backends import plain_attention

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


# ---------------------------------------------------------------------------------------------- fused inference
def _call(mlen, qlen, window, hidden, seed=0):
    from transformer_xl.model.attention import segment_visibility
    from transformer_xl.model.attention.relative import distances, sinusoid_table

    g = torch.Generator().manual_seed(seed)
    B, H, D = 2, 3, 8
    K = mlen + qlen
    q, k, v = (torch.randn(B, H, n, D, generator=g) for n in (qlen, K, K))
    r_k = torch.randn(H, 1, D, generator=g) * sinusoid_table(distances(K, 3, "cpu"), D)[None]  # [H, K+1, D]
    u, v_bias = torch.randn(H, D, generator=g), torch.randn(H, D, generator=g)
    key_hidden = None
    if hidden:
        key_hidden = torch.zeros(B, K, dtype=torch.bool)
        key_hidden[0, : max(mlen // 2, 1)] = True  # forgotten memory in row 0
        key_hidden[1, -1] = True  # a padded last token in row 1
    vis = segment_visibility(qlen, mlen, "cpu", window, key_hidden)
    return AttentionCall(q, r_k, u, v_bias, vis, D ** -0.5, torch.nn.Dropout(0.0), k=k, v=v)


@pytest.mark.parametrize("mlen,qlen,window,hidden", [(0, 5, 0, False), (3, 5, 0, False), (9, 5, 0, False),
                                                     (9, 5, 6, False), (3, 5, 0, True), (9, 4, 7, True)])
def test_fused_inference_path_equals_the_plain_maths(mlen, qlen, window, hidden):
    """Without gradients the plain back-end goes through scaled_dot_product_attention with the position term as
    bias; it equals the shift-trick score + masked softmax (taken with gradients on) for memory 0, < L and > L,
    same_length windows and hidden keys."""
    call = _call(mlen, qlen, window, hidden)
    k, v = call.k, call.v
    for t in (call.q, k, v, call.r_k):
        t.requires_grad_(True)
    assert not backends.fused_inference_applies(call, k, v)
    expected = plain_attention(call)  # the masked softmax path (gradients wanted)
    with torch.no_grad():
        assert backends.fused_inference_applies(call, k, v)
        got = plain_attention(call)
        direct = backends.fused_inference_attention(call, k, v)
    torch.testing.assert_close(got, expected.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(direct, got, rtol=0, atol=0)


def test_fused_inference_path_is_not_taken_with_dropout_or_autocast():
    call = _call(3, 5, 0, False)
    call.dropatt = torch.nn.Dropout(0.5).train()
    with torch.no_grad():
        assert not backends.fused_inference_applies(call, call.k, call.v)
        call.dropatt.eval()
        assert backends.fused_inference_applies(call, call.k, call.v)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert not backends.fused_inference_applies(call, call.k, call.v)
