"""Downloads with urllib: progress bar, resume of partial files (HTTP Range into ``<dest>.part``), checksum or
size verification and an atomic rename into place; plus archive member extraction.

Every failure is a one-line :class:`~transformer_xl.errors.DataError`. When the network cannot be reached, the
message names the URL to fetch by hand and the exact path to save it at.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import logging
import os
import re
import shutil
import ssl
import tarfile
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Callable, Dict, Optional, Sequence, Tuple
from urllib.error import HTTPError, URLError
from urllib.request import Request, urlopen

from .._io import PathLike
from ..errors import DataError
from ..files import atomic_write_stream

log = logging.getLogger(__name__)

USER_AGENT = "transformer-xl (python urllib)"
_CHUNK = 1 << 20
_NETWORK_ERRORS = (URLError, http.client.HTTPException, TimeoutError, ConnectionError, ssl.SSLError)


@dataclass(frozen=True)
class RemoteFile:
    """A file to download: where from, the name to save it under, and what it should hash to.

    ``checksum`` is ``"<algorithm>:<hex>"`` (``sha256``, ``sha1`` or ``md5``); ``size`` in bytes. Either may be
    None where it could not be established; ``mirrors`` are tried in order after ``url``.
    """

    url: str
    filename: str
    checksum: Optional[str] = None
    size: Optional[int] = None
    mirrors: Tuple[str, ...] = ()


@dataclass(frozen=True)
class Member:
    """A file inside an archive: its name there, where it goes, and (optionally) what it should hash to."""

    name: str
    dest: str
    checksum: Optional[str] = None
    size: Optional[int] = None


@dataclass(frozen=True)
class MemberPattern:
    """Archive members whose (``./``-less) name matches ``regex``; each goes to ``dest_dir/<its name>``."""

    regex: str
    dest_dir: str = ""
    members: Tuple[Member, ...] = field(default=())


def _digest_of(path: Path, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def verify_file(path: PathLike, checksum: Optional[str] = None, size: Optional[int] = None,
                what: Optional[str] = None) -> None:
    """Raise DataError unless ``path`` has the given size and checksum (each skipped when None)."""
    p = Path(path)
    label = what or str(p)
    if size is not None and p.stat().st_size != size:
        raise DataError(f"{label} has {p.stat().st_size} bytes, expected {size} (incomplete or wrong file)")
    if checksum:
        algorithm, _, expected = checksum.partition(":")
        if not expected or algorithm.lower() not in hashlib.algorithms_available:
            raise DataError(f"checksum: expected ALGORITHM:HEX (sha256:...), got {checksum!r}")
        actual = _digest_of(p, algorithm)
        if actual != expected.lower():
            raise DataError(f"{label} has {algorithm} {actual}, expected {expected} (corrupt or wrong file)")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, URLError):
        return str(exc.reason)
    return str(exc) or type(exc).__name__


def _progress(total: Optional[int], initial: int, desc: str, enabled: Optional[bool]):
    from tqdm.auto import tqdm

    disable = None if enabled is None else not enabled  # None: only on a terminal
    return tqdm(total=total, initial=initial, unit="B", unit_scale=True, unit_divisor=1024, desc=desc,
                disable=disable, leave=False)


def _open(url: str, offset: int, timeout: float):
    """Open ``url``, asking for bytes from ``offset`` on. Returns the response, or None when the server
    answers 416 to a resume (the partial file is already whole)."""
    headers = {"User-Agent": USER_AGENT}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    try:
        return urlopen(Request(url, headers=headers), timeout=timeout)
    except HTTPError as exc:
        if exc.code == 416 and offset:
            return None
        raise


def _resume_offset(response, offset: int) -> int:
    """Where the response body starts in the file: ``offset`` for a matching 206, else 0 (whole file)."""
    if not offset or response.status != 206:
        return 0
    match = re.match(r"bytes (\d+)-", response.headers.get("Content-Range", ""))
    return offset if match and int(match.group(1)) == offset else 0


def _fetch(url: str, part: Path, timeout: float, progress: Optional[bool]) -> None:
    """Download ``url`` into ``part``, appending when the server honours a Range request."""
    offset = part.stat().st_size if part.exists() else 0
    response = _open(url, offset, timeout)
    if response is None:
        return
    with response:
        start = _resume_offset(response, offset)
        if offset and start:
            log.info("resuming %s at byte %d", url, start)
        length = response.headers.get("Content-Length")
        total = start + int(length) if length and length.isdigit() else None
        with open(part, "ab" if start else "wb") as f, _progress(total, start, part.name[:-5], progress) as bar:
            for block in iter(lambda: response.read(_CHUNK), b""):
                f.write(block)
                bar.update(len(block))
    if total is not None and part.stat().st_size < total:
        raise http.client.IncompleteRead(b"", total - part.stat().st_size)


def download_file(url: str, dest: PathLike, *, checksum: Optional[str] = None, size: Optional[int] = None,
                  mirrors: Sequence[str] = (), timeout: float = 60.0, progress: Optional[bool] = None) -> Path:
    """Download ``url`` to ``dest`` unless it is already there; verify it; return ``dest``.

    The bytes go to ``dest + '.part'`` first (a later call resumes it with an HTTP Range request), are checked
    against ``size``/``checksum`` and are then renamed into place. An existing ``dest`` is only verified.
    ``progress``: True/False forces the tqdm bar on/off; None shows it on a terminal only.
    """
    dest = Path(dest).expanduser()
    if dest.exists():
        verify_file(dest, checksum, size)
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    failures = []
    for source in (url, *mirrors):
        try:
            log.info("downloading %s -> %s", source, dest)
            _fetch(source, part, timeout, progress)
            break
        except _NETWORK_ERRORS as exc:
            failures.append(_reason(exc))
    else:
        raise DataError(f"could not download {url} ({'; '.join(failures)}); fetch it by other means and save it "
                        f"as {dest}")
    try:
        verify_file(part, checksum, size, what=f"download of {url}")
    except DataError:
        part.unlink(missing_ok=True)
        raise
    os.replace(part, dest)
    return dest


def _safe_relpath(name: str) -> PurePosixPath:
    """An archive member name as a relative path, refusing absolute paths and ``..``."""
    while name.startswith("./"):
        name = name[2:]
    rel = PurePosixPath(name)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise DataError(f"refusing unsafe archive member name {name!r}")
    return rel


def _copy_member(src: BinaryIO, dest: Path, member: Optional[Member], archive: Path) -> None:
    atomic_write_stream(dest, lambda f: shutil.copyfileobj(src, f, _CHUNK))
    if member is not None:
        verify_file(dest, member.checksum, member.size, what=f"{member.name} from {archive}")


def _wanted(name: str, patterns: Sequence[MemberPattern]) -> Optional[Tuple[Path, Optional[Member]]]:
    """Where a member goes (relative path) and its expected hash, or None when it is not wanted."""
    rel = _safe_relpath(name)
    key = str(rel)
    for pat in patterns:
        for m in pat.members:
            if str(_safe_relpath(m.name)) == key:
                return Path(m.dest), m
        if pat.regex and re.fullmatch(pat.regex, key):
            return Path(pat.dest_dir) / rel.name, None
    return None


def extract_members(archive: PathLike, work_dir: PathLike, patterns: Sequence[MemberPattern]) -> Dict[str, Path]:
    """Extract the wanted members of a .zip or .tar(.gz) into ``work_dir`` (atomically, member by member).

    Returns ``{member name: extracted path}``; every listed :class:`Member` must be present (else DataError).
    """
    archive, work_dir = Path(archive), Path(work_dir)
    done: Dict[str, Path] = {}
    handler: Callable = _extract_zip if zipfile.is_zipfile(archive) else _extract_tar
    try:
        handler(archive, work_dir, patterns, done)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise DataError(f"cannot read archive {archive}: {exc} (delete it to download again)") from None
    expected = [_safe_relpath(m.name) for pat in patterns for m in pat.members]
    missing = [str(m) for m in expected if str(m) not in {str(_safe_relpath(k)) for k in done}]
    if missing:
        raise DataError(f"archive {archive} lacks {', '.join(missing)}")
    return done


def _extract_zip(archive: Path, work_dir: Path, patterns, done: Dict[str, Path]) -> None:
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            if info.is_dir():
                continue
            target = _wanted(info.filename, patterns)
            if target is None:
                continue
            dest = work_dir / target[0]
            with zf.open(info) as src:
                _copy_member(src, dest, target[1], archive)
            done[info.filename] = dest


def _extract_tar(archive: Path, work_dir: Path, patterns, done: Dict[str, Path]) -> None:
    with tarfile.open(archive, "r|*") as tf:
        for info in tf:
            if not info.isfile():
                continue
            target = _wanted(info.name, patterns)
            if target is None:
                continue
            dest = work_dir / target[0]
            src = tf.extractfile(info)
            if src is None:
                continue
            with src:
                _copy_member(src, dest, target[1], archive)
            done[info.name] = dest
