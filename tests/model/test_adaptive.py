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


@pytest.mark.parametrize("div_val", [1, 2])
def test_one_tail_cluster_is_head_times_tail(div_val):
    """A single cutoff: P(w) = P(w | head) for the shortlist, P(cluster) * P(w | cluster) beyond it, computed here
    from the parameters in float64; the target path (with and without gradients) gives the same numbers."""
    crit = make_crit(30, 8, 8 if div_val == 1 else 12, [10], div_val)
    hidden = torch.randn(6, crit.d_proj, dtype=torch.float64)

    def logits(i, weight, bias):
        proj = crit.out_projs[i]
        x = hidden if proj is None else hidden @ proj.double()
        return x @ weight.double().t() + bias.double()

    if div_val == 1:
        w, b = crit.out_layers[0].weight, crit.out_layers[0].bias
        (w0, b0), (w1, b1) = (w[:10], b[:10]), (w[10:], b[10:])
    else:
        (w0, b0), (w1, b1) = [(layer.weight, layer.bias) for layer in crit.out_layers]
    head = torch.log_softmax(logits(0, torch.cat([w0, crit.cluster_weight]), torch.cat([b0, crit.cluster_bias])), -1)
    tail = torch.log_softmax(logits(1, w1, b1), -1)
    expected = torch.cat([head[:, :10], head[:, 10:] + tail], dim=1)  # [N, 30]
    got = crit.log_probs(hidden.float())
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5)
    target = torch.tensor([0, 9, 10, 17, 29, 3])
    for grad in (True, False):
        with torch.set_grad_enabled(grad):
            lp = crit(hidden.float(), target)
        torch.testing.assert_close(lp.double(), expected.gather(1, target[:, None]).squeeze(1), rtol=1e-5, atol=1e-5)


def test_the_default_is_one_table_of_full_width():
    """Without ``div_val`` the embedding and the softmax are the paper's default (div_val 1): one table of
    ``d_embed`` columns for the whole vocabulary."""
    emb, crit = AdaptiveEmbedding(100, 16, 16, [10, 30]), ProjectedAdaptiveLogSoftmax(100, 16, 16, [10, 30])
    assert [e.weight.shape for e in emb.emb_layers] == [(100, 16)] and emb.div_val == 1
    assert [layer.weight.shape for layer in crit.out_layers] == [(100, 16)] and crit.div_val == 1


@pytest.mark.parametrize("div_val", [2, 4])
def test_adaptive_embedding_keeps_the_weights_type_also_under_autocast(div_val):
    """bf16 weights give bf16 embeddings (the next layers take them as they are); under bf16 autocast, float32
    weights give float32 embeddings within bf16's rounding of the float32 ones."""
    emb = AdaptiveEmbedding(100, 64, 24, [10, 30, 60], div_val)
    randomize_(emb)
    tokens = torch.tensor([[0, 9, 10, 29], [30, 59, 60, 99]])
    exact = emb(tokens)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = emb(tokens)
    assert mixed.dtype == torch.float32
    torch.testing.assert_close(mixed, exact, rtol=0.02, atol=0.02)
    half = emb.bfloat16()(tokens)
    assert half.dtype == torch.bfloat16
    torch.testing.assert_close(half.float(), exact, rtol=0.02, atol=0.02)


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


def test_target_log_probs_by_row_blocks_equal_the_whole():
    """Without gradients a one-cluster softmax computes the target log-probabilities ROW_BLOCK rows at a time; they
    equal the log-softmax of all rows at once (the path with gradients), for a row count not a multiple of it."""
    from transformer_xl.model.adaptive import ROW_BLOCK

    torch.manual_seed(3)
    crit = make_crit(300, 24, 32, [], 1, seed=3)
    n = 2 * ROW_BLOCK + 17
    hidden, target = torch.randn(n, 32), torch.randint(0, 300, (n,))
    with torch.no_grad():
        blocks = crit(hidden, target)
    whole = crit(hidden.requires_grad_(), target).detach()
    want = torch.log_softmax(crit._logit(hidden.detach(), 0), dim=-1).gather(1, target[:, None]).squeeze(1)
    torch.testing.assert_close(blocks, whole, rtol=0, atol=1e-6)
    torch.testing.assert_close(blocks, want, rtol=0, atol=1e-6)


def test_bf16_target_log_probs_by_products_of_many_rows_equal_the_float64_maths(monkeypatch):
    """bf16 weights without gradients: the output product takes up to PRODUCT_LOGITS_16BIT logits at a time and
    its log-softmax goes ROW_BLOCK rows at a time; the target log-probabilities are float32 and within bf16's
    rounding of the log-softmax computed in float64 from the same weights, for a row count that is a multiple
    of neither block (three products here: the limit is lowered to two row blocks)."""
    from transformer_xl.model import adaptive

    monkeypatch.setattr(adaptive, "PRODUCT_LOGITS_16BIT", 2 * adaptive.ROW_BLOCK * 300)
    torch.manual_seed(4)
    crit = make_crit(300, 24, 32, [], 1, seed=4).bfloat16()
    n = 5 * adaptive.ROW_BLOCK + 9
    hidden, target = torch.randn(n, 32).bfloat16(), torch.randint(0, 300, (n,))
    with torch.no_grad():
        got = crit(hidden, target)
    proj, layer = crit.out_projs[0].double(), crit.out_layers[0]
    logits = hidden.double() @ proj @ layer.weight.double().t() + layer.bias.double()  # [N, V]
    want = torch.log_softmax(logits, dim=-1).gather(1, target[:, None]).squeeze(1)
    assert got.dtype == torch.float32 and got.shape == (n,)
    torch.testing.assert_close(got.double(), want, rtol=0.01, atol=0.1)
    assert (got.double() - want).abs().mean() < 0.02


def test_autocast_target_log_probs_and_gradients_by_row_blocks_equal_the_float64_maths():
    """Under bf16 autocast with gradients the output layer's log-softmax goes ROW_BLOCK rows at a time in both
    passes (the backward recomputes the softmax from the 16-bit logits); the log-probabilities equal the float64
    log-softmax of the same bf16 logits, and the gradient reaching the logits is g * (onehot - softmax) rounded once
    to bf16, for a row count not a multiple of the block."""
    from transformer_xl.model.adaptive import ROW_BLOCK

    torch.manual_seed(5)
    crit = make_crit(300, 32, 32, [], 1, seed=5)
    n = 3 * ROW_BLOCK + 5
    hidden, target = torch.randn(n, 32), torch.randint(0, 300, (n,))
    weights = torch.rand(n)  # a different gradient for each row
    kept = {}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = crit._logit(hidden, 0)
    orig_logit = crit._logit

    def keep_logits(h, i):
        out = orig_logit(h, i)
        out.register_hook(lambda g: kept.setdefault("grad", g))
        kept["logits"] = out
        return out

    crit._logit = keep_logits
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = crit(hidden, target)
    (got * weights).sum().backward()
    assert kept["logits"].dtype == torch.bfloat16 and got.dtype == torch.float32
    torch.testing.assert_close(kept["logits"], logits, rtol=0, atol=0)
    exact = logits.double()
    logp = torch.log_softmax(exact, dim=-1)
    torch.testing.assert_close(got.double(), logp.gather(1, target[:, None]).squeeze(1), rtol=0, atol=1e-5)
    onehot = torch.nn.functional.one_hot(target, 300).double()
    want = (weights.double()[:, None] * (onehot - logp.exp())).bfloat16()
    assert kept["grad"].dtype == torch.bfloat16
    torch.testing.assert_close(kept["grad"].double(), want.double(), rtol=0.01, atol=1e-6)


@pytest.mark.parametrize("div_val", [1, 2])
def test_a_cluster_without_targets_is_skipped_not_the_rest(div_val):
    """Targets in the head and the last tail cluster only: each one's log-prob is the full distribution's."""
    crit = make_crit(100, 16, 16, [10, 30, 60], div_val)
    hidden = torch.randn(6, 16)
    target = torch.tensor([3, 70, 99, 5, 60, 61])
    expected = crit.log_probs(hidden).gather(1, target[:, None])[:, 0]
    torch.testing.assert_close(crit(hidden, target), expected, rtol=1e-6, atol=1e-6)
    emb = AdaptiveEmbedding(100, 16, 8, [10, 30, 60], 2)
    randomize_(emb)
    out = emb(target.view(2, 3)).view(6, 8)  # no token of clusters 1 and 2: the last one still embeds its own
    bounds = [0, 10, 30, 60, 100]
    for row, tok in zip(out, target.tolist()):
        c = max(i for i in range(4) if bounds[i] <= tok)
        expected = emb.emb_projs[c] @ emb.emb_layers[c].weight[tok - bounds[c]] * emb.emb_scale
        torch.testing.assert_close(row, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("div_val", [1, 2, 4])
def test_the_exported_embedding_path_gives_the_same_embeddings(monkeypatch, div_val):
    """While exporting (no data-dependent shapes) every cluster embeds every token, each keeping its own
    cluster's row: the same embeddings as the eager path, every cluster hit."""
    emb = AdaptiveEmbedding(100, 64, 24, [10, 30, 60], div_val)
    randomize_(emb)
    tokens = torch.tensor([[0, 9, 10, 29, 30], [59, 60, 99, 45, 15]])
    eager = emb(tokens)
    monkeypatch.setattr(torch.compiler, "is_exporting", lambda: True)
    torch.testing.assert_close(emb(tokens), eager, rtol=1e-6, atol=1e-6)


def test_the_target_log_softmax_gradient_is_autogrds():
    """The one-pass backward of the full softmax's target log-probs (no cutoffs) equals autograd's."""
    crit = make_crit(40, 16, 16, [], 1)
    hidden = torch.randn(9, 16, requires_grad=True)
    target = torch.tensor([0, 39, 7, 7, 12, 30, 1, 2, 3])
    weights = torch.randn(9)
    grads = torch.autograd.grad((crit(hidden, target) * weights).sum(), [hidden, crit.out_layers[0].weight])
    logits = F.linear(hidden, crit.out_layers[0].weight, crit.out_layers[0].bias)
    direct = F.log_softmax(logits, dim=-1).gather(1, target[:, None])[:, 0]
    expected = torch.autograd.grad((direct * weights).sum(), [hidden, crit.out_layers[0].weight])
    for g, e in zip(grads, expected):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("div_val", [1, 2, 4])
def test_sizes_of_the_clusters(div_val):
    """Cluster i embeds in d_embed / div_val^i and projects to d_proj; the head holds the shortlist and one logit
    per tail cluster; a full softmax with d_proj == d_embed has no projection."""
    emb = AdaptiveEmbedding(100, 64, 24, [10, 30, 60], div_val)
    crit = ProjectedAdaptiveLogSoftmax(100, 64, 24, [10, 30, 60], div_val)
    assert emb.emb_scale == 24 ** 0.5 and (crit.n_clusters, crit.shortlist_size, crit.head_size) == (3, 10, 13)
    assert crit.cluster_weight.shape == (3, 64) and crit.cluster_bias.shape == (3,)
    if div_val == 1:
        assert [tuple(e.weight.shape) for e in emb.emb_layers] == [(100, 64)]
        assert [tuple(p.shape) for p in emb.emb_projs] == [(24, 64)]
        assert [tuple(o.weight.shape) for o in crit.out_layers] == [(100, 64)]
        assert [tuple(p.shape) for p in crit.out_projs] == [(24, 64)] * 4
    else:
        widths = [64 // div_val ** i for i in range(4)]
        sizes = [10, 20, 30, 40]
        assert [tuple(e.weight.shape) for e in emb.emb_layers] == list(zip(sizes, widths))
        assert [tuple(p.shape) for p in emb.emb_projs] == [(24, w) for w in widths]
        assert [tuple(o.weight.shape) for o in crit.out_layers] == list(zip(sizes, widths))
        assert [tuple(p.shape) for p in crit.out_projs] == [(24, w) for w in widths]
    plain = ProjectedAdaptiveLogSoftmax(50, 16, 16, [], 1)
    assert list(plain.out_projs) == [None] and plain.n_clusters == 0 and not hasattr(plain, "cluster_weight")
    assert len(AdaptiveEmbedding(50, 16, 16, [], 1).emb_projs) == 0
