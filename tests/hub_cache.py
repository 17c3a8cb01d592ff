"""A huggingface_hub cache built on disk as a download leaves it, for tests that must not touch the network.

Layout (huggingface_hub's cache, checked with its own ``scan_cache_dir`` by the tests)::

    CACHE/models--ORG--NAME/blobs/<etag>                      the file contents
    CACHE/models--ORG--NAME/snapshots/<commit>/<filename>     relative symlinks to ../../blobs/<etag>
    CACHE/models--ORG--NAME/refs/<branch>                     the commit the branch points to

The etag of a large (LFS) file is the SHA-256 of its contents, of a small one its git blob SHA-1, as the hub
reports them; a commit id is 40 hex digits derived from the files it holds.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Dict, Optional, Union

LFS_SUFFIXES = (".bin", ".safetensors", ".pkl", ".h5")


def repo_folder(cache: Path, repo_id: str) -> Path:
    return Path(cache) / ("models--" + repo_id.replace("/", "--"))


def _etag(name: str, data: bytes) -> str:
    if name.endswith(LFS_SUFFIXES):
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def add_commit(cache: Path, repo_id: str, files: Dict[str, Union[Path, bytes]], branch: Optional[str] = "main",
               salt: str = "") -> str:
    """Put a commit holding ``files`` (name -> a file to copy, or bytes) into the cache; point ``branch`` at it.
    Returns the commit id."""
    repo = repo_folder(cache, repo_id)
    contents = {name: (src if isinstance(src, bytes) else Path(src).read_bytes()) for name, src in files.items()}
    etags = {name: _etag(name, data) for name, data in contents.items()}
    commit = hashlib.sha1((salt + "".join(f"{n}:{e};" for n, e in sorted(etags.items()))).encode()).hexdigest()
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    for name, data in contents.items():
        blob = repo / "blobs" / etags[name]
        if not blob.exists():
            blob.write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(blob, link.parent), link)
    if branch is not None:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / branch).write_text(commit)
    return commit


def add_folder(cache: Path, repo_id: str, folder: Path, branch: Optional[str] = "main", salt: str = "") -> str:
    """A commit holding every file of ``folder`` (not recursive)."""
    return add_commit(cache, repo_id, {p.name: p for p in sorted(Path(folder).iterdir()) if p.is_file()}, branch, salt)
