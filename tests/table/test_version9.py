"""Table version 9 (Hudi 1.1): tables Hudi wrote are read as hudi-rs reads them and continued;
tables we create at version 9 carry Hudi 1.1's settings; a table upgraded from 8 to 9 between two
of our commits keeps its writers going."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest

import multiwriter as mw
from multiwriter.errors import TableFormatError
from multiwriter.table import properties as props
from multiwriter.table.properties import PROPERTIES_FILE, TableConfig
from tests.oracle import hudi_read, rows, unzip_fixture

V9 = [("cow", "v9_txns_simple_meta"), ("cow", "v9_txns_simple_nometa"), ("mor", "v9_txns_simple_meta"),
      ("mor", "v9_txns_simple_nometa"), ("mor", "v9_nonpartitioned_rollback")]
DATA = ["txn_id", "account_id", "txn_ts", "txn_datetime", "txn_date", "amount", "currency", "txn_type",
        "merchant_name", "is_international", "fee_amount", "txn_metadata"]


def _data(t: pa.Table) -> list[tuple]:
    return rows(t, [c for c in DATA if c in t.column_names])


@pytest.mark.needs_fixtures
@pytest.mark.parametrize(("kind", "name"), V9)
def test_reads_as_hudi_rs_at_every_instant(kind, name, tmp_path):
    path = str(unzip_fixture(name, tmp_path, kind))
    t = mw.Table.open(path)
    assert t.config.version == 9 and t.config.ordering_field == "txn_ts"
    assert _data(t.read()) == _data(hudi_read(path)) and t.read().num_rows > 0
    for i in t.timeline().completed_writes():
        assert _data(t.read(as_of=i.requested_time)) == _data(hudi_read(path, as_of=i.requested_time)), i
    if kind == "mor":
        assert _data(t.read(read_optimized=True)) == _data(hudi_read(path, read_optimized=True))


@pytest.mark.needs_fixtures
@pytest.mark.parametrize(("kind", "name"), V9)
def test_continues_a_hudi_1_1_table(kind, name, tmp_path):
    """Update, delete and insert into a table Hudi 1.1 wrote; hudi-rs (listing files from the
    metadata table where the table keeps one) reads each step as we do. Its files' footer bloom
    filters deny their own keys to our hashing: trusting them made every update a second copy of
    its key."""
    path = str(unzip_fixture(name, tmp_path, kind))
    table = mw.Table.open(path).read()
    before = table.select([c for c in table.column_names if not c.startswith("_hoodie_")])
    keys = sorted(before.column("txn_id").to_pylist())
    old = before.filter(pa.compute.equal(before.column("txn_id"), keys[0])).to_pylist()[0]
    gone_key = next(k for k in keys[1:] if keys.count(k) == 1)  # the rollback fixture holds one key twice
    gone = before.filter(pa.compute.equal(before.column("txn_id"), gone_key)).to_pylist()[0]
    cfg = mw.WriterConfig(writer_id="continue", lock=mw.InProcessLock())

    def batch(recs: list[dict]) -> pa.Table:
        return pa.Table.from_pylist(recs, schema=before.schema)

    mw.write(batch([{**old, "txn_ts": old["txn_ts"] + 1, "txn_type": "corrected"}]), path, cfg)
    assert _data(mw.Table.open(path).read()) == _data(hudi_read(path))
    mw.write(batch([gone]), path, mw.WriterConfig(writer_id="continue", lock=mw.InProcessLock(), operation="delete"))
    assert _data(mw.Table.open(path).read()) == _data(hudi_read(path))
    mw.write(batch([{**old, "txn_id": "TXN-900", "txn_ts": 1}]), path, cfg)
    got = mw.Table.open(path).read()
    assert _data(got) == _data(hudi_read(path))
    ids = got.column("txn_id").to_pylist()
    expect = [k for k in keys if k != gone_key] + ["TXN-900"]
    assert sorted(ids) == sorted(expect), "each key as often as before, the deleted one gone"
    types = dict(zip(ids, got.column("txn_type").to_pylist(), strict=True))
    assert types[old["txn_id"]] == "corrected"
    t = mw.Table.open(path)
    assert t.config.version == 9
    if name.endswith("_meta"):  # files and the indexes are kept; the others and their definitions go
        assert t.config.raw["hoodie.table.metadata.partitions"] == "column_stats,files,partition_stats,record_index"
        defs = json.loads((tmp_path / name / ".hoodie" / ".index_defs" / "index.json").read_text())
        # Hudi defines no partition_stats entry
        assert sorted(defs["indexDefinitions"]) == ["column_stats", "record_index"]


def _schema() -> pa.Schema:
    return pa.schema([("id", pa.string()), ("ts", pa.int64()), ("v", pa.float64()), ("d", pa.string()),
                      ("h", pa.string())])


def test_a_version_9_table_carries_hudi_1_1_settings(tmp_path):
    path = str(tmp_path / "t")
    t = mw.Table.create(path, name="t9", schema=_schema(), record_key="id", partition_by=["d"],
                        ordering_field="ts", table_version=9)
    raw = props.parse((tmp_path / "t" / PROPERTIES_FILE).read_text())
    assert raw["hoodie.table.version"] == "9" and raw["hoodie.table.ordering.fields"] == "ts"
    assert "hoodie.table.precombine.field" not in raw and "hoodie.compaction.payload.class" not in raw
    assert raw["hoodie.record.merge.mode"] == "EVENT_TIME_ORDERING"
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    b = pa.table({"id": ["a", "b"], "ts": [1, 1], "v": [1.0, 2.0], "d": ["x", "y"], "h": ["1", "2"]}, schema=_schema())
    mw.write(b, path, cfg)
    mw.write(pa.table({"id": ["a"], "ts": [2], "v": [9.0], "d": ["x"], "h": ["1"]}, schema=_schema()), path, cfg)
    got = t.read()
    assert rows(got, ["id", "v"]) == [("a", 9.0), ("b", 2.0)] == rows(hudi_read(path), ["id", "v"])


def test_complex_key_with_one_field_is_written_field_colon_value_on_version_9(tmp_path):
    """Hudi 1.1's complex key generator writes ``field:value`` even for one key field; version 8
    tables keep the bare value they always had."""
    got = {}
    for version in (8, 9):
        path = str(tmp_path / f"v{version}")
        mw.Table.create(path, name=f"c{version}", schema=_schema(), record_key="id", partition_by=["d", "h"],
                        ordering_field="ts", table_version=version)
        cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
        mw.write(pa.table({"id": ["a"], "ts": [1], "v": [1.0], "d": ["x"], "h": ["1"]}, schema=_schema()), path, cfg)
        mw.write(pa.table({"id": ["a"], "ts": [2], "v": [5.0], "d": ["x"], "h": ["1"]}, schema=_schema()), path, cfg)
        theirs = hudi_read(path)
        got[version] = theirs.column("_hoodie_record_key").to_pylist()
        assert rows(theirs, ["id", "v"]) == [("a", 5.0)] == rows(mw.Table.open(path).read(), ["id", "v"])
    assert got == {8: ["a"], 9: ["id:a"]}


def _upgrade_to_9(table_dir) -> None:
    """What Hudi 1.1's upgrade from 8 does to ``hoodie.properties`` (EightToNineUpgradeHandler):
    the precombine field becomes the ordering fields, the payload class goes, the version is 9."""
    f = table_dir / PROPERTIES_FILE
    raw = props.parse(f.read_text())
    if "hoodie.table.precombine.field" in raw:
        raw["hoodie.table.ordering.fields"] = raw.pop("hoodie.table.precombine.field")
    raw.pop("hoodie.compaction.payload.class", None)
    raw["hoodie.table.version"] = "9"
    f.write_text(props.render(raw))


@pytest.mark.parametrize("partition_by", [["d"], ["d", "h"]])
def test_writers_go_on_when_the_table_is_upgraded_between_their_commits(tmp_path, partition_by):
    """A writer opened before the upgrade goes on after it, and its keys keep their format (a
    complex key of one field stays the bare value the table was created with)."""
    path = str(tmp_path / "t")
    mw.Table.create(path, name="up", schema=_schema(), record_key="id", partition_by=partition_by, ordering_field="ts")
    lock = mw.InProcessLock()
    w = mw.Writer(mw.Table.open(path), mw.WriterConfig(writer_id="long-lived", lock=lock))
    w.write(pa.table({"id": ["a", "b"], "ts": [1, 1], "v": [1.0, 1.0], "d": ["x", "x"], "h": ["1", "1"]},
                     schema=_schema()))
    _upgrade_to_9(tmp_path / "t")
    r = w.write(pa.table({"id": ["a", "c"], "ts": [2, 1], "v": [2.0, 3.0], "d": ["x", "x"], "h": ["1", "1"]},
                         schema=_schema()))
    assert r.attempts == 1
    mw.write(pa.table({"id": ["b"], "ts": [5], "v": [7.0], "d": ["x"], "h": ["1"]}, schema=_schema()), path,
             mw.WriterConfig(writer_id="other", lock=lock))
    t = mw.Table.open(path)
    assert t.config.version == 9 and "hoodie.table.precombine.field" not in t.config.raw
    want = [("a", 2.0), ("b", 7.0), ("c", 3.0)]
    assert rows(t.read(), ["id", "v"]) == want == rows(hudi_read(path), ["id", "v"])
    assert sorted(hudi_read(path).column("_hoodie_record_key").to_pylist()) == ["a", "b", "c"]


@pytest.mark.parametrize(("key", "value"), [
    ("hoodie.record.merge.mode", "CUSTOM"),
    ("hoodie.table.partial.update.mode", "IGNORE_DEFAULTS"),
    ("hoodie.table.version", "10"),
])
def test_settings_we_do_not_write_are_refused_by_name(key, value):
    base = TableConfig(name="t", record_key=("id",), ordering_field="ts", version=9).to_properties()
    base[key] = value
    if key == "hoodie.table.version":
        with pytest.raises(TableFormatError, match="version 10"):
            TableConfig.from_properties(base)
        return
    cfg = TableConfig.from_properties(base)
    with pytest.raises(TableFormatError, match=key.replace(".", r"\.")):
        cfg.check_writable()
    TableConfig.from_properties(TableConfig(name="t", record_key=("id",), version=9).to_properties()).check_writable()


def test_several_ordering_fields_are_writable():
    """Writers order by every field (tests/write/test_ordering_fields.py)."""
    base = TableConfig(name="t", record_key=("id",), ordering_field="ts", version=9).to_properties()
    cfg = TableConfig.from_properties({**base, "hoodie.table.ordering.fields": "ts,v"})
    cfg.check_writable()
    assert cfg.ordering_fields == ("ts", "v") and cfg.ordering_field == "ts"


def test_a_write_into_a_table_with_a_custom_merger_is_refused_and_leaves_nothing(tmp_path):
    path = str(tmp_path / "t")
    mw.Table.create(path, name="cm", schema=_schema(), record_key="id", ordering_field="ts", table_version=9)
    f = tmp_path / "t" / PROPERTIES_FILE
    raw = props.parse(f.read_text())
    raw["hoodie.record.merge.mode"] = "CUSTOM"
    f.write_text(props.render(raw))
    with pytest.raises(TableFormatError, match="CUSTOM"):
        mw.write(pa.table({"id": ["a"], "ts": [1], "v": [1.0], "d": ["x"], "h": ["1"]}, schema=_schema()), path,
                 mw.WriterConfig(writer_id="w", lock=mw.InProcessLock()))
    assert [p.name for p in (tmp_path / "t" / ".hoodie" / "timeline").iterdir() if p.is_file()] == []
