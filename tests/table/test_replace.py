"""Replace commits (INSERT OVERWRITE, clustering) retire file groups for every consumer.

Oracles: hudi-rs for reads; the replace metadata Java Hudi wrote (fixture) decoded with fastavro.
"""
from __future__ import annotations

import io
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import multiwriter as mw
from multiwriter.conflict import FileGroupOverlapStrategy
from multiwriter.format import instant as inst
from multiwriter.format import layout
from tests.conftest import trips
from tests.oracle import hudi_read, rows, unzip_fixture

NAME = "v8_simplekeygen_nonhivestyle_overwritetable"
REPLACE_FILE = "20250713011347462_20250713011347809.replacecommit"
BEFORE_REPLACE = "20250713011346372"  # requested time of the second INSERT
COLS = ["id", "name", "isActive"]


def _java_replace_record() -> tuple[dict, dict]:
    """(writer schema, record) of the replace commit Java Hudi wrote into the fixture."""
    path = unzip_fixture(NAME, Path(_tmp()))
    with open(path / ".hoodie" / "timeline" / REPLACE_FILE, "rb") as f:
        reader = fastavro.reader(f)
        return reader.writer_schema, next(iter(reader))


def _tmp() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="mw-replace-")


def write_replacecommit(table: mw.Table, t: str, c: str, replaced: dict[str, list[str]]) -> None:
    """A completed replace commit (no new files, like DELETE PARTITION), encoded with the schema
    Java Hudi uses, independently of our encoder."""
    schema, rec = _java_replace_record()
    tl = table.timeline()
    extra = dict(tl.commit_metadata(tl.completed_writes()[-1]).extra_metadata)  # hudi-rs takes the schema from here
    rec = dict(rec, partitionToWriteStats={}, partitionToReplaceFileIds=replaced, operationType="DELETE_PARTITION",
               extraMetadata=extra)
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(schema), [rec])
    timeline = Path(table.storage.abs(table.config.timeline_dir))
    (timeline / f"{t}.replacecommit.requested").write_bytes(b"")
    (timeline / f"{t}.replacecommit.inflight").write_bytes(b"")
    (timeline / f"{t}_{c}.replacecommit").write_bytes(buf.getvalue())


pytestmark = pytest.mark.needs_fixtures


def test_replace_metadata_decodes_and_round_trips():
    from multiwriter.table.metadata import ReplaceCommitMetadata, decode_commit_metadata

    schema, rec = _java_replace_record()
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(schema), [rec])
    meta = decode_commit_metadata(inst.REPLACE_COMMIT, buf.getvalue(), source="fixture")
    assert isinstance(meta, ReplaceCommitMetadata)
    expected = {(p, f) for p, ids in rec["partitionToReplaceFileIds"].items() for f in ids}
    assert meta.replaced_file_groups() == expected and len(expected) == 3
    assert meta.operation_type == "INSERT_OVERWRITE_TABLE"
    # what we write, Java's schema reads (fastavro resolves our record against it)
    ours = next(iter(fastavro.reader(io.BytesIO(meta.to_bytes()), reader_schema=fastavro.parse_schema(schema))))
    assert ours["partitionToReplaceFileIds"] == rec["partitionToReplaceFileIds"]
    assert ours["partitionToWriteStats"]["30"][0]["path"] == rec["partitionToWriteStats"]["30"][0]["path"]


def test_overwritten_fixture_reads_like_hudi_rs(tmp_path):
    path = str(unzip_fixture(NAME, tmp_path))
    t = mw.Table.open(path)
    assert rows(t.read(), COLS) == rows(hudi_read(path), COLS) == [(4, "Diana", False)]
    old = rows(t.read(as_of=BEFORE_REPLACE), COLS)
    assert old == rows(hudi_read(path, as_of=BEFORE_REPLACE), COLS)
    assert old == [(1, "Alice", False), (2, "Bob", False), (3, "Carol", True), (4, "Diana", True)]
    snap = t.snapshot()
    assert {f.partition for f in snap.files()} == {"30"} and len(snap.files()) == 1


def test_incremental_reads_of_overwritten_fixture_match_hudi_rs(tmp_path):
    from hudi import HudiQueryType, HudiReadOptions, HudiTableBuilder

    path = str(unzip_fixture(NAME, tmp_path))
    t = mw.Table.open(path)
    completions = [i.completion_time for i in t.timeline().completed()]
    bounds = [None, *completions]
    for a, start in enumerate(bounds):
        for end in bounds[a + 1:] + [None]:
            opts = HudiReadOptions().with_query_type(HudiQueryType.Incremental)
            if start:
                opts = opts.with_start_timestamp(start)
            if end:
                opts = opts.with_end_timestamp(end)
            batches = HudiTableBuilder.from_base_uri(path).build().read(opts)
            theirs = rows(pa.Table.from_batches(batches), COLS) if batches else []
            assert rows(t.read_incremental(start, end), COLS) == theirs, (start, end)


def test_write_into_overwritten_fixture_keeps_replaced_groups_retired(tmp_path):
    path = str(unzip_fixture(NAME, tmp_path))
    t = mw.Table.open(path)
    old = t.read(as_of=BEFORE_REPLACE).drop_columns(list(mw.format.schema.META_COLUMNS))
    alice = old.filter(pc.equal(old["id"], 1))  # only in a replaced group
    diana = old.filter(pc.equal(old["id"], 4))
    diana = diana.set_column(diana.schema.get_field_index("longField"), "longField", pa.array([987654322], pa.int64()))
    diana = diana.set_column(diana.schema.get_field_index("name"), "name", pa.array(["Di"]))
    mw.write(pa.concat_tables([alice, diana]), path, mw.WriterConfig(writer_id="w", lock=mw.InProcessLock()))
    got = rows(mw.Table.open(path).read(), ["id", "name"])
    assert got == [(1, "Alice"), (4, "Di")]
    assert rows(hudi_read(path), ["id", "name"]) == got
    # Alice went into a new file group: no replaced group got a newer slice
    replaced = {f for ids in _java_replace_record()[1]["partitionToReplaceFileIds"].values() for f in ids}
    newer = [layout.parse_data_file(p.name) for p in Path(path).rglob("*.parquet")]
    assert not [f for f in newer if f and f.file_id in replaced and f.instant_time > REPLACE_FILE[:17]]


def test_update_of_a_group_a_concurrent_replace_retired_conflicts(trips_table, table_path):
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    base = mw.write(trips(range(5)), table_path, cfg)
    t = mw.Table.open(table_path)
    (group,) = {(f.partition, f.file_id) for f in t.snapshot().files()}
    # a replace retiring that group completes after our base
    tl = t.timeline()
    later = max(tl.max_time(), base.instant.completion_time)
    rt, rc = str(int(later) + 1), str(int(later) + 2)
    write_replacecommit(t, rt, rc, {group[0]: [group[1]]})
    own = str(int(later) + 3)
    conflict = FileGroupOverlapStrategy().find_conflict(t.timeline(), base.instant.completion_time, own, {group})
    assert conflict is not None and conflict.winner.requested_time == rt and conflict.file_groups == {group}
    # and after it, readers (ours and hudi-rs) see the group gone
    assert t.read().num_rows == 0 and hudi_read(table_path).num_rows == 0
