"""Every Hudi table setting that changes a merge, honoured or refused by name (issue 63; the
table of settings: ``docs/merge-settings.md``). Literal cases whose expected rows follow Hudi's
code (each cites the class and method), through our reader, our compaction then hudi-rs."""
from __future__ import annotations

import pyarrow as pa
import pytest

import multiwriter as mw
from multiwriter.errors import MergeSettingError
from multiwriter.storage import Storage
from multiwriter.table import properties
from multiwriter.table.files import LogFile
from multiwriter.format.log_file import encode_delete_block, encode_parquet_data_block, with_log_meta_columns
from multiwriter.table.merge_config import (
    COMMIT_TIME,
    COMMIT_TIME_STRATEGY,
    EVENT_TIME,
    EVENT_TIME_STRATEGY,
    IGNORE_DEFAULTS,
    NO_PARTIAL,
    PAYLOAD_STRATEGY,
    MergeConfig,
)
from multiwriter.table.merge_rule import Versions, merge
from multiwriter.table.merged_slice import read_log
from multiwriter.table.properties import TableConfig
from tests.oracle import hudi_read, rows
from tests.table.jvm_style import at, bucket_group, deltacommit, keys_in_bucket
from tests.table.test_merge_rule_partial import SCHEMA, dels, out, recs
from tests.conftest import compact_slices as _compact

M = "org.apache.hudi.common.model."
K = keys_in_bucket(3, 1)[0]
GROUP = bucket_group(3)


def config(version: int, **props: str) -> TableConfig:
    raw = {"hoodie.table.name": "t", "hoodie.table.version": str(version), "hoodie.table.recordkey.fields": "k", **props}
    return TableConfig.from_properties(raw)


# -- MergeConfig.from_table_config: how each version names its merge -----------------------------

@pytest.mark.parametrize(("version", "props", "expected"), [
    # item 1: a v8 table upgraded from 0.x with OverwriteWithLatestAvroPayload keeps its precombine
    # field; HoodieTableConfig.inferMergingConfigsForPreV9Table: the strategy id (v8) or the
    # payload (v6) says commit time, and COMMIT_TIME_ORDERING uses no ordering field
    (8, {"hoodie.table.precombine.field": "ts", "hoodie.record.merge.mode": "COMMIT_TIME_ORDERING",
         "hoodie.compaction.payload.class": M + "OverwriteWithLatestAvroPayload",
         "hoodie.record.merge.strategy.id": COMMIT_TIME_STRATEGY}, (COMMIT_TIME, (), NO_PARTIAL)),
    (8, {"hoodie.table.precombine.field": "ts", "hoodie.record.merge.strategy.id": COMMIT_TIME_STRATEGY},
     (COMMIT_TIME, (), NO_PARTIAL)),
    (6, {"hoodie.table.precombine.field": "ts", "hoodie.compaction.payload.class": M + "OverwriteWithLatestAvroPayload"},
     (COMMIT_TIME, (), NO_PARTIAL)),
    (6, {"hoodie.table.precombine.field": "ts"}, (EVENT_TIME, ("ts",), NO_PARTIAL)),  # nothing set: the field decides
    (8, {"hoodie.table.precombine.field": "ts", "hoodie.compaction.payload.class": M + "DefaultHoodieRecordPayload",
         "hoodie.record.merge.strategy.id": EVENT_TIME_STRATEGY}, (EVENT_TIME, ("ts",), NO_PARTIAL)),
    # EVENT_TIME_ORDERING without an ordering field: "Using commit time-based ordering now"
    (9, {"hoodie.record.merge.mode": "EVENT_TIME_ORDERING"}, (COMMIT_TIME, (), NO_PARTIAL)),
    # item 2: version 9 names several ordering fields
    (9, {"hoodie.table.ordering.fields": "ts,value", "hoodie.record.merge.mode": "EVENT_TIME_ORDERING"},
     (EVENT_TIME, ("ts", "value"), NO_PARTIAL)),
    # item 5: payloads Hudi 1.1 maps onto merge modes (inferMergingConfigsForV9TableCreation, the 8->9 upgrade)
    (8, {"hoodie.table.precombine.field": "ts", "hoodie.record.merge.mode": "CUSTOM",
         "hoodie.compaction.payload.class": M + "PartialUpdateAvroPayload",
         "hoodie.record.merge.strategy.id": PAYLOAD_STRATEGY}, (EVENT_TIME, ("ts",), IGNORE_DEFAULTS)),
    (8, {"hoodie.table.precombine.field": "ts", "hoodie.record.merge.mode": "CUSTOM",
         "hoodie.compaction.payload.class": M + "OverwriteNonDefaultsWithLatestAvroPayload",
         "hoodie.record.merge.strategy.id": PAYLOAD_STRATEGY}, (COMMIT_TIME, (), IGNORE_DEFAULTS)),
    (6, {"hoodie.table.precombine.field": "ts", "hoodie.compaction.payload.class": M + "EventTimeAvroPayload"},
     (EVENT_TIME, ("ts",), NO_PARTIAL)),
    (9, {"hoodie.table.ordering.fields": "ts", "hoodie.record.merge.mode": "EVENT_TIME_ORDERING",
         "hoodie.table.legacy.payload.class": M + "PartialUpdateAvroPayload",
         "hoodie.table.partial.update.mode": "IGNORE_DEFAULTS"}, (EVENT_TIME, ("ts",), IGNORE_DEFAULTS)),
])
def test_the_merge_a_table_names(version, props, expected):
    c = MergeConfig.from_table_config(config(version, **props))
    assert (c.mode, c.ordering_fields, c.partial_update_mode) == expected


@pytest.mark.parametrize(("version", "props", "named"), [
    (8, {"hoodie.record.merge.mode": "CUSTOM", "hoodie.compaction.payload.class": M + "AWSDmsAvroPayload",
         "hoodie.record.merge.strategy.id": PAYLOAD_STRATEGY}, "AWSDmsAvroPayload"),
    (6, {"hoodie.compaction.payload.class": M + "debezium.PostgresDebeziumAvroPayload"}, "PostgresDebeziumAvroPayload"),
    (6, {"hoodie.compaction.payload.class": "com.example.MyPayload"}, "com.example.MyPayload"),
    (8, {"hoodie.record.merge.mode": "CUSTOM", "hoodie.record.merge.strategy.id": "1234-custom"}, "1234-custom"),
    (9, {"hoodie.record.merge.mode": "CUSTOM", "hoodie.compaction.payload.class": "com.example.MyPayload"},
     "com.example.MyPayload"),
    (9, {"hoodie.table.partial.update.mode": "IGNORE_MARKERS"}, "hoodie.table.partial.update.mode=IGNORE_MARKERS"),
    (9, {"hoodie.table.partial.update.mode": "FILL_UNAVAILABLE"}, "FILL_UNAVAILABLE"),
    # the custom delete marker is honoured (delete_markers); another merge property is not
    (9, {"hoodie.record.merge.mode": "COMMIT_TIME_ORDERING",
         "hoodie.record.merge.property.hoodie.write.partial.update.custom.marker": "__u__"},
     "hoodie.write.partial.update.custom.marker"),
    # a recorded mode that contradicts the payload: Hudi's checkArgument refuses it too
    (8, {"hoodie.record.merge.mode": "EVENT_TIME_ORDERING", "hoodie.table.precombine.field": "ts",
         "hoodie.compaction.payload.class": M + "OverwriteWithLatestAvroPayload"}, "contradicts"),
])
def test_a_merge_we_do_not_do_is_refused_by_name(version, props, named):
    with pytest.raises(MergeSettingError, match=named.replace(".", r"\.")):
        MergeConfig.from_table_config(config(version, **props))


# -- the merge rule: literal cases -----------------------------------------------------------------

def _merge(cfg: MergeConfig, *sources: Versions, schema: pa.Schema = SCHEMA) -> list[tuple]:
    return out(merge(sources, config=cfg, schema=schema))


def test_commit_time_with_an_ordering_field_takes_the_latest():
    """Item 1: log1 A(ts 5), log2 A(ts 3) on COMMIT_TIME_ORDERING: the later log's version
    (``BufferedRecordMergerFactory.CommitTimeRecordMerger.deltaMerge`` keeps the newer)."""
    got = _merge(MergeConfig(COMMIT_TIME), Versions(0, recs("200", {"k": "A", "ts": 5, "v": "one"})),
                 Versions(1, recs("300", {"k": "A", "ts": 3, "v": "two"})))
    assert got == [("A", "300", 3, "two", None)]


def test_several_ordering_fields_compare_field_by_field():
    """Item 2: ordering fields (ts, n): log1 A(5, 9), log2 A(5, 1): ts ties, n decides: log1
    (``ArrayComparable.compareTo``; ``EventTimeRecordMerger.shouldKeepNewerRecord``: newer >=)."""
    cfg = MergeConfig(EVENT_TIME, ("ts", "n"))
    first = Versions(0, recs("200", {"k": "A", "ts": 5, "v": "a", "n": 9}))
    assert _merge(cfg, first, Versions(1, recs("300", {"k": "A", "ts": 5, "v": "b", "n": 1}))) == [("A", "200", 5, "a", 9)]
    assert _merge(cfg, first, Versions(1, recs("300", {"k": "A", "ts": 5, "v": "b", "n": 9}))) == [("A", "300", 5, "b", 9)]
    assert _merge(cfg, first, Versions(1, recs("300", {"k": "A", "ts": 6, "v": "b", "n": 0}))) == [("A", "300", 6, "b", 0)]
    # a null field value is OrderingValues' default, Integer 0 (ranked below every value of a long field)
    assert _merge(cfg, first, Versions(1, recs("300", {"k": "A", "ts": 5, "v": "b", "n": None}))) == [("A", "200", 5, "a", 9)]


def test_a_delete_on_several_ordering_fields_is_plain():
    """A delete's single ordering value is never of the class of an ``ArrayComparable``
    (``OrderingValues.isSameClass``): ``deltaMergeDeleteRecord`` lets it win over every older version."""
    cfg = MergeConfig(EVENT_TIME, ("ts", "n"))
    base = Versions(-1, recs("100", {"k": "A", "ts": 9, "v": "a", "n": 9}))
    assert _merge(cfg, base, Versions(0, None, dels(("A", 1)))) == []


def test_ignore_defaults_fills_the_winners_nulls_from_the_loser():
    """Item 4: IGNORE_DEFAULTS, log1 A(1, v 'x', n 1), log2 A(2, v null): (2, 'x', n 1)
    (``PartialUpdateHandler.reconcileDefaultValues``: a value equal to the field's default,
    null, takes the lower-ordered record's); also when the older version wins (ts 3 > 2)."""
    cfg = MergeConfig(EVENT_TIME, ("ts",), IGNORE_DEFAULTS)
    log1 = Versions(0, recs("200", {"k": "A", "ts": 1, "v": "x", "n": 1}))
    assert _merge(cfg, log1, Versions(1, recs("300", {"k": "A", "ts": 2, "v": None, "n": None}))) == [
        ("A", "300", 2, "x", 1)]
    old_wins = Versions(0, recs("200", {"k": "A", "ts": 3, "v": None, "n": 1}))
    assert _merge(cfg, old_wins, Versions(1, recs("300", {"k": "A", "ts": 2, "v": "y", "n": 2}))) == [
        ("A", "200", 3, "y", 1)]
    # commit time (OverwriteNonDefaultsWithLatestAvroPayload): the latest, its nulls filled
    assert _merge(MergeConfig(COMMIT_TIME, (), IGNORE_DEFAULTS), old_wins,
                  Versions(1, recs("300", {"k": "A", "ts": 2, "v": None, "n": 2}))) == [("A", "300", 2, None, 2)]
    # a delete in between: no fill across it (partialMerge skips delete records)
    base = Versions(-1, recs("100", {"k": "A", "ts": 0, "v": "b", "n": 7}))
    assert _merge(cfg, base, Versions(0, None, dels(("A", None))),
                  Versions(1, recs("300", {"k": "A", "ts": 2, "v": None, "n": None}))) == [("A", "300", 2, "b", 7)]


# -- block order within one log file (item 7) ------------------------------------------------------

def test_blocks_of_one_log_file_apply_in_file_order(tmp_path):
    """A delete block before a data block deletes only what came before it: Hudi's
    ``BaseHoodieLogRecordReader`` applies a file's blocks one after another."""
    storage = Storage(str(tmp_path))
    schema = {"type": "record", "name": "r", "fields": [{"name": "ts", "type": ["null", "long"], "default": None},
                                                        {"name": "v", "type": ["null", "string"], "default": None}]}
    data = with_log_meta_columns(pa.table({"ts": pa.array([1], pa.int64()), "v": ["new"]}), record_keys=["A"],
                                 partition_path="p1", file_id="f1", instant_time=at(2))
    lf = LogFile("p1", "f1", at(2), 1, f".f1_{at(2)}.log.1_0-1-0")
    storage.write_bytes(lf.path, encode_delete_block(dels(("A", None)), instant_time=at(2), schema=schema)
                        + encode_parquet_data_block(data, schema, instant_time=at(2)))
    file_schema = pa.schema([*SCHEMA][:5] + [pa.field("ts", pa.int64()), pa.field("v", pa.string())])
    sources = read_log(storage, lf, 0, file_schema)
    assert [s.deletes is not None for s in sources] == [True, False]
    base = Versions(-1, recs("100", {"k": "A", "ts": 0, "v": "old"}).select(file_schema.names))
    got = merge([base, *sources], config=MergeConfig(COMMIT_TIME), schema=file_schema)
    assert got.column("v").to_pylist() == ["new"]


# -- end to end: JVM-style deltacommits, our reader, our compaction, then hudi-rs ------------------

def _settings(table: mw.Table, **props: str) -> None:
    properties.modify(table.storage, lambda p: {**p, **props})


def _values(path: str) -> list[tuple]:
    return rows(mw.Table.open(path).read(), ["id", "ts", "value"])


def _through_every_path(path: str, expected: list[tuple]) -> None:
    assert _values(path) == expected
    _compact(path)
    assert _values(path) == expected
    assert rows(hudi_read(path), ["id", "ts", "value"]) == expected


def test_item1_commit_time_table_with_a_precombine_field_end_to_end(mor_table, table_path):
    """v8 table upgraded from 0.x with OverwriteWithLatestAvroPayload: log1 A(5, 1.0), log2
    A(3, 2.0): Hudi (3, 2.0) (``CommitTimeRecordMerger``), before and after our compaction."""
    _settings(mor_table, **{"hoodie.record.merge.mode": "COMMIT_TIME_ORDERING",
                            "hoodie.compaction.payload.class": M + "OverwriteWithLatestAvroPayload",
                            "hoodie.record.merge.strategy.id": COMMIT_TIME_STRATEGY})
    deltacommit(mor_table, at(1), at(2), GROUP, upserts=[(K, 5, 1.0)])
    deltacommit(mor_table, at(3), at(4), GROUP, upserts=[(K, 3, 2.0)])
    _through_every_path(table_path, [(K, 3, 2.0)])


def test_item4_ignore_defaults_end_to_end(mor_table, table_path):
    """IGNORE_DEFAULTS: log1 A(1, 1.0), log2 A(2, null): Hudi (2, 1.0)
    (``PartialUpdateHandler.reconcileDefaultValues``), before and after our compaction."""
    _settings(mor_table, **{"hoodie.table.partial.update.mode": "IGNORE_DEFAULTS"})
    deltacommit(mor_table, at(1), at(2), GROUP, upserts=[(K, 1, 1.0)])
    deltacommit(mor_table, at(3), at(4), GROUP, upserts=[(K, 2, None)])
    # version 8: Hudi reads no partial-update mode (HoodieTableConfig.getPartialUpdateMode): NONE
    assert _values(table_path) == [(K, 2, None)]
    _settings(mor_table, **{"hoodie.table.version": "9", "hoodie.table.ordering.fields": "ts"})
    _through_every_path(table_path, [(K, 2, 1.0)])


def test_refused_settings_are_refused_on_read_compaction_and_write(mor_table, table_path):
    _settings(mor_table, **{"hoodie.record.merge.mode": "CUSTOM", "hoodie.compaction.payload.class": M + "AWSDmsAvroPayload",
                            "hoodie.record.merge.strategy.id": PAYLOAD_STRATEGY})
    deltacommit(mor_table, at(1), at(2), GROUP, upserts=[(K, 5, 1.0)])
    t = mw.Table.open(table_path)
    with pytest.raises(MergeSettingError, match="AWSDmsAvroPayload"):
        t.read()
    c = mw.Cleaner(table_path, lock=mw.InProcessLock(), clustering=None, heartbeat_interval_s=1.0,
                   heartbeat_tolerable_misses=1, compaction=mw.CompactionConfig(delta_commits=1))
    try:  # the cleaner reports the compaction's error; no plan is written
        with pytest.raises(mw.errors.CleanerError, match="MergeSettingError.*AWSDmsAvroPayload"):
            c.run_once()
        assert not mw.Table.open(table_path).timeline().pending(frozenset({"compaction"}))
    finally:
        c.close()
    from tests.conftest import trips
    with pytest.raises(mw.errors.TableFormatError):
        mw.write(trips([K], ts=9, value=3.0), table_path, mw.WriterConfig(writer_id="w", lock=mw.InProcessLock()))


def test_item2_several_ordering_fields_end_to_end(mor_table, table_path):
    """Version 9, ordering fields ts,value: log1 A(5, 9.0), log2 A(5, 1.0): Hudi (5, 9.0)
    (``OrderingValues.create`` of both fields, ``ArrayComparable.compareTo``)."""
    _settings(mor_table, **{"hoodie.table.version": "9", "hoodie.table.ordering.fields": "ts,value"})
    deltacommit(mor_table, at(1), at(2), GROUP, upserts=[(K, 5, 9.0)])
    deltacommit(mor_table, at(3), at(4), GROUP, upserts=[(K, 5, 1.0)])
    assert _values(table_path) == [(K, 5, 9.0)]
    _compact(table_path)
    assert _values(table_path) == [(K, 5, 9.0)]
    # hudi-rs 0.5 refuses such a table ("Multiple ordering fields ... are not yet supported")
    with pytest.raises(Exception, match="Multiple ordering fields"):
        hudi_read(table_path)


# -- what a version 8 table records beside its merge mode ------------------------------------------

_V8_KEYS = ("hoodie.record.merge.mode", "hoodie.compaction.payload.class", "hoodie.record.merge.strategy.id")


def test_a_v8_table_records_hudis_pair_for_its_merge_mode(tmp_path):
    """Hudi 1.1 writes a version 8 table's payload class and strategy id from its merge mode
    (``HoodieTableMetaClient.TableBuilder.build`` -> ``HoodieTableConfig
    .inferMergingConfigsForPreV9Table``: ``HoodieRecordPayload.getAvroPayloadForMergeMode``,
    ``HoodieRecordMerger.getRecordMergeStrategyId``); a recorded mode the payload contradicts is
    refused there (its ``checkArgument``). Event time: as the Hudi-written fixture records it;
    commit time (no ordering field): ``OverwriteWithLatestAvroPayload``, the commit-time id."""
    from tests.oracle import unzip_fixture

    hudi = properties.parse((unzip_fixture("v8_trips_8i3d", tmp_path, "mor") / ".hoodie/hoodie.properties").read_text())
    ours = TableConfig(name="t", record_key=("id",), ordering_field="ts", version=8).to_properties()
    assert [ours[k] for k in _V8_KEYS] == [hudi[k] for k in _V8_KEYS]
    commit_time = TableConfig(name="t", record_key=("id",), version=8).to_properties()
    assert [commit_time[k] for k in _V8_KEYS] == ["COMMIT_TIME_ORDERING", M + "OverwriteWithLatestAvroPayload",
                                                  COMMIT_TIME_STRATEGY]
    assert MergeConfig.from_table_config(TableConfig.from_properties(commit_time)).mode == COMMIT_TIME


def test_a_v8_table_written_before_keeps_reading_by_commit_time():
    """Tables this package created at version 8 without an ordering field name
    ``DefaultHoodieRecordPayload`` with ``COMMIT_TIME_ORDERING``: event time without an ordering
    field merges by commit time (``inferMergingConfigsForPreV9Table``), so they read as before."""
    older = config(8, **{"hoodie.compaction.payload.class": M + "DefaultHoodieRecordPayload",
                         "hoodie.record.merge.mode": "COMMIT_TIME_ORDERING"})
    assert (MergeConfig.from_table_config(older).mode, MergeConfig.from_table_config(older).ordering_fields) == (
        COMMIT_TIME, ())
    older.check_writable()


# -- partial-update blocks that lose on ordering, through compaction ------------------------------

def test_partial_updates_that_lose_on_ordering_end_to_end(mor_table, table_path):
    """Base A(1, 1.0), B(5, 5.0); then IS_PARTIAL blocks without ``value``: A(ts 5), B(ts 3);
    then a full A(3, 3.0). B's partial version loses to the base whole: (5, 5.0). A's partial
    version (ts 5) beats the full one (ts 3), and as the winner of that pair it takes the
    loser's value (``BufferedRecordMergerFactory.PartialUpdateBufferedRecordMerger.deltaMerge``):
    (5, 3.0), from our reader, our compaction, then hudi-rs reading the compacted base. Before
    the compaction hudi-rs reads A as (5, 1.0): a version that never led the fold adds nothing
    there, so the column comes from the base row (tests/table/test_merge_rule_partial.py)."""
    from tests.conftest import trips

    a, b = keys_in_bucket(3, 2)
    full = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    mw.write(pa.concat_tables([trips([a], ts=1, value=1.0), trips([b], ts=5, value=5.0)]), table_path, full)
    partial = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock(), partial_update=True)
    mw.write(pa.concat_tables([trips([a], ts=5), trips([b], ts=3)]).drop_columns(["value"]), table_path, partial)
    mw.write(trips([a], ts=3, value=3.0), table_path, full)
    expected = sorted([(a, 5, 3.0), (b, 5, 5.0)], key=repr)
    assert _values(table_path) == expected
    assert rows(hudi_read(table_path), ["id", "ts", "value"]) == sorted([(a, 5, 1.0), (b, 5, 5.0)], key=repr)
    _compact(table_path)
    assert _values(table_path) == expected
    assert rows(hudi_read(table_path), ["id", "ts", "value"]) == expected
