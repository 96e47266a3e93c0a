"""An S3 endpoint for tests, the chaos run and the benchmarks: moto's server on 127.0.0.1.

While entered, the standard AWS variables point this process and its children at it (an
endpoint and a region: nothing asks AWS where a bucket lives), so plain ``s3://`` URIs reach
only this server; they are restored on exit. moto keeps its buckets per process, not per
server, so every user makes fresh buckets (:meth:`MotoS3.bucket`).
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections import Counter
from typing import Any
from urllib.parse import parse_qs

#: the kinds of S3 request :class:`CountingLatency` counts (:func:`request_kind`)
KINDS = ("LIST", "HEAD", "GET", "PUT", "MULTIPART", "DELETE", "other")


def request_kind(method: str, path: str, query: str) -> str:
    """An S3 request (path-style) by kind: LIST (ListObjects(V2) on the bucket), HEAD, GET, PUT
    (objects, upload parts, copies), MULTIPART (a multipart upload's start or completion; its
    parts are PUTs), DELETE (one object, or a batch ``POST ?delete``), other."""
    parts = path.strip("/").split("/", 1)
    keyed = len(parts) == 2 and parts[1] != ""
    q = parse_qs(query, keep_blank_values=True)
    if method == "GET" and not keyed:
        return "LIST" if not q or {"list-type", "prefix", "delimiter", "continuation-token", "marker"} & set(q) else "other"
    if method == "POST" and "delete" in q:
        return "DELETE"
    if method == "POST" and {"uploads", "uploadId"} & set(q):
        return "MULTIPART"
    return {"HEAD": "HEAD", "GET": "GET", "PUT": "PUT", "DELETE": "DELETE"}.get(method, "other")


class CountingLatency:
    """A WSGI middleware that counts every request by kind (:func:`request_kind`) and answers
    each ``latency_s`` later, as a real object store would (15 ms by default; requests sent at
    once wait side by side, so concurrency pays as it does on S3). ``log=True`` also keeps
    ``(kind, method, path)`` of each request (with the query of a LIST) in :attr:`requests` (to see where they go)."""

    def __init__(self, app: Any, latency_s: float = 0.015, *, log: bool = False) -> None:
        self.app = app
        self.latency_s = float(latency_s)
        self.log = log
        self.counts: Counter[str] = Counter()
        self.requests: list[tuple[str, str, str]] = []
        self._mu = threading.Lock()

    def __call__(self, environ: dict, start_response: Any) -> Any:
        method, path, query = environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO", ""), environ.get("QUERY_STRING", "")
        kind = request_kind(method, path, query)
        with self._mu:
            self.counts[kind] += 1
            if self.log:
                self.requests.append((kind, method, f"{path}?{query}" if kind == "LIST" else path))
        if self.latency_s > 0:
            time.sleep(self.latency_s)
        return self.app(environ, start_response)

    def take(self) -> dict[str, int]:
        """The counts since the last call (every kind of :data:`KINDS`), and start again."""
        with self._mu:
            out = {k: self.counts.get(k, 0) for k in KINDS}
            self.counts.clear()
            self.requests = []
        return out


class SerializedWrites:
    """A WSGI middleware that lets one write request (PUT, POST, DELETE) into moto at a time.

    moto checks a conditional PUT's precondition and writes the object in two steps, so two
    conditional creates of one key can both succeed inside it (a real S3 decides them
    atomically). Tests that prove exclusion (the storage lock, the commit decision) need the
    real store's guarantee, so writes are serialized here. ``conditional`` counts the
    ``If-None-Match`` creates seen."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.mu = threading.Lock()
        self.conditional = 0

    def __call__(self, environ: dict, start_response: Any) -> Any:
        if environ.get("REQUEST_METHOD") not in ("PUT", "POST", "DELETE"):
            return self.app(environ, start_response)
        with self.mu:
            self.conditional += environ.get("HTTP_IF_NONE_MATCH") == "*"
            return list(self.app(environ, start_response))


class MotoS3:
    """``with MotoS3() as s3: uri = s3.bucket()``; ``wrap``: a WSGI middleware around moto's app
    (a request counter, say), given the app, returning the app to serve."""

    def __init__(self, *, prefix: str = "mwtest", wrap: Any = None) -> None:
        self.prefix = prefix
        self.wrap = wrap
        self.app: Any = None

    def __enter__(self) -> MotoS3:
        import boto3
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request otherwise
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        self.server.start()
        if self.wrap is not None:
            self.app = self.server._server.app = self.wrap(self.server._server.app)
        self.endpoint = f"http://127.0.0.1:{port}"
        self.env = {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": "testing",
                    "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true",
                    "AWS_EC2_METADATA_DISABLED": "true"}
        self.saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)
        self.client = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1")
        return self

    def bucket(self, versioned: bool = False) -> str:
        """A fresh bucket: ``s3://<name>``."""
        name = f"{self.prefix}-{uuid.uuid4().hex[:12]}"
        self.client.create_bucket(Bucket=name)
        if versioned:
            self.client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        return f"s3://{name}"

    def __exit__(self, *exc: object) -> None:
        self.server.stop()
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
