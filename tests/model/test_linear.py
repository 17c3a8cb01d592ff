"""The few-row linear (decoding's matrix-vector products split across threads) equals F.linear."""

import pytest
import torch
import torch.nn.functional as F

from transformer_xl.model.ops.linear import FEW_ROWS, Linear, _split, linear


@pytest.fixture
def two_threads():
    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(saved)


@pytest.mark.parametrize("rows", [1, 3, FEW_ROWS, FEW_ROWS + 1])
@pytest.mark.parametrize("with_bias", [True, False])
def test_split_product_equals_f_linear(two_threads, rows, with_bias):
    g = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 48, generator=g)
    w = torch.randn(64, 48, generator=g)
    b = torch.randn(64, generator=g) if with_bias else None
    with torch.no_grad():
        assert _split(x, w, b) == (2 if rows <= FEW_ROWS else 0)
        torch.testing.assert_close(linear(x, w, b), F.linear(x, w, b), rtol=1e-6, atol=1e-6)
        x3 = x.view(1, rows, 48)  # [B, T, in] as the layers call it
        torch.testing.assert_close(linear(x3, w, b), F.linear(x3, w, b), rtol=1e-6, atol=1e-6)


def test_odd_widths_autograd_and_slices(two_threads):
    x = torch.randn(2, 8)
    assert _split(x, torch.randn(7, 8), None) == 0  # 7 outputs do not split into 2 blocks
    w = torch.randn(12, 8, requires_grad=True)
    assert _split(x, w, None) == 0  # gradients wanted: F.linear
    with torch.no_grad():
        assert _split(x, w, None) == 2
        assert _split(x, w.t().contiguous().t(), None) == 0  # a transposed weight is not split
        full = torch.randn(24, 8)
        torch.testing.assert_close(linear(x, full[12:]), F.linear(x, full[12:]), rtol=1e-6, atol=1e-6)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert _split(x, w, None) == 0


def test_module_keeps_nn_linears_names_and_results(two_threads):
    torch.manual_seed(0)
    ours, theirs = Linear(16, 10), torch.nn.Linear(16, 10)
    theirs.load_state_dict(ours.state_dict())
    assert set(ours.state_dict()) == {"weight", "bias"}
    x = torch.randn(1, 1, 16)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), rtol=1e-6, atol=1e-6)
    y = ours(x)  # with gradients: F.linear, and they flow
    y.sum().backward()
    assert ours.weight.grad is not None
