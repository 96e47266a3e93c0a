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
import uuid
from typing import Any


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
