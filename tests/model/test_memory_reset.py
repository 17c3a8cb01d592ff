"""Resetting chosen rows' memory makes those rows continue exactly as a fresh start."""

import torch
from helpers import random_tokens, tiny_model

from transformer_xl.model import reset_mems


def test_reset_rows_behave_like_a_fresh_start_and_others_are_untouched():
    model = tiny_model(seed=1, tgt_len=4, mem_len=8)
    x = random_tokens(3, 13, seed=1)
    with torch.no_grad():
        first = model(x[:, :4], x[:, 1:5])
        second = model(x[:, 4:8], x[:, 5:9], mems=first.mems)
        mems, mask = reset_mems(second.mems, second.mems_mask, [1])
        third = model(x[:, 8:12], x[:, 9:13], mems=mems, mems_mask=mask)
        carried = model(x[:, 8:12], x[:, 9:13], mems=second.mems)
        fresh = model(x[:, 8:12], x[:, 9:13])
        # one more segment: row 1's memory now holds only segment 3
        fourth = model(x[:, 8:12], x[:, 9:13], mems=third.mems, mems_mask=third.mems_mask)
        fresh_then = model(x[:, 8:12], x[:, 9:13], mems=fresh.mems)
    torch.testing.assert_close(third.losses[1], fresh.losses[1], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(third.losses[[0, 2]], carried.losses[[0, 2]], rtol=1e-6, atol=1e-6)
    assert (third.losses[1] - carried.losses[1]).abs().max() > 1e-4
    torch.testing.assert_close(fourth.losses[1], fresh_then.losses[1], rtol=1e-5, atol=1e-5)
    assert third.mems_mask.shape == (3, 8) and third.mems_mask[1, :4].all() and not third.mems_mask[1, 4:].any()


def test_reset_does_not_modify_inputs():
    model = tiny_model()
    out = model(random_tokens(2, 5))
    before = [m.clone() for m in out.mems]
    reset_mems(out.mems, None, torch.tensor([True, False]))
    assert all(torch.equal(a, b) for a, b in zip(before, out.mems))
