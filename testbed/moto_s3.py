"""An S3 endpoint for tests, the chaos run and the benchmarks: moto's server on 127.0.0.1.

While entered, the standard AWS variables point this process and its children at it (an
endpoint and a region: nothing asks AWS where a bucket lives), so plain ``s3://`` URIs reach
only this server; they are restored on exit. moto keeps its buckets per process, not per
server, so every user makes fresh buckets (:meth:`MotoS3.bucket`).
"""
from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
import uuid
from collections import Counter
from typing import Any
from urllib.parse import parse_qs

from .server_process import ServerProcess, announce, free_port

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
    ``(kind, method, path)`` of each request (with the query of a LIST) in :attr:`requests` (to see where they go),
    and its ``(start, end, kind, path)`` on the monotonic clock in :attr:`spans` (which requests
    waited side by side). ``list_latency_s``: LISTs answer that much later instead (a test that
    tells listings sent together from listings sent one after another)."""

    def __init__(self, app: Any, latency_s: float = 0.015, *, log: bool = False,
                 list_latency_s: float | None = None) -> None:
        self.app = app
        self.latency_s = float(latency_s)
        self.list_latency_s = list_latency_s
        self.log = log
        self.counts: Counter[str] = Counter()
        self.requests: list[tuple[str, str, str]] = []
        self.spans: list[tuple[float, float, str, str]] = []
        self._mu = threading.Lock()

    def __call__(self, environ: dict, start_response: Any) -> Any:
        method, path, query = environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO", ""), environ.get("QUERY_STRING", "")
        kind = request_kind(method, path, query)
        where = f"{path}?{query}" if kind == "LIST" else path
        start = time.monotonic()
        with self._mu:
            self.counts[kind] += 1
            if self.log:
                self.requests.append((kind, method, where))
        latency = self.list_latency_s if kind == "LIST" and self.list_latency_s is not None else self.latency_s
        if latency > 0:
            time.sleep(latency)
        out = self.app(environ, start_response)
        if self.log:
            with self._mu:
                self.spans.append((start, time.monotonic(), kind, where))
        return out

    def seen(self) -> list[tuple[str, str, str]]:
        """The requests kept since the last :meth:`take` (``log=True``)."""
        with self._mu:
            return list(self.requests)

    def take(self) -> dict[str, int]:
        """The counts since the last call (every kind of :data:`KINDS`), and start again."""
        with self._mu:
            out = {k: self.counts.get(k, 0) for k in KINDS}
            self.counts.clear()
            self.requests = []
            self.spans = []
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


class HeldLists:
    """A WSGI middleware that holds the next LIST of one prefix of one bucket until the test
    lets it go, as a slow store may answer one request of several sent together last: a test
    orders a writer's listing after another process's writes. ``holding`` is set once that
    LIST arrived (and waits)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._mu = threading.Lock()
        self._wanted: tuple[str, str] | None = None
        self.holding = threading.Event()
        self._go = threading.Event()
        #: (bucket path, prefix) of every LIST answered, in order
        self.answered: list[tuple[str, str]] = []

    def hold_next(self, bucket: str, prefix: str) -> None:
        with self._mu:
            self._wanted = (f"/{bucket}", prefix)
            self.holding.clear()
            self._go.clear()

    def release(self) -> None:
        with self._mu:
            self._wanted = None
        self._go.set()

    def __call__(self, environ: dict, start_response: Any) -> Any:
        query = environ.get("QUERY_STRING", "")
        if environ.get("REQUEST_METHOD") == "GET" and "list-type=2" in query:
            asked = (environ.get("PATH_INFO", "").rstrip("/"), parse_qs(query).get("prefix", [""])[0])
            with self._mu:
                hit = asked == self._wanted
                if hit:
                    self._wanted = None
            if hit:
                self.holding.set()
                self._go.wait(timeout=120)
            out = list(self.app(environ, start_response))
            with self._mu:
                self.answered.append(asked)
            return out
        return self.app(environ, start_response)


#: the path prefix of :class:`Control`'s requests (no S3 bucket name starts with ``_``)
CONTROL = "/_mw/"


class Control:
    """A WSGI middleware in a server process of its own (:func:`serve`) that lets the process
    that started it read and reset a :class:`CountingLatency`'s counts (``take``), read its
    requests (``requests``) and set its latency (``latency?s=``), each answered in JSON and
    never counted."""

    def __init__(self, counter: CountingLatency) -> None:
        self.app = self.counter = counter

    def __call__(self, environ: dict, start_response: Any) -> Any:
        path = environ.get("PATH_INFO", "")
        if not path.startswith(CONTROL):
            return self.app(environ, start_response)
        what = path[len(CONTROL):]
        if what == "take":
            body: Any = self.counter.take()
        elif what == "requests":
            body = self.counter.seen()
        elif what == "latency":
            self.counter.latency_s = float(parse_qs(environ.get("QUERY_STRING", ""))["s"][0])
            body = self.counter.latency_s
        else:
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"no such control"]
        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps(body).encode()]


class RemoteCounter:
    """:class:`CountingLatency`'s interface (``take``, ``requests``, ``latency_s``) for a counter
    in a moto server of its own process, reached through :class:`Control`."""

    def __init__(self, endpoint: str, latency_s: float) -> None:
        self.endpoint = endpoint
        self._latency = float(latency_s)

    def _get(self, what: str) -> Any:
        from urllib.request import urlopen

        with urlopen(f"{self.endpoint}{CONTROL}{what}", timeout=30) as r:
            return json.loads(r.read())

    def take(self) -> dict[str, int]:
        return self._get("take")

    @property
    def requests(self) -> list[tuple[str, str, str]]:
        return [tuple(r) for r in self._get("requests")]

    @property
    def latency_s(self) -> float:
        return self._latency

    @latency_s.setter
    def latency_s(self, value: float) -> None:
        self._latency = float(self._get(f"latency?s={float(value)}"))


def serve(port_file: str, latency_s: float, log: bool) -> None:
    """moto's server behind :class:`Control` and :class:`CountingLatency` in this process until it
    is stopped; its port written to ``port_file``."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    counter = CountingLatency(server._server.app, latency_s, log=log)
    server._server.app = Control(counter)
    announce(port_file, port)
    threading.Event().wait()


class MotoS3:
    """``with MotoS3() as s3: uri = s3.bucket()``; ``wrap``: a WSGI middleware around moto's app
    (a request counter, say), given the app, returning the app to serve.

    ``counted=(latency_s, log)`` runs moto in a process of its own behind a
    :class:`CountingLatency` instead, reached as :attr:`counter` (a :class:`RemoteCounter`): as a
    real store, its work then takes no turn of this process's interpreter lock, which a Python
    client's own requests would otherwise wait for (a benchmark of request costs wants that)."""

    def __init__(self, *, prefix: str = "mwtest", wrap: Any = None, counted: tuple[float, bool] | None = None) -> None:
        self.prefix = prefix
        self.wrap = wrap
        self.counted = counted
        self.app: Any = None
        self.proc: ServerProcess | None = None

    def __enter__(self) -> MotoS3:
        import boto3

        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request otherwise
        if self.counted is not None:
            latency, log = self.counted
            self.proc = ServerProcess("testbed.moto_s3", str(latency), str(int(log)))
            port = self.proc.port
            self.counter = RemoteCounter(f"http://127.0.0.1:{port}", latency)
        else:
            from moto.server import ThreadedMotoServer

            port = free_port()
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
        if self.proc is not None:
            self.proc.stop()
        else:
            self.server.stop()
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


if __name__ == "__main__":
    serve(sys.argv[1], float(sys.argv[2]), sys.argv[3] == "1")
