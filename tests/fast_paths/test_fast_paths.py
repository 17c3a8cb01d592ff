"""Fast paths give the losses and gradients of the plain path."""

import pytest
import torch
from helpers import random_tokens, tiny_model

from transformer_xl.model.attention import backends as attention_backends
from transformer_xl.model.ops.streamed import streamed_rel_attention

# TensorFlow's same_length rule from an empty memory: the window follows the memory present (0, 7, then 9);
# 3 heads of 40 on states of 100 (d_model not divisible by n_head).
VARIANTS = [dict(), dict(same_length=True, clamp_len=3), dict(pre_lnorm=True, untie_r=True),
            dict(same_length=True, same_length_extra=1), dict(d_model=100, n_head=3, d_head=40)]


@pytest.mark.parametrize("block", [1, 3, 4, 64])
@pytest.mark.parametrize("variant", VARIANTS)
def test_streamed_attention_equals_plain_in_training(block, variant, monkeypatch):
    """Keys in blocks with the hand-written backward: losses and every gradient, memory of 0, 7 and 9 > L."""
    calls = []
    monkeypatch.setattr(attention_backends, "streamed_rel_attention",
                        lambda *a, **k: calls.append(k["block"]) or streamed_rel_attention(*a, **k))
    model = tiny_model(seed=block, tgt_len=7, mem_len=9, **variant).train()
    names, params = zip(*model.named_parameters())
    x = random_tokens(2, 30, seed=block)
    plain_mems = fast_mems = None
    for i in range(3):
        inp, tgt = x[:, 7 * i:7 * i + 7], x[:, 7 * i + 1:7 * i + 8]
        model.set_attention("plain")
        plain = model(inp, tgt, mems=plain_mems)
        plain_grads = torch.autograd.grad(plain.loss, params)
        model.set_attention("streamed", block)
        fast = model(inp, tgt, mems=fast_mems)
        fast_grads = torch.autograd.grad(fast.loss, params)
        torch.testing.assert_close(fast.losses, plain.losses, rtol=1e-5, atol=1e-5)
        for n, a, b in zip(names, fast_grads, plain_grads):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=n)
        for new, old in zip(fast.mems, plain.mems):
            torch.testing.assert_close(new, old, rtol=1e-5, atol=1e-5)
        plain_mems, fast_mems = plain.mems, fast.mems
    assert calls == [block] * (3 * model.config.n_layer)  # the streamed path ran in every layer


@pytest.mark.parametrize("block", [1, 3, 4, 64])
@pytest.mark.parametrize("variant", VARIANTS)
def test_streamed_keys_equal_plain(block, variant):
    """Evaluation without gradients: keys in blocks with an online softmax, memory of 0, 7 and 9 > L."""
    model = tiny_model(seed=block, tgt_len=7, mem_len=9, **variant)
    x = random_tokens(2, 30, seed=block)
    with torch.no_grad():
        mems, plain = None, []
        for i in range(3):
            out = model(x[:, 7 * i:7 * i + 7], x[:, 7 * i + 1:7 * i + 8], mems=mems)
            plain.append(out)
            mems = out.mems
        model.set_attention("streamed", block)
        mems = None
        for i in range(3):
            out = model(x[:, 7 * i:7 * i + 7], x[:, 7 * i + 1:7 * i + 8], mems=mems)
            torch.testing.assert_close(out.losses, plain[i].losses, rtol=1e-5, atol=1e-5)
            for new, old in zip(out.mems, plain[i].mems):
                torch.testing.assert_close(new, old, rtol=1e-5, atol=1e-5)
            mems = out.mems


def test_streamed_keys_with_hidden_memory_and_padding():
    model = tiny_model(seed=7, tgt_len=6, mem_len=6)
    x = random_tokens(3, 13, seed=7)
    mems_mask = torch.tensor([[True] * 6, [False] * 6, [True, True, False, False, False, False]])
    padding = torch.zeros(3, 6, dtype=torch.bool)
    padding[2, :2] = True
    with torch.no_grad():
        mems = model(x[:, :6], x[:, 1:7]).mems
    plain = model(x[:, 6:12], x[:, 7:13], mems=mems, mems_mask=mems_mask, padding_mask=padding)
    plain_grads = torch.autograd.grad(plain.loss, list(model.parameters()))
    model.set_attention("streamed", 5)
    fast = model(x[:, 6:12], x[:, 7:13], mems=mems, mems_mask=mems_mask, padding_mask=padding)
    torch.testing.assert_close(fast.losses, plain.losses, rtol=1e-5, atol=1e-5)
    for (n, _), a, b in zip(model.named_parameters(), torch.autograd.grad(fast.loss, list(model.parameters())),
                            plain_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=n)


def test_kv_buffer_equals_concatenation():
    from transformer_xl.model.kv_cache import KVBuffer

    gen = torch.Generator().manual_seed(0)
    buf = KVBuffer(torch.zeros(2, 3, 0, 4))
    ref = torch.zeros(2, 3, 0, 4)
    for step, (n, drop) in enumerate([(5, 0), (1, 2), (40, 0), (1, 30), (70, 1), (1, 0), (3, 80)]):
        x = torch.randn(2, 3, n, 4, generator=gen)
        ref = torch.cat([ref, x], dim=2)[:, :, drop:]
        buf.append(x)
        buf.drop_front(drop)
        assert torch.equal(buf.tensor, ref), step
