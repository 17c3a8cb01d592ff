"""Streamed relative attention with its hand-written backward pass, against a plain autograd reference.

The reference builds all keys and values, gathers position key ``r_k[L - i + j]`` for every (query, key)
pair explicitly (no shift trick), masks, softmaxes, applies the full dropout keep-mask and sums values;
outputs and the gradients of every differentiable input must match.
"""

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from transformer_xl.model.ops.streamed import draw_dropout_seed, dropout_keep_mask, streamed_rel_attention

B, H, L, D, DM = 2, 2, 5, 4, 6  # batch, heads, segment, head size, model size


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny tensors: a second intra-op thread only adds wake-up latency (~8 ms per layer_norm on 2 busy cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def reference(q_u, q_v, r_k, mems, h, w_kv, ln=None, attn_mask=None, keep=None, scale=1.0):
    """Plain formula: ``softmax(q_u.k_j + q_v.r_k[L-i+j], masked) (* keep * scale) @ v``; ``[B, H, L, D]``."""
    bsz, n_head, qlen, d_head = q_u.shape
    cat = h if mems is None else torch.cat([mems, h], dim=1)  # [B, K, d]
    klen, mlen = cat.size(1), cat.size(1) - qlen
    if ln is not None:
        cat = F.layer_norm(cat, (cat.size(-1),), ln[0], ln[1], ln[2])
    kv = F.linear(cat, w_kv).view(bsz, klen, 2, n_head, d_head)
    k, v = kv[:, :, 0].transpose(1, 2), kv[:, :, 1].transpose(1, 2)  # [B, H, K, D]
    i = torch.arange(qlen)[:, None]
    j = torch.arange(klen)[None]
    future = j > mlen + i  # [L, K]
    rows = (qlen - i + j).clamp(max=klen)  # [L, K]: row of distance M + i - j (future entries: any row)
    r = r_k[:, rows]  # [H, L, K, D]
    score = torch.einsum("bhid,bhjd->bhij", q_u, k) + torch.einsum("bhid,hijd->bhij", q_v, r)
    mask = future if attn_mask is None else future | attn_mask
    score = score.masked_fill(mask[:, None] if mask.dim() == 3 else mask, float("-inf"))
    prob = torch.softmax(score.float() if score.dtype != torch.float64 else score, dim=-1)
    if keep is not None:
        prob = prob * keep * scale
    return torch.matmul(prob.to(v.dtype), v)


def make_inputs(mlen, ln=False, mems_grad=True, dtype=torch.float32, seed=0, bsz=B, qlen=L, d_model=DM,
                r_view=True):
    """Random inputs; r_k is the model's layout (a transposed view of ``[K+1, H, D]``) unless ``r_view=False``."""
    gen = torch.Generator().manual_seed(seed)

    def rnd(*shape, s=1.0):
        return (torch.randn(*shape, generator=gen, dtype=torch.float64) * s).to(dtype).requires_grad_()

    klen = mlen + qlen
    r_k = rnd(klen + 1, H, D).transpose(0, 1) if r_view else rnd(H, klen + 1, D)  # [H, K+1, D]
    x = dict(q_u=rnd(bsz, H, qlen, D), q_v=rnd(bsz, H, qlen, D), r_k=r_k,
             mems=rnd(bsz, mlen, d_model).requires_grad_(mems_grad) if mlen else None, h=rnd(bsz, qlen, d_model),
             w_kv=rnd(2 * H * D, d_model, s=0.5))
    x["ln"] = (rnd(d_model, s=0.3) + 1, rnd(d_model, s=0.3), 1e-5) if ln else None
    return x


def grad_inputs(x):
    """The differentiable tensors of an input dict (mems only when it requires grad)."""
    ts = [x["q_u"], x["q_v"], x["r_k"], x["mems"], x["h"], x["w_kv"]]
    if x["ln"] is not None:
        ts += [x["ln"][0], x["ln"][1]]
    return [t for t in ts if t is not None and t.requires_grad]


def make_mask(kind, mlen, qlen=L, bsz=B, seed=0):
    klen = mlen + qlen
    i = torch.arange(qlen)[:, None]
    j = torch.arange(klen)[None]
    if kind == "none":
        return None
    causal = j > mlen + i  # [L, K]
    if kind == "causal":
        return causal
    if kind == "band":  # same_length: every query sees exactly mem_len keys (itself included)
        mem_len = max(mlen, 3)
        return causal | (j <= mlen + i - mem_len)
    if kind == "hidden":  # [B, L, K]: random hidden keys, the first 4 hidden everywhere, never the own key
        gen = torch.Generator().manual_seed(seed)
        hidden = torch.rand(bsz, klen, generator=gen) < 0.4
        hidden[:, :4] = True
        own = j == mlen + i  # [L, K]
        return causal[None] | (hidden[:, None, :] & ~own[None])
    raise ValueError(kind)


def assert_all_close(got, want, atol=1e-5, rtol=1e-5):
    assert len(got) == len(want)
    for n, (g, w) in enumerate(zip(got, want)):
        torch.testing.assert_close(g, w, atol=atol, rtol=rtol, msg=lambda m: f"tensor {n}: {m}")


def run_both(x, mask, block, p, call_seed=11):
    """Streamed output and reference output with the same dropout masks; returns (out, ref)."""
    kw = dict(ln=x["ln"], attn_mask=mask)
    torch.manual_seed(call_seed)
    out = streamed_rel_attention(x["q_u"], x["q_v"], x["r_k"], x["mems"], x["h"], x["w_kv"], block=block,
                                 dropatt=p, training=p > 0, **kw)
    keep, scale = None, 1.0
    if p > 0:
        torch.manual_seed(call_seed)
        seed = draw_dropout_seed("cpu")
        keep, scale = dropout_keep_mask(seed, p, out.shape[:3] + (x["r_k"].size(1) - 1,), block)
    ref = reference(x["q_u"], x["q_v"], x["r_k"], x["mems"], x["h"], x["w_kv"], keep=keep, scale=scale, **kw)
    return out, ref


@pytest.mark.parametrize("p", [0.0, 0.3], ids=["nodrop", "dropatt"])
@pytest.mark.parametrize("ln", [False, True], ids=["postln", "preln"])
@pytest.mark.parametrize("mask_kind", ["none", "causal", "band", "hidden"])
@pytest.mark.parametrize("block", [1, 2, 3, 64])
@pytest.mark.parametrize("mlen", [0, 3, 12])
def test_output_and_gradients_match_reference(mlen, block, mask_kind, ln, p):
    x = make_inputs(mlen, ln=ln, seed=mlen * 7 + block)
    mask = make_mask(mask_kind, mlen, seed=block)
    out, ref = run_both(x, mask, block, p)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    d_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(3))
    leaves = grad_inputs(x)
    assert_all_close(torch.autograd.grad(out, leaves, d_out), torch.autograd.grad(ref, leaves, d_out))


def test_dropout_actually_drops_and_is_reproducible():
    x = make_inputs(12)
    out_a, _ = run_both(x, None, 3, 0.5, call_seed=1)
    out_b, _ = run_both(x, None, 3, 0.5, call_seed=1)
    out_c, _ = run_both(x, None, 3, 0.5, call_seed=2)
    out_eval = streamed_rel_attention(x["q_u"], x["q_v"], x["r_k"], x["mems"], x["h"], x["w_kv"], block=3,
                                      dropatt=0.5, training=False)
    assert torch.equal(out_a, out_b)  # torch.manual_seed reproduces the masks
    assert not torch.allclose(out_a, out_c)
    assert not torch.allclose(out_a, out_eval)  # and dropout is on in training only
    torch.testing.assert_close(out_eval, reference(x["q_u"], x["q_v"], x["r_k"], x["mems"], x["h"], x["w_kv"]))
    keep, scale = dropout_keep_mask(5, 0.3, (4, 8, 64, 100), block=7)
    assert keep.shape == (4, 8, 64, 100) and abs(scale - 1 / (1 - 0.3)) < 1e-4
    assert abs((~keep).float().mean().item() - 0.3) < 0.01
    assert not torch.equal(keep[..., :7], keep[..., 7:14])  # blocks draw different masks


def test_detached_memory_gets_no_gradient_and_the_rest_is_exact():
    x = make_inputs(12, ln=True, mems_grad=False)
    mask = make_mask("hidden", 12)
    out, ref = run_both(x, mask, 4, 0.0)
    leaves = grad_inputs(x)
    assert all(t is not x["mems"] for t in leaves)
    assert_all_close(torch.autograd.grad(out, leaves, torch.ones_like(out)),
                     torch.autograd.grad(ref, leaves, torch.ones_like(ref)))


@pytest.mark.parametrize("ln", [False, True], ids=["postln", "preln"])
def test_no_grad_forward_matches_reference(ln):
    x = make_inputs(12, ln=ln)
    mask = make_mask("band", 12)
    with torch.no_grad():
        out = streamed_rel_attention(x["q_u"], x["q_v"], x["r_k"], x["mems"], x["h"], x["w_kv"], ln=x["ln"],
                                     attn_mask=mask, block=5)
        ref = reference(x["q_u"], x["q_v"], x["r_k"], x["mems"], x["h"], x["w_kv"], ln=x["ln"], attn_mask=mask)
    assert out.grad_fn is None
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("ln,p", [(False, 0.0), (True, 0.0), (True, 0.4)], ids=["postln", "preln", "preln-dropatt"])
def test_gradcheck_float64(ln, p):
    x = make_inputs(2, ln=ln, dtype=torch.float64, bsz=1, qlen=3, d_model=3, r_view=False)
    mask = make_mask("hidden", 2, qlen=3, bsz=1, seed=1)
    eps = 1e-5

    def fn(q_u, q_v, r_k, mems, h, w_kv, *ln_params):
        torch.manual_seed(0)  # the same dropout masks on every evaluation
        ln_arg = (*ln_params, eps) if ln_params else None
        return streamed_rel_attention(q_u, q_v, r_k, mems, h, w_kv, ln=ln_arg, attn_mask=mask, block=2,
                                      dropatt=p, training=True)

    args = [x["q_u"], x["q_v"], x["r_k"], x["mems"], x["h"], x["w_kv"]] + (list(x["ln"][:2]) if ln else [])
    assert torch.autograd.gradcheck(fn, args, eps=1e-6, atol=1e-6)


def saved_bytes_beyond_inputs(fn, inputs):
    """Bytes autograd saves for backward while ``fn`` runs, counting only tensors that are not inputs' storage."""
    known = {t.untyped_storage().data_ptr() for t in inputs if t is not None}
    saved = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in known:
            saved[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return sum(saved.values()), out


def test_saved_memory_does_not_grow_with_memory_length():
    def measure(mlen, streamed):
        x = make_inputs(mlen, mems_grad=False, bsz=2, qlen=8, d_model=8)
        inputs = [x["q_u"], x["q_v"], x["r_k"], x["mems"], x["h"], x["w_kv"]]
        if streamed:
            fn = lambda: streamed_rel_attention(*inputs, block=32)  # noqa: E731
        else:
            fn = lambda: reference(*inputs)  # noqa: E731
        nbytes, out = saved_bytes_beyond_inputs(fn, inputs)
        out.sum().backward()  # the saved tensors suffice for the backward pass
        return nbytes, out

    short, out = measure(64, True)
    long, _ = measure(1024, True)
    assert short == long
    assert long <= 2 * out.numel() * out.element_size()  # output + log-sum-exp, nothing per key
    plain_short, _ = measure(64, False)
    plain_long, _ = measure(1024, False)
    assert plain_long > 10 * plain_short  # the measure does see what grows with M


class _MatmulDtypes(TorchDispatchMode):
    """Records the operand dtypes of the matrix products that run while active."""

    def __init__(self):
        super().__init__()
        self.dtypes = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in (torch.ops.aten.mm, torch.ops.aten.bmm):
            self.dtypes.update(a.dtype for a in args if isinstance(a, torch.Tensor))
        return func(*args, **(kwargs or {}))


def test_bf16_autocast_close_to_fp32():
    x = make_inputs(12, ln=True)
    mask = make_mask("hidden", 12)
    args = (x["q_u"], x["q_v"], x["r_k"], x["mems"], x["h"], x["w_kv"])
    leaves = grad_inputs(x)
    d_out = torch.randn(B, H, L, D, generator=torch.Generator().manual_seed(3))
    out32 = streamed_rel_attention(*args, ln=x["ln"], attn_mask=mask, block=4)
    g32 = torch.autograd.grad(out32, leaves, d_out)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out16 = streamed_rel_attention(*args, ln=x["ln"], attn_mask=mask, block=4)
    with _MatmulDtypes() as seen:
        g16 = torch.autograd.grad(out16, leaves, d_out)
    assert torch.bfloat16 in seen.dtypes  # the backward recomputes under the forward's autocast
    assert out16.dtype == torch.float32  # q's dtype
    torch.testing.assert_close(out16, out32, atol=3e-2, rtol=3e-2)
    for a, b in zip(g16, g32):
        assert a.dtype == b.dtype
        assert (a - b).norm() <= 3e-2 * b.norm() + 1e-3


@pytest.mark.parametrize("qlen", [1, 2])
def test_short_segments(qlen):
    """L = 1 and 2: the strided position view degenerates (one row / rows one element apart)."""
    x = make_inputs(7, ln=True, qlen=qlen, seed=qlen)
    mask = make_mask("hidden", 7, qlen=qlen)
    out, ref = run_both(x, mask, 3, 0.0)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    leaves = grad_inputs(x)
    assert_all_close(torch.autograd.grad(out, leaves, torch.ones_like(out)),
                     torch.autograd.grad(ref, leaves, torch.ones_like(ref)))


def test_bf16_inputs_without_autocast():
    def to_bf16(t):
        return t.detach().bfloat16().requires_grad_() if torch.is_tensor(t) else t

    x = make_inputs(12, ln=True)
    low = {k: tuple(map(to_bf16, v)) if isinstance(v, tuple) else to_bf16(v) for k, v in x.items()}
    out, ref = run_both(low, None, 4, 0.0)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref.float(), atol=3e-2, rtol=3e-2)
    grads = torch.autograd.grad(out, grad_inputs(low), torch.ones_like(out))
    assert all(g.dtype == torch.bfloat16 for g in grads)
