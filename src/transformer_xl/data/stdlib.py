"""Two byte-level corpora of real text that exists offline wherever Python runs: the standard library's source.

``default``: the Python standard library's own ``*.py`` source, found under ``sysconfig.get_paths()['stdlib']``
(skipping ``test``/``tests``/``idlelib``/``site-packages``/``dist-packages``/``__pycache__`` and hidden
directories), taken in sorted relative-path order (POSIX separators) and concatenated whole until
:data:`DEFAULT_CORPUS_BYTES` is reached, then cut at exactly that many bytes. Byte level, vocabulary of 256,
split 90/5/5 (train first, test last).

``stdlib``: every ``*.py`` file of the standard library, its tests and ``idlelib`` included (skipping only
``site-packages``/``dist-packages``/``__pycache__`` and hidden directories): about 31 MB on CPython 3.11. Each
file goes whole to one split, chosen by its path alone (:func:`split_of`: the first byte of the SHA-256 of its
relative POSIX path, modulo 20: 0 is valid, 1 is test, the rest train, so about 5% / 5% / 90% of the files),
and each split is its files concatenated in sorted path order. Valid and test are thus other files than those
trained on, spread over the whole library.

The same Python installation always gives the same bytes (the corpus metadata keeps the SHA-256 of each split).
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

from ..errors import DataError

log = logging.getLogger(__name__)

DEFAULT_CORPUS_BYTES = 4_000_000
SKIP_DIRS = frozenset({"test", "tests", "idlelib", "site-packages", "dist-packages", "__pycache__"})
#: What the ``stdlib`` corpus skips: installed packages and byte code, nothing of the library itself.
STDLIB_SKIP_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__"})
SPLIT_MODULUS = 20  # split_of: 1 file in 20 to valid, 1 in 20 to test


@dataclass(frozen=True)
class SourceFile:
    """One standard-library file chosen for the corpus."""

    relpath: str
    path: Path
    size: int
    mtime_ns: int


def stdlib_dir() -> Path:
    """The standard library directory of the running interpreter."""
    return Path(sysconfig.get_paths()["stdlib"])


def _walk_py_files(base: Path, skip: frozenset = SKIP_DIRS) -> List[Tuple[str, Path]]:
    """``(relative POSIX path, path)`` of every ``*.py`` under ``base`` outside the ``skip`` directories."""
    found = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = [d for d in dirnames if d not in skip and not d.startswith(".")]
        for name in filenames:
            if name.endswith(".py"):
                path = Path(dirpath) / name
                found.append((path.relative_to(base).as_posix(), path))
    return sorted(found)


def _source_files(base: Optional[Path], skip: frozenset, corpus: str) -> Iterator[SourceFile]:
    """Every non-empty ``*.py`` file under ``base`` (the standard library) outside ``skip``, in sorted order."""
    base = base or stdlib_dir()
    if not base.is_dir():
        raise DataError(f"cannot build the {corpus} corpus: the standard library directory {base} does not exist")
    for rel, path in _walk_py_files(base, skip):
        st = path.stat()
        if st.st_size:
            yield SourceFile(rel, path, st.st_size, st.st_mtime_ns)


def select_sources(target_bytes: int = DEFAULT_CORPUS_BYTES, base: Optional[Path] = None) -> List[SourceFile]:
    """The files that make up the corpus: sorted, whole, until their sizes add up to ``target_bytes``."""
    chosen, total = [], 0
    for f in _source_files(base, SKIP_DIRS, "default"):
        chosen.append(f)
        total += f.size
        if total >= target_bytes:
            return chosen
    base = base or stdlib_dir()
    if total < target_bytes // 4:
        raise DataError(f"cannot build the default corpus: only {total} bytes of .py files under {base}")
    log.warning("default corpus: the standard library has only %d bytes of .py files (wanted %d)", total,
                target_bytes)
    return chosen


def read_sources(files: List[SourceFile], target_bytes: int = DEFAULT_CORPUS_BYTES) -> bytes:
    """The concatenated bytes of ``files``, cut at ``target_bytes``."""
    parts, total = [], 0
    for f in files:
        data = f.path.read_bytes()
        parts.append(data)
        total += len(data)
        if total >= target_bytes:
            break
    return b"".join(parts)[:target_bytes]


def describe_sources(files: List[SourceFile], data: bytes) -> dict:
    """What goes in the cache metadata: the interpreter, the directory, every file and the text's sha256."""
    return {"python": sys.version.split()[0], "stdlib": str(stdlib_dir()), "n_bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(), "files": [[f.relpath, f.size] for f in files]}


# ------------------------------------------------------------------------------------------------ stdlib
def split_of(relpath: str) -> str:
    """The ``stdlib`` corpus split of a file, from its relative POSIX path alone: ``valid``, ``test`` or ``train``."""
    k = hashlib.sha256(relpath.encode("utf-8")).digest()[0] % SPLIT_MODULUS
    return {0: "valid", 1: "test"}.get(k, "train")


def stdlib_sources(base: Optional[Path] = None) -> List[SourceFile]:
    """Every non-empty ``*.py`` file of the standard library (tests included), in sorted relative-path order."""
    files = list(_source_files(base, STDLIB_SKIP_DIRS, "stdlib"))
    if not files:
        raise DataError(f"cannot build the stdlib corpus: no .py files under {base or stdlib_dir()}")
    return files


def split_files(files: List[SourceFile]) -> Dict[str, List[SourceFile]]:
    """``{"train", "valid", "test"}``: the files of each split (:func:`split_of`), in their order."""
    out: Dict[str, List[SourceFile]] = {"train": [], "valid": [], "test": []}
    for f in files:
        out[split_of(f.relpath)].append(f)
    return out


def stdlib_parts(files: List[SourceFile]) -> Dict[str, bytes]:
    """``{"train", "valid", "test"}``: each split's files concatenated whole, in order."""
    out = {k: b"".join(f.path.read_bytes() for f in v) for k, v in split_files(files).items()}
    empty = [k for k, v in out.items() if not v]
    if empty:
        raise DataError(f"cannot build the stdlib corpus: its {empty[0]} split has no files "
                        f"({len(files)} files in all)")
    return out


def describe_parts(files: List[SourceFile], parts: Dict[str, bytes]) -> dict:
    """The ``stdlib`` corpus metadata: the interpreter, the directory, each split's files, size and sha256."""
    listed = split_files(files)
    return {"python": sys.version.split()[0], "stdlib": str(stdlib_dir()),
            "splits": {k: {"n_bytes": len(v), "sha256": hashlib.sha256(v).hexdigest(),
                           "files": [[f.relpath, f.size] for f in listed[k]]}
                       for k, v in parts.items()}}
