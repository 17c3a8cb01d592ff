"""Precision by CPU: bf16 autocast only where the CPU multiplies bf16 natively, else fp32 with one line."""

import logging

import pytest
import torch

from transformer_xl import devices
from transformer_xl.errors import ConfigError

AVX2_ONLY = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse sse2 avx avx2 fma f16c\n\n"
ZEN4 = "processor\t: 0\nflags\t\t: avx2 avx512f avx512bw avx512_bf16 avx512_vnni\n\n"
SAPPHIRE = "processor\t: 0\nflags\t\t: avx2 avx512f amx_bf16 amx_tile amx_int8\n\n"
SKYLAKE = "processor\t: 0\nflags\t\t: avx2 avx512f avx512bw avx512dq avx512vl\n\n"
GRAVITON3 = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n\n"


@pytest.mark.parametrize("text, native", [(AVX2_ONLY, False), (ZEN4, True), (SAPPHIRE, True), (SKYLAKE, False),
                                          (GRAVITON3, True)])
def test_native_bf16_is_read_from_the_cpu_flags(tmp_path, text, native):
    info = tmp_path / "cpuinfo"
    info.write_text(text)
    flags = devices.cpu_flags(str(info))
    assert bool(flags & {"avx512_bf16", "amx_bf16", "bf16"}) is native


def test_without_native_bf16_training_falls_back_to_fp32_with_one_line(monkeypatch, caplog):
    monkeypatch.setattr(devices, "_cpu_has_bf16", lambda: False)
    with caplog.at_level(logging.WARNING, logger="transformer_xl.devices"):
        assert devices.autocast_dtype("bf16", torch.device("cpu")) is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "no native bf16" in lines[0] and "fp32 instead" in lines[0]


def test_with_native_bf16_autocast_is_bf16(monkeypatch, caplog):
    monkeypatch.setattr(devices, "_cpu_has_bf16", lambda: True)
    with caplog.at_level(logging.WARNING, logger="transformer_xl.devices"):
        assert devices.autocast_dtype("bf16", torch.device("cpu")) is torch.bfloat16
    assert not caplog.records
    assert devices.autocast_dtype("fp32", torch.device("cpu")) is None


def test_fp16_on_cpu_is_one_error():
    with pytest.raises(ConfigError, match="fp16 needs a CUDA device"):
        devices.autocast_dtype("fp16", torch.device("cpu"))


def test_this_machines_answer_follows_its_flags():
    flags = devices.cpu_flags()
    if flags is None:
        pytest.skip("no /proc/cpuinfo on this system")
    assert devices._cpu_has_bf16() == bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})
