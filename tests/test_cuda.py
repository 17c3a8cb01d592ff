"""On a CUDA device: the same numbers as the CPU, the mixed precisions close to fp32, and `txl train` on a GPU
(fp16 with its gradient scaler, bf16 with the fused kernel) giving checkpoints that the CPU evaluates to the
GPU's loss. Without CUDA every test here skips and says so."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import random_tokens, tiny_model

from transformer_xl.generation import generate
from transformer_xl.generation.sampling import SamplingConfig
from transformer_xl.model.ops import triton_kernel

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

SEGMENTS = 3


def _segments(model, x, L):
    """Losses, every parameter's gradient and the memories of ``SEGMENTS`` segments of ``x [B, T]``."""
    params = list(model.parameters())
    mems, out = None, []
    for i in range(SEGMENTS):
        res = model(x[:, L * i:L * i + L], x[:, L * i + 1:L * i + L + 1], mems=mems)
        grads = torch.autograd.grad(res.loss, params)
        out.append((res.losses.detach().cpu(), [g.cpu() for g in grads], [m.cpu() for m in res.mems]))
        mems = res.mems
    return out


@pytest.mark.parametrize("variant", [dict(), dict(same_length=True, clamp_len=3, pre_lnorm=True),
                                     dict(div_val=2, cutoffs=[20, 40])], ids=["plain", "same-length", "adaptive"])
def test_segments_with_memory_on_cuda_equal_the_cpu(variant):
    """fp32, TF32 off: losses, gradients and memories of three segments with memory, GPU against CPU."""
    torch.backends.cuda.matmul.allow_tf32 = False
    model = tiny_model(seed=3, tgt_len=7, mem_len=9, **variant).train()
    x = random_tokens(2, 7 * SEGMENTS + 1, seed=3)
    cpu = _segments(model, x, 7)
    gpu = _segments(model.cuda(), x.cuda(), 7)
    for (lc, gc, mc), (lg, gg, mg) in zip(cpu, gpu):
        torch.testing.assert_close(lg, lc, rtol=1e-5, atol=1e-5)
        for a, b in zip(gg, gc):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
        for a, b in zip(mg, mc):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("attention", ["plain", "triton"])
def test_autocast_losses_stay_close_to_fp32(dtype, attention):
    """A wider model under autocast: per-token losses within the precision's few units in the last place of
    fp32's, with the plain path and with the fused kernel."""
    if attention == "triton" and not triton_kernel.is_available():
        pytest.skip("Triton is not installed")
    model = tiny_model(seed=5, n_token=500, d_model=128, n_head=4, d_head=32, d_inner=256, tgt_len=32,
                       mem_len=32).cuda()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.2)  # random weights of 0.3 saturate the softmax; keep logits in a trained model's range
    x = random_tokens(4, 97, n_token=500, seed=5).cuda()
    model.set_attention(attention)
    mems, fp32 = None, []
    with torch.no_grad():
        for i in range(3):
            out = model(x[:, 32 * i:32 * i + 32], x[:, 32 * i + 1:32 * i + 33], mems=mems)
            fp32.append(out.losses)
            mems = out.mems
        mems = None
        for i in range(3):
            with torch.autocast("cuda", dtype=dtype):
                out = model(x[:, 32 * i:32 * i + 32], x[:, 32 * i + 1:32 * i + 33], mems=mems)
            assert torch.isfinite(out.losses).all()
            err = (out.losses.float() - fp32[i]).abs().mean().item()
            assert err < (3e-2 if dtype == torch.bfloat16 else 5e-3), err
            mems = out.mems


@pytest.mark.parametrize("precision, kernel_runs", [("fp32", False), ("tf32", True), ("bf16", True)])
def test_triton_runs_the_kernel_where_it_pays(monkeypatch, precision, kernel_runs):
    """``set_attention("triton")`` on CUDA: the fused kernel for 16-bit inputs and for float32 with TF32 allowed;
    IEEE float32 (where the kernel is slower than cuBLAS) takes the plain path, with the same losses."""
    if not triton_kernel.is_available():
        pytest.skip("Triton is not installed")
    calls = []
    monkeypatch.setattr(triton_kernel, "rel_attention",
                        lambda *a, _f=triton_kernel.rel_attention, **k: calls.append(1) or _f(*a, **k))
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if precision == "tf32" else "highest")
    try:
        model = tiny_model(seed=4, tgt_len=8, mem_len=8, d_model=32, d_head=16).cuda()
        x = random_tokens(2, 9, seed=4).cuda()
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
            plain = model(x[:, :8], x[:, 1:9]).losses
            model.set_attention("triton")
            fused = model(x[:, :8], x[:, 1:9]).losses
    finally:
        torch.set_float32_matmul_precision(before)
    assert len(calls) == (model.config.n_layer if kernel_runs else 0)
    tol = {"fp32": 1e-5, "tf32": 1e-2, "bf16": 5e-2}[precision]
    torch.testing.assert_close(fused.float(), plain.float(), rtol=tol, atol=tol)


def test_greedy_tokens_on_cuda_equal_the_cpu():
    """Cached decoding on the GPU picks the CPU's tokens (a tiny model, fp32)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    model = tiny_model(seed=11, tgt_len=6, mem_len=12)
    prompts = [[1, 2, 3, 4, 5], [7, 8, 9]]
    cfg = SamplingConfig(max_new_tokens=20, do_sample=False)
    cpu = generate(model, prompts, cfg)
    gpu = generate(model.cuda(), prompts, cfg)
    assert gpu == cpu


# ------------------------------------------------------------------------------------------------ txl train on CUDA
TRAIN = ["--dataset", "default", "--n-layer", "2", "--d-model", "64", "--n-head", "2", "--d-head", "32",
         "--d-inner", "128", "--tgt-len", "32", "--mem-len", "32", "--batch-size", "8", "--max-steps", "40",
         "--log-interval", "10", "--eval-interval", "40", "--eval.max-steps", "5", "--progress", "false",
         "--tensorboard", "false", "--dropout", "0.0", "--seed", "7"]


def _txl(*args, timeout=600):
    cmd = [sys.executable, "-m", "transformer_xl", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _train_losses(run: Path):
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if r.get("split") == "train"]


def _eval_loss(run: Path, device: str, precision: str = "fp32") -> float:
    done = _txl("eval", str(run), "--device", device, "--precision", precision, "--json", "--split", "valid",
                "--max-steps", "5")
    return json.loads(done.stdout.strip().splitlines()[-1])["loss"]


@pytest.mark.parametrize("precision, attention", [("fp16", "plain"), ("bf16", "triton"), ("fp32", "triton")])
def test_txl_train_on_cuda_learns_and_the_cpu_reads_its_checkpoint(tmp_path, precision, attention):
    """Loss falls on the GPU; its checkpoint evaluates on the CPU (fp32) to the GPU's fp32 loss."""
    if attention == "triton" and not triton_kernel.is_available():
        pytest.skip("Triton is not installed")
    run = tmp_path / "run"
    _txl("train", *TRAIN, "--run-dir", str(run), "--cache-dir", str(tmp_path / "cache"), "--device", "cuda",
         "--precision", precision, "--attention", attention)
    losses = _train_losses(run)
    assert len(losses) == 4 and all(math.isfinite(x) for x in losses), losses
    assert losses[-1] < losses[0] - 0.3, losses
    on_gpu, on_cpu = _eval_loss(run, "cuda"), _eval_loss(run, "cpu")
    assert abs(on_gpu - on_cpu) < 1e-4, (on_gpu, on_cpu)

