"""The adaptive log-softmax is a distribution; with no cutoffs it is a plain softmax."""

import pytest
import torch
import torch.nn.functional as F
from helpers import randomize_

from transformer_xl.model.adaptive import AdaptiveEmbedding, ProjectedAdaptiveLogSoftmax


def make_crit(n_token, d_embed, d_proj, cutoffs, div_val, seed=0):
    crit = ProjectedAdaptiveLogSoftmax(n_token, d_embed, d_proj, cutoffs, div_val)
    randomize_(crit, seed)
    return crit


@pytest.mark.parametrize("div_val", [1, 2, 4])
@pytest.mark.parametrize("d_proj", [16, 24])
def test_log_probs_sum_to_one_and_match_target_path(div_val, d_proj):
    crit = make_crit(100, 64, d_proj, [10, 30, 60], div_val)
    hidden = torch.randn(40, d_proj)
    log_probs = crit.log_probs(hidden)  # [N, V]
    assert log_probs.shape == (40, 100)
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(40), rtol=0, atol=1e-5)
    target = torch.arange(40) * 5 % 100  # every cluster is hit
    torch.testing.assert_close(crit(hidden, target), log_probs.gather(1, target[:, None]).squeeze(1), rtol=1e-6,
                               atol=1e-6)


@pytest.mark.parametrize("d_proj", [16, 24])
def test_no_cutoffs_is_plain_softmax(d_proj):
    crit = make_crit(50, 16, d_proj, [], 1)
    hidden = torch.randn(7, d_proj)
    proj = crit.out_projs[0]
    x = hidden if proj is None else hidden @ proj
    expected = F.log_softmax(x @ crit.out_layers[0].weight.t() + crit.out_layers[0].bias, dim=-1)
    torch.testing.assert_close(crit.log_probs(hidden), expected, rtol=1e-6, atol=1e-6)


def test_tail_cluster_probability_is_head_times_tail():
    """P(w) = P(cluster) * P(w | cluster), with cluster c's head column at -c."""
    crit = make_crit(30, 8, 8, [10, 20], 2)
    hidden = torch.randn(3, 8)
    lp = crit.log_probs(hidden)
    head = F.log_softmax(F.linear(hidden @ crit.out_projs[0],
                                  torch.cat([crit.out_layers[0].weight, crit.cluster_weight]),
                                  torch.cat([crit.out_layers[0].bias, crit.cluster_bias])), -1)
    for c, (lo, hi) in enumerate([(10, 20), (20, 30)], start=1):
        layer = crit.out_layers[c]
        tail = F.log_softmax(F.linear(hidden @ crit.out_projs[c], layer.weight, layer.bias), -1)
        torch.testing.assert_close(lp[:, lo:hi], head[:, -c, None] + tail, rtol=1e-6, atol=1e-6)
    # cluster mass equals the head's cluster probability
    torch.testing.assert_close(lp[:, 10:20].exp().sum(-1), head[:, -1].exp(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("div_val", [1, 2, 4])
def test_adaptive_embedding_per_cluster(div_val):
    emb = AdaptiveEmbedding(100, 64, 24, [10, 30, 60], div_val)
    randomize_(emb)
    tokens = torch.tensor([[0, 9, 10, 29], [30, 59, 60, 99]])
    out = emb(tokens)
    assert out.shape == (2, 4, 24)
    bounds = [0, 10, 30, 60, 100]
    for b in range(2):
        for t in range(4):
            tok = int(tokens[b, t])
            if div_val == 1:
                expected = emb.emb_projs[0] @ emb.emb_layers[0].weight[tok]
            else:
                c = max(i for i in range(4) if bounds[i] <= tok)
                expected = emb.emb_projs[c] @ emb.emb_layers[c].weight[tok - bounds[c]]
            torch.testing.assert_close(out[b, t], expected * 24 ** 0.5, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("div_val", [1, 2])
def test_bf16_autocast_keeps_log_softmax_in_float32(div_val):
    crit = make_crit(100, 16, 16, [10, 30], div_val)
    hidden = torch.randn(20, 16)
    target = torch.arange(20) * 5
    with torch.autocast("cpu", dtype=torch.bfloat16):
        lp = crit(hidden, target)
        full = crit.log_probs(hidden)
    assert lp.dtype == torch.float32 and full.dtype == torch.float32
    torch.testing.assert_close(full.exp().sum(-1), torch.ones(20), rtol=0, atol=1e-4)
    # bf16 logits, float32 log-softmax: off by at most 0.014 here; log-probs of this size (up to 11) held in bf16
    # would be off by up to 0.03 more
    torch.testing.assert_close(lp, crit(hidden, target), rtol=0, atol=0.02)
