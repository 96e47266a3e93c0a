"""Hudi's metadata table: we maintain its ``files`` partition and the indexes beside it
(:data:`multiwriter.table.metadata_table.MAINTAINED`), so our first commit to a table that lists
others drops them (properties first, then the files), keeps ``files`` up to
date, and every reader that trusts the metadata table (hudi-rs here) sees our rows."""
from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pytest

import multiwriter as mw
from multiwriter.errors import TableFormatError
from multiwriter.storage import Storage
from multiwriter.table import metadata_table as mdt
from multiwriter.table import properties as props
from tests.oracle import hudi_read, rows, unzip_fixture

FIXTURE = "v8_trips_8i3u1d"
PARTITIONS = "column_stats,files,partition_stats,record_index,secondary_index_rider_idx"
#: what our writers keep of them (:mod:`multiwriter.table.metadata_stats` keeps the data-skipping
#: ones, :mod:`multiwriter.table.metadata_record_index` the record index)
KEPT = "column_stats,files,partition_stats,record_index"
UPDATED = "1dced545-862b-4ceb-8b43-d2a568f6616b"  # san_francisco, fare 93.5 in the fixture
COLUMNS = ["uuid", "fare", "city"]


def _props(root: Path) -> dict[str, str]:
    return props.parse((root / ".hoodie" / "hoodie.properties").read_text())


def _batch(base: pa.Table) -> pa.Table:
    """One update (fare 93.5 -> 11.0, a newer ts) and two new keys."""
    data = base.drop_columns([c for c in base.column_names if c.startswith("_hoodie_")])
    upd = data.filter(pa.compute.equal(data["uuid"], UPDATED))
    upd = upd.set_column(data.schema.get_field_index("fare"), "fare", pa.array([11.0]))
    upd = upd.set_column(data.schema.get_field_index("ts"), "ts", pa.array([1695332066205], pa.int64()))
    new = pa.table({"ts": pa.array([1700000000000, 1700000000001], pa.int64()), "uuid": ["new-1", "new-2"],
                    "rider": ["r1", "r2"], "driver": ["d1", "d2"], "fare": [1.5, 2.5], "city": ["chennai", "oslo"]},
                   schema=data.schema)
    return pa.concat_tables([upd, new])


@pytest.mark.needs_fixtures
def test_first_write_drops_the_indexes_we_do_not_keep_so_hudi_rs_sees_our_rows(tmp_path, caplog):
    root = unzip_fixture(FIXTURE, tmp_path, "mor")
    original = _props(root)
    assert original["hoodie.table.metadata.partitions"] == PARTITIONS
    assert (root / ".hoodie" / "metadata" / "files").is_dir()
    base = mw.Table.open(str(root)).read()
    assert base.num_rows == 6

    with caplog.at_level(logging.INFO, logger="multiwriter.table.metadata_table"):
        mw.write(_batch(base), str(root), mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w"))

    ours = rows(mw.Table.open(str(root)).read(), COLUMNS)
    assert len(ours) == 8
    assert (UPDATED, 11.0, "san_francisco") in ours
    assert {("new-1", 1.5, "chennai"), ("new-2", 2.5, "oslo")} <= set(ours)
    assert rows(hudi_read(str(root)), COLUMNS) == ours  # hudi-rs no longer lists from a stale table
    after = _props(root)
    assert after["hoodie.table.metadata.partitions"] == KEPT and after["hoodie.table.metadata.partitions.inflight"] == ""
    assert {k: v for k, v in after.items() if "metadata.partitions" not in k} == \
        {k: v for k, v in original.items() if "metadata.partitions" not in k}
    assert sorted(p.name for p in (root / ".hoodie" / "metadata").iterdir() if p.name != ".hoodie") == KEPT.split(",")
    assert not (root / ".hoodie" / "hoodie.properties.backup").exists()
    assert any("secondary_index_rider_idx" in r.getMessage() and "files" in r.getMessage() for r in caplog.records)


@pytest.mark.needs_fixtures
def test_compaction_by_the_companion_job_drops_it_too(tmp_path):
    root = unzip_fixture(FIXTURE, tmp_path, "mor")
    before = rows(mw.Table.open(str(root)).read(), COLUMNS)
    cleaner = mw.Cleaner(str(root), lock=mw.InProcessLock(), clustering=None,
                         compaction=mw.CompactionConfig(delta_commits=1))
    report = cleaner.run_once()
    assert len(report.compaction_instants) == 1
    assert _props(root)["hoodie.table.metadata.partitions"] == KEPT
    assert not (root / ".hoodie" / "metadata" / "secondary_index_rider_idx").exists()
    assert rows(hudi_read(str(root)), COLUMNS) == rows(mw.Table.open(str(root)).read(), COLUMNS) == before


def test_only_unmaintained_partitions_are_dropped(tmp_path):
    """With ``files`` maintained (a later release), only the others go; without it, all of them
    (Hudi: every other partition needs the file listing)."""
    storage = _table_with_metadata(tmp_path, "column_stats,files", inflight="record_index")
    assert mdt.drop_unmaintained(storage, maintained=frozenset({"files"})) == ["column_stats", "record_index"]
    p = props.parse(storage.read_bytes(props.PROPERTIES_FILE).decode())
    assert p["hoodie.table.metadata.partitions"] == "files"
    assert p["hoodie.table.metadata.partitions.inflight"] == ""
    assert sorted(e.path for e in storage.walk_files(".hoodie/metadata")) == [".hoodie/metadata/files/f"]
    assert mdt.drop_unmaintained(storage) == []
    assert mdt.drop_unmaintained(storage, maintained=frozenset()) == ["files"]
    assert not storage.exists(".hoodie/metadata")


def test_a_table_without_metadata_partitions_is_left_alone(tmp_path):
    storage = _table_with_metadata(tmp_path, "")
    before = storage.read_bytes(props.PROPERTIES_FILE)
    assert mdt.drop_unmaintained(storage) == []
    assert storage.read_bytes(props.PROPERTIES_FILE) == before


def test_a_files_partition_still_being_built_is_dropped(tmp_path):
    """``files`` listed only as inflight: a listing a JVM writer is still taking, which our
    commits would not be in."""
    storage = _table_with_metadata(tmp_path, "", inflight="files")
    assert mdt.drop_unmaintained(storage) == ["files"]
    assert not storage.exists(".hoodie/metadata")


def test_a_partition_name_that_is_not_a_name_is_refused(tmp_path):
    storage = _table_with_metadata(tmp_path, "files,../../data")
    with pytest.raises(TableFormatError, match=r"\.\./\.\./data"):
        mdt.drop_unmaintained(storage)
    assert storage.exists(".hoodie/metadata/files/f")


def test_properties_rewrite_recovers_from_a_crash_between_backup_and_rewrite(tmp_path):
    """Hudi's protocol: a backup first; a reader finding no ``hoodie.properties`` reads the
    backup; the next rewrite restores from it and removes it."""
    storage = _table_with_metadata(tmp_path, "files")
    original = storage.read_bytes(props.PROPERTIES_FILE)
    storage.write_bytes(props.BACKUP_FILE, original)
    storage.delete(props.PROPERTIES_FILE)  # a Hudi writer died between deleting the properties and rewriting them
    assert mw.Table.open(str(tmp_path)).config.raw["hoodie.table.metadata.partitions"] == "files"
    assert mdt.drop_unmaintained(storage, maintained=frozenset()) == ["files"]
    assert not storage.exists(props.BACKUP_FILE)
    assert mw.Table.open(str(tmp_path)).config.raw["hoodie.table.metadata.partitions"] == ""


def _table_with_metadata(root: Path, partitions: str, inflight: str = "") -> Storage:
    t = mw.Table.create(str(root), name="t", schema=pa.schema([("id", pa.string())]), record_key="id", metadata=False)
    p = dict(t.config.raw)
    p["hoodie.table.metadata.partitions"] = partitions
    p["hoodie.table.metadata.partitions.inflight"] = inflight
    t.storage.write_bytes(props.PROPERTIES_FILE, props.render(p).encode())
    for name in [*partitions.split(","), *inflight.split(",")]:
        if name and "/" not in name:
            t.storage.write_bytes(f".hoodie/metadata/{name}/f", b"x")
    return t.storage
