"""bf16 inference: the weights cast once at load (``--precision bf16``, ``from_pretrained(dtype=torch.bfloat16)``),
judged against float32 on a trained model.

A small byte-level model trained on the built-in corpus until it predicts far better than chance (below 4 bits
per byte; uniform is 8): its bf16 evaluation loss stays within 0.5% of float32's, and bf16 greedy generation
agrees with float32's token for token over the first 20 tokens. The bf16 model holds bf16 weights (no autocast
around float32 weights). The comparison runs on any CPU: without native bf16 instructions oneDNN emulates the
products (slowly), which is why ``--precision bf16`` falls back to fp32 there, with one warning line.
"""

from __future__ import annotations

import pytest
import torch

from transformer_xl import TransformerXL, generate_text, open_checkpoint
from transformer_xl.cli import main
from transformer_xl.jobs import CheckpointEvalSettings, evaluate_checkpoint
from transformer_xl.pretrained import find_checkpoint

TOLERANCE = 0.005  # relative, on the evaluation loss


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("bf16")
    args = ["train", "--run-dir", str(root / "run"), "--cache-dir", str(root / "cache"), "--n-layer", "2",
            "--d-model", "64", "--n-head", "2", "--d-head", "32", "--d-inner", "256", "--tgt-len", "32",
            "--mem-len", "32", "--batch-size", "16", "--max-steps", "300", "--eval-interval", "300",
            "--eval.max-steps", "5", "--warmup-steps", "20", "--lr", "0.003", "--dropout", "0.0",
            "--progress", "false", "--tensorboard", "false", "--num-threads", "2"]
    assert main(args) == 0
    return root / "run"


def eval_loss(run, precision: str) -> float:
    settings = CheckpointEvalSettings(split="valid", max_steps=20, batch_size=8, device="cpu", precision=precision)
    return evaluate_checkpoint(str(run), settings).result.loss


def test_the_fixture_is_trained(run):
    assert eval_loss(run, "fp32") / 0.6931 < 4.0  # bits per byte, against 8 for a uniform guess


def test_bf16_weights_are_cast_once(run):
    model = find_checkpoint(str(run)).load_model("cpu", torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    loaded = TransformerXL.from_pretrained(run, dtype=torch.bfloat16)
    assert {p.dtype for p in loaded.parameters()} == {torch.bfloat16}


def test_bf16_evaluation_is_within_tolerance_of_fp32(run, monkeypatch):
    monkeypatch.setattr("transformer_xl.devices._cpu_has_bf16", lambda: True)  # compare the numerics on any CPU
    fp32, bf16 = eval_loss(run, "fp32"), eval_loss(run, "bf16")
    assert fp32 != bf16  # the bf16 path really ran
    assert abs(bf16 - fp32) / fp32 < TOLERANCE, (fp32, bf16)


def test_bf16_greedy_generation_agrees_with_fp32(run, monkeypatch):
    monkeypatch.setattr("transformer_xl.devices._cpu_has_bf16", lambda: True)
    prompt = "def __init__(self, "
    fp32 = open_checkpoint(str(run), precision="fp32")
    bf16 = open_checkpoint(str(run), precision="bf16")
    assert next(bf16.model.parameters()).dtype == torch.bfloat16
    want = generate_text(fp32.model, fp32.tokenizer, prompt, max_new_tokens=20, do_sample=False)
    got = generate_text(bf16.model, bf16.tokenizer, prompt, max_new_tokens=20, do_sample=False)
    assert len(want) > 0 and got == want, (want, got)


def test_bf16_without_native_support_falls_back_with_one_line(run, monkeypatch, caplog):
    monkeypatch.setattr("transformer_xl.devices._cpu_has_bf16", lambda: False)
    ckpt = open_checkpoint(str(run), precision="bf16")
    assert next(ckpt.model.parameters()).dtype == torch.float32
    lines = [r.getMessage() for r in caplog.records if "bf16" in r.getMessage()]
    assert len(lines) == 1 and "running in fp32 instead" in lines[0]
