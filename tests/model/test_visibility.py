"""The visibility rule (model/attention/visibility.py), element by element against the rule as its docstring states
it, written out here as loops over (query, key) pairs."""

from __future__ import annotations

import itertools

import pytest
import torch

from transformer_xl.model.attention import episode_ids, segment_visibility
from transformer_xl.model.attention.visibility import block_mask, forbidden, hide, other_episode


def rule(q: int, k: int, window: int = 0, first=None) -> bool:
    """True where a query at position q may not see a key at position k."""
    return k > q or (window > 0 and q - k >= window) or (first is not None and k < first)


@pytest.mark.parametrize("window", [0, 1, 3])
@pytest.mark.parametrize("first", [None, 2])
def test_forbidden_is_the_rule(window, first):
    q_pos, k_pos = torch.arange(7)[:, None], torch.arange(9)[None]
    got = forbidden(q_pos, k_pos, window, None if first is None else torch.full((7, 1), first))
    expected = torch.tensor([[rule(q, k, window, first) for k in range(9)] for q in range(7)])
    assert torch.equal(got, expected)


def test_without_a_window_the_rule_is_causal_only():
    """The defaults (no ``window``: no same_length) forbid only the future, in both functions."""
    q_pos, k_pos = torch.arange(3, 7)[:, None], torch.arange(7)[None]
    expected = torch.tensor([[rule(q, k) for k in range(7)] for q in range(3, 7)])
    assert torch.equal(forbidden(q_pos, k_pos), expected)
    vis = segment_visibility(4, 3, "cpu")
    assert vis.window == 0 and torch.equal(vis.mask, expected)


def test_a_window_per_query_is_always_applied():
    """A tensor window (one per query: the decoding cache's) applies even where it is not above 0's rule."""
    q_pos, k_pos = torch.arange(5)[:, None], torch.arange(5)[None]
    windows = torch.tensor([[1], [2], [1], [3], [5]])
    got = forbidden(q_pos, k_pos, windows)
    expected = torch.tensor([[k > q or q - k >= int(windows[q]) for k in range(5)] for q in range(5)])
    assert torch.equal(got, expected)


def test_hide_adds_hidden_keys_but_each_query_keeps_its_own():
    gen = torch.Generator().manual_seed(0)
    mask = torch.rand(2, 3, 5, generator=gen) < 0.3
    key_hidden = torch.rand(2, 5, generator=gen) < 0.5
    own = torch.zeros(3, 5, dtype=torch.bool)
    own[torch.arange(3), torch.arange(2, 5)] = True
    got = hide(mask, key_hidden, own)
    for b, i, j in itertools.product(range(2), range(3), range(5)):
        assert bool(got[b, i, j]) == ((bool(mask[b, i, j]) or bool(key_hidden[b, j])) and not bool(own[i, j]))


def test_episode_ids_number_the_keys():
    starts = torch.tensor([[False, True, False, True], [True, False, False, False]])
    ids = episode_ids(starts, 2)
    assert ids.dtype == torch.int32
    assert ids.tolist() == [[0, 0, 0, 1, 1, 2], [0, 0, 1, 1, 1, 1]]
    assert episode_ids(starts, 0).tolist() == [[0, 1, 1, 2], [1, 1, 1, 1]]
    other = other_episode(ids, 2)  # [B, L, K]
    assert other.shape == (2, 4, 6)
    for b, i, j in itertools.product(range(2), range(4), range(6)):
        assert bool(other[b, i, j]) == (ids[b, 2 + i] != ids[b, j])


CASES = [dict(qlen=4, mlen=0), dict(qlen=4, mlen=3), dict(qlen=3, mlen=5, window=4), dict(qlen=5, mlen=2, window=1),
         dict(qlen=4, mlen=3, hidden=True), dict(qlen=4, mlen=3, episodes=True),
         dict(qlen=4, mlen=3, window=3, hidden=True, episodes=True)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_segment_visibility_is_the_rule(case):
    qlen, mlen, window = case["qlen"], case["mlen"], case.get("window", 0)
    gen = torch.Generator().manual_seed(qlen * 10 + mlen)
    key_hidden = torch.rand(2, mlen + qlen, generator=gen) < 0.4 if case.get("hidden") else None
    starts = torch.rand(2, qlen, generator=gen) < 0.4 if case.get("episodes") else None
    episode = None if starts is None else episode_ids(starts, mlen)
    vis = segment_visibility(qlen, mlen, "cpu", window, key_hidden, episode)
    assert (vis.qlen, vis.mlen, vis.klen, vis.window, vis.kernel_rule) == (qlen, mlen, mlen + qlen, window, True)
    assert vis.key_hidden is key_hidden and vis.episode is episode
    per_row = key_hidden is not None or episode is not None
    assert vis.mask.shape == ((2, qlen, mlen + qlen) if per_row else (qlen, mlen + qlen))
    for b, i, j in itertools.product(range(2), range(qlen), range(mlen + qlen)):
        q = mlen + i
        no = rule(q, j, window)
        if episode is not None:
            no = no or bool(episode[b, q] != episode[b, j])
        if key_hidden is not None:
            no = (no or bool(key_hidden[b, j])) and j != q
        assert bool((vis.mask[b] if per_row else vis.mask)[i, j]) == no, (b, i, j)
    # mask_start: the first column that can hold a True (only the future is masked: the column after memory)
    if per_row or window:
        assert vis.mask_start == 0
    else:
        assert vis.mask_start == mlen + 1
        assert not vis.mask[:, :mlen + 1].any() and (qlen < 2 or bool(vis.mask[0, mlen + 1]))


@pytest.mark.parametrize("with_mask", [False, True])
def test_block_mask_is_the_rule_for_a_block_of_keys(with_mask):
    qlen, mlen = 4, 3
    attn_mask = torch.rand(2, qlen, mlen + qlen, generator=torch.Generator().manual_seed(1)) < 0.3
    for j0, j1 in [(0, 3), (2, 6), (5, 7)]:
        got = block_mask(attn_mask if with_mask else None, mlen, qlen, j0, j1, "cpu")
        assert got.shape == ((2, qlen, j1 - j0) if with_mask else (qlen, j1 - j0))
        for i, j in itertools.product(range(qlen), range(j0, j1)):
            for b in range(2):
                expected = rule(mlen + i, j) or (with_mask and bool(attn_mask[b, i, j]))
                assert bool((got[b] if with_mask else got)[i, j - j0]) == expected
