"""The shift-trick score equals the paper's formula evaluated pair by pair."""

import pytest
import torch
from helpers import tiny_model
from reference import brute_force_rel_scores, sinusoid

from transformer_xl.model.attention import distances, rel_attn_score, rel_shift, segment_visibility, sinusoid_table


def fast_scores(model, layer: int, h: torch.Tensor, mems):
    """Scores of the model's own pipeline (positions, r_net, shift, mask) for layer ``layer``."""
    attn = model.layers[layer].dec_attn
    qlen, mlen = h.size(1), (0 if mems is None else mems.size(1))
    q, k, _ = attn.project(h, mems)  # [B, H, L, D], [B, H, K, D]
    pos_emb = sinusoid_table(distances(mlen + qlen, model.clamp_len, h.device), model.config.d_model)  # [K+1, d]
    r_k = attn.position_keys(pos_emb)  # [H, K+1, D]
    score = rel_attn_score(q, k, r_k, model.r_w_bias, model.r_r_bias)  # [B, H, L, K]
    window = model.same_length_window(mlen)
    mask = segment_visibility(qlen, mlen, h.device, window).mask  # [L, K]
    return score.masked_fill(mask, float("-inf")), q, k


@pytest.mark.parametrize("mlen,qlen", [(0, 6), (3, 6), (9, 4)], ids=["no-memory", "M<L", "M>L"])
@pytest.mark.parametrize("clamp_len,same_length", [(-1, False), (3, False), (-1, True), (4, True), (0, False),
                                                   (1, False)])
def test_shift_trick_equals_brute_force(mlen, qlen, clamp_len, same_length):
    mem_len = 7
    model = tiny_model(seed=mlen + qlen, clamp_len=clamp_len, same_length=same_length, mem_len=mem_len)
    gen = torch.Generator().manual_seed(1)
    h = torch.randn(2, qlen, 16, generator=gen)
    mems = torch.randn(2, mlen, 16, generator=gen) if mlen else None
    fast, q, k = fast_scores(model, 0, h, mems)
    attn = model.layers[0].dec_attn
    for b in range(2):
        slow = brute_force_rel_scores(q[b], k[b], attn.r_net.weight, model.r_w_bias, model.r_r_bias,
                                      mem_len if same_length else None, clamp_len, 16)
        assert torch.equal(torch.isinf(fast[b]), torch.isinf(slow)), "masks differ"
        visible = ~torch.isinf(slow)
        assert visible.any(dim=-1).all(), "every query must see at least itself"
        torch.testing.assert_close(fast[b][visible], slow[visible], rtol=1e-5, atol=1e-5)


def test_rel_shift_is_a_view_without_copy():
    x = torch.arange(3 * 4 * 9, dtype=torch.float32).view(1, 3, 4, 9)  # L=4, K+1=9
    y = rel_shift(x)
    assert y.shape == (1, 3, 4, 8)
    assert y.data_ptr() == x.data_ptr() + 4 * x.element_size()  # a view into x's storage
    qlen, klen = 4, 8
    mlen = klen - qlen
    for i in range(qlen):
        for j in range(mlen + i + 1):  # every causal entry: distance M+i-j is column K-(M+i-j)
            assert y[0, 0, i, j] == x[0, 0, i, klen - (mlen + i - j)]


def test_no_gather_of_position_vectors(monkeypatch):
    """The position term is a matmul against K+1 position keys, never an [L, K, d] gather."""
    model = tiny_model()
    seen = []
    real_matmul = torch.matmul

    def spy(a, b):
        seen.append((tuple(a.shape), tuple(b.shape)))
        return real_matmul(a, b)

    monkeypatch.setattr(torch, "matmul", spy)
    h, mems = torch.randn(2, 6, 16), torch.randn(2, 4, 16)
    fast_scores(model, 0, h, mems)
    assert ((2, 12, 8), (2, 8, 11)) in seen  # (q+v) [H,B*L,D] @ r_k^T [H,D,K+1]: one product per head
    assert all(len(a) <= 4 and len(b) <= 4 for a, b in seen)


@pytest.mark.parametrize("clamp_len, expected", [(-1, [6, 5, 4, 3, 2, 1, 0]), (0, [6, 5, 4, 3, 2, 1, 0]),
                                                 (1, [1, 1, 1, 1, 1, 1, 0]), (4, [4, 4, 4, 3, 2, 1, 0])])
def test_distances_count_down_and_clamp_only_above_zero(clamp_len, expected):
    pos = distances(6, clamp_len, "cpu")
    assert pos.dtype == torch.float32 and pos.tolist() == expected


def test_sinusoid_table_is_the_papers():
    """Sines of pos / 10000^(2k/d) first, then the cosines: each row judged by the reference's formula."""
    pos = torch.tensor([0.0, 1.0, 3.0, 17.0])
    table = sinusoid_table(pos, 8)
    assert table.shape == (4, 8)
    for row, p in zip(table, pos.tolist()):
        torch.testing.assert_close(row, sinusoid(p, 8), rtol=1e-6, atol=1e-6)
