"""The built-in ``default`` corpus: real text that exists offline wherever Python runs.

It is the Python standard library's own ``*.py`` source, found under ``sysconfig.get_paths()['stdlib']``
(skipping ``test``/``tests``/``idlelib``/``site-packages``/``dist-packages``/``__pycache__`` and hidden
directories), taken in sorted relative-path order (POSIX separators) and concatenated whole until
:data:`DEFAULT_CORPUS_BYTES` is reached, then cut at exactly that many bytes. Byte level, vocabulary of 256,
split 90/5/5 (train first, test last). The same Python installation always gives the same bytes.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import List, Tuple

from ..errors import DataError

log = logging.getLogger(__name__)

DEFAULT_CORPUS_BYTES = 4_000_000
SKIP_DIRS = frozenset({"test", "tests", "idlelib", "site-packages", "dist-packages", "__pycache__"})


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


def _walk_py_files(base: Path) -> List[Tuple[str, Path]]:
    """``(relative POSIX path, path)`` of every ``*.py`` under ``base`` outside the skipped directories."""
    found = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".")]
        for name in filenames:
            if name.endswith(".py"):
                path = Path(dirpath) / name
                found.append((path.relative_to(base).as_posix(), path))
    return sorted(found)


def select_sources(target_bytes: int = DEFAULT_CORPUS_BYTES, base: Path = None) -> List[SourceFile]:
    """The files that make up the corpus: sorted, whole, until their sizes add up to ``target_bytes``."""
    base = base or stdlib_dir()
    if not base.is_dir():
        raise DataError(f"cannot build the default corpus: the standard library directory {base} does not exist")
    chosen, total = [], 0
    for rel, path in _walk_py_files(base):
        st = path.stat()
        if st.st_size == 0:
            continue
        chosen.append(SourceFile(rel, path, st.st_size, st.st_mtime_ns))
        total += st.st_size
        if total >= target_bytes:
            return chosen
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
