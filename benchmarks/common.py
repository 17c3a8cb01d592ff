"""Shared pieces of the benchmarks: the matmul throughput of this machine right now, resident memory, a child
command's JSON and Markdown tables."""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import time
from pathlib import Path
from typing import Iterable, List, Optional, Sequence

import torch


class MatmulReference:
    """The machine's matmul throughput *now*: ``ref()`` times ``repeat`` square products and returns FLOP/s.

    Call it right before and after each timed piece of work and divide by the mean: on a shared machine
    the rate drifts by a factor of two within seconds, and a reference measured once at the start of a
    run makes ratios taken minutes later meaningless. One untimed product comes first: right after other
    work, the first bf16 product runs at a fraction of the AMX rate.
    """

    def __init__(self, dtype=torch.float32, n: int = 1024, repeat: int = 3, device: str = "cpu"):
        self.a = torch.randn(n, n).to(device, dtype)
        self.b = torch.randn(n, n).to(device, dtype)
        self.flops = 2.0 * n ** 3 * repeat
        self.repeat = repeat
        self.cuda = self.a.is_cuda
        for _ in range(2):
            self.a @ self.b

    def __call__(self) -> float:
        self.a @ self.b  # untimed: wakes the matrix units (AMX for bf16) from whatever ran before
        self._sync()
        start = time.perf_counter()
        for _ in range(self.repeat):
            self.a @ self.b
        self._sync()
        return self.flops / (time.perf_counter() - start)

    def _sync(self) -> None:
        if self.cuda:  # a GPU's products are queued: wait for them
            torch.cuda.synchronize()


def current_rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize()


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def cpu_model_name(default: str = "unknown") -> str:
    """The CPU's model name from /proc/cpuinfo (``default`` where there is none)."""
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return default


def cpu_description() -> str:
    """``CPU: <model name> | <the vector and matrix flags that decide the kernels>``, from /proc/cpuinfo."""
    from transformer_xl.devices import cpu_flags  # the flags the package itself decides bf16 by

    model, flags = cpu_model_name(), cpu_flags() or set()
    wanted = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")
    shown = " ".join(f for f in wanted if f in flags) or "none of avx2/avx512/amx"
    return f"CPU: {model} | {shown} | torch {torch.__version__}, {torch.get_num_threads()} threads"


def add_model_args(parser: argparse.ArgumentParser) -> None:
    """The base-like model of the benchmarks, each field a flag: 4 layers, d_model 256, 8 heads of 32, d_inner
    1024, tgt_len = mem_len = 128, batch 8, vocabulary 10k, dropout 0.1, attention dropout 0, Adam 2.5e-4."""
    for name, default in (("n-layer", 4), ("d-model", 256), ("n-head", 8), ("d-head", 32), ("d-inner", 1024),
                          ("tgt-len", 128), ("mem-len", 128), ("batch", 8), ("vocab", 10000)):
        parser.add_argument(f"--{name}", type=int, default=default)
    for name, default in (("dropout", 0.1), ("dropatt", 0.0), ("lr", 2.5e-4)):
        parser.add_argument(f"--{name}", type=float, default=default)


def jsonl_rows(path: Path) -> List[dict]:
    """The records of a JSON-lines results file (one finished run a line), blank lines skipped."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def last_line(done) -> dict:
    """The JSON object a child command (``--json``) printed last, or ``{"error": its last stderr line}`` when it
    failed (``done``: a ``subprocess.CompletedProcess`` with text output)."""
    if done.returncode != 0:
        return {"error": last_stderr_line(done, "failed")}
    return json.loads(done.stdout.strip().splitlines()[-1])


def last_stderr_line(done, default: str = "") -> str:
    """The last line a finished child wrote to stderr (``default`` where it wrote none)."""
    lines = done.stderr.strip().splitlines()
    return lines[-1] if lines else default


def run_json(cmd: List[str], **kwargs) -> dict:
    """:func:`last_line` of ``cmd`` run to its end (``subprocess.run`` with ``kwargs``, the output captured as
    text; ``check=True`` raises on a failure)."""
    return last_line(subprocess.run(cmd, capture_output=True, text=True, **kwargs))


def table_row(cells: Iterable) -> str:
    """One row of a Markdown table, ``| a | b |``, each cell ``str()``-ed; an empty one reads ``| |``."""
    return "|" + "".join(f" {text} |" if text else " |" for text in map(str, cells))


def markdown_table(headers: Sequence, rows: Iterable[Iterable] = ()) -> str:
    """A GitHub Markdown table: the ``headers``, ``|---|`` under each, then the ``rows`` (see :func:`table_row`).
    With no rows, the head alone, for rows printed one by one as they are measured."""
    return "\n".join([table_row(headers), "|" + "---|" * len(headers), *map(table_row, rows)])


def mean_se(values: Sequence[float], digits: int = 2) -> str:
    """``mean ± standard error`` over ``values`` (seeds); the value alone for one."""
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values) / len(values) ** 0.5:.{digits}f}"


def first_reach(curve: List[dict], level: float) -> Optional[int]:
    """The first step of a learning curve (``[{"step", "mean_return"}]``) at which the return reached ``level``."""
    return next((p["step"] for p in curve if p["mean_return"] is not None and p["mean_return"] >= level), None)
