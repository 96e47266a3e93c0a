"""One boto3 S3 client per process and setting, and the S3 answers we act on.

pyarrow's S3 filesystem has no conditional writes, and two parts of multiwriter need them: the
storage lock (``If-None-Match`` / ``If-Match`` on its lock object) and the commit decision
(:meth:`multiwriter.storage.Storage.create_exclusive`, ``If-None-Match: *``). Both use the
client made here, configured from the same standard AWS variables as
:func:`multiwriter.storage.s3_options`.
"""
from __future__ import annotations

import os
import threading
from typing import Any

from .threads import free_in_child

_clients: dict[tuple[Any, ...], Any] = {}
_clients_mu = free_in_child(threading.Lock())


def s3_client(call_timeout_s: float) -> Any:
    """A boto3 S3 client configured like :func:`multiwriter.storage.s3_options` (the standard AWS
    variables; path-style addressing for an explicit endpoint), with calls bounded by
    ``call_timeout_s`` (a fifth of the validity, as Hudi's) for the whole call: one attempt, its
    connect and its read half each (the lock's own loops try again). One per process and setting: making
    one takes long, using one from several threads is safe, and clients do not survive a fork."""
    env = os.environ
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or ("us-east-1" if endpoint else None)
    key = (os.getpid(), endpoint, region, env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_PROFILE"), call_timeout_s)
    with _clients_mu:
        client = _clients.get(key)
        if client is None:
            # one attempt, whose connect and read share the bound; at least half a second each
            # (the bound holds from Hudi's minimum validity, 10 s, up)
            client = _clients[key] = _new_s3_client(endpoint, region, call_timeout_s / 2, retries=0, floor=0.5)
        return client


#: the read and connect timeout of :func:`data_client`'s calls
DATA_TIMEOUT_S = 60.0
#: connections :func:`data_client` keeps per process and setting (bounds concurrent requests)
DATA_POOL = 32


def data_client(credentials: tuple[str, str] | None = None) -> Any:
    """The boto3 S3 client of table data (:mod:`multiwriter.s3_store`): configured like
    :func:`s3_client`, retried five times, :data:`DATA_POOL` pooled connections. ``credentials``
    (key, secret) from an ``s3://KEY:SECRET@bucket`` URI, or None for the default chain."""
    env = os.environ
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or ("us-east-1" if endpoint else None)
    key = ("data", os.getpid(), endpoint, region, env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_PROFILE"), credentials)
    with _clients_mu:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = _new_s3_client(endpoint, region, DATA_TIMEOUT_S, retries=5, pool=DATA_POOL,
                                                    credentials=credentials)
        return client


def _new_s3_client(endpoint: str | None, region: str | None, call_timeout_s: float, *, retries: int = 2,
                   pool: int = 10, credentials: tuple[str, str] | None = None, floor: float = 1.0) -> Any:
    import boto3
    from botocore.config import Config

    timeout = max(floor, call_timeout_s)
    cfg = Config(connect_timeout=timeout, read_timeout=timeout, retries={"max_attempts": retries, "mode": "standard"},
                 max_pool_connections=pool, s3={"addressing_style": "path"} if endpoint else None)
    kw: dict[str, Any] = {"config": cfg}
    if endpoint:
        kw["endpoint_url"] = endpoint if "://" in endpoint else f"https://{endpoint}"
    if region:
        kw["region_name"] = region
    if credentials:
        kw["aws_access_key_id"], kw["aws_secret_access_key"] = credentials
    return boto3.session.Session(botocore_session=_botocore_session()).client("s3", **kw)


def _botocore_session() -> Any:
    """A botocore session whose responses' times are parsed by :func:`parse_timestamp`:
    botocore's own parser (dateutil's) took about 0.15 ms of this process's CPU per time, so
    half of a LIST's client time went to its objects' ``LastModified``."""
    import botocore.session

    session = botocore.session.get_session()
    session.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=parse_timestamp)
    return session


def parse_timestamp(value: Any) -> Any:
    """An S3 answer's time as botocore's parser gives it (an aware UTC datetime), fast for the two
    forms S3 sends: ISO 8601 in bodies (``2026-11-30T14:07:39.000Z``) and RFC 1123 in headers
    (``Mon, 30 Nov 2026 14:07:39 GMT``). Anything else goes to botocore's own parser."""
    import datetime as dt
    from email.utils import parsedate_to_datetime

    from botocore.utils import parse_timestamp as slow

    if isinstance(value, str):
        try:
            if value.endswith("Z") and "T" in value:
                return dt.datetime.fromisoformat(value[:-1]).replace(tzinfo=dt.timezone.utc)
            if value.endswith(" GMT"):
                return parsedate_to_datetime(value).astimezone(dt.timezone.utc)
        except (ValueError, TypeError, IndexError):
            pass
    return slow(value)


def status(e: Any) -> int:
    """The HTTP status of a botocore ``ClientError`` (0 when it has none)."""
    return int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


def code(e: Any) -> str:
    """The S3 error code of a botocore ``ClientError`` ('' when it has none)."""
    return str(e.response.get("Error", {}).get("Code", ""))


def precondition_failed(e: Any) -> bool:
    """HTTP 412: the conditional write lost (the object exists, or its version moved on)."""
    return status(e) == 412 or code(e) == "PreconditionFailed"
