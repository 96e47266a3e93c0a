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
import uuid
from typing import Any


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
