"""Rollback command blocks (written by Hudi before 1.0, table version 6, when a failed
deltacommit that had appended to a log file was rolled back): Hudi's reader
(``BaseHoodieLogRecordReader.scanInternalV1``, ``COMMAND_BLOCK`` / ``ROLLBACK_BLOCK``) drops
every block queued so far, from any log file of the slice, whose ``INSTANT_TIME`` equals the
rollback block's ``TARGET_INSTANT_TIME`` (``currentInstantLogBlocks.removeIf``). That handling
does not depend on the table version (only the inflight-instant filter before it does), so the
table tests run on a version 8 table with a base file (hudi-rs 0.5 reads no log-only group);
hudi-rs 0.5 agrees in each of them, a block of the target after the rollback block too."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest

import multiwriter as mw
from multiwriter.errors import CommandBlockError
from multiwriter.instant_time import next_after
from multiwriter.format import log_file as lf
from multiwriter.format.layout import data_file_path
from multiwriter.table.log_rollbacks import surviving_blocks
from multiwriter.format.schema import arrow_to_avro_json
from tests.conftest import TRIPS_SCHEMA
from tests.oracle import hudi_read, rows
from tests.table.jvm_style import DATE, at, bucket_group, deltacommit, keys_in_bucket
from tests.conftest import compact_slices as _compact

GROUP = bucket_group(3)
A, B = keys_in_bucket(3, 2)
AVRO = json.loads(arrow_to_avro_json(TRIPS_SCHEMA, "trips_record"))


def data(instant: str, *versions: tuple[str, int, float]) -> bytes:
    """A data block of ``versions`` (id, ts, value) written by ``instant``."""
    t = pa.table({"id": [v[0] for v in versions], "date": [DATE] * len(versions),
                  "ts": pa.array([v[1] for v in versions], pa.int64()), "value": [v[2] for v in versions]})
    records = lf.with_log_meta_columns(t, record_keys=t.column("id"), partition_path=DATE, file_id=GROUP,
                                       instant_time=instant)
    return lf.encode_data_block(records, AVRO, instant_time=instant)


def rollback(instant: str, target: str) -> bytes:
    return lf.encode_rollback_block(instant_time=instant, target_instant_time=target)


def instants(kept: list[list[lf.LogBlock]]) -> list[list[str]]:
    return [[b.instant_time for b in blocks] for blocks in kept]


# -- which blocks survive ---------------------------------------------------------------------------

def test_a_rollback_drops_the_blocks_of_its_target_in_the_same_file():
    """data T1, data T2, rollback(T2): T1's block alone is applied."""
    blocks = lf.read_log_blocks(data(at(1), (A, 1, 1.0)) + data(at(3), (A, 2, 2.0)) + rollback(at(5), at(3)))
    assert instants(surviving_blocks([("log1", blocks)])) == [[at(1)]]


def test_a_rollback_drops_its_targets_blocks_in_earlier_log_files():
    """log1: data T1, data T2; log2: data T3, rollback(T1): T2 and T3 stay (``removeIf`` over
    every block queued so far, whatever its file)."""
    log1 = lf.read_log_blocks(data(at(1), (A, 1, 1.0)) + data(at(3), (B, 1, 1.0)))
    log2 = lf.read_log_blocks(data(at(5), (A, 3, 3.0)) + rollback(at(7), at(1)))
    assert instants(surviving_blocks([("log1", log1), ("log2", log2)])) == [[at(3)], [at(5)]]


def test_blocks_after_the_rollback_and_extra_rollbacks_stay():
    """A block of the target instant after the rollback block is not dropped (it was not queued
    yet); a rollback matching nothing changes nothing ("invalid or extra rollback command block")."""
    blocks = lf.read_log_blocks(data(at(1), (A, 1, 1.0)) + rollback(at(5), at(1)) + data(at(1), (B, 1, 1.0))
                                + rollback(at(7), at(9)))
    assert instants(surviving_blocks([("log1", blocks)])) == [[at(1)]]
    assert surviving_blocks([("log1", blocks)])[0][0].records.column("id").to_pylist() == [B]


def test_a_command_hudi_does_not_know_is_refused_naming_the_file_and_block():
    """``scanInternalV1`` throws ``UnsupportedOperationException`` ("Command type not yet
    supported") for any command but a rollback."""
    first = data(at(1), (A, 1, 1.0))
    other = lf.encode_block(lf.BlockType.COMMAND, {lf.HeaderKey.INSTANT_TIME: at(3), lf.HeaderKey.COMMAND_BLOCK_TYPE: "7",
                                                   lf.HeaderKey.TARGET_INSTANT_TIME: at(1)}, b"")
    with pytest.raises(CommandBlockError, match=rf"log1: the command block at offset {len(first)} is of type '7'") as e:
        surviving_blocks([("log1", lf.read_log_blocks(first + other))])
    assert (e.value.path, e.value.offset) == ("log1", len(first))
    untargeted = lf.encode_block(lf.BlockType.COMMAND, {lf.HeaderKey.INSTANT_TIME: at(3),
                                                        lf.HeaderKey.COMMAND_BLOCK_TYPE: "0"}, b"")
    with pytest.raises(CommandBlockError, match="names no TARGET_INSTANT_TIME"):
        surviving_blocks([("log1", lf.read_log_blocks(first + untargeted))])


# -- a table: our reader, our compaction, hudi-rs ---------------------------------------------------

def _append(table: mw.Table, name: str, tail: bytes) -> None:
    rel = data_file_path(DATE, name)
    table.storage.write_bytes(rel, table.storage.read_bytes(rel) + tail)


def _values(path: str) -> list[tuple]:
    return rows(mw.Table.open(path).read(), ["id", "ts", "value"])


def _based(table: mw.Table, path: str) -> list[str]:
    """A base file of A(0, 0.0) and B(0, 0.0) in the group, written by our writer (hudi-rs reads
    no log-only group), and the next four instant times after it."""
    mw.write(pa.table({"id": [A, B], "date": [DATE] * 2, "ts": pa.array([0, 0], pa.int64()), "value": [0.0, 0.0]}),
             path, mw.WriterConfig(writer_id="w", lock=mw.InProcessLock()))
    times = [mw.Table.open(path).timeline().completed()[-1].completion_time]
    for _ in range(6):
        times.append(next_after(times[-1]))
    return times[1:]


def test_a_rolled_back_append_is_gone_from_reads_and_compaction(mor_table, table_path):
    """Base A(0, 0.0), B(0, 0.0); log1: data T1 A(1, 1.0), then a failed T3's data block
    A(2, 2.0), B(2, 2.0) and the rollback block T5 targeting T3: A(1, 1.0) and B(0, 0.0), read,
    by hudi-rs, and compacted."""
    t = _based(mor_table, table_path)
    name = deltacommit(mor_table, t[0], t[1], GROUP, upserts=[(A, 1, 1.0)])
    _append(mor_table, name, data(t[2], (A, 2, 2.0), (B, 2, 2.0)) + rollback(t[4], t[2]))
    expected = sorted([(A, 1, 1.0), (B, 0, 0.0)])
    assert _values(table_path) == expected
    assert rows(hudi_read(table_path), ["id", "ts", "value"]) == expected
    _compact(table_path)
    assert _values(table_path) == expected


def test_a_rollback_in_a_later_log_file_drops_its_target_in_an_earlier_one(mor_table, table_path):
    """Base A(0, 0.0), B(0, 0.0); log1 (T1): A(1, 1.0); log2 (T3): B(3, 3.0), then a rollback
    block targeting T1: A is back at its base row (Hudi's ``removeIf`` spans the slice's log
    files), through our reader, hudi-rs and our compaction."""
    t = _based(mor_table, table_path)
    deltacommit(mor_table, t[0], t[1], GROUP, upserts=[(A, 1, 1.0)])
    second = deltacommit(mor_table, t[2], t[3], GROUP, upserts=[(B, 3, 3.0)])
    _append(mor_table, second, rollback(t[4], t[0]))
    expected = sorted([(A, 0, 0.0), (B, 3, 3.0)])
    assert _values(table_path) == expected
    assert rows(hudi_read(table_path), ["id", "ts", "value"]) == expected
    _compact(table_path)
    assert _values(table_path) == expected


def test_a_block_of_the_target_after_the_rollback_block_stays(mor_table, table_path):
    """Base A(0, 0.0), B(0, 0.0); log1: data T1 A(1, 1.0), rollback(T1), data T1 B(1, 1.0):
    Hudi applies B's block (queued after the rollback), not A's."""
    t = _based(mor_table, table_path)
    name = deltacommit(mor_table, t[0], t[1], GROUP, upserts=[(A, 1, 1.0)])
    _append(mor_table, name, rollback(t[2], t[0]) + data(t[0], (B, 1, 1.0)))
    expected = sorted([(A, 0, 0.0), (B, 1, 1.0)])
    assert _values(table_path) == expected
    assert rows(hudi_read(table_path), ["id", "ts", "value"]) == expected
    _compact(table_path)
    assert _values(table_path) == expected
