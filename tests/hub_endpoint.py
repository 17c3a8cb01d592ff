"""A hub endpoint on 127.0.0.1, for the answers that only the hub gives (no cache can say that a repository does
not exist, or holds no such file).

huggingface_hub, pointed at it with ``HF_ENDPOINT``, asks it for a file as it asks huggingface.co: ``HEAD`` then
``GET /{org}/{name}/resolve/{revision}/{filename}``. It answers as the hub answers: the file, with the commit
(``X-Repo-Commit``), ``ETag`` and ``Content-Length`` huggingface_hub requires; ``404`` with
``X-Error-Code: EntryNotFound`` for a file the repository does not hold; ``401`` with
``X-Error-Code: RepoNotFound`` for a repository it does not hold (the hub's answer to an anonymous request for
a missing or private repository).
"""

from __future__ import annotations

import hashlib
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict
from urllib.parse import unquote, urlsplit

_RESOLVE = re.compile(r"/(?P<repo>[^/]+/[^/]+)/resolve/(?P<revision>[^/]+)/(?P<filename>.+)")


class _Handler(BaseHTTPRequestHandler):
    server: "HubEndpoint"

    def do_HEAD(self):  # http.server's name
        self._answer(with_body=False)

    def do_GET(self):  # http.server's name
        self._answer(with_body=True)

    def _answer(self, with_body: bool) -> None:
        found = _RESOLVE.fullmatch(urlsplit(self.path).path)
        files = self.server.repos.get(found["repo"]) if found else None
        if files is None:
            return self._refuse(401, "RepoNotFound", "Repository not found")
        commit = hashlib.sha1("\n".join([found["repo"], *sorted(files)]).encode()).hexdigest()
        data = files.get(unquote(found["filename"]))
        if data is None:
            return self._refuse(404, "EntryNotFound", "Entry not found", commit)
        self.send_response(200)
        self.send_header("X-Repo-Commit", commit)
        self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if with_body:
            self.wfile.write(data)

    def _refuse(self, status: int, code: str, message: str, commit: str = "") -> None:
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        if commit:
            self.send_header("X-Repo-Commit", commit)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:  # quiet
        pass


class HubEndpoint(ThreadingHTTPServer):
    """``with HubEndpoint({"org/name": {"config.json": b"..."}}) as hub:`` serves those repositories at
    ``hub.url`` until the block ends."""

    daemon_threads = True

    def __init__(self, repos: Dict[str, Dict[str, bytes]]):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.repos = repos
        self.url = f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> "HubEndpoint":
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
        self.server_close()
