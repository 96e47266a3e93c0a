"""Log files of Merge-on-Read tables: names, blocks Hudi on Spark wrote, and blocks we write that
hudi-rs reads and merges."""
from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import os
import shutil
import struct
import zipfile
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from multiwriter.errors import InvalidRecordError, SchemaMismatchError, TableFormatError
from multiwriter.format import log_file as lf
from multiwriter.table import metadata
from multiwriter.format.schema import arrow_to_avro
from tests.oracle import FIXTURES, hudi_read

MOR_FIXTURES = ["8i1u", "8i3d", "8i3u1d"]
DATA_COLUMNS = ["ts", "uuid", "rider", "driver", "fare", "city"]
T1 = "20250101000000001"
T2 = "20250101000000002"


def unzip_mor(name: str, dest: Path) -> Path:
    """A copy of ``mor_v8_trips_<name>`` in ``dest``; returns the table root."""
    with zipfile.ZipFile(FIXTURES / f"mor_v8_trips_{name}.zip") as zf:
        zf.extractall(dest)
    shutil.rmtree(dest / "__MACOSX", ignore_errors=True)
    return dest / f"v8_trips_{name}"


def log_files(root: Path) -> list[Path]:
    """Every log file under ``root``, hidden directories (the metadata table) included."""
    found = []
    for d, _, names in os.walk(root):
        found += [Path(d) / n for n in names if ".log." in n]
    return sorted(found)


# -- names --------------------------------------------------------------------------


def test_log_file_name_round_trips():
    name = ".87a4c895-1f59-4518-972f-27f49a92c7b4-0_20250713011914363.log.1_0-265-414"
    parsed = lf.parse_log_file(name)
    assert parsed == lf.LogFileName("87a4c895-1f59-4518-972f-27f49a92c7b4-0", "20250713011914363", 1, "0-265-414")
    assert parsed.name == name
    assert lf.LogFileName("files-0000-0", "00000000000000000", 12, "10-999-2838").name == \
        ".files-0000-0_00000000000000000.log.12_10-999-2838"


@pytest.mark.parametrize("name", [
    "87a4c895-1f59-4518-972f-27f49a92c7b4-0_0-252-389_20250713011913147.parquet",  # a base file
    "87a4c895-0_20250713011914363.log.1_0-265-414",  # no leading dot
    ".87a4c895-0_2025071301191436.log.1_0-265-414",  # 16-digit time
    ".87a4c895-0_20250713011914363.log.0_0-265-414",  # versions start at 1
    ".87a4c895-0_20250713011914363.log.01_0-265-414",
    ".87a4c895-0_20250713011914363.log.1_0-265",  # token of two parts
    ".87a4c895-0_20250713011914363.log.1_0-265-x",
    ".87a4_c895-0_20250713011914363.log.1_0-265-414",  # underscore in the file id
    ".87a4c895-0_20250713011914363.log.1_0-265-414.cdc",
    ".87a4c895-0_20250713011914363.archive.1_0-265-414",
    "._87a4c895-0_20250713011914363.log.1_0-265-414",
    "",
])
def test_other_names_are_not_log_files(name):
    assert lf.parse_log_file(name) is None


@pytest.mark.parametrize("parts", [
    ("a_b", T1, 1, "0-1-1"), ("", T1, 1, "0-1-1"), ("a", "2025", 1, "0-1-1"), ("a", T1, 0, "0-1-1"),
    ("a", T1, True, "0-1-1"), ("a", T1, 1, "0-1"),
])
def test_invalid_name_parts_are_refused(parts):
    with pytest.raises(ValueError):
        lf.LogFileName(*parts)


# -- what Hudi on Spark wrote ---------------------------------------------------------


@pytest.mark.needs_fixtures
@pytest.mark.parametrize("name", MOR_FIXTURES)
def test_every_fixture_log_file_decodes(name, tmp_path):
    root = unzip_mor(name, tmp_path)
    files = log_files(root)
    assert files
    kinds = set()
    for path in files:
        parsed = lf.parse_log_file(path.name)
        assert parsed is not None, path.name
        blocks = lf.read_log_blocks(path.read_bytes(), source=str(path))
        assert blocks, path
        assert sum(b.length for b in blocks) == path.stat().st_size
        for b in blocks:
            kinds.add(b.kind)
            assert b.instant_time == parsed.instant_time
            if b.kind == lf.DATA:
                assert b.records.column_names == [f["name"] for f in b.schema["fields"]]
                assert set(b.records.column("_hoodie_file_name").to_pylist()) == {parsed.file_id}
                assert set(b.records.column("_hoodie_commit_time").to_pylist()) == {parsed.instant_time}
            if b.kind == lf.DELETE:
                assert b.records.column_names == list(lf.DELETE_COLUMNS)
    assert lf.CORRUPT not in kinds
    expected = {"8i1u": {lf.DATA}, "8i3d": {lf.DELETE}, "8i3u1d": {lf.DATA, lf.DELETE, lf.HFILE}}[name]
    assert kinds == expected


def _latest_slice_changes(root: Path) -> dict[str, dict | None]:
    """Per record key, the last change the logs of each group's latest file slice make: the
    record's data columns, or None for a delete. Logs older than the group's newest base file
    were compacted into it."""
    newest_base: dict[str, str] = {}
    for p in root.glob("city=*/*.parquet"):
        file_id, _, instant = p.stem.split("_")
        newest_base[file_id] = max(newest_base.get(file_id, ""), instant)
    logs = []
    for p in root.glob("city=*/.*.log.*"):
        parsed = lf.parse_log_file(p.name)
        if parsed.instant_time >= newest_base.get(parsed.file_id, ""):
            logs.append((parsed.instant_time, p))
    changes: dict[str, dict | None] = {}
    for _, p in sorted(logs):
        for b in lf.read_log_blocks(p.read_bytes(), source=str(p)):
            if b.kind == lf.DATA:
                for row in b.records.select(["_hoodie_record_key", *DATA_COLUMNS]).to_pylist():
                    changes[row.pop("_hoodie_record_key")] = row
            elif b.kind == lf.DELETE:
                for key in b.records.column("record_key").to_pylist():
                    changes[key] = None
    return changes


@pytest.mark.needs_fixtures
@pytest.mark.parametrize("name", MOR_FIXTURES)
def test_fixture_log_contents_agree_with_hudi_rs(name, tmp_path):
    root = unzip_mor(name, tmp_path)
    changes = _latest_slice_changes(root)
    snapshot = {r["uuid"]: r for r in hudi_read(str(root)).select(DATA_COLUMNS).to_pylist()}
    assert changes
    for key, row in changes.items():
        if row is None:
            assert key not in snapshot
        else:
            assert snapshot[key] == row
    # what the SQL scripts did, as a check that the comparison above compared something
    riders = {k: (r or {}).get("rider") for k, r in changes.items()}
    fares = {r["rider"]: r["fare"] for r in changes.values() if r}
    if name == "8i1u":
        assert fares == {"rider-D": 25.0}
    elif name == "8i3d":
        assert len(changes) == 3 and all(r is None for r in changes.values())
        assert {"334e26e9-8355-45cc-97c6-c31daf0df330", "e96c4396-3fad-413a-a942-4cb36106d721",
                "9909a8b1-2d15-4d3d-8ec9-efc48c536a00"} == set(changes)
    else:
        assert fares == {"rider-G": 0.0} and set(riders.values()) == {"rider-G"}


def _header_span(block: lf.LogBlock) -> int:
    return 4 + sum(8 + len(v.encode()) for v in block.header.values())


def _header_entries(data: bytes, span: int) -> set[bytes]:
    """The header's entries as byte strings (their order is the writer's hash-map order)."""
    region = data[22:22 + span]
    entries, pos = set(), 4
    while pos < len(region):
        (n,) = struct.unpack_from(">i", region, pos + 4)
        entries.add(region[pos:pos + 8 + n])
        pos += 8 + n
    return entries


@pytest.mark.needs_fixtures
@pytest.mark.parametrize("name", ["8i1u", "8i3d"])
def test_reencoding_a_fixture_log_gives_the_bytes_hudi_wrote(name, tmp_path):
    """Java Hudi as the oracle: our encoding of what a Spark-written log file holds is that file,
    byte for byte, except for the order of the header entries."""
    (path,) = log_files(unzip_mor(name, tmp_path))
    original = path.read_bytes()
    (block,) = lf.read_log_blocks(original)
    if block.kind == lf.DATA:
        ours = lf.encode_data_block(block.records, block.schema, instant_time=block.instant_time)
    else:
        ours = lf.encode_delete_block(block.records, instant_time=block.instant_time, schema=block.schema)
    span = _header_span(block)
    assert len(ours) == len(original)
    assert ours[:22] == original[:22]
    assert ours[22 + span:] == original[22 + span:]
    assert _header_entries(ours, span) == _header_entries(original, span)


# -- our blocks through our decoder and fastavro ----------------------------------------


def _typed_table() -> pa.Table:
    return pa.table({
        "s": pa.array(["a", None, "ü€"], pa.string()),
        "i8": pa.array([1, None, -128], pa.int8()),
        "i32": pa.array([2**31 - 1, None, -5], pa.int32()),
        "i64": pa.array([2**62, -1, None], pa.int64()),
        "f32": pa.array([1.5, None, -0.25], pa.float32()),
        "f64": pa.array([None, 3.25, -1e300], pa.float64()),
        "b": pa.array([True, False, None], pa.bool_()),
        "ts_utc": pa.array([1_700_000_000_123_456, None, 0], pa.timestamp("us", tz="UTC")),
        "ts_local_ms": pa.array([None, 1_700_000_000_123, -1], pa.timestamp("ms")),
        "d": pa.array([dt.date(2024, 2, 29), None, dt.date(1969, 12, 31)], pa.date32()),
        "dec": pa.array([decimal.Decimal("12345.67"), decimal.Decimal("-0.01"), None], pa.decimal128(10, 2)),
        "bin": pa.array([b"\x00\xff", None, b""], pa.binary()),
    })


def _meta(data: pa.Table, instant: str = T1) -> pa.Table:
    keys = [f"k{i}" for i in range(data.num_rows)]
    return lf.with_log_meta_columns(data, record_keys=keys, partition_path="p=1", file_id="fg-0",
                                    instant_time=instant)


def test_data_block_round_trips_types_and_nulls():
    data = _typed_table()
    schema = arrow_to_avro(data.schema, "t")
    records = _meta(data)
    (block,) = lf.read_log_blocks(lf.encode_data_block(records, schema, instant_time=T1))
    assert block.kind == lf.DATA and block.block_type == lf.BlockType.AVRO_DATA
    assert block.header == {"INSTANT_TIME": T1, "SCHEMA": block.header["SCHEMA"]}
    assert block.records.equals(records)
    assert block.records.column("_hoodie_commit_seqno").to_pylist() == [f"{T1}_0_{i}" for i in range(3)]
    assert block.records.column("_hoodie_file_name").to_pylist() == ["fg-0"] * 3


@pytest.mark.parametrize("data_format, block_type", [("parquet", lf.BlockType.PARQUET_DATA), ("avro", lf.BlockType.AVRO_DATA)])
def test_log_files_write_parquet_or_avro_data_blocks(data_format, block_type):
    """Parquet data blocks (the writer's default: encoded and decoded column at a time) carry the
    same records and headers as Avro ones; pyarrow reads the block's content as a Parquet file."""
    import pyarrow.parquet as pq

    data = _typed_table()
    records = _meta(data)
    raw = lf.encode_log_file(instant_time=T1, schema=arrow_to_avro(data.schema, "t"), records=records,
                             data_format=data_format)
    (block,) = lf.read_log_blocks(raw)
    assert block.block_type == block_type and block.header["INSTANT_TIME"] == T1 and "SCHEMA" in block.header
    assert block.records.to_pylist() == records.to_pylist()
    if data_format == "parquet":
        start = raw.index(b"PAR1")
        assert pq.read_table(pa.BufferReader(raw[start:raw.rindex(b"PAR1") + 4])).to_pylist() == records.to_pylist()


def test_parquet_data_blocks_decode_only_the_asked_columns():
    """``columns``: a Parquet block decodes those of its columns (in its own order; one it lacks is
    left out); an Avro block decodes whole."""
    data = _typed_table()
    records = _meta(data)
    schema = arrow_to_avro(data.schema, "t")
    raw = lf.encode_log_file(instant_time=T1, schema=schema, records=records, data_format="parquet")
    (block,) = lf.read_log_blocks(raw, columns=["f64", "_hoodie_record_key", "not_there"])
    assert block.records.schema.names == ["_hoodie_record_key", "f64"]
    assert block.records.to_pylist() == records.select(["_hoodie_record_key", "f64"]).to_pylist()
    raw = lf.encode_log_file(instant_time=T1, schema=schema, records=records, data_format="avro")
    (block,) = lf.read_log_blocks(raw, columns=["f64"])
    assert block.records.to_pylist() == records.to_pylist()


def test_data_block_records_are_plain_avro_of_the_header_schema():
    """fastavro, reading one record with the SCHEMA header, sees the values we meant (an oracle
    for the Avro encoding independent of our decoder's Arrow conversion)."""
    data = _typed_table()
    encoded = lf.encode_data_block(_meta(data), arrow_to_avro(data.schema, "t"), instant_time=T1)
    (block,) = lf.read_log_blocks(encoded)
    content_start = 22 + _header_span(block) + 8
    version, count, first_len = struct.unpack_from(">iii", encoded, content_start)
    assert (version, count) == (3, 3)
    body = encoded[content_start + 12:content_start + 12 + first_len]
    record = fastavro.schemaless_reader(io.BytesIO(body), fastavro.parse_schema(block.schema), None)
    assert record["_hoodie_record_key"] == "k0"
    assert record["s"] == "a" and record["i8"] == 1 and record["f32"] == 1.5 and record["f64"] is None
    assert record["ts_utc"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=dt.timezone.utc)
    assert record["d"] == dt.date(2024, 2, 29)
    assert record["dec"] == decimal.Decimal("12345.67")
    assert record["bin"] == b"\x00\xff"


def test_data_block_with_only_strings_and_longs_round_trips():
    """A schema of the types the compiled encoder covers takes that path; same result."""
    data = pa.table({"id": pa.array([1, None, -(2**40)], pa.int64()), "name": ["x", "y", None],
                     "ok": pa.array([None, True, False])})
    records = _meta(data)
    (block,) = lf.read_log_blocks(lf.encode_data_block(records, arrow_to_avro(data.schema, "t"), instant_time=T1))
    assert block.records.equals(records)


@pytest.mark.parametrize("ordering", [
    None,
    pa.array([5, None], pa.int32()),
    pa.array([2**40, 7], pa.int64()),
    pa.array([1.5, -2.0], pa.float64()),
    pa.array([0.5, None], pa.float32()),
    pa.array(["b", "a"], pa.string()),
    pa.array([b"\x01", b""], pa.binary()),
    pa.array([True, False], pa.bool_()),
    pa.array([dt.date(2020, 1, 1), None], pa.date32()),
    pa.array([1_700_000_000_000_001, 0], pa.timestamp("us", tz="UTC")),
    pa.array([decimal.Decimal("1.25"), decimal.Decimal("-3")], pa.decimal128(12, 3)),
    pa.array([None, None], pa.null()),
])
def test_delete_block_round_trips_ordering_values(ordering):
    cols = {"record_key": ["k1", "k2"], "partition_path": ["p=1", ""]}
    if ordering is not None:
        cols["ordering_value"] = ordering
    (block,) = lf.read_log_blocks(lf.encode_delete_block(pa.table(cols), instant_time=T1))
    assert block.kind == lf.DELETE and block.header == {"INSTANT_TIME": T1}
    got = block.records
    assert got.column("record_key").to_pylist() == ["k1", "k2"]
    assert got.column("partition_path").to_pylist() == ["p=1", ""]
    values = got.column("ordering_value")
    if ordering is None:  # Hudi's default: IntWrapper(0)
        assert values.type == pa.int32() and values.to_pylist() == [0, 0]
    elif pa.types.is_date(ordering.type):  # Hudi 1.1's IntWrapper of the days
        assert values.type == pa.int32() and values.to_pylist() == pc.cast(ordering, pa.int32()).to_pylist()
    elif pa.types.is_timestamp(ordering.type):  # Hudi 1.1's LongWrapper of the Avro long (micros here)
        assert values.type == pa.int64() and values.to_pylist() == pc.cast(ordering, pa.int64()).to_pylist()
    elif pa.types.is_decimal(ordering.type):
        assert values.type == pa.decimal128(30, 15)
        assert values.to_pylist() == [decimal.Decimal("1.25"), decimal.Decimal("-3")]
    else:
        assert values.type == ordering.type
        assert values.to_pylist() == ordering.to_pylist()


def test_log_file_of_several_blocks_with_a_rollback():
    data = pa.table({"id": pa.array([1], pa.int64())})
    schema = arrow_to_avro(data.schema, "t")
    deletes = pa.table({"record_key": ["k9"], "partition_path": ["p=1"]})
    first = lf.encode_log_file(instant_time=T1, schema=schema, records=_meta(data), deletes=deletes)
    rollback = lf.encode_rollback_block(instant_time=T2, target_instant_time=T1)
    blocks = lf.read_log_blocks(first + rollback)
    assert [b.kind for b in blocks] == [lf.DATA, lf.DELETE, lf.COMMAND]
    assert blocks[1].schema == blocks[0].schema  # Hudi puts the table schema in a delete block too
    assert blocks[2].is_rollback and not blocks[0].is_rollback
    assert blocks[2].instant_time == T2 and blocks[2].target_instant_time == T1
    assert blocks[2].records is None
    assert [b.offset for b in blocks] == [0, blocks[0].length, blocks[0].length + blocks[1].length]


def test_torn_write_and_garbage_become_corrupt_blocks():
    data = pa.table({"id": pa.array([1, 2], pa.int64())})
    good = lf.encode_data_block(_meta(data), arrow_to_avro(data.schema, "t"), instant_time=T1)
    deletes = lf.encode_delete_block(pa.table({"record_key": ["k1"], "partition_path": ["p"]}), instant_time=T2)
    torn = lf.read_log_blocks(good + deletes[:-10])
    assert [b.kind for b in torn] == [lf.DATA, lf.CORRUPT]
    assert torn[1].offset == len(good) and torn[1].length == len(deletes) - 10
    assert [b.kind for b in lf.read_log_blocks(good + deletes[:3])] == [lf.DATA, lf.CORRUPT]
    resync = lf.read_log_blocks(good + lf.MAGIC + b"\x00" * 40 + deletes)
    assert [b.kind for b in resync] == [lf.DATA, lf.CORRUPT, lf.DELETE]
    assert resync[2].records.column("record_key").to_pylist() == ["k1"]
    bad_size = bytearray(good)
    bad_size[6:14] = struct.pack(">q", 10**9)
    assert [b.kind for b in lf.read_log_blocks(bytes(bad_size) + deletes)] == [lf.CORRUPT, lf.DELETE]


def test_unreadable_log_files_raise_naming_the_file():
    assert lf.read_log_blocks(b"") == []
    with pytest.raises(TableFormatError, match="p/.f_x.log"):
        lf.read_log_blocks(b"PAR1" + b"\x00" * 40, source="p/.f_x.log")
    schema = json.dumps(lf.writer_schema(arrow_to_avro(pa.schema([("id", pa.int64())]), "t")))
    header = {lf.HeaderKey.INSTANT_TIME: T1, lf.HeaderKey.SCHEMA: schema}
    # framed correctly, but the one record is five bytes of an unterminated varint
    content = struct.pack(">iii", 3, 1, 5) + b"\xff" * 5
    with pytest.raises(TableFormatError, match="some.log"):
        lf.read_log_blocks(lf.encode_block(lf.BlockType.AVRO_DATA, header, content), source="some.log")
    with pytest.raises(TableFormatError, match="SCHEMA"):
        lf.read_log_blocks(lf.encode_block(lf.BlockType.AVRO_DATA, {lf.HeaderKey.INSTANT_TIME: T1}, content))


def test_encoding_refuses_what_it_cannot_write():
    data = pa.table({"id": pa.array([1], pa.int64())})
    schema = arrow_to_avro(pa.schema([("id", pa.int64()), ("missing", pa.string())]), "t")
    with pytest.raises(SchemaMismatchError, match="missing"):
        lf.encode_data_block(_meta(data), schema, instant_time=T1)
    with pytest.raises(ValueError):
        lf.encode_data_block(_meta(data), arrow_to_avro(data.schema, "t"), instant_time="2025")
    with pytest.raises(InvalidRecordError):
        lf.encode_log_file(instant_time=T1, schema=arrow_to_avro(data.schema, "t"))
    with pytest.raises(InvalidRecordError):
        lf.encode_delete_block(pa.table({"record_key": [None], "partition_path": ["p"]}), instant_time=T1)
    with pytest.raises(SchemaMismatchError):
        lf.encode_delete_block(pa.table({"record_key": ["k"]}), instant_time=T1)
    too_fine = pa.array([decimal.Decimal("1." + "1" * 20)], pa.decimal128(38, 20))
    with pytest.raises(InvalidRecordError):
        lf.encode_delete_block(pa.table({"record_key": ["k"], "partition_path": ["p"], "ordering_value": too_fine}),
                               instant_time=T1)


# -- a deltacommit of ours, read by hudi-rs ---------------------------------------------

RIDER_A = "334e26e9-8355-45cc-97c6-c31daf0df330"  # city=san_francisco, ts 1695159649087
RIDER_C = "e96c4396-3fad-413a-a942-4cb36106d721"  # city=san_francisco, ts 1695091554788
RIDER_F = "e3cf430c-889d-4015-bc98-59bdce1e530c"  # city=sao_paulo, ts 1695516137016
SF_GROUP = "87a4c895-1f59-4518-972f-27f49a92c7b4-0"
SP_GROUP = "f362fd72-680f-4a16-ade8-c3e20bc2026c-0"
BASE_INSTANT = "20250713011913147"
NEW_INSTANT, NEW_COMPLETION = "20250713011920000", "20250713011920500"


def _table_schema(root: Path) -> dict:
    for line in (root / ".hoodie/hoodie.properties").read_text().splitlines():
        if line.startswith("hoodie.table.create.schema="):
            return json.loads(line.split("=", 1)[1].replace("\\:", ":"))
    raise AssertionError("no create schema")


def _log_write_stat(partition: str, name: str, size: int, *, updates: int = 0, deletes: int = 0) -> dict:
    """A ``HoodieWriteStat`` for one new log file, with the fields Hudi fills for one (as in the
    fixtures' .deltacommit files)."""
    parsed = lf.parse_log_file(name)
    return {
        "fileId": parsed.file_id, "path": f"{partition}/{name}", "prevCommit": BASE_INSTANT,
        "numWrites": updates, "numDeletes": deletes, "numUpdateWrites": updates, "numInserts": 0,
        "totalWriteBytes": size, "totalWriteErrors": 0, "partitionPath": partition, "totalLogRecords": 0,
        "totalUpdatedRecordsCompacted": 0, "totalLogBlocks": 0, "totalCorruptLogBlock": 0, "totalRollbackBlocks": 0,
        "fileSizeInBytes": size, "logVersion": parsed.version, "logOffset": 0, "baseFile": "", "logFiles": [name],
        "runtimeStats": {"totalScanTime": 0, "totalCreateTime": 0, "totalUpsertTime": 0},
        "totalLogFilesCompacted": 0, "totalLogReadTimeMs": 0, "totalLogSizeCompacted": 0, "numUpdates": 0,
    }


def commit_deltacommit(root: Path, requested: str, completed: str, stats: dict[str, list[dict]], schema: dict) -> None:
    """The three timeline files of a completed deltacommit listing ``stats``."""
    timeline = root / ".hoodie/timeline"
    record = {"partitionToWriteStats": stats, "compacted": False, "extraMetadata": {"schema": json.dumps(schema)},
              "version": 1, "operationType": "UPSERT"}
    (timeline / f"{requested}.deltacommit.requested").write_bytes(b"")
    (timeline / f"{requested}.deltacommit.inflight").write_bytes(metadata.encode("commit", record))
    (timeline / f"{requested}_{completed}.deltacommit").write_bytes(metadata.encode("commit", record))


def _write_log(root: Path, partition: str, name: lf.LogFileName, data: bytes, **counts: int) -> dict:
    (root / partition / name.name).write_bytes(data)
    return _log_write_stat(partition, name.name, len(data), **counts)


def _update(schema: dict, key: str, ts: int, fare: float, rider: str, city: str) -> bytes:
    row = pa.table({"ts": pa.array([ts], pa.int64()), "uuid": [key], "rider": [rider], "driver": ["driver-NEW"],
                    "fare": [fare], "city": [city]})
    records = lf.with_log_meta_columns(row, record_keys=[key], partition_path=f"city={city}",
                                       file_id=SF_GROUP, instant_time=NEW_INSTANT)
    return lf.encode_log_file(instant_time=NEW_INSTANT, schema=schema, records=records)


def _snapshot(root: Path) -> dict[str, dict]:
    return {r["uuid"]: r for r in hudi_read(str(root)).select([*DATA_COLUMNS, "_hoodie_commit_time"]).to_pylist()}


@pytest.mark.needs_fixtures
def test_hudi_rs_merges_our_update_and_delete_log_files(tmp_path):
    root = unzip_mor("8i1u", tmp_path)
    schema = _table_schema(root)
    before = _snapshot(root)
    new_ts = before[RIDER_A]["ts"] + 1
    update = lf.LogFileName(SF_GROUP, NEW_INSTANT, 1, "0-1-1")
    delete = lf.LogFileName(SP_GROUP, NEW_INSTANT, 1, "1-1-2")
    deletes = pa.table({"record_key": [RIDER_F], "partition_path": ["city=sao_paulo"]})
    stats = {
        "city=san_francisco": [_write_log(root, "city=san_francisco", update,
                                          _update(schema, RIDER_A, new_ts, 77.25, "rider-A", "san_francisco"),
                                          updates=1)],
        "city=sao_paulo": [_write_log(root, "city=sao_paulo", delete,
                                      lf.encode_log_file(instant_time=NEW_INSTANT, schema=schema, deletes=deletes),
                                      deletes=1)],
    }
    commit_deltacommit(root, NEW_INSTANT, NEW_COMPLETION, stats, schema)

    after = _snapshot(root)
    assert after[RIDER_A] == {**before[RIDER_A], "ts": new_ts, "fare": 77.25, "driver": "driver-NEW",
                              "_hoodie_commit_time": NEW_INSTANT}
    assert RIDER_F not in after
    assert {k: v for k, v in after.items() if k != RIDER_A} == {k: v for k, v in before.items()
                                                                  if k not in (RIDER_A, RIDER_F)}


@pytest.mark.needs_fixtures
def test_hudi_rs_orders_our_log_records_by_their_ordering_values(tmp_path):
    """An update and a delete whose ordering values are older than the base records' lose the
    merge (event-time ordering): hudi-rs read our ordering values as the longs they are."""
    root = unzip_mor("8i1u", tmp_path)
    schema = _table_schema(root)
    before = _snapshot(root)
    stale_update = _update(schema, RIDER_C, before[RIDER_C]["ts"] - 1, 1.0, "rider-C", "san_francisco")
    deletes = pa.table({"record_key": [RIDER_F], "partition_path": ["city=sao_paulo"],
                        "ordering_value": pa.array([before[RIDER_F]["ts"] - 1], pa.int64())})
    stats = {
        "city=san_francisco": [_write_log(root, "city=san_francisco", lf.LogFileName(SF_GROUP, NEW_INSTANT, 1, "0-1-1"),
                                          stale_update, updates=1)],
        "city=sao_paulo": [_write_log(root, "city=sao_paulo", lf.LogFileName(SP_GROUP, NEW_INSTANT, 1, "1-1-2"),
                                      lf.encode_delete_block(deletes, instant_time=NEW_INSTANT, schema=schema),
                                      deletes=1)],
    }
    commit_deltacommit(root, NEW_INSTANT, NEW_COMPLETION, stats, schema)
    assert _snapshot(root) == before

    # the same delete with an ordering value equal to the record's wins
    newer = deletes.set_column(2, "ordering_value", pa.array([before[RIDER_F]["ts"]], pa.int64()))
    path = root / "city=sao_paulo" / lf.LogFileName(SP_GROUP, NEW_INSTANT, 1, "1-1-2").name
    path.write_bytes(lf.encode_delete_block(newer, instant_time=NEW_INSTANT, schema=schema))
    assert RIDER_F not in _snapshot(root)


@pytest.mark.parametrize("data_format", lf.DATA_BLOCK_FORMATS)
def test_a_partial_data_block_carries_hudis_is_partial_header(data_format):
    """Key ordinal 7 (``HeaderMetadataType.IS_PARTIAL``) with the value "true", as Hudi's
    partial-update writers mark a block; a block without it is full records."""
    data = pa.table({"ts": pa.array([1], pa.int64())})
    schema = arrow_to_avro(data.schema, "t")
    encoded = lf.encode_log_file(instant_time=T1, schema=schema, records=_meta(data), data_format=data_format, partial=True)
    assert struct.pack(">ii", 7, 4) + b"true" in encoded
    (block,) = lf.read_log_blocks(encoded)
    assert block.header["IS_PARTIAL"] == "true" and block.is_partial
    (full,) = lf.read_log_blocks(lf.encode_log_file(instant_time=T1, schema=schema, records=_meta(data),
                                                    data_format=data_format))
    assert "IS_PARTIAL" not in full.header and not full.is_partial
    assert not lf.LogBlock("data", {"IS_PARTIAL": "false"}).is_partial
    assert lf.LogBlock("data", {"IS_PARTIAL": "TRUE"}).is_partial  # Java's Boolean.parseBoolean
