"""Sliding-window evaluation equals evaluating every window separately; where the methods must
agree, sliding and segment-with-memory evaluation give the same losses."""

import numpy as np
import pytest
import torch
from helpers import random_tokens, tiny_model

from transformer_xl.evaluation import evaluate
from transformer_xl.evaluation.token_losses import segment_losses, sliding_losses, stream_rows


@pytest.mark.parametrize("attn_type", [2, 0])
def test_sliding_window_equals_brute_force_loop(attn_type):
    model = tiny_model(seed=1, attn_type=attn_type, mem_len=0, tgt_len=4)
    data = random_tokens(3 * 15, seed=1).numpy()
    window = 4
    fast = sliding_losses(model, data, batch_size=3, window=window, windows_per_call=5)
    rows = stream_rows(data, 3)
    assert fast.shape == (3, 14)
    for b in range(3):
        for j in range(14):  # predict token j + 1 from at most `window` predecessors, one forward each
            ctx = rows[b, max(0, j + 1 - window): j + 1][None]
            labels = torch.full_like(ctx, -100)
            labels[0, -1] = rows[b, j + 1]
            with torch.no_grad():
                expected = model(ctx, labels).losses[0, -1]
            torch.testing.assert_close(fast[b, j], expected, rtol=1e-5, atol=1e-5)


def test_sliding_equals_segment_when_the_window_covers_everything():
    """Window >= row length and memory holding the whole prefix: both are one long causal pass."""
    model = tiny_model(seed=2, tgt_len=4, mem_len=64)
    data = random_tokens(2 * 13, seed=2).numpy()
    slide = sliding_losses(model, data, batch_size=2, window=64)
    seg = segment_losses(model, data, batch_size=2, tgt_len=4, mem_len=64)
    torch.testing.assert_close(slide, seg, rtol=1e-5, atol=1e-5)


def test_one_layer_xl_sliding_window_equals_memory_of_window_minus_one():
    """With one layer the memory holds embeddings, so token-by-token evaluation with memory A-1 sees
    exactly the sliding window of A tokens."""
    model = tiny_model(seed=3, n_layer=1, tgt_len=1, mem_len=5)
    data = random_tokens(2 * 20, seed=3).numpy()
    slide = sliding_losses(model, data, batch_size=2, window=6)
    seg = segment_losses(model, data, batch_size=2, tgt_len=1, mem_len=5)
    torch.testing.assert_close(slide, seg, rtol=1e-5, atol=1e-5)


def test_evaluate_modes_and_max_predictions():
    model = tiny_model(seed=4, attn_type=2, mem_len=0, tgt_len=5)
    data = random_tokens(4 * 30, seed=4).numpy()
    res = evaluate(model, data, batch_size=4, mode="sliding", max_steps=10)
    assert res.tokens == 40
    expected = sliding_losses(model, data, 4, 5, max_tokens=10).double().mean()
    assert res.loss == pytest.approx(float(expected))
    seg = evaluate(model, data, batch_size=4, mode="segment")
    assert np.isfinite(seg.loss) and seg.tokens == 4 * 29
