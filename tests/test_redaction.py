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


def test_every_log_record_and_error_is_redacted_through_write_read_incremental_and_clean(s3_server, caplog):
    """Issue 56, 4: every record at every level (kazoo's BLATHER included) through a write, the
    metadata table's start, a read, an incremental read and a time travel the cleaner cut into,
    and a cleaner run, on a URI carrying credentials: the secret is in none of them, nor in the
    typed errors' texts."""
    from multiwriter import errors

    bucket = s3_server().removeprefix("s3://")
    uri = f"s3://testing:{IN_URI}@{bucket}/trips"
    caplog.set_level(1)  # the root logger, every package, below DEBUG
    shown: list[str] = []
    mw.Table.create(uri, name="trips", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"],
                    ordering_field="ts", metadata=False)
    lock = mw.InProcessLock()
    cfg = mw.WriterConfig(lock=lock, writer_id="w", executor="driver")
    results = [mw.write(trips(range(3), value=k), uri, cfg) for k in range(4)]
    table = mw.Table.open(uri)
    assert table.enable_metadata(lock) is True
    mw.write(trips(range(3), value=9), uri, cfg)
    with mw.Cleaner(uri, lock=lock, retain_commits=1, heartbeat_interval_s=1.0, heartbeat_tolerable_misses=1) as c:
        assert c.run_once().old_versions_deleted > 0
    table = mw.Table.open(uri)
    assert sorted(table.read().column("value").to_pylist()) == [9.0] * 3
    done = [r.instant.completion_time for r in results]
    with pytest.raises(errors.InstantNotRetainedError) as incremental:
        table.read_incremental(done[0], done[2])
    with pytest.raises(errors.InstantNotRetainedError) as travel:
        table.read(as_of=results[0].instant.requested_time)
    for e in (incremental.value, travel.value):
        assert f"s3://***@{bucket}/trips" in str(e)
        shown.append(str(e))
    assert "started the metadata table of s3://***@" in caplog.text
    shown.append(caplog.text)
    for r in caplog.records:
        shown += [r.getMessage(), r.exc_text or ""]
    leaks = [s for s in shown if SECRET.split("/")[0] in s]
    assert not leaks, leaks[0][:2000]


def test_the_filter_covers_every_logger_of_the_packages_kazoo_and_error_texts(caplog):
    from multiwriter import errors

    uri = f"s3://AKIA:{IN_URI}@bucket/t"
    caplog.set_level(1)
    late = logging.getLogger("multiwriter.a.logger.made.after.import")  # children made later too
    late.info("compacted the metadata table's files partition of %s: archival waited for it", uri)
    logging.getLogger("multiwriter.table.table").info("started the metadata table of %s from %d files", uri, 3)
    # kazoo's connection logs every request at BLATHER (5), the auth packet and ACLs included
    logging.getLogger("kazoo.protocol.connection").log(
        5, "Sending request(xid=%s): %s", None, "Auth(auth_type=0, scheme='digest', auth='zkuser:zk-pass-SECRET')")
    logging.getLogger("kazoo.client").debug("auth data %r", [("digest", "zkuser:zk-pass-SECRET")])
    logging.getLogger("kazoo.protocol.connection").log(
        5, "Create(path='/x', acl=[ACL(perms=31, id=Id(scheme='digest', id='zkuser:zk-pass-SECRET'))])")
    try:
        raise OSError(f"failed to open {uri}")
    except OSError:
        logging.getLogger("multiwriter.storage").exception("while writing %s", uri)
    texts = [caplog.text, *(r.getMessage() for r in caplog.records), *(r.exc_text or "" for r in caplog.records)]
    texts += [str(errors.LockLostError(f"instant 1 completed on the timeline of {uri} while ...")),
              str(errors.InstantNotRetainedError(f"incremental read of {uri} needs x", earliest="1")),
              str(errors.CommitStateUnknownError(f"commit to {uri} unknown", instant="1"))]
    assert not [t for t in texts if SECRET.split("/")[0] in t or "zk-pass-SECRET" in t]
    assert "Auth(auth_type=0, scheme='digest', auth='zkuser:***')" in caplog.text
    assert "s3://***@bucket/t" in texts[-3]
    assert len(caplog.records) == 6
