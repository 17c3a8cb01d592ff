"""Shared fixtures and helpers of the data-layer tests (imported by the other ``test_data_*`` modules).

Real corpora are found only through ``$TXL_DATA_DIR`` (default ``<repo root>/../shared/data``); tests that
need one skip when it is absent. Built corpora go to one cache directory per test session.
"""

from __future__ import annotations

import os
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from transformer_xl.data import load_corpus

REPO_ROOT = Path(__file__).resolve().parents[1]


def data_root() -> Path:
    """``$TXL_DATA_DIR``, else ``<repo root>/../shared/data``."""
    env = os.environ.get("TXL_DATA_DIR")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "data"


def require(relpath: str) -> Path:
    """A path under the data root, or skip the test when it is not there."""
    path = data_root() / relpath
    if not path.exists():
        pytest.skip(f"{path} not available (set TXL_DATA_DIR)")
    return path


def one_line(exc: BaseException) -> str:
    """The message of ``exc``, asserting it is a single non-empty line."""
    msg = str(exc)
    assert msg and "\n" not in msg, f"not a one-line message: {msg!r}"
    return msg


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory) -> Path:
    """One corpus cache for the whole session (a fixed path, so every module that imports this shares it)."""
    path = tmp_path_factory.getbasetemp() / "txl-data-cache"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(scope="session")
def ptb(shared_cache):
    """Real PTB, loaded from ``$TXL_DATA_DIR/ptb``."""
    return load_corpus("ptb", data_dir=require("ptb"), cache_dir=shared_cache)


@pytest.fixture(scope="session")
def wt2(shared_cache):
    """Real WikiText-2, loaded from ``$TXL_DATA_DIR/wikitext-2``."""
    return load_corpus("wt2", data_dir=require("wikitext-2"), cache_dir=shared_cache)


# ------------------------------------------------------------------------------------------ local HTTP server
class _Handler(BaseHTTPRequestHandler):
    """Serves ``server.files`` (path -> bytes), honouring ``Range: bytes=N-`` unless told not to."""

    def do_GET(self):  # http.server's name
        server = self.server
        server.requests.append((self.path, self.headers.get("Range")))
        body = server.files.get(self.path)
        if body is None:
            self.send_error(404)
            return
        match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
        if match and server.honor_range:
            start = int(match.group(1))
            if start >= len(body):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(body)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            payload = body[start:]
        else:
            self.send_response(200)
            payload = body
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        server.bytes_sent += len(payload)  # counted before sending: the client may finish before this thread runs on
        self.wfile.write(payload)

    def log_message(self, *args):  # keep test output quiet
        pass


class LocalServer:
    """A threaded HTTP server on 127.0.0.1 (ephemeral port) serving in-memory files."""

    def __init__(self):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.files: Dict[str, bytes] = {}
        self.httpd.requests: List[Tuple[str, Optional[str]]] = []
        self.httpd.honor_range = True
        self.httpd.bytes_sent = 0
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def add(self, path: str, body: bytes) -> str:
        """Serve ``body`` at ``path``; return its URL."""
        self.httpd.files[path] = body
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def server():
    srv = LocalServer()
    yield srv
    srv.close()


def closed_port_url(path: str = "/missing.zip") -> str:
    """A URL on 127.0.0.1 where nothing listens (connection refused: the 'offline' case)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}{path}"
