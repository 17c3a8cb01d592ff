"""The memory functions (model/memory.py) on values worked out by hand: which states the next memory keeps, in
what order and type, which slots stay hidden, and how rows are forgotten."""

from __future__ import annotations

import pytest
import torch

from transformer_xl.model import empty_mems, reset_mems, update_mems
from transformer_xl.model.memory import cache_window, next_hidden, shift_mems, update_mems_mask


def states(batch: int, length: int, start: int, dtype=torch.float32):
    """``[B, length, 2]`` whose entry ``[b, t]`` is ``(100 b + start + t, -(100 b + start + t))``: positions readable
    in the values."""
    t = (torch.arange(batch)[:, None] * 100 + start + torch.arange(length)[None]).to(dtype)
    return torch.stack([t, -t], dim=-1)


def positions(mem):
    return mem[..., 0].long().tolist()


def test_empty_mems():
    mems = empty_mems(3, 2, 5, dtype=torch.float64)
    assert len(mems) == 3 and all(m.shape == (2, 0, 5) and m.dtype == torch.float64 for m in mems)


@pytest.mark.parametrize("mlen, qlen, mem_len, ext_len, window", [
    (0, 4, 3, 0, (1, 4)),  # the last mem_len of the segment
    (0, 4, 6, 0, (0, 4)),  # all of it
    (3, 4, 5, 0, (2, 7)),  # the last 5 of memory + segment
    (3, 4, 5, 1, (1, 6)),  # ext_len: the segment's last position is not cached
    (2, 3, 4, 5, (0, 2)),  # ext_len beyond the segment: nothing of it
    (4, 2, 0, 0, (6, 6)),  # no memory
])
def test_cache_window(mlen, qlen, mem_len, ext_len, window):
    assert cache_window(mlen, qlen, mem_len, ext_len) == window


def test_update_mems_keeps_the_last_states_in_order():
    hids = [states(2, 4, 10), states(2, 4, 20)]  # two layers, segment positions 10..13 (20..23)
    first = update_mems(hids, None, 3, 0)
    assert [positions(m) for m in first] == [[[11, 12, 13], [111, 112, 113]], [[21, 22, 23], [121, 122, 123]]]
    mems = [states(2, 2, 8), states(2, 2, 18)]  # memory positions 8, 9 before the segment
    kept = update_mems(hids, mems, 5, 1)  # 2 + 4 - 1 = 5 states: 8, 9, 10, 11, 12
    assert positions(kept[0]) == [[8, 9, 10, 11, 12], [108, 109, 110, 111, 112]]
    assert positions(kept[1]) == [[18, 19, 20, 21, 22], [118, 119, 120, 121, 122]]
    assert [m[..., 1].long().tolist() for m in kept] == [(-m[..., 0]).long().tolist() for m in kept]
    assert positions(update_mems(hids, mems, 4, 0)[0]) == [[10, 11, 12, 13], [110, 111, 112, 113]]


@pytest.mark.parametrize("mlen", [0, 2, 5])
@pytest.mark.parametrize("qlen", [1, 4])
@pytest.mark.parametrize("mem_len", [0, 1, 3, 8])
@pytest.mark.parametrize("ext_len", [0, 1, 2, 6])
def test_update_mems_is_the_last_mem_len_of_the_cached_states(mlen, qlen, mem_len, ext_len):
    """Against the rule in words: of the ``M + L`` states in order, the segment's last ``ext_len`` are not cached;
    of the rest, the last ``mem_len`` are kept (a list of positions, sliced by Python)."""
    mems = [states(2, mlen, 0), states(2, mlen, 50)] if mlen else None
    hids = [states(2, qlen, mlen), states(2, qlen, 50 + mlen)]
    cached = list(range(mlen + qlen))[:mlen + max(0, qlen - ext_len)]
    kept = cached[max(0, len(cached) - mem_len):] if mem_len else []
    got = update_mems(hids, mems, mem_len, ext_len)
    assert [positions(m) for m in got] == [[[100 * b + start + p for p in kept] for b in range(2)]
                                           for start in (0, 50)]


def test_update_mems_detaches_and_takes_the_segments_type():
    hid = states(1, 3, 0).requires_grad_()
    mem = states(1, 2, 0, torch.float64)
    with torch.enable_grad():
        out = update_mems([hid * 1], [mem], 4, 0)
    assert out[0].dtype == torch.float32 and not out[0].requires_grad and out[0].grad_fn is None
    assert out[0].shape == (1, 4, 2)


def test_shift_mems_keeps_the_last_slots_of_a_fixed_length():
    mems = [states(2, 4, 0, torch.float64), states(2, 4, 50, torch.float64)]
    hids = [states(2, 3, 4), states(2, 3, 54)]
    hidden = torch.tensor([[True, False, True, False, False, True, False],
                           [False, False, False, True, True, False, True]])
    new, mask = shift_mems(hids, mems, hidden)
    assert positions(new[0]) == [[3, 4, 5, 6], [103, 104, 105, 106]]
    assert positions(new[1]) == [[53, 54, 55, 56], [153, 154, 155, 156]]
    assert all(m.dtype == torch.float32 for m in new)
    assert torch.equal(mask, hidden[:, 3:])
    new, mask = shift_mems(hids, mems, None)
    assert mask.shape == (2, 4) and mask.dtype == torch.bool and not mask.any()
    empty, mask = shift_mems(hids, [states(2, 0, 0)] * 2, None)  # a memory of length 0 stays so
    assert empty[0].shape == (2, 0, 2) and mask.shape == (2, 0)


def test_next_hidden_and_its_slice():
    key_hidden = torch.tensor([[False, True, False, False, False]])
    episode = torch.tensor([[0, 0, 1, 1, 2]], dtype=torch.int32)  # the episodes before the row's last have ended
    assert next_hidden(None, None) is None
    assert next_hidden(key_hidden, None) is key_hidden
    assert next_hidden(None, episode).tolist() == [[True, True, True, True, False]]
    assert next_hidden(key_hidden, torch.tensor([[1, 1, 1, 1, 1]], dtype=torch.int32)).tolist() == \
        key_hidden.tolist()
    assert next_hidden(key_hidden, torch.tensor([[0, 0, 0, 1, 1]], dtype=torch.int32)).tolist() == \
        [[True, True, True, False, False]]
    hidden = torch.tensor([[True, False, True, False, True, False, False]])
    assert update_mems_mask(None, 3, 4, 5, 0) is None
    assert update_mems_mask(hidden, 3, 4, 5, 0).tolist() == [[True, False, True, False, False]]  # [2, 7)
    assert update_mems_mask(hidden, 3, 4, 5, 1).tolist() == [[False, True, False, True, False]]  # [1, 6)


def test_reset_mems_forgets_the_chosen_rows():
    mems = [states(3, 4, 1), states(3, 4, 1) * 2]
    before = [m.clone() for m in mems]
    for rows in (torch.tensor([False, True, False]), [1], torch.tensor([1])):
        out, mask = reset_mems(mems, None, rows)
        assert mask.dtype == torch.bool and mask.tolist() == [[False] * 4, [True] * 4, [False] * 4]
        for m, kept in zip(out, before):
            assert torch.equal(m[[0, 2]], kept[[0, 2]]) and not m[1].any()
    assert all(torch.equal(m, b) for m, b in zip(mems, before))  # inputs are not modified
    old_mask = torch.tensor([[True, False, False, False]] * 3)
    out, mask = reset_mems(mems, old_mask, [2])
    assert mask.tolist() == [[True, False, False, False]] * 2 + [[True] * 4]
    assert old_mask.tolist() == [[True, False, False, False]] * 3
    out, mask = reset_mems(mems, None, [0], mem_init="zeros")  # zero states, visible: a fresh start
    assert not mask.any() and not out[0][0].any() and torch.equal(out[0][1:], before[0][1:])
    with pytest.raises(ValueError, match=r"rows: a bool mask must have shape \[3\]"):
        reset_mems(mems, None, torch.tensor([True, False]))
    empty = [torch.zeros(3, 0, 2)]
    assert reset_mems(empty, None, [0]) == (empty, None)
    assert reset_mems([], None, [0]) == ([], None)
