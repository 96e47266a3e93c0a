"""A Google Cloud Storage endpoint for tests: ``gcp-storage-emulator`` on 127.0.0.1, behind a front
that makes it keep Cloud Storage's promises on conditional writes.

The emulator stores objects and answers the JSON API that pyarrow's ``GcsFileSystem`` and
:mod:`multiwriter.gcs` speak, but it ignores generation preconditions (a second upload with
``ifGenerationMatch=0`` replaces the first) and names no ``x-goog-generation`` on a download.
Cloud Storage decides a precondition atomically with the write it guards, so tests that prove
exclusion (the storage lock, the commit decision) need that. The front (:class:`Front`) passes
one request at a time to the emulator and, for each upload that carries ``ifGenerationMatch``,
looks the object's generation up first: HTTP 412 when it differs (``0``: the object exists),
the upload otherwise. A download is answered with the generation it read. A precondition the
front does not decide (on a delete, a metadata patch, a resumable upload) is refused with 501,
so no test can pass on a condition nobody checked. An empty media upload, which the emulator
fails, is passed on as the same object's multipart upload; a media upload's type is passed on as
``application/octet-stream`` (the emulator takes a JSON object's bytes for its request's).

Both run in a child process (:func:`serve`). While entered, ``STORAGE_EMULATOR_HOST`` points this process and its children at the front
(Google's client libraries and :mod:`multiwriter.gcs` read it); it is restored on exit.
"""
from __future__ import annotations

import http.client
import json
import logging
import os
import sys
import threading
import uuid
from collections import Counter
from datetime import datetime
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from .server_process import ServerProcess, announce, free_port

#: the front's own path: its counts, as JSON
STATS = "/_front/stats"
#: headers not passed on between the front and the emulator
_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "proxy-connection", "te", "upgrade"}


class Front:
    """The emulator's front: serialized requests, preconditions decided, generations named.
    ``counts`` counts requests by method; ``refused`` the uploads answered 412."""

    def __init__(self, backend_port: int) -> None:
        self.backend_port = backend_port
        #: the front's own address, set once it listens: the emulator's links are rewritten to it
        self.address = ""
        self.mu = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.refused = 0

    def backend(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None,
                ) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.backend_port, timeout=60)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, resp.getheaders(), resp.read()
        finally:
            conn.close()

    def metadata(self, bucket: str, name: str) -> dict[str, Any] | None:
        status, _, body = self.backend("GET", f"/storage/v1/b/{quote(bucket, safe='')}/o/{quote(name, safe='')}")
        return json.loads(body) if status == 200 else None

    def generation(self, bucket: str, name: str) -> str:
        """The live object's generation, '0' when there is none."""
        meta = self.metadata(bucket, name)
        return str(meta["generation"]) if meta else "0"

    def serve(self, method: str, path: str, body: bytes | None, headers: dict[str, str],
              ) -> tuple[int, list[tuple[str, str]], bytes]:
        parts = urlsplit(path)
        q = parse_qs(parts.query, keep_blank_values=True)
        if parts.path == STATS:
            with self.mu:
                stats = json.dumps({"counts": dict(self.counts), "refused": self.refused}).encode()
            return 200, [("Content-Type", "application/json")], stats
        with self.mu:
            self.counts[method] += 1
            condition = {k for k in q if k.startswith("if")}
            upload = parts.path.startswith("/upload/storage/v1/b/") and q.get("uploadType") == ["media"] and "name" in q
            if condition and not (upload and condition == {"ifGenerationMatch"}):
                return 501, [("Content-Type", "text/plain")], f"the test front decides no {sorted(condition)} here".encode()
            if condition:
                bucket = unquote(parts.path.split("/")[5])
                want, have = q["ifGenerationMatch"][0], self.generation(bucket, q["name"][0])
                if want != have:
                    self.refused += 1
                    err = {"error": {"code": 412, "message": "conditionNotMet", "errors": [{"reason": "conditionNotMet"}]}}
                    return 412, [("Content-Type", "application/json")], json.dumps(err).encode()
            if upload and not body:  # the emulator fails an empty media upload; a multipart one works
                path, body, headers = _as_multipart(path, q)
            elif upload:  # the emulator would parse a JSON object's bytes as its request, not store them
                headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
                headers["Content-Type"] = "application/octet-stream"
            status, out_headers, out = self.backend(method, path, body, headers)
            if method == "GET" and q.get("alt") == ["media"] and status == 200 and "generation" not in q:
                segments = parts.path.split("/")
                i = segments.index("b")
                bucket, name = unquote(segments[i + 1]), unquote("/".join(segments[i + 3:]))
                meta = self.metadata(bucket, name) or {}
                updated = datetime.fromisoformat(meta.get("updated", "1970-01-01T00:00:00Z").replace("Z", "+00:00"))
                out_headers = [*out_headers, ("x-goog-generation", str(meta.get("generation", "0"))),
                               ("Last-Modified", format_datetime(updated, usegmt=True)),
                               ("ETag", f'"{meta.get("generation", "0")}"')]
            return status, *self._through_front(out_headers, out)

    def _through_front(self, headers: list[tuple[str, str]], body: bytes) -> tuple[list[tuple[str, str]], bytes]:
        """The emulator names itself in upload sessions (``Location``) and media links: every
        later request must come through the front too."""
        backend, front = f"127.0.0.1:{self.backend_port}", self.address
        headers = [(k, v.replace(backend, front)) for k, v in headers]
        if any(k.lower() == "content-type" and "json" in v for k, v in headers):
            body = body.replace(backend.encode(), front.encode())
        return headers, body


def _as_multipart(path: str, q: dict[str, list[str]]) -> tuple[str, bytes, dict[str, str]]:
    """An empty media upload as the same object's multipart upload."""
    rest = {k: v[0] for k, v in q.items() if k not in ("uploadType", "name")}
    query = "&".join(f"{k}={quote(v)}" for k, v in {"uploadType": "multipart", **rest}.items())
    meta = json.dumps({"name": q["name"][0]}).encode()
    body = (b"--mw\r\nContent-Type: application/json\r\n\r\n" + meta
            + b"\r\n--mw\r\nContent-Type: application/octet-stream\r\n\r\n\r\n--mw--\r\n")
    return f"{urlsplit(path).path}?{query}", body, {"Content-Type": "multipart/related; boundary=mw"}


def _handler(front: Front) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _body(self) -> bytes | None:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while True:
                    size = int(self.rfile.readline().strip().split(b";")[0], 16)
                    if size == 0:
                        self.rfile.readline()
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
            n = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(n) if n else (b"" if self.command in ("POST", "PUT", "PATCH") else None)

        def _any(self) -> None:
            body = self._body()
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            status, out_headers, out = front.serve(self.command, self.path, body, headers)
            self.send_response(status)
            for k, v in out_headers:
                if k.lower() not in _HOP and k.lower() not in ("server", "date"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(out)

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _any

        def log_message(self, *args: Any) -> None:  # quiet
            pass

    return Handler


def serve(port_file: str) -> None:
    """Run the emulator and its front in this process until it is stopped; the front's port is
    written to ``port_file``. A process of their own: pyarrow's GCS calls hold the interpreter
    lock of the process that makes them, which would stall a server in that same process."""
    from gcp_storage_emulator.server import create_server

    logging.getLogger("gcp_storage_emulator").setLevel(logging.WARNING)
    backend_port = free_port()
    server = create_server("127.0.0.1", backend_port, in_memory=True)
    server.start()
    front = Front(backend_port)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(front))
    httpd.daemon_threads = True
    front.address = f"127.0.0.1:{httpd.server_address[1]}"
    announce(port_file, httpd.server_address[1])
    httpd.serve_forever()


class GcsEmulator:
    """``with GcsEmulator() as gcs: uri = gcs.bucket()`` -> ``gs://<fresh bucket>``; the
    emulator and its front run in a child process (:func:`serve`), stopped on exit."""

    def __init__(self, *, prefix: str = "mwtest") -> None:
        self.prefix = prefix

    def __enter__(self) -> GcsEmulator:
        self.server = ServerProcess("testbed.gcs_emulator", start_timeout_s=30)
        self.port = self.server.port
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.saved = os.environ.get("STORAGE_EMULATOR_HOST")
        os.environ["STORAGE_EMULATOR_HOST"] = self.endpoint
        return self

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None,
                ) -> tuple[int, bytes]:
        """One plain HTTP request to the front."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def stats(self) -> dict[str, Any]:
        """The front's counts: requests by method, and ``refused`` (uploads answered 412)."""
        return json.loads(self.request("GET", STATS)[1])

    def bucket(self) -> str:
        name = f"{self.prefix}-{uuid.uuid4().hex[:12]}"
        status, body = self.request("POST", "/storage/v1/b?project=test", json.dumps({"name": name}).encode(),
                                    {"Content-Type": "application/json"})
        if status != 200:
            raise RuntimeError(f"the emulator made no bucket {name}: HTTP {status} {body[:200]!r}")
        return f"gs://{name}"

    def objects(self, bucket: str) -> dict[str, bytes]:
        """Every object of ``bucket`` by name, read through plain JSON API requests (independent
        of the code under test)."""
        out: dict[str, bytes] = {}
        token = ""
        while True:
            path = f"/storage/v1/b/{quote(bucket, safe='')}/o" + (f"?pageToken={quote(token)}" if token else "")
            status, body = self.request("GET", path)
            assert status == 200, body
            page = json.loads(body)
            for item in page.get("items", []):
                name = item["name"]
                s, data = self.request("GET", f"/storage/v1/b/{quote(bucket, safe='')}/o/{quote(name, safe='')}?alt=media")
                assert s == 200, data
                out[name] = data
            token = page.get("nextPageToken", "")
            if not token:
                return out

    def download(self, uri: str, dest: str) -> str:
        """Copy every object under ``gs://bucket/prefix`` into the local folder ``dest`` (for a
        reader that cannot reach the emulator); ``dest``."""
        bucket, _, prefix = uri.removeprefix("gs://").partition("/")
        prefix = prefix.rstrip("/") + "/" if prefix else ""
        for name, data in self.objects(bucket).items():
            if name.startswith(prefix) and not name.endswith("/"):
                path = os.path.join(dest, name[len(prefix):])
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    f.write(data)
        return dest

    def __exit__(self, *exc: object) -> None:
        self.server.stop()
        if self.saved is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = self.saved


if __name__ == "__main__":
    serve(sys.argv[1])
