"""The CPU dropout mask: drop rate, unbiasedness, reproducibility, gradient, and the fused target log-softmax."""

import math

import torch

from transformer_xl.model.adaptive import _TargetLogSoftmax
from transformer_xl.model.dropout import Dropout


def test_drop_rate_and_mean_match_p():
    n = 2_000_001  # odd: the last int32 contributes one lane only
    for p in (0.1, 0.25, 0.5):
        torch.manual_seed(0)
        out = Dropout(p).train()(torch.ones(n))
        dropped = (out == 0).double()
        sd = math.sqrt(p * (1 - p) / n)
        # both 15-bit halves of each random int32 drop at rate p (5 standard deviations)
        for lane in (dropped[0::2], dropped[1::2]):
            assert abs(lane.mean().item() - p) < 5 * sd * math.sqrt(2)
        assert abs(out.double().mean().item() - 1.0) < 5 * math.sqrt(p / (1 - p) / n)
        kept = out[out != 0]
        torch.testing.assert_close(kept, torch.full_like(kept, 1 / (1 - p)), rtol=1e-4, atol=0)


def test_neighbouring_elements_are_independent():
    torch.manual_seed(1)
    d = (Dropout(0.5).train()(torch.ones(1_000_000)) == 0).double()
    both = (d[0::2] * d[1::2]).mean().item()  # the two lanes of one int32
    shifted = (d[1:-1:2] * d[2::2]).mean().item()  # lanes of neighbouring int32s
    assert abs(both - 0.25) < 0.005 and abs(shifted - 0.25) < 0.005


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
