"""Read time and peak memory of the TensorFlow checkpoint reader on a generated large checkpoint.

    PYTHONPATH=src python benchmarks/tf_checkpoint_read.py [--size-gib 1] [--dir /tmp]

Writes a V2 checkpoint of ``--size-gib`` GiB of float32 tensors (64 MiB each) with a minimal
writer defined here (data shard + SSTable index with masked crc32c, the layout
transformer_xl.convert.tf_checkpoint documents), then, in a fresh process so that the writer's
memory does not count, times :func:`read_tf_checkpoint` (index parse + crc32c of every tensor) and
reports the peak resident set size, then touches every array through its memory map. Deletes the
checkpoint at the end. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from transformer_xl.convert.tf_checkpoint import TABLE_MAGIC, Crc32c, crc32c, mask_crc, read_tf_checkpoint

TENSOR_MIB = 64


# ---------------------------------------------------------------------------- a minimal V2 writer
def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, wire: int, payload: bytes) -> bytes:
    return _varint(number << 3 | wire) + payload


def _entry_proto(shape, offset: int, size: int, crc: int) -> bytes:
    dims = b"".join(_field(2, 2, _varint(len(d)) + d) for d in (_field(1, 0, _varint(s)) for s in shape))
    return (_field(1, 0, _varint(1)) + _field(2, 2, _varint(len(dims)) + dims) + _field(3, 0, _varint(0))
            + _field(4, 0, _varint(offset)) + _field(5, 0, _varint(size)) + _field(6, 5, crc.to_bytes(4, "little")))


def _block(entries) -> bytes:
    """Entries without prefix sharing, one restart point at 0."""
    body = b"".join(_varint(0) + _varint(len(k)) + _varint(len(v)) + k + v for k, v in entries)
    return body + (0).to_bytes(4, "little") + (1).to_bytes(4, "little")


def _with_trailer(block: bytes) -> bytes:
    return block + b"\x00" + mask_crc(Crc32c().update(block).update(b"\x00").value).to_bytes(4, "little")


def write_checkpoint(prefix: Path, size_gib: float) -> int:
    n_tensors = max(1, round(size_gib * 1024 / TENSOR_MIB))
    rows = TENSOR_MIB * (1 << 20) // 4 // 1024
    rng = np.random.default_rng(0)
    entries, offset = [], 0
    with open(f"{prefix}.data-00000-of-00001", "wb") as fh:
        for i in range(n_tensors):
            array = rng.random((rows, 1024), dtype=np.float32)
            data = array.tobytes()
            fh.write(data)
            entries.append((f"transformer/w_{i:04d}".encode(), _entry_proto(array.shape, offset, len(data),
                                                                             mask_crc(crc32c(data)))))
            offset += len(data)
    header = _field(1, 0, _varint(1)) + _field(2, 0, _varint(0))
    data_block = _with_trailer(_block([(b"", header)] + sorted(entries)))
    meta_block = _with_trailer(_block([]))
    handle = _varint(0) + _varint(len(data_block) - 5)
    index_block = _with_trailer(_block([(sorted(entries)[-1][0], handle)]))
    meta_off, index_off = len(data_block), len(data_block) + len(meta_block)
    footer = (_varint(meta_off) + _varint(len(meta_block) - 5) + _varint(index_off) + _varint(len(index_block) - 5))
    footer = footer.ljust(40, b"\x00") + TABLE_MAGIC.to_bytes(8, "little")
    Path(f"{prefix}.index").write_bytes(data_block + meta_block + index_block + footer)
    return offset


# ---------------------------------------------------------------------------- measuring (child process)
def _rss_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(prefix: str) -> dict:
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # after imports (torch included)
    t0 = time.perf_counter()
    arrays = read_tf_checkpoint(prefix)
    t_read = time.perf_counter() - t0
    peak_read = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    total = sum(float(a[:, :8].sum()) + float(a.sum(dtype=np.float64)) for a in arrays.values())
    t_touch = time.perf_counter() - t0
    return dict(tensors=len(arrays), base_rss_mib=base, read_s=t_read, peak_rss_read_mib=peak_read, touch_s=t_touch,
                peak_rss_after_touch_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                rss_anon_after_touch_mib=_rss_mib("RssAnon"), rss_file_after_touch_mib=_rss_mib("RssFile"),
                checksum=total)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-gib", type=float, default=1.0)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--measure", metavar="PREFIX", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return 0
    work = Path(tempfile.mkdtemp(prefix="tf_ckpt_bench_", dir=args.dir))
    try:
        t0 = time.perf_counter()
        n_bytes = write_checkpoint(work / "model.ckpt", args.size_gib)
        t_write = time.perf_counter() - t0
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from common import run_json  # here, not above: the measured child runs this file, and common imports torch

        r = run_json([sys.executable, __file__, "--measure", str(work / "model.ckpt")], check=True, env={**os.environ})
        print(f"CPU: {cpu_model()} ({os.cpu_count()} logical cores)")
        print(f"checkpoint: {n_bytes / 2**30:.2f} GiB in {r['tensors']} float32 tensors (written in {t_write:.1f} s)")
        print(f"read_tf_checkpoint (index + crc32c of every tensor): {r['read_s']:.2f} s "
              f"({n_bytes / 2**20 / r['read_s']:.0f} MiB/s), peak RSS {r['peak_rss_read_mib']:.0f} MiB "
              f"(+{r['peak_rss_read_mib'] - r['base_rss_mib']:.0f} MiB over the {r['base_rss_mib']:.0f} MiB "
              f"of the interpreter with the package imported)")
        print(f"then every array read through its memory map: {r['touch_s']:.2f} s, peak RSS "
              f"{r['peak_rss_after_touch_mib']:.0f} MiB (anonymous {r['rss_anon_after_touch_mib']:.0f} MiB, "
              f"file-backed page cache {r['rss_file_after_touch_mib']:.0f} MiB)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
