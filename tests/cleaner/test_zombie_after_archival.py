"""A rolled-back writer's late file whose instant archival has moved behind the active timeline.

Hudi's readers (hudi-rs here) take every data file older than the earliest active instant for an
archived commit's file, so such a file shows until the failed-write sweep deletes it. Our reader
and our index take it as committed only when the archived timeline names its instant as a
completed write: the oracle for them is the set of acknowledged commits, written out by hand.
The sweep then deletes the file, after which hudi-rs agrees.
"""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pytest
import pyarrow.compute as pc
import pyarrow.parquet as pq

import multiwriter as mw
from multiwriter.cleaner import archive
from multiwriter.instant_time import parse_time
from multiwriter.format import instant as inst
from multiwriter.format import layout
from multiwriter.table import timeline as tlmod
from multiwriter.table.files import list_files
from multiwriter.format.log_file import LogFileName, encode_log_file, read_log_blocks
from multiwriter.transaction import Transaction
from tests.cleaner.conftest import BOUND, writer_config
from tests.conftest import trips
from tests.oracle import hudi_read, rows

@pytest.fixture()
def trips_table(table_path):
    """Without Hudi's metadata table: these tests are about the listing from storage (Hudi's rule
    for files older than the timeline, which hudi-rs applies there)."""
    from tests.conftest import TRIPS_SCHEMA

    return mw.Table.create(table_path, name="trips", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"],
                           ordering_field="ts", metadata=False)


@pytest.fixture()
def mor_table(table_path):
    from tests.conftest import TRIPS_SCHEMA

    return mw.Table.create(table_path, name="trips", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"],
                           ordering_field="ts", table_type="MERGE_ON_READ", num_buckets=4, metadata=False)


COLS = ["id", "value"]
NEVER = 10_000  # a sweep age (in heartbeat bounds) no test run reaches: the sweep leaves the file alone


def _dead_instant(table: mw.Table, lock_provider, action: str) -> str:
    """A writer that issued its instant, wrote its inflight file and died (no heartbeat)."""
    lock = lock_provider.for_table(table.table_id, table.storage)
    try:
        t = Transaction(table, lock, writer_id="zombie").begin().requested_time
    finally:
        lock.close()
    tlmod.create_inflight(table.storage, table.config, t, action)
    return t


def _rekeyed(data: pa.Table, t: str, keys: list[str], value: float) -> pa.Table:
    """``data``'s first rows under new record keys, written at instant ``t`` with ``value``."""
    data = data.slice(0, len(keys))
    for col, arr in (("id", pa.array(keys)), ("_hoodie_record_key", pa.array(keys)),
                     ("_hoodie_commit_time", pa.array([t] * len(keys)))):
        data = data.set_column(data.schema.get_field_index(col), col, arr)
    return data.set_column(data.schema.get_field_index("value"), "value", pc.add(pc.multiply(data["value"], 0.0), value))


def _archive_past(table_path: str, zk_lock, cleaners, table: mw.Table, dead: str, n: int = 6) -> None:
    """n acknowledged commits, each to its own partition, and a cleaner run that archives until
    the active timeline starts after ``dead`` (archival itself deletes uncommitted files below its
    new start: the zombie's file comes later, when it thaws)."""
    cfg = writer_config(zk_lock(), "ingest")
    for k in range(n):
        mw.write(trips([100 + k], date=f"2024-03-{k + 1:02d}", value=100 + k), table_path, cfg)
    cleaners(table_path, zk_lock(), retain_commits=2, archive_keep_min=2, archive_keep_max=3,
             failed_write_min_age_bounds=NEVER).run_once()
    assert table.timeline().earliest_time() > dead, "archival moved the active timeline past the dead instant"
    assert dead not in {a.requested_time for a in archive.load_history(table)}, "a rolled-back instant is not archived"


def _sweep(table_path: str, zk_lock, cleaners, dead: str) -> list[str]:
    while time.time() - parse_time(dead) <= BOUND:  # the sweep's safe age, from the instant time
        time.sleep(0.1)
    return cleaners(table_path, zk_lock(), failed_write_min_age_bounds=1).run_once().failed_writes_swept


def test_copy_on_write_late_file_after_archival_is_never_visible_nor_indexed(
    trips_table, table_path, zk_lock, cleaners
):
    mw.write(trips([1, 2], value=1.0), table_path, writer_config(zk_lock()))
    dead = _dead_instant(trips_table, zk_lock(), inst.COMMIT)
    assert cleaners(table_path, zk_lock(), failed_write_min_age_bounds=NEVER).run_once().rolled_back == [dead]
    _archive_past(table_path, zk_lock, cleaners, trips_table, dead)
    # the zombie thaws and finishes one data file under its rolled-back instant: new keys z1, z2
    src = trips_table.snapshot().in_partition("2024-01-01")[0]
    name = layout.DataFileName(layout.new_file_id(), layout.write_token(3), dead).name
    zombie = layout.data_file_path(src.partition, name)
    pq.write_table(_rekeyed(pq.read_table(trips_table.storage.abs(src.path)), dead, ["z1", "z2"], 999.0),
                   trips_table.storage.abs(zombie))

    acked = [("1", 1.0), ("2", 1.0), *[(str(100 + k), float(100 + k)) for k in range(6)]]
    assert 999.0 in hudi_read(table_path).column("value").to_pylist(), "Hudi's rule: hudi-rs shows the zombie's rows"
    assert rows(mw.Table.open(table_path).read(), COLS) == sorted(acked, key=repr), "our reader: acknowledged rows only"

    # the index must not route an upsert of z1 into the zombie's file group (that would commit
    # the zombie's z2 for good): z1 is a new key
    mw.write(trips(["z1"], value=5.0), table_path, writer_config(zk_lock()))
    acked.append(("z1", 5.0))
    assert rows(mw.Table.open(table_path).read(), COLS) == sorted(acked, key=repr)

    assert _sweep(table_path, zk_lock, cleaners, dead) == [zombie]
    assert not trips_table.storage.exists(zombie)
    assert rows(hudi_read(table_path), COLS) == rows(mw.Table.open(table_path).read(), COLS) == sorted(acked, key=repr)


def _rewritten_log(table: mw.Table, path: str, t: str, value: float) -> bytes:
    """The bytes of the log file at ``path`` as instant ``t`` would write it, every value ``value``."""
    [data] = [b for b in read_log_blocks(table.storage.read_bytes(path), source=path) if b.kind == "data"]
    recs = data.records
    recs = recs.set_column(recs.schema.get_field_index("_hoodie_commit_time"), "_hoodie_commit_time",
                           pa.array([t] * recs.num_rows))
    recs = recs.set_column(recs.schema.get_field_index("value"), "value", pc.add(pc.multiply(recs["value"], 0.0), value))
    return encode_log_file(instant_time=t, schema=json.loads(data.header["SCHEMA"]), records=recs)


def test_merge_on_read_late_log_file_after_archival_is_never_visible(mor_table, table_path, zk_lock, cleaners):
    cfg = writer_config(zk_lock(), "w")
    mw.write(trips(range(6), value=1.0), table_path, cfg)
    mw.write(trips(range(6), ts=2, value=2.0), table_path, cfg)  # log files over the buckets' base files
    logs = list_files(mor_table.storage)[1]
    assert logs
    dead = _dead_instant(mor_table, zk_lock(), inst.DELTA_COMMIT)
    no_compaction = {"compaction": None}
    assert cleaners(table_path, zk_lock(), failed_write_min_age_bounds=NEVER, **no_compaction).run_once().rolled_back == [dead]

    def _cleaner(path, lock, **kw):
        return cleaners(path, lock, **no_compaction, **kw)

    _archive_past(table_path, zk_lock, _cleaner, mor_table, dead)
    # the zombie thaws and appends one log file to a committed group under its rolled-back instant
    src = logs[0]
    zombie = layout.data_file_path(src.partition, LogFileName(src.file_id, dead, 1, "0-0-3").name)
    mor_table.storage.put_if_absent(zombie, _rewritten_log(mor_table, src.path, dead, 999.0))
    acked = sorted([*((str(i), 2.0) for i in range(6)), *((str(100 + k), float(100 + k)) for k in range(6))], key=repr)
    assert rows(mw.Table.open(table_path).read(), COLS) == acked, "our reader: acknowledged rows only"
    assert 999.0 in hudi_read(table_path).column("value").to_pylist(), "Hudi's rule: hudi-rs takes the zombie's log"

    assert _sweep(table_path, zk_lock, _cleaner, dead) == [zombie]
    assert rows(hudi_read(table_path), COLS) == rows(mw.Table.open(table_path).read(), COLS) == acked


def test_an_unreadable_archive_keeps_hudis_rule(trips_table, table_path, zk_lock, cleaners):
    """A version 6 archive cannot be read here: files older than the active timeline may be
    archived commits' files, so the reader keeps taking them (as Hudi does)."""
    mw.write(trips([1], value=1.0), table_path, writer_config(zk_lock()))
    dead = _dead_instant(trips_table, zk_lock(), inst.COMMIT)
    assert cleaners(table_path, zk_lock(), failed_write_min_age_bounds=NEVER).run_once().rolled_back == [dead]
    _archive_past(table_path, zk_lock, cleaners, trips_table, dead)
    src = trips_table.snapshot().files()[0]
    zombie = layout.data_file_path(src.partition, layout.DataFileName(layout.new_file_id(), layout.write_token(3), dead).name)
    pq.write_table(_rekeyed(pq.read_table(trips_table.storage.abs(src.path)), dead, ["z1"], 999.0),
                   trips_table.storage.abs(zombie))
    assert 999.0 not in mw.Table.open(table_path).read().column("value").to_pylist()
    trips_table.storage.write_bytes(".hoodie/archived/.commits_.archive.1_1-0-1", b"an archive this package cannot read")
    assert 999.0 in mw.Table.open(table_path).read().column("value").to_pylist()


def test_with_the_metadata_table_no_reader_lists_the_late_file(table_path, zk_lock, cleaners):
    """The same thawed zombie on a table that keeps Hudi's metadata table: its late file is in
    no metadata record (its instant never completed), so hudi-rs, which lists files from there,
    does not show it either, even before the sweep."""
    from tests.conftest import TRIPS_SCHEMA

    table = mw.Table.create(table_path, name="trips", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"],
                            ordering_field="ts", metadata=True)
    mw.write(trips([1, 2], value=1.0), table_path, writer_config(zk_lock()))
    dead = _dead_instant(table, zk_lock(), inst.COMMIT)
    assert cleaners(table_path, zk_lock(), failed_write_min_age_bounds=NEVER).run_once().rolled_back == [dead]
    _archive_past(table_path, zk_lock, cleaners, table, dead)
    src = table.snapshot().in_partition("2024-01-01")[0]
    name = layout.DataFileName(layout.new_file_id(), layout.write_token(3), dead).name
    zombie = layout.data_file_path(src.partition, name)
    pq.write_table(_rekeyed(pq.read_table(table.storage.abs(src.path)), dead, ["z1", "z2"], 999.0),
                   table.storage.abs(zombie))
    acked = sorted([("1", 1.0), ("2", 1.0), *[(str(100 + k), float(100 + k)) for k in range(6)]], key=repr)
    assert rows(hudi_read(table_path), COLS) == rows(mw.Table.open(table_path).read(), COLS) == acked
    assert _sweep(table_path, zk_lock, cleaners, dead) == [zombie]
    assert rows(hudi_read(table_path), COLS) == acked
