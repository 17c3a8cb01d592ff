"""Fast paths give the losses and gradients of the plain path."""

import pytest
import torch

from helpers import random_tokens, tiny_model


@pytest.mark.parametrize("chunk", [1, 3, 4])
@pytest.mark.parametrize("variant", [dict(), dict(same_length=True, clamp_len=3), dict(pre_lnorm=True, untie_r=True)])
def test_chunked_attention_equals_plain(chunk, variant):
    model = tiny_model(seed=chunk, tgt_len=7, mem_len=9, **variant)
    x = random_tokens(2, 22, seed=chunk)
    first = model(x[:, :7], x[:, 1:8])  # memory of 7
    plain = model(x[:, 7:14], x[:, 8:15], mems=first.mems)
    plain.loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    model.attn_chunk = chunk
    fast = model(x[:, 7:14], x[:, 8:15], mems=first.mems)
    fast.loss.backward()
    torch.testing.assert_close(fast.losses, plain.losses, rtol=1e-5, atol=1e-5)
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, grads[n], rtol=1e-4, atol=1e-6, msg=n)
    with torch.no_grad():
        torch.testing.assert_close(model(x[:, 7:14], x[:, 8:15], mems=first.mems).losses, plain.losses,
                                   rtol=1e-5, atol=1e-5)
