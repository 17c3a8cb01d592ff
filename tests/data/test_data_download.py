"""Downloads against a local http.server on 127.0.0.1 (never the internet): success, checksum mismatch,
resume of a partial ``.part`` file, servers that ignore Range, offline failures, and corpus fetch + extract."""

import dataclasses
import hashlib
import io
import tarfile
import zipfile
from types import MappingProxyType

import numpy as np
import pytest
from data_fixtures import closed_port_url, one_line, require

from transformer_xl.data import RemoteFile, download_file, load_corpus, verify_file
from transformer_xl.data import corpus as corpus_module
from transformer_xl.errors import DataError

PAYLOAD = bytes(np.random.default_rng(0).integers(0, 256, size=300_000, dtype=np.uint8))
SHA256 = "sha256:" + hashlib.sha256(PAYLOAD).hexdigest()


def test_download_verifies_and_renames(server, tmp_path):
    url = server.add("/data/blob.bin", PAYLOAD)
    dest = download_file(url, tmp_path / "sub" / "blob.bin", checksum=SHA256, size=len(PAYLOAD), progress=False)
    assert dest.read_bytes() == PAYLOAD
    assert not (tmp_path / "sub" / "blob.bin.part").exists()
    md5 = "md5:" + hashlib.md5(PAYLOAD).hexdigest()
    assert download_file(url, tmp_path / "other.bin", checksum=md5, progress=False).read_bytes() == PAYLOAD
    requests = len(server.httpd.requests)
    download_file(url, dest, checksum=SHA256, progress=False)  # already there: verified, not fetched again
    assert len(server.httpd.requests) == requests


def test_checksum_mismatch_fails_and_keeps_nothing(server, tmp_path):
    url = server.add("/blob.bin", PAYLOAD)
    wrong = "sha256:" + hashlib.sha256(b"something else").hexdigest()
    dest = tmp_path / "blob.bin"
    with pytest.raises(DataError) as info:
        download_file(url, dest, checksum=wrong, progress=False)
    msg = one_line(info.value)
    assert url in msg and wrong.split(":")[1] in msg
    assert not dest.exists() and not (tmp_path / "blob.bin.part").exists()


def test_size_mismatch_of_an_existing_file(tmp_path):
    dest = tmp_path / "blob.bin"
    dest.write_bytes(b"short")
    with pytest.raises(DataError) as info:
        download_file(closed_port_url(), dest, size=len(PAYLOAD))
    assert str(dest) in one_line(info.value)


@pytest.mark.parametrize("checksum", ["486b76cb68e2d98b", "nosuchhash:00", "sha256:"])
def test_a_checksum_without_its_algorithm_is_one_line(tmp_path, checksum):
    path = tmp_path / "f.txt"
    path.write_text("x")
    with pytest.raises(DataError, match=r"checksum: expected ALGORITHM:HEX"):
        verify_file(path, checksum=checksum)


def test_resume_from_partial_file(server, tmp_path):
    url = server.add("/blob.bin", PAYLOAD)
    dest = tmp_path / "blob.bin"
    split = 123_457
    (tmp_path / "blob.bin.part").write_bytes(PAYLOAD[:split])
    download_file(url, dest, checksum=SHA256, progress=False)
    assert dest.read_bytes() == PAYLOAD
    assert server.httpd.requests == [("/blob.bin", f"bytes={split}-")]
    assert server.httpd.bytes_sent == len(PAYLOAD) - split  # only the missing tail travelled


def test_resume_when_server_ignores_range(server, tmp_path):
    server.httpd.honor_range = False
    url = server.add("/blob.bin", PAYLOAD)
    (tmp_path / "blob.bin.part").write_bytes(b"\0" * 1000)  # garbage that must not survive
    download_file(url, tmp_path / "blob.bin", checksum=SHA256, progress=False)
    assert (tmp_path / "blob.bin").read_bytes() == PAYLOAD


def test_complete_part_file_is_finished(server, tmp_path):
    url = server.add("/blob.bin", PAYLOAD)
    (tmp_path / "blob.bin.part").write_bytes(PAYLOAD)
    download_file(url, tmp_path / "blob.bin", checksum=SHA256, progress=False)  # server answers 416
    assert (tmp_path / "blob.bin").read_bytes() == PAYLOAD


def test_offline_names_url_and_destination(tmp_path):
    url = closed_port_url("/wikitext-2-v1.zip")
    dest = tmp_path / "downloads" / "wikitext-2-v1.zip"
    with pytest.raises(DataError) as info:
        download_file(url, dest, timeout=5)
    msg = one_line(info.value)
    assert url in msg and str(dest) in msg


def test_http_error(server, tmp_path):
    url = server.add("/present", b"x")
    with pytest.raises(DataError) as info:
        download_file(url.replace("/present", "/absent"), tmp_path / "absent", progress=False)
    assert "404" in one_line(info.value)


def test_mirror_is_tried_after_a_dead_url(server, tmp_path):
    url = server.add("/mirror/blob.bin", PAYLOAD)
    dest = download_file(closed_port_url(), tmp_path / "blob.bin", checksum=SHA256, mirrors=(url,),
                         progress=False)
    assert dest.read_bytes() == PAYLOAD


# ------------------------------------------------------------------------------------------ corpus downloads
def with_remote(monkeypatch, name, **changes):
    """Point a named corpus at the local server (the registry itself is read-only)."""
    specs = dict(corpus_module.SPECS)
    specs[name] = dataclasses.replace(specs[name], **changes)
    monkeypatch.setattr(corpus_module, "SPECS", MappingProxyType(specs))


def test_corpus_download_into_cache(server, tmp_path, monkeypatch, shared_cache):
    path = require("tinyshakespeare/input.txt")
    real = corpus_module.SPECS["shakespeare"].remote[0]
    url = server.add("/input.txt", path.read_bytes())
    with_remote(monkeypatch, "shakespeare", remote=(dataclasses.replace(real, url=url),))  # the real checksum
    c = load_corpus("shakespeare", cache_dir=tmp_path)
    assert (tmp_path / "downloads" / "shakespeare" / "input.txt").read_bytes() == path.read_bytes()
    ref = load_corpus("shakespeare", data_dir=path.parent, cache_dir=shared_cache)
    assert np.array_equal(c.train, ref.train) and np.array_equal(c.test, ref.test)
    requests = len(server.httpd.requests)
    load_corpus("shakespeare", cache_dir=tmp_path)
    assert len(server.httpd.requests) == requests  # second time: nothing fetched


def test_corpus_offline_message(tmp_path, monkeypatch):
    url = closed_port_url("/input.txt")
    with_remote(monkeypatch, "shakespeare", remote=(RemoteFile(url, "input.txt"),))
    with pytest.raises(DataError) as info:
        load_corpus("shakespeare", cache_dir=tmp_path)
    msg = one_line(info.value)
    assert url in msg and str(tmp_path / "downloads" / "shakespeare" / "input.txt") in msg
    with pytest.raises(DataError) as info:
        load_corpus("shakespeare", cache_dir=tmp_path, download=False)
    assert url in one_line(info.value)


def test_cache_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TXL_CACHE_DIR", str(tmp_path / "envcache"))
    with_remote(monkeypatch, "shakespeare", remote=(RemoteFile(closed_port_url("/x"), "input.txt"),))
    with pytest.raises(DataError) as info:
        load_corpus("shakespeare")
    assert str(tmp_path / "envcache" / "downloads" / "shakespeare" / "input.txt") in one_line(info.value)


def test_ptb_tgz_download_extract_and_member_checksums(server, tmp_path, monkeypatch, shared_cache):
    root = require("ptb")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tf:
        for split in ("train", "valid", "test"):
            tf.add(root / f"ptb.{split}.txt", arcname=f"./simple-examples/data/ptb.{split}.txt")
        info = tarfile.TarInfo("./simple-examples/data/README")
        tf.addfile(info, io.BytesIO(b""))
    url = server.add("/simple-examples.tgz", buf.getvalue())
    with_remote(monkeypatch, "ptb", remote=(RemoteFile(url, "simple-examples.tgz"),))
    c = load_corpus("ptb", cache_dir=tmp_path)
    ref = load_corpus("ptb", data_dir=root, cache_dir=shared_cache)
    assert np.array_equal(c.train, ref.train) and c.vocab.idx2sym == ref.vocab.idx2sym


def test_downloaded_archive_with_wrong_member_is_rejected(server, tmp_path, monkeypatch):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("enwik8", b"far fewer than 100,000,000 bytes\n" * 10)
    url = server.add("/enwik8.zip", buf.getvalue())
    with_remote(monkeypatch, "enwik8", remote=(RemoteFile(url, "enwik8.zip"),))
    with pytest.raises(DataError) as info:
        load_corpus("enwik8", cache_dir=tmp_path)
    assert "100000000" in one_line(info.value)
