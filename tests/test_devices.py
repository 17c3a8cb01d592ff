"""Precision by CPU: bf16 autocast only where the CPU multiplies bf16 natively, else fp32 with one line."""

import logging
import os
import platform
import re
import subprocess
import sys

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
                                          (GRAVITON3, True)],
                         ids=["avx2-only", "zen4", "sapphire-rapids", "skylake", "graviton3"])
def test_native_bf16_is_read_from_the_cpu_flags(tmp_path, monkeypatch, text, native):
    """What each processor has, by its vendor: Zen 4 avx512_bf16, Sapphire Rapids AMX, Graviton 3 Arm's bf16;
    Skylake and an AVX2-only processor none."""
    info = tmp_path / "cpuinfo"
    info.write_text(text)
    read = devices.cpu_flags
    monkeypatch.setattr(devices, "cpu_flags", lambda cpuinfo="/proc/cpuinfo": read(str(info)))
    assert devices._cpu_has_bf16() is native


@pytest.mark.parametrize("text, amx", [(AVX2_ONLY, False), (ZEN4, False), (SAPPHIRE, True), (SKYLAKE, False),
                                       (GRAVITON3, False), ("processor\t: 0\n\n", False), (None, False)],
                         ids=["avx2-only", "zen4", "sapphire-rapids", "skylake", "graviton3", "no-flags", "no-file"])
def test_amx_is_read_from_the_cpu_flags(tmp_path, monkeypatch, text, amx):
    """The fused 16-bit attention's CPU rule: AMX (Sapphire Rapids) only; not Zen 4's avx512_bf16, and not a
    machine whose flags cannot be read."""
    info = tmp_path / "cpuinfo"
    if text is not None:
        info.write_text(text)
    read = devices.cpu_flags
    monkeypatch.setattr(devices, "cpu_flags", lambda cpuinfo="/proc/cpuinfo": read(str(info)))
    devices.cpu_has_amx.cache_clear()
    try:
        assert devices.cpu_has_amx() is amx
    finally:
        devices.cpu_has_amx.cache_clear()


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


ONEDNN_ISA = "import torch; torch.ones(4, 4).to_mkldnn()"  # a oneDNN reorder: oneDNN starts and says its ISA


def test_this_machines_answer_is_onednns():
    """On x86 the outside truth is oneDNN's own reading of the processor (CPUID, not /proc/cpuinfo): the instruction
    set it reports names bfloat16 (AVX-512 BF16 or AMX) or is AVX10, which includes it."""
    if platform.machine().lower() not in ("x86_64", "amd64") or devices.cpu_flags() is None:
        pytest.skip("oneDNN names the bf16 instructions on x86 Linux only")
    done = subprocess.run([sys.executable, "-c", ONEDNN_ISA], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "ONEDNN_VERBOSE": "1", "DNNL_VERBOSE": "1"})
    isa = [line for line in done.stdout.splitlines() if ",info,cpu,isa:" in line]
    if not isa:
        pytest.skip("this torch build's oneDNN says nothing of the instruction set")
    native = "bfloat16" in isa[0] or re.search(r"AVX ?10", isa[0]) is not None  # "AVX10.1", "Intel AVX 10.1"
    assert devices._cpu_has_bf16() is native, isa[0]
