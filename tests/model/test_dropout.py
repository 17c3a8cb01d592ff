"""The CPU dropout mask: drop rate, unbiasedness, reproducibility, gradient, and the fused target log-softmax."""

import math

import pytest
import torch

from transformer_xl.model.adaptive import _TargetLogSoftmax
from transformer_xl.model.ops.dropout import Dropout, keep_mask


def test_drop_rate_and_mean_match_p():
    n = 2_000_003  # not a multiple of 4: the last word contributes three lanes only
    for p in (0.1, 0.25, 0.5):
        torch.manual_seed(0)
        out = Dropout(p).train()(torch.ones(n))
        dropped = (out == 0).double()
        sd = math.sqrt(p * (1 - p) / n)
        # each of the four 16-bit lanes of a random 64-bit word drops at rate p (5 standard deviations)
        for lane in range(4):
            assert abs(dropped[lane::4].mean().item() - p) < 5 * sd * 2
        assert abs(out.double().mean().item() - 1.0) < 5 * math.sqrt(p / (1 - p) / n)
        kept = out[out != 0]
        torch.testing.assert_close(kept, torch.full_like(kept, 1 / (1 - p)), rtol=1e-4, atol=0)


def test_neighbouring_elements_are_independent():
    torch.manual_seed(1)
    d = (Dropout(0.5).train()(torch.ones(1_000_000)) == 0).double()
    for lag in (1, 2, 3, 4, 5):  # lanes of one word (1-3) and of neighbouring words (4, 5)
        both = (d[:-lag] * d[lag:]).mean().item()
        assert abs(both - 0.25) < 0.004, lag


def test_explicit_seeds_fix_the_mask():
    a, scale = keep_mask((3, 1000), 0.2, seed=[7, 3])
    b, _ = keep_mask((3, 1000), 0.2, seed=[7, 3])
    c, _ = keep_mask((3, 1000), 0.2, seed=[7, 4])
    assert a.shape == (3, 1000) and torch.equal(a, b) and not torch.equal(a, c)
    assert scale == 2 ** 16 / (2 ** 16 - round(0.2 * 2 ** 16))
    torch.manual_seed(3)
    d, _ = keep_mask((3, 1000), 0.2)
    torch.manual_seed(3)
    assert torch.equal(d, keep_mask((3, 1000), 0.2)[0])  # the seed comes from torch's generator
    with pytest.raises(ValueError):
        keep_mask((4,), 1.0)


def test_seeded_eval_and_gradient():
    x = torch.randn(64, 33, requires_grad=True)
    drop = Dropout(0.3).train()
    torch.manual_seed(5)
    a = drop(x)
    torch.manual_seed(5)
    b = drop(x)
    assert torch.equal(a, b)
    assert not torch.equal(a, drop(x))  # a fresh mask per call
    a.sum().backward()
    torch.testing.assert_close(x.grad, (a != 0).float() / 0.7, rtol=1e-4, atol=0)  # d out / d x = mask / (1 - p)
    assert drop.eval()(x) is x
    assert Dropout(0.0).train()(x) is x


def test_target_log_softmax_matches_autograd():
    logits = torch.randn(9, 13, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 13, (9,))
    assert torch.autograd.gradcheck(lambda z: _TargetLogSoftmax.apply(z, target), (logits,))
    ref = torch.log_softmax(logits, -1).gather(1, target[:, None]).squeeze(1)
    torch.testing.assert_close(_TargetLogSoftmax.apply(logits, target), ref)
