"""The fused Triton relative attention against the plain PyTorch math, forward and all six gradients.

The kernels run on CUDA, or on CPU in Triton's interpreter (``TRITON_INTERPRET=1``, slow: the shapes
here are tiny). Otherwise the kernel tests skip; the argument checks run everywhere.

    TRITON_INTERPRET=1 python -m pytest tests/fast_paths/test_triton_attention.py
"""

from __future__ import annotations

import os

import pytest
import torch

from transformer_xl.model.attention import episode_ids, rel_attn_score, segment_visibility
from transformer_xl.model.ops import triton_kernel as ta

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA and not INTERPRET else "cpu"

needs_kernels = pytest.mark.skipif(
    not ta.is_available(),
    reason="the fused attention needs Triton >= 3.2 and a CUDA device, or TRITON_INTERPRET=1 for the CPU interpreter"
    + ("" if ta.triton is not None else " (triton is not installed)"))
needs_cuda = pytest.mark.skipif(not CUDA or INTERPRET or not ta.is_available(),
                                reason="needs a CUDA device: bfloat16 matmuls and GPU memory (Triton's interpreter "
                                       "cannot multiply bfloat16)")

# (B, H, L, M, D, window, hidden keys): with block 16, none of L, K = M + L is a multiple of it
CASES = {
    "no-memory": (2, 2, 20, 0, 16, 0, False),
    "mem<L": (2, 2, 20, 7, 16, 0, False),
    "mem>L": (2, 2, 9, 30, 16, 0, False),
    "mem=block+1": (1, 2, 20, 17, 16, 0, False),
    "head-dim-12": (1, 2, 18, 5, 12, 0, False),
    "window": (2, 2, 20, 13, 16, 10, False),
    "window>=K": (1, 2, 20, 13, 16, 40, False),
    "window-1": (1, 2, 17, 6, 16, 1, False),
    "window-first-key-ends-block": (1, 2, 20, 22, 16, 8, False),  # key 15 is query 0's oldest
    "window-one-row-in-block": (1, 2, 20, 6, 16, 8, False),  # only query 16 of its block sees key 15
    "window-skips-blocks": (1, 2, 20, 45, 16, 8, False),
    "hidden": (2, 2, 20, 11, 16, 0, True),
    "hidden+window": (2, 2, 20, 11, 16, 7, True),
    "hidden-no-memory": (2, 1, 36, 0, 16, 0, True),
}
# (B, H, L, M, D, window, hidden keys) with episodes: random starts in the window (the block-diagonal rule)
EPISODE_CASES = {
    "episodes": (2, 2, 20, 11, 16, 0, False),
    "episodes+window": (2, 2, 36, 13, 16, 9, False),
    "episodes+hidden": (2, 2, 20, 11, 16, 0, True),
    "episodes-no-memory": (2, 1, 36, 0, 16, 0, False),
}


def _mask(qlen: int, mlen: int, window: int, key_hidden, episode=None):
    """The model's own rule (:func:`segment_visibility`) for a same_length ``window`` (0 = none)."""
    return segment_visibility(qlen, mlen, key_hidden.device if key_hidden is not None else "cpu", window,
                              key_hidden, episode).mask


def _plain(q, k, v, r_k, u, vb, scale, window=0, key_hidden=None, episode=None):
    """The unfused path: rel_attn_score, the model's mask, softmax, weighted sum. ``[B, H, L, D]``."""
    qlen, klen = q.size(2), k.size(2)
    score = rel_attn_score(q, k, r_k, u, vb, scale)  # [B, H, L, K]
    if score.dtype != torch.float64:
        score = score.float()  # softmax in float32, as AttentionBase.attend
    mask = _mask(qlen, klen - qlen, window, None if key_hidden is None else key_hidden.cpu(),
                 None if episode is None else episode.cpu()).to(q.device)
    mask = mask[:, None] if mask.dim() == 3 else mask  # [B|1, 1|L, L, K]
    prob = torch.softmax(score.masked_fill(mask, float("-inf")), dim=-1).to(v.dtype)
    return torch.matmul(prob, v)


def _inputs(bsz, n_head, qlen, mlen, d_head, hidden, seed=0):
    """float64 CPU leaves q, k, v, r_k, u, v_bias, the key mask and an upstream gradient."""
    gen = torch.Generator().manual_seed(seed)
    klen = mlen + qlen

    def rnd(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    xs = [rnd(bsz, n_head, qlen, d_head), rnd(bsz, n_head, klen, d_head), rnd(bsz, n_head, klen, d_head),
          rnd(n_head, klen + 1, d_head), rnd(n_head, d_head), rnd(n_head, d_head)]
    key_hidden = None
    if hidden:
        key_hidden = torch.rand(bsz, klen, generator=gen) < 0.4
        key_hidden[0, : klen // 2] = True  # long hidden runs: whole blocks of hidden keys
    grad_out = rnd(bsz, n_head, qlen, d_head)
    return xs, key_hidden, grad_out


def _run(fn, xs, grad_out, dtype, device, **kwargs):
    """Forward and backward of ``fn`` on copies of ``xs`` in ``dtype``: (out, [6 grads]), float64 CPU."""
    leaves = [x.detach().to(device=device, dtype=dtype, copy=True).requires_grad_() for x in xs]
    out = fn(*leaves, **kwargs)
    out.backward(grad_out.to(device=device, dtype=dtype))
    return out.detach().double().cpu(), [x.grad.double().cpu() for x in leaves]


def _max_errors(got, want):
    """Largest absolute error of each tensor, relative to max(1, largest reference magnitude)."""
    return [((g - w).abs().max() / max(1.0, w.abs().max().item())).item() for g, w in zip(got, want)]


NAMES = ["out", "dq", "dk", "dv", "dr_k", "dr_w_bias", "dr_r_bias"]


def _episodes(bsz: int, qlen: int, mlen: int, seed: int = 0):
    """``[B, M+L]`` episode numbers of random starts (about one step in six, and one at step 0 of row 0)."""
    gen = torch.Generator().manual_seed(seed + 1)
    starts = torch.rand(bsz, qlen, generator=gen) < 0.17
    starts[0, 0] = True
    return episode_ids(starts, mlen)


def _compare(case, dtype, block, tol, baseline_factor=None, episodes=False):
    bsz, n_head, qlen, mlen, d_head, window, hidden = case
    xs, key_hidden, grad_out = _inputs(bsz, n_head, qlen, mlen, d_head, hidden)
    scale = d_head ** -0.5
    kh = None if key_hidden is None else key_hidden.to(DEVICE)
    episode = _episodes(bsz, qlen, mlen) if episodes else None
    ep = None if episode is None else episode.to(DEVICE)
    ref_out, ref_grads = _run(_plain, xs, grad_out, torch.float64, "cpu", scale=scale, window=window,
                              key_hidden=key_hidden, episode=episode)
    out, grads = _run(ta.rel_attention, xs, grad_out, dtype, DEVICE, scale=scale, window=window,
                      key_hidden=kh, block=block, episode=ep)
    errors = _max_errors([out] + grads, [ref_out] + ref_grads)
    assert all(torch.isfinite(t).all() for t in [out] + grads)
    if baseline_factor is not None:  # low precision: no worse than the plain path in the same dtype
        base_out, base_grads = _run(_plain, xs, grad_out, dtype, DEVICE, scale=scale, window=window, key_hidden=kh,
                                    episode=ep)
        base = _max_errors([base_out] + base_grads, [ref_out] + ref_grads)
        limits = [max(tol, baseline_factor * b) for b in base]
    else:
        limits = [tol] * len(errors)
    bad = {n: (e, lim) for n, e, lim in zip(NAMES, errors, limits) if not e <= lim}
    assert not bad, f"errors above limits (error, limit): {bad}"
    return errors


@pytest.fixture
def ieee_float32():
    """Full float32 matmuls (no TF32) in the kernel and the reference, whatever other tests set."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    yield
    torch.set_float32_matmul_precision(before)


def _blocks():
    return [16] if INTERPRET or not CUDA else [16, 64]


@needs_kernels
@pytest.mark.parametrize("block", _blocks())
@pytest.mark.parametrize("name", list(CASES))
def test_float32_matches_plain_math(name, block, ieee_float32):
    _compare(CASES[name], torch.float32, block, tol=1e-4)


@needs_kernels
@pytest.mark.parametrize("block", _blocks())
@pytest.mark.parametrize("name", list(EPISODE_CASES))
def test_episodes_match_plain_math(name, block, ieee_float32):
    """Packed episodes (``episode [B, K]``): the block-diagonal rule in-kernel, forward and every gradient."""
    _compare(EPISODE_CASES[name], torch.float32, block, tol=1e-4, episodes=True)


@needs_cuda
@pytest.mark.parametrize("name", list(EPISODE_CASES))
def test_episodes_bfloat16(name):
    _compare(EPISODE_CASES[name], torch.bfloat16, None, tol=5e-2, baseline_factor=2.0, episodes=True)


@needs_kernels
@pytest.mark.parametrize("name", ["mem<L", "mem>L", "hidden+window"])
def test_float16_matches_plain_math(name):
    _compare(CASES[name], torch.float16, 16, tol=2e-2, baseline_factor=2.0)


@needs_cuda
@pytest.mark.parametrize("block", [16, 64])
@pytest.mark.parametrize("name", ["no-memory", "mem<L", "mem>L", "window", "hidden+window"])
def test_bfloat16_matches_plain_math(name, block):
    _compare(CASES[name], torch.bfloat16, block, tol=5e-2, baseline_factor=2.0)


@needs_cuda
def test_bfloat16_larger_shapes():
    """Several blocks of 64 in both directions, memory longer than the segment, head dim 64."""
    _compare((2, 4, 150, 333, 64, 0, True), torch.bfloat16, None, tol=5e-2, baseline_factor=2.0)


@needs_kernels
def test_matches_module_attention_with_strided_inputs(ieee_float32):
    """Inputs as the model lays them out (head-transposed views), through ``_attend`` of the layer."""
    from transformer_xl.model.attention import RelativeAttention, Visibility

    bsz, n_head, d_head, qlen, mlen = 2, 2, 16, 19, 9
    klen = qlen + mlen
    layer = RelativeAttention(n_head, n_head * d_head, d_head, 0.0, 0.0, False).to(DEVICE)
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(bsz, qlen, n_head, d_head, generator=gen).to(DEVICE).transpose(1, 2)  # [B, H, L, D] view
    k = torch.randn(bsz, klen, n_head, d_head, generator=gen).to(DEVICE).transpose(1, 2)
    v = torch.randn(bsz, klen, n_head, d_head, generator=gen).to(DEVICE).transpose(1, 2)
    r_k = torch.randn(klen + 1, n_head, d_head, generator=gen).to(DEVICE).transpose(0, 1)  # [H, K+1, D] view
    u, vb = (torch.randn(n_head, d_head, generator=gen).to(DEVICE) for _ in range(2))
    assert not q.is_contiguous() and not r_k.is_contiguous()
    mask = _mask(qlen, mlen, 0, None).to(DEVICE)
    vis = Visibility(qlen, mlen, mask, 0)
    want = layer.attend(rel_attn_score(q, k, r_k, u, vb, layer.scale), v, vis)  # [B, L, H*D]
    got = ta.rel_attention(q, k, v, r_k, u, vb, layer.scale, block=16)  # [B, H, L, D]
    got = got.transpose(1, 2).reshape(bsz, qlen, n_head * d_head)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@needs_kernels
def test_fully_hidden_key_blocks_are_not_read(ieee_float32):
    """With a window, key blocks that no query sees are skipped: NaN there must not reach any output."""
    bsz, n_head, qlen, mlen, d_head, window = 1, 2, 20, 45, 16, 8
    xs, _, grad_out = _inputs(bsz, n_head, qlen, mlen, d_head, False)
    # keys j <= M - window are hidden from every query; with block 16, key blocks 0 and 1 (j < 32) entirely
    for t in xs[1:3]:
        t[:, :, :32] = float("nan")
    clean = [x.clone() for x in xs]
    for t in clean[1:3]:
        t[:, :, :32] = 0.0
    ref_out, ref_grads = _run(_plain, clean, grad_out, torch.float64, "cpu", scale=0.25, window=window)
    out, grads = _run(ta.rel_attention, xs, grad_out, torch.float32, DEVICE, scale=0.25, window=window, block=16)
    assert torch.isfinite(out).all() and all(torch.isfinite(g).all() for g in grads)
    assert (grads[1][:, :, :32] == 0).all() and (grads[2][:, :, :32] == 0).all()
    errors = _max_errors([out] + grads, [ref_out] + ref_grads)
    assert max(errors) < 1e-4, dict(zip(NAMES, errors))


@needs_kernels
def test_window_one_returns_own_value():
    """window = 1: each query sees only its own key, so the output is its own value row."""
    xs, _, _ = _inputs(1, 2, 17, 6, 16, False)
    q, k, v, r_k, u, vb = (x.float().to(DEVICE) for x in xs)
    out = ta.rel_attention(q, k, v, r_k, u, vb, 0.25, window=1, block=16)
    torch.testing.assert_close(out, v[:, :, 6:], atol=1e-6, rtol=1e-6)


@needs_cuda
def test_peak_memory_below_one_score_tensor():
    """Forward + backward never holds a [B, H, L, K] float32 tensor (the plain path holds several)."""
    bsz, n_head, qlen, mlen, d_head = 4, 8, 256, 4096, 32
    klen = qlen + mlen
    gen = torch.Generator(device="cuda").manual_seed(0)
    xs = [torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=gen, requires_grad=True)
          for s in [(bsz, n_head, qlen, d_head), (bsz, n_head, klen, d_head), (bsz, n_head, klen, d_head),
                    (n_head, klen + 1, d_head), (n_head, d_head), (n_head, d_head)]]
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    ta.rel_attention(*xs, d_head ** -0.5).sum().backward()
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base
    score_bytes = bsz * n_head * qlen * klen * 4
    assert extra < score_bytes / 2, (extra, score_bytes)


# ---------------------------------------------------------------------------- argument checks (no Triton needed)
def _small(dtype=torch.float32):
    xs, _, _ = _inputs(1, 2, 4, 3, 16, False)
    return [x.to(dtype) for x in xs]


def test_attention_dropout_is_refused():
    with pytest.raises(ValueError, match="dropatt"):
        ta.rel_attention(*_small(), 0.25, dropatt=0.1)


@pytest.mark.parametrize("bad", ["r_k", "bias", "dtype", "window", "key_hidden", "block", "episode"])
def test_bad_arguments_are_refused(bad):
    q, k, v, r_k, u, vb = _small()
    kwargs = {}
    if bad == "r_k":
        r_k = r_k[:, 1:]
    elif bad == "bias":
        u = u[:, :8]
    elif bad == "dtype":
        k = k.double()
    elif bad == "window":
        kwargs["window"] = -1
    elif bad == "key_hidden":
        kwargs["key_hidden"] = torch.zeros(1, 6, dtype=torch.bool)  # K is 7
    elif bad == "episode":
        kwargs["episode"] = torch.zeros(1, 7)  # float, not episode numbers
    else:
        kwargs["block"] = 24
    with pytest.raises(ValueError):
        ta.rel_attention(q, k, v, r_k, u, vb, 0.25, **kwargs)


@pytest.mark.skipif(INTERPRET, reason="the interpreter runs on CPU tensors")
def test_cpu_tensors_are_not_available():
    q = torch.zeros(1, 1, 2, 16)
    assert ta.is_available(q) is False
    with pytest.raises(RuntimeError, match="CUDA|Triton"):
        ta.rel_attention(*_small(), 0.25)


@needs_kernels
@pytest.mark.parametrize("variant", [dict(), dict(same_length=True, mem_len=6), dict(pre_lnorm=True, untie_r=True),
                                     dict(same_length=True, mem_len=6, same_length_extra=1),
                                     dict(d_model=100, n_head=3, d_head=40)])
def test_model_with_fused_attention_equals_plain(variant, monkeypatch):
    """``model.set_attention("triton")``: losses, gradients and memories of a training step equal the plain path.
    The kernel runs in IEEE float32 here (where the model would not choose it on a GPU: ``pays_off``) so that the
    comparison is tight."""
    import sys

    calls = []
    monkeypatch.setattr(ta, "pays_off", lambda q: True)
    monkeypatch.setattr(ta, "rel_attention", lambda *a, _f=ta.rel_attention, **k: calls.append(1) or _f(*a, **k))

    sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
    from helpers import random_tokens, tiny_model

    cfg = dict(tgt_len=7, mem_len=9, d_model=32, d_head=16, n_head=2)
    cfg.update(variant)
    model = tiny_model(seed=2, **cfg).train().to(DEVICE)
    x = random_tokens(2, 22, seed=2).to(DEVICE)
    padding = torch.zeros(2, 7, dtype=torch.bool, device=DEVICE)
    padding[1, :2] = True
    runs = []
    for fused in (False, True):
        model.set_attention("triton" if fused else "plain")
        first = model(x[:, :7], x[:, 1:8])
        out = model(x[:, 7:14], x[:, 8:15], mems=first.mems, padding_mask=padding)
        out.loss.backward()
        runs.append((out, {n: p.grad.clone() for n, p in model.named_parameters()}))
        model.zero_grad(set_to_none=True)
    (plain, plain_grads), (fused, fused_grads) = runs
    assert len(calls) == 2 * model.config.n_layer  # the kernel ran in every layer of both segments
    torch.testing.assert_close(fused.losses, plain.losses, rtol=1e-4, atol=1e-5)
    for name, g in plain_grads.items():
        torch.testing.assert_close(fused_grads[name], g, rtol=1e-3, atol=1e-5, msg=name)
