"""keep_cpu_memory: a large tensor freed and allocated again is served from the heap, without page faults."""

import platform
import subprocess
import sys

import pytest

PROBE = r"""
import resource, torch
from transformer_xl.training.allocator import keep_cpu_memory

def faults_of_second_allocation():
    torch.ones(12 << 20)  # 48 MiB, freed at once
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    torch.ones(12 << 20)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

plain = faults_of_second_allocation()
assert keep_cpu_memory()
kept = faults_of_second_allocation()
print(plain, kept)
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                    reason="mallopt tuning applies to glibc on Linux only")
def test_freed_tensor_memory_is_reused_without_page_faults():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    plain, kept = map(int, out.stdout.split())
    pages = (48 << 20) // 4096
    assert plain > pages // 2, f"expected the default allocator to fault the 48 MiB in again, got {plain} faults"
    assert kept < pages // 20, f"expected the kept heap to be reused, got {kept} faults"
