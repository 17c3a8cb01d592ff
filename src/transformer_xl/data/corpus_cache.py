"""The on-disk cache of encoded corpora.

Layout under the cache root (``cache_dir`` argument, else ``$TXL_CACHE_DIR``, else ``~/.cache/transformer-xl``)::

    downloads/<corpus>/          downloaded archives and the files extracted from them
    extracted/<corpus>-<hash>/   files extracted from an archive found in a user's data_dir
    corpora/<corpus>-<hash>/     train.npy valid.npy test.npy, vocab.json (or tokenizer.json), meta.json

The ``<hash>`` of a corpus directory covers the corpus name, its input files (resolved path, size, mtime),
the preprocessing options and :data:`FORMAT_VERSION`, so any change to those gives a fresh directory.
``meta.json`` is written last: a directory without it is incomplete and is rebuilt.
"""

from __future__ import annotations

import io
import logging
import os
import re
import time
from pathlib import Path
from typing import Any, BinaryIO, Dict, Iterable, Optional, Tuple, Union

import numpy as np

from .._io import JSON_STYLE, PathLike, atomic_save_npy, load_npy, read_json, smallest_dtype, stable_hash
from ..errors import DataError
from ..files import atomic_write_stream, write_json
from ..text.vocab_files import load_vocab

log = logging.getLogger(__name__)

CACHE_ENV = "TXL_CACHE_DIR"
FORMAT_VERSION = 1
SPLITS = ("train", "valid", "test")
META_FILENAME = "meta.json"

SplitData = Union[np.ndarray, Iterable[np.ndarray]]


def cache_root(cache_dir: Optional[PathLike] = None) -> Path:
    """The cache root: ``cache_dir``, else ``$TXL_CACHE_DIR``, else ``~/.cache/transformer-xl``."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "transformer-xl"


def corpus_dir(root: Path, name: str, key: Dict[str, Any]) -> Path:
    """``root/corpora/<name>-<hash of key>``."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:48] or "corpus"
    return root / "corpora" / f"{safe}-{stable_hash({'format': FORMAT_VERSION, **key})}"


def _npy_header(dtype: np.dtype, length: int) -> bytes:
    """The ``.npy`` (format 1.0) header of a 1-D array: 128 bytes for any length, padding included."""
    out = io.BytesIO()
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": (length,)}
    np.lib.format.write_array_header_1_0(out, header)
    return out.getvalue()


def _save_chunks(path: Path, chunks: Iterable[np.ndarray], dtype: np.dtype) -> int:
    """Write a 1-D ``.npy`` from arrays produced one by one (memory: one chunk): a header for length 0, the
    chunks, then the header of the real length over the first one. Returns the length."""
    total = 0

    def write(out: BinaryIO) -> None:
        nonlocal total
        placeholder = _npy_header(dtype, 0)
        out.write(placeholder)
        for chunk in chunks:
            arr = np.ascontiguousarray(chunk, dtype=dtype)
            out.write(arr.tobytes())
            total += arr.size
        header = _npy_header(dtype, total)
        if len(header) != len(placeholder):  # numpy pads every 1-D header to the same size; never seen otherwise
            raise ValueError(f"{path}: .npy header of {len(header)} bytes, not {len(placeholder)}")
        out.seek(0)
        out.write(header)

    atomic_write_stream(path, write)
    return total


def save_corpus(directory: Path, vocab, splits: Dict[str, SplitData], meta: Dict[str, Any]) -> None:
    """Write the encoded splits (smallest fitting dtype), the vocabulary and, last, ``meta.json``."""
    dtype = smallest_dtype(len(vocab))
    sizes = {}
    for split in SPLITS:
        data = splits[split]
        if isinstance(data, np.ndarray):
            atomic_save_npy(directory / f"{split}.npy", data.astype(dtype, copy=False))
            sizes[split] = int(data.size)
        else:
            sizes[split] = _save_chunks(directory / f"{split}.npy", data, dtype)
        if sizes[split] == 0:
            raise DataError(f"the {split} split of corpus {meta.get('name')} is empty")
    vocab.save(directory)
    full = {"format_version": FORMAT_VERSION, "created": time.strftime("%Y-%m-%dT%H:%M:%S"), **meta,
            "dtype": dtype.name, "vocab_size": len(vocab), "sizes": sizes}
    write_json(directory / META_FILENAME, full, **JSON_STYLE)


def load_corpus_files(directory: Path) -> Optional[Tuple[Any, Dict[str, np.ndarray], Dict[str, Any]]]:
    """``(vocab, {split: memmap}, meta)`` from a complete cache directory, or None when it is not there."""

    meta_path = directory / META_FILENAME
    if not meta_path.is_file():
        return None
    try:
        meta = read_json(meta_path, "cache metadata")
        if meta.get("format_version") != FORMAT_VERSION:
            return None
        arrays = {s: load_npy(directory / f"{s}.npy") for s in SPLITS}
        vocab = load_vocab(directory)
    except (OSError, ValueError, DataError) as exc:
        log.warning("ignoring unreadable corpus cache %s (%s); rebuilding", directory, exc)
        return None
    if any(arrays[s].size != meta["sizes"][s] for s in SPLITS):
        log.warning("ignoring corpus cache %s whose arrays do not match its metadata; rebuilding", directory)
        return None
    return vocab, arrays, meta
