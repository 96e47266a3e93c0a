"""Credentials in a table URI are never printed: not in logs, errors, ``status --json``,
``timeline`` or metrics; the URI still opens the table (an S3 table on moto)."""
from __future__ import annotations

import json
import logging
import subprocess
import sys
from urllib.parse import quote

import pytest
from prometheus_client import CollectorRegistry, generate_latest

import multiwriter as mw
from multiwriter.errors import TableNotFoundError
from multiwriter.metrics import Metrics
from multiwriter.redact import redact
from multiwriter.write.writer import Writer
from tests.conftest import TRIPS_SCHEMA, trips

SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYSECRET"
IN_URI = quote(SECRET, safe="")  # a URI carries it percent-encoded, as pyarrow reads it


@pytest.mark.parametrize("text, shown", [
    ("s3://AKIA:secret@bucket/t", "s3://***@bucket/t"),
    ("at s3://AKIA:se/cr/et@bucket/t/x, then", "at s3://***@bucket/t/x, then"),  # a secret holding '/'
    ("'s3a://user@bucket/t'", "'s3a://***@bucket/t'"),
    ("s3://bucket/t?region=eu-west-1&secret_key=abc&access_key=AKIA", "s3://bucket/t?region=eu-west-1&secret_key=***&access_key=***"),
    ("https://h/p?X-Amz-Signature=abc&X-Amz-Security-Token=t&sig=s#f", "https://h/p?X-Amz-Signature=***&X-Amz-Security-Token=***&sig=***#f"),
    ("s3://bucket/t/date=2024@x/f.parquet", "s3://bucket/t/date=2024@x/f.parquet"),  # an '@' in the path is no user-info
    ("hdfs://namenode:8020/t", "hdfs://namenode:8020/t"),
    ("/local/path/t", "/local/path/t"),
])
def test_redact_hides_user_info_and_secret_query_values(text, shown):
    assert redact(text) == shown


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "multiwriter.cli", *args], capture_output=True, text=True, timeout=120)


def test_a_table_uri_with_credentials_is_never_printed(s3_server, caplog):
    bucket = s3_server().removeprefix("s3://")
    uri = f"s3://testing:{IN_URI}@{bucket}/trips"
    registry = CollectorRegistry()
    shown: list[str] = []
    with caplog.at_level(logging.DEBUG, logger="multiwriter"):
        table = mw.Table.create(uri, name="trips", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"],
                                ordering_field="ts")
        lock = mw.InProcessLock()
        writer = Writer(mw.Table.open(uri), mw.WriterConfig(lock=lock, writer_id="w"), metrics=Metrics(registry))
        try:
            for k in range(3):
                writer.write(trips(range(3), value=k))
        finally:
            writer.close()
        assert sorted(mw.Table.open(uri).read().column("value").to_pylist()) == [2.0] * 3  # it opens with them
        with mw.Cleaner(uri, lock=lock, retain_commits=1, heartbeat_interval_s=1.0, heartbeat_tolerable_misses=1,
                        metrics=Metrics(registry)) as cleaner:
            report = cleaner.run_once()
        assert report.old_versions_deleted > 0
        with pytest.raises(TableNotFoundError) as missing:
            mw.Table.open(f"s3://testing:{IN_URI}@{bucket}/missing")
        shown.append(str(missing.value))
    assert "s3://***@" in shown[0]
    shown.append(caplog.text)
    shown.extend(r.getMessage() for r in caplog.records)
    shown.append(generate_latest(registry).decode())
    # the commit metadata records file URIs: never with the credentials either
    for i in table.timeline().completed():
        shown.append(table.timeline().read_bytes(i).decode("latin-1"))

    outs = {}
    for args in (("status", uri, "--json"), ("status", uri), ("timeline", uri), ("timeline", f"s3://k:{IN_URI}@{bucket}/x"),
                 ("heartbeats", uri)):
        out = outs[args] = _cli(*args)
        shown += [out.stdout, out.stderr]
    assert json.loads(outs["status", uri, "--json"].stdout)["path"] == f"s3://***@{bucket}/trips"
    assert f"at s3://***@{bucket}/trips" in outs["timeline", uri].stdout
    assert outs["timeline", f"s3://k:{IN_URI}@{bucket}/x"].returncode == 2
    assert f"no Hudi table at s3://***@{bucket}/x" in outs["timeline", f"s3://k:{IN_URI}@{bucket}/x"].stderr
    leaks = [s for s in shown if SECRET.split("/")[0] in s]  # the raw secret and the encoded one start alike
    assert not leaks, leaks[0][:2000]
