"""A commit on S3 lists the metadata table only once the decision log's listing is in.

A writer frozen past its fence (SIGSTOP, its ZooKeeper session lapsed) thaws while another
writer holds the lock: it writes its metadata-table deltacommit, due to compact the files
partition, and decides. The other writer's listing of the decision log is answered only after
that (moto holds it), so it builds on the thawed writer's decision; had it listed the metadata
table beside the decision log, as the lock was taken, it would write its own deltacommit from a
listing without the thawed writer's. Real processes, real ZooKeeper, moto's S3 (writes
serialized); the oracles are hudi-rs, which lists the table's files from the metadata table,
and the rows both writers were told were committed."""
from __future__ import annotations

import os
import signal
import time

import pytest

import multiwriter as mw
from multiwriter.table import metadata_files
from tests.conftest import TRIPS_SCHEMA, trips
from tests.oracle import hudi_read, rows, s3_storage_options
from tests.test_concurrency import result, spawn

LEASE_S = 2.5  # the frozen writer's ZooKeeper session


@pytest.fixture()
def held_s3():
    """moto's S3, its writes serialized, a LIST of a chosen prefix held on request."""
    from testbed.moto_s3 import HeldLists, MotoS3, SerializedWrites

    with MotoS3(prefix="mwheld", wrap=lambda app: HeldLists(SerializedWrites(app))) as s3:
        yield s3


def _wait_for(path, proc, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the writer exited before {path.name}: {proc.communicate()}")
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.02)


def _seed_until_a_compaction_is_due(uri: str) -> dict[str, float]:
    """Writes until the next deltacommit compacts the metadata table's files partition."""
    cfg = mw.WriterConfig(lock=mw.InProcessLock(), writer_id="seed", executor="driver")
    want: dict[str, float] = {}
    for k in range(3 * metadata_files.MAX_DELTA_COMMITS):
        mw.write(trips([f"s{k}"], ts=1, value=float(k)), uri, cfg)
        want[f"s{k}"] = float(k)
        table = mw.Table.open(uri)
        if metadata_files.MetadataTable(table.storage, table.config).open_deltacommits() >= \
                metadata_files.MAX_DELTA_COMMITS:
            return want
    raise AssertionError("the metadata table never came due for a compaction")


def test_a_decision_made_while_the_lock_holder_listed_is_in_what_it_builds_on(zk_server, zk_base, held_s3, tmp_path):
    bucket_uri = held_s3.bucket()
    uri = bucket_uri + "/t"
    mw.Table.create(uri, name="trips", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"],
                    ordering_field="ts", metadata=True)
    want = _seed_until_a_compaction_is_due(uri)
    args = dict(zk=zk_server.connect, base=zk_base, path=uri, hb=1.0, misses=2)
    thawed_dir, holder_dir = tmp_path / "thawed", tmp_path / "holder"
    thawed_dir.mkdir()
    holder_dir.mkdir()
    thawed = spawn("write", dict(args, writer="thawed", ids=["t1"], date="2024-02-01", ts=9, value=9.0,
                                 session_timeout_s=LEASE_S),
                   {"MULTIWRITER_FAULTS": "before-completed-file=hang", "MULTIWRITER_FAULT_DIR": str(thawed_dir)})
    holder = None
    try:
        _wait_for(thawed_dir / "before-completed-file.hanging", thawed)  # past its fence
        os.kill(thawed.pid, signal.SIGSTOP)
        time.sleep(LEASE_S + 1.5)  # its session and heartbeat lapse
        holder = spawn("write", dict(args, writer="holder", ids=["h1"], date="2024-03-01", ts=10, value=5.0),
                       {"MULTIWRITER_FAULTS": "after-lock-acquired=hang", "MULTIWRITER_FAULT_DIR": str(holder_dir)})
        _wait_for(holder_dir / "after-lock-acquired.hanging", holder)  # the lock is the holder's
        held_s3.app.hold_next(bucket_uri.removeprefix("s3://"), "t/.hoodie/.decisions/")
        (holder_dir / "after-lock-acquired.release").touch()
        assert held_s3.app.holding.wait(timeout=60), "the holder never listed the decision log"
        time.sleep(1.0)  # whatever the holder sent beside that listing is answered meanwhile
        os.kill(thawed.pid, signal.SIGCONT)
        (thawed_dir / "before-completed-file.release").touch()
        r_thawed = result(thawed)
        assert r_thawed["ok"], r_thawed  # nobody had decided since its look at the log: it lands
    finally:
        if thawed.poll() is None:
            os.kill(thawed.pid, signal.SIGCONT)
        (thawed_dir / "before-completed-file.release").touch()
        held_s3.app.release()
    r_holder = result(holder)
    assert r_holder["ok"], r_holder
    want.update({"t1": 9.0, "h1": 5.0})
    theirs = dict(rows(hudi_read(uri, storage_options=s3_storage_options(uri)), ["id", "value"]))
    assert theirs == want, "hudi-rs, listing files from the metadata table, misses a committed write"
    assert dict(rows(mw.Table.open(uri).read(), ["id", "value"])) == want
