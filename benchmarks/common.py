"""Shared pieces of the benchmarks: the matmul throughput of this machine right now, and resident memory."""

from __future__ import annotations

import resource
import time

import torch


class MatmulReference:
    """The machine's matmul throughput *now*: ``ref()`` times ``repeat`` square products and returns FLOP/s.

    Call it right before and after each timed piece of work and divide by the mean: on a shared machine
    the rate drifts by a factor of two within seconds, and a reference measured once at the start of a
    run makes ratios taken minutes later meaningless. One untimed product comes first: right after other
    work, the first bf16 product runs at a fraction of the AMX rate.
    """

    def __init__(self, dtype=torch.float32, n: int = 1024, repeat: int = 3):
        self.a = torch.randn(n, n).to(dtype)
        self.b = torch.randn(n, n).to(dtype)
        self.flops = 2.0 * n ** 3 * repeat
        self.repeat = repeat
        for _ in range(2):
            self.a @ self.b

    def __call__(self) -> float:
        self.a @ self.b  # untimed: wakes the matrix units (AMX for bf16) from whatever ran before
        start = time.perf_counter()
        for _ in range(self.repeat):
            self.a @ self.b
        return self.flops / (time.perf_counter() - start)


def current_rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize()


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
