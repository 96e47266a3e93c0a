"""The record index's bytes (:mod:`multiwriter.format.record_index`) against what Hudi wrote:
the Spark-written fixtures of Hudi 1.1 (table version 9, a JVM in UTC-6) and 1.0 (version 8, in
UTC). Oracles: the fixtures' own files (their file group of each key, their cell bytes), the
live rows hudi-rs reads from the data tables, the data timelines' instant times, and hudi-rs
reading a base HFile we wrote."""
from __future__ import annotations

import datetime as dt
import io
import json
import os
from pathlib import Path

import fastavro
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiwriter.errors import TableFormatError
from multiwriter.format import hfile
from multiwriter.format import record_index as ri
from multiwriter.format.instant import decode_file_name
from multiwriter.format.log_file import BlockType, HeaderKey, encode_block, parse_log_file, read_log_blocks
from multiwriter.table import metadata_files
from tests.oracle import hudi_read, unzip_fixture

#: the zone of the JVM that wrote each fixture (its hoodie.properties say so: "CST" / "UTC")
CST = dt.timezone(dt.timedelta(hours=-6))
FIXTURES = {"cow9": ("v9_txns_simple_meta", "cow", CST), "mor9": ("v9_txns_simple_meta", "mor", CST),
            "mor8": ("v8_trips_8i3u1d", "mor", ri.UTC)}
SCHEMA = ri.with_record_index(metadata_files.RECORD_SCHEMA)


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ri")
    return {k: unzip_fixture(name, root / k, kind) for k, (name, kind, _) in FIXTURES.items()}


def _files(table: Path) -> dict[str, bytes]:
    d = table / ".hoodie/metadata/record_index"
    return {n: (d / n).read_bytes() for n in sorted(os.listdir(d)) if n.endswith(".hfile") or parse_log_file(n)}


def _changes(name: str, data: bytes, zone: dt.tzinfo) -> list[ri.Changes]:
    if name.endswith(".hfile"):
        return [ri.Changes(updates=ri.decode_hfile(data, source=name, zone=zone))]
    return ri.decode_log_file(data, source=name, zone=zone)


def _group_of(name: str) -> int:
    base = ri.parse_base_file_name(name)
    g = ri.file_group_of(base.file_id if base else parse_log_file(name).file_id)
    assert g is not None, name
    return g


def _completed(timeline: Path) -> dict[str, str]:
    return {i.requested_time: i.completion_time or i.requested_time for n in os.listdir(timeline)
            if (i := decode_file_name(n)) is not None and i.is_completed}


def _merged(table: Path, zone: dt.tzinfo) -> tuple[int, dict[str, ri.Location]]:
    """(file groups, key -> location) of the index's latest slices: per group the newest
    completed base, then the logs whose deltacommit completed at or after it, by completion."""
    done = _completed(table / ".hoodie/metadata/.hoodie/timeline")
    bases: dict[int, list[tuple[str, str]]] = {}
    logs: dict[int, list[tuple[str, int, str]]] = {}
    for n in _files(table):
        b, lg = ri.parse_base_file_name(n), parse_log_file(n)
        t = b.instant_time if b else lg.instant_time
        if t in done:
            (bases.setdefault(_group_of(n), []).append((t, n)) if b else
             logs.setdefault(_group_of(n), []).append((done[t], lg.version, n)))
    files = _files(table)
    out: dict[str, ri.Location] = {}
    groups = set(bases) | set(logs)
    for g in groups:
        base_t, base = max(bases.get(g, [("", None)]))
        order = ([base] if base else []) + [n for c, _, n in sorted(logs.get(g, [])) if c >= base_t]
        for n in order:
            for ch in _changes(n, files[n], zone):
                out.update(ch.updates)
                for k in ch.deletes:
                    out.pop(k, None)
    return len(groups), out


def _file_id(file_name: str) -> str:
    """The file group of a row's ``_hoodie_file_name``: a base file's, a log file's, or (a row a
    Merge-on-Read log wrote) the bare file id."""
    if "_" not in file_name:
        return file_name
    return file_name.lstrip(".").split("_", 1)[0]


# -- Hudi's files ----------------------------------------------------------------------------
@pytest.mark.needs_fixtures
@pytest.mark.parametrize("which", FIXTURES)
def test_every_key_is_in_the_file_group_its_hash_names(tables, which):
    table, (_, _, zone) = tables[which], FIXTURES[which]
    files = _files(table)
    groups = {_group_of(n) for n in files}
    assert groups == set(range(10)) == set(range(ri.MIN_FILE_GROUPS))
    seen = 0
    for n, data in files.items():
        for ch in _changes(n, data, zone):
            for key in [*ch.updates, *ch.deletes]:
                assert ri.file_group_index(key, len(groups)) == _group_of(n), (key, n)
                seen += 1
    assert seen >= 10


@pytest.mark.needs_fixtures
@pytest.mark.parametrize("which", FIXTURES)
def test_the_index_places_every_live_row_in_its_file_group(tables, which):
    """Decoded and merged, the index holds exactly the live keys, each at the partition and file
    group of the row hudi-rs reads, at the time of a commit completed on the data timeline."""
    table, (_, kind, zone) = tables[which], FIXTURES[which]
    n, index = _merged(table, zone)
    live = hudi_read(str(table))
    rows = {k: (p, _file_id(f)) for k, p, f in zip(live["_hoodie_record_key"].to_pylist(),
                                                  live["_hoodie_partition_path"].to_pylist(),
                                                  live["_hoodie_file_name"].to_pylist(), strict=True)}
    assert rows and set(index) == set(rows)
    assert {k: (loc.partition, loc.file_id) for k, loc in index.items()} == rows
    data_instants = set(_completed(table / ".hoodie/timeline"))
    assert {loc.instant_time for loc in index.values()} <= data_instants
    assert all(loc.position is None for loc in index.values())
    if kind == "cow":  # the latest base files themselves, read with pyarrow
        from hudi import HudiTableBuilder

        slices = HudiTableBuilder.from_base_uri(str(table)).build().get_file_slices()
        from_files = {}
        for s in slices:
            t = pq.read_table(table / s.base_file_relative_path(), columns=["_hoodie_record_key"])
            from_files.update(dict.fromkeys(t.column("_hoodie_record_key").to_pylist(), (s.partition_path, s.file_id)))
        assert from_files == {k: (loc.partition, loc.file_id) for k, loc in index.items()}


@pytest.mark.needs_fixtures
@pytest.mark.parametrize("which", FIXTURES)
def test_hudis_cells_encode_again_byte_for_byte(tables, which):
    """Every cell Hudi wrote, decoded and encoded again in the schema its file declares (and,
    in a base file, with that file's name), is the same bytes; and encoded in the files
    partition's schema extended here, too (the fields the record index leaves null take the
    same byte in either)."""
    table, (_, _, zone) = tables[which], FIXTURES[which]
    checked = 0
    for n, data in _files(table).items():
        if n.endswith(".hfile"):
            found = [(hfile.read(data, source=n), n)]
        else:
            found = [(hfile.read(b.content), None) for b in read_log_blocks(data) if b.block_type == BlockType.HFILE_DATA]
        for h, base_name in found:
            schema = h.file_info[b"schema"].decode()
            entries = ri.decode_cells(h.cells, schema, source=n, zone=zone)
            theirs = [(k.decode(), v) for k, v in h.cells]
            assert ri.encode_cells(entries, schema, zone=zone, file_name=base_name) == theirs, n
            assert ri.encode_cells(entries, SCHEMA, zone=zone, file_name=base_name) == theirs, n
            checked += len(theirs)
    assert checked >= 10


@pytest.mark.needs_fixtures
def test_deletes_are_delete_blocks_of_keys_in_the_record_index_partition(tables):
    files = _files(tables["cow9"])
    name = ".record-index-0004-0_20260307162446287.log.1_5-132-293"  # DELETE FROM ... WHERE txn_id = 'TXN-005'
    [theirs] = read_log_blocks(files[name])
    ours = read_log_blocks(ri.encode_log_file("20260307162446287", {}, ["TXN-005"], SCHEMA))
    assert [b.block_type for b in ours] == [BlockType.DELETE]
    assert ours[0].records.to_pylist() == theirs.records.to_pylist() == [
        {"record_key": "TXN-005", "partition_path": "record_index", "ordering_value": 0}]
    assert ours[0].records.schema == theirs.records.schema  # IntWrapper(0), as Hudi's
    assert ours[0].instant_time == theirs.instant_time
    assert ri.decode_log_file(files[name]) == [ri.Changes("20260307162446287", deletes=["TXN-005"])]
    # each file group opens with an empty delete block at the index's initialization time
    assert ri.decode_log_file(files[".record-index-0009-0_00000000000000002.log.1_0-0-0"]) == [
        ri.Changes("00000000000000002")]


# -- literal cases ---------------------------------------------------------------------------
#: (record key, file group) as the fixtures' file names show them, 10 file groups
HUDIS_GROUPS = [
    ("TXN-001", 8), ("TXN-002", 7), ("TXN-003", 6), ("TXN-004", 5), ("TXN-005", 4), ("TXN-006", 3),
    ("TXN-007", 2), ("TXN-008", 1), ("TXN-009", 0), ("TXN-010", 8), ("TXN-016", 2), ("TXN-018", 0),
    ("e96c4396-3fad-413a-a942-4cb36106d721", 1), ("c8abbe79-8d89-47ea-b4ce-4d224bae5bfa", 3),
    ("334e26e9-8355-45cc-97c6-c31daf0df330", 4), ("3eeb61f7-c2b0-4636-99bd-5d7a5a1d2c04", 6),
    ("7a84095f-737f-40bc-b62f-6b69664712d2", 9), ("e3cf430c-889d-4015-bc98-59bdce1e530c", 9),
]


@pytest.mark.parametrize(("key", "group"), HUDIS_GROUPS)
def test_file_group_of_keys_hudi_placed(key, group):
    assert ri.file_group_index(key, 10) == group


def test_hash_is_javas_string_hash_code():
    # "polygenelubricants".hashCode() is Integer.MIN_VALUE: Math.abs leaves it negative, and
    # Math.abs(MIN_VALUE % 10) is 8; "Aa" and "BB" share a hash code (2112); a character outside
    # the BMP counts as its two UTF-16 code units (0xD83D, 0xDE00)
    assert ri.file_group_index("polygenelubricants", 10) == 8
    assert ri.file_group_index("polygenelubricants", 7) == 2**31 % 7
    assert ri.file_group_index("Aa", 1000) == ri.file_group_index("BB", 1000) == 112
    assert ri.file_group_index("\U0001F600", 10**7) == 31 * 0xD83D + 0xDE00
    assert ri.file_group_index("", 10) == 0 and ri.file_group_index("x", 1) == 0
    with pytest.raises(ValueError):
        ri.file_group_index("x", 0)


def test_file_group_names():
    assert ri.file_group_id(3) == "record-index-0003-0" and ri.file_group_of("record-index-0003-0") == 3
    assert ri.file_group_of("files-0000-0") is None and ri.file_group_of("record-index-3-0") is None
    name = "record-index-0009-0_10-170-399_20260307162449278.hfile"
    parsed = ri.parse_base_file_name(name)
    assert parsed == ri.BaseFileName("record-index-0009-0", "10-170-399", "20260307162449278") and parsed.group == 9
    assert ri.base_file_name(parsed.file_id, parsed.write_token, parsed.instant_time) == name
    assert ri.parse_base_file_name(".record-index-0009-0_00000000000000002.log.1_0-0-0") is None


def test_file_id_round_trip_through_high_and_low_bits():
    # TXN-008's file group in the 1.1 fixture, as its first log block stores it
    parts = ri.encode_file_id("07838327-b037-4532-a9df-3c5b05dd823d-0")
    assert parts == ri.FileIdParts(ri.ENCODING_UUID, 541420586697966898, -6206175399855160771, 0, "")
    assert ri.decode_file_id(parts) == "07838327-b037-4532-a9df-3c5b05dd823d-0"
    bare = ri.encode_file_id("07838327-b037-4532-a9df-3c5b05dd823d")
    assert bare.file_index == ri.MISSING_FILE_INDEX and ri.decode_file_id(bare) == "07838327-b037-4532-a9df-3c5b05dd823d"
    for raw in ("my-file", "07838327-B037-4532-A9DF-3C5B05DD823D-0", "07838327-b037-4532-a9df-3c5b05dd823d-007",
                "07838327-b037-4532-a9df-3c5b05dd823d-99999999999", "", "07838327-b037-4532-a9df-3c5b05dd823d-x"):
        parts = ri.encode_file_id(raw)
        assert parts == ri.FileIdParts(ri.ENCODING_RAW, -1, -1, -1, raw) and ri.decode_file_id(parts) == raw
    top = ri.encode_file_id("ffffffff-ffff-ffff-ffff-ffffffffffff-2147483647")
    assert (top.high_bits, top.low_bits, top.file_index) == (-1, -1, 2**31 - 1)


@given(st.uuids(), st.integers(0, 2**31 - 1))
@settings(max_examples=200, deadline=None)
def test_any_uuid_file_id_round_trips(u, n):
    fid = f"{u}-{n}"
    parts = ri.encode_file_id(fid)
    assert parts.encoding == ri.ENCODING_UUID and ri.decode_file_id(parts) == fid
    assert -(2**63) <= parts.high_bits < 2**63 and -(2**63) <= parts.low_bits < 2**63


def test_instant_times_are_epoch_millis_in_the_writers_zone():
    # the same deltacommit in the 1.1 fixture (UTC-6) and the 1.0 one (UTC)
    assert ri.instant_millis("20260307162434124", CST) == 1772922274124
    assert ri.instant_of_millis(1772922274124, CST) == "20260307162434124"
    assert ri.instant_millis("20251220210108078") == 1766264468078
    assert ri.instant_of_millis(1766264468078) == "20251220210108078"
    assert ri.instant_millis("20251220210108") == 1766264468999  # seconds granularity: 999 ms
    assert ri.instant_millis("20251220210108078_extra"[:20]) == 1766264468078
    for bad in ("00000000000000000", "2025122021010", "2025122021010x078"):
        with pytest.raises(ValueError):
            ri.instant_millis(bad)


# -- our bytes -------------------------------------------------------------------------------
_key = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20)
_file_ids = st.one_of(st.uuids().map(lambda u: f"{u}-0"), st.uuids().map(str), st.text(min_size=1, max_size=12))
_instant = st.datetimes(dt.datetime(2000, 1, 1), dt.datetime(2099, 1, 1)).map(
    lambda d: d.strftime("%Y%m%d%H%M%S") + f"{d.microsecond // 1000:03d}")
_location = st.builds(ri.Location, st.text(max_size=12), _file_ids, _instant, st.one_of(st.none(), st.integers(0, 2**40)))


@given(st.dictionaries(_key, _location, max_size=30), st.sampled_from([ri.UTC, CST]))
@settings(max_examples=60, deadline=None)
def test_encode_decode_round_trip(entries, zone):
    base = ri.base_file_name(ri.file_group_id(0), "0-0-0", "20240101000000000")
    for name in (None, base):
        data = ri.encode_hfile(entries, SCHEMA, zone=zone, base_file_name=name, created_ms=7)
        assert ri.decode_hfile(data, zone=zone) == entries
        h = hfile.read(data)  # our HFile reader takes it: sorted cells, the schema, a base's bloom filter
        assert [k.decode() for k, _ in h.cells] == sorted(entries)
        assert json.loads(h.file_info[b"schema"]) == SCHEMA
        assert (hfile.BLOOM_META_BLOCK in h.meta) == (name is not None)


def test_a_log_file_holds_the_deltacommits_entries_then_its_deletes():
    entries = {"a": ri.Location("p=1", "07838327-b037-4532-a9df-3c5b05dd823d-0", "20240101000000001"),
               "b": ri.Location("p=2", "raw-id", "20240101000000001", 5)}
    data = ri.encode_log_file("20240101000000001", entries, ["c", "d", "c"], SCHEMA, created_ms=1)
    blocks = read_log_blocks(data)
    assert [b.block_type for b in blocks] == [BlockType.HFILE_DATA, BlockType.DELETE]
    assert json.loads(blocks[0].header["SCHEMA"]) == SCHEMA and blocks[0].instant_time == "20240101000000001"
    assert ri.decode_log_file(data) == [ri.Changes("20240101000000001", entries),
                                        ri.Changes("20240101000000001", deletes=["c", "d"])]
    assert ri.encode_log_file("20240101000000001", {}, [], SCHEMA) == b""
    with pytest.raises(ValueError, match="both"):
        ri.encode_log_file("20240101000000001", entries, ["a"], SCHEMA)


def test_the_files_partition_schema_is_extended_not_replaced():
    assert [f["name"] for f in SCHEMA["fields"]] == [f["name"] for f in metadata_files.RECORD_SCHEMA["fields"]]
    assert metadata_files.RECORD_SCHEMA["fields"][10]["type"] == ["null"]  # left as it was
    assert ri.with_record_index(SCHEMA) == SCHEMA == ri.with_record_index(json.dumps(SCHEMA))
    with pytest.raises(ValueError):
        ri.with_record_index({"type": "record", "name": "x", "fields": []})


def test_hudi_rs_reads_a_base_hfile_we_wrote(tmp_path):
    """hudi-rs 0.5 reads a record-index base file (``HudiFileGroupReader`` over the metadata
    table) but not its log files (it takes HFile log blocks for the files partition only)."""
    from hudi import HudiFileGroupReader

    mdt = tmp_path / ".hoodie" / "metadata"
    (mdt / ".hoodie").mkdir(parents=True)
    (mdt / "record_index").mkdir()
    (mdt / ".hoodie" / "hoodie.properties").write_text(
        "hoodie.table.name=t_metadata\nhoodie.table.type=MERGE_ON_READ\nhoodie.table.version=9\n"
        "hoodie.table.base.file.format=HFILE\nhoodie.table.recordkey.fields=key\nhoodie.populate.meta.fields=false\n"
        "hoodie.timeline.layout.version=2\nhoodie.timeline.path=timeline\n")
    entries = {"k1": ri.Location("p=1", "07838327-b037-4532-a9df-3c5b05dd823d-0", "20240101000000000"),
               "k2": ri.Location("", "raw-id", "20240102000000123", 7)}
    name = ri.base_file_name(ri.file_group_id(0), "0-0-0", "20240102000000200")
    (mdt / "record_index" / name).write_bytes(ri.encode_hfile(entries, SCHEMA, base_file_name=name))
    got = HudiFileGroupReader(str(mdt)).read_file_slice_from_paths(f"record_index/{name}", []).to_pylist()
    assert [(r["key"], r["type"], r["_hoodie_file_name"]) for r in got] == [("k1", 5, name), ("k2", 5, name)]
    assert [r["recordIndexMetadata"] for r in got] == [
        {"partitionName": "p=1", "fileIdHighBits": 541420586697966898, "fileIdLowBits": -6206175399855160771,
         "fileIndex": 0, "fileId": "", "instantTime": 1704067200000, "fileIdEncoding": 0, "position": None},
        {"partitionName": "", "fileIdHighBits": -1, "fileIdLowBits": -1, "fileIndex": -1, "fileId": "raw-id",
         "instantTime": 1704153600123, "fileIdEncoding": 1, "position": 7}]


# -- malformed input -------------------------------------------------------------------------
def _cell(value: dict) -> bytes:
    buf = io.BytesIO()
    parsed = fastavro.parse_schema(SCHEMA)
    fastavro.schemaless_writer(buf, parsed, {**dict.fromkeys(f["name"] for f in SCHEMA["fields"]), **value})
    return buf.getvalue()


_INFO = {"partitionName": "p", "fileIdHighBits": 1, "fileIdLowBits": 2, "fileIndex": 0, "fileId": "",
         "instantTime": 0, "fileIdEncoding": 0, "position": None}


@pytest.mark.parametrize(("value", "why"), [
    ({"key": "", "type": 2, "filesystemMetadata": {}}, "type 2"),
    ({"key": "", "type": 5}, "type 5"),
    ({"key": "", "type": 5, "recordIndexMetadata": {**_INFO, "instantTime": None}}, "instant"),
    ({"key": "", "type": 5, "recordIndexMetadata": {**_INFO, "fileIdHighBits": None}}, "bits"),
    ({"key": "", "type": 5, "recordIndexMetadata": {**_INFO, "fileIdEncoding": 1, "fileId": None}}, "without fileId"),
    ({"key": "", "type": 5, "recordIndexMetadata": {**_INFO, "instantTime": 2**62}}, "out of range"),
])
def test_malformed_entries_are_table_format_errors(value, why):
    with pytest.raises(TableFormatError, match=why):
        ri.decode_cells([(b"k", _cell(value))], SCHEMA, source="f")


def test_malformed_files_are_table_format_errors():
    good = ri.encode_hfile({"k": ri.Location("p", "raw", "20240101000000000")}, SCHEMA)
    cases = [
        lambda: ri.decode_cells([(b"k", b"\x99")], SCHEMA),
        lambda: ri.decode_cells([(b"\xff", _cell({"key": "", "type": 5, "recordIndexMetadata": _INFO}))], SCHEMA),
        lambda: ri.decode_cells([], "{not json"),
        lambda: ri.decode_hfile(hfile.write([("k", b"")])),  # no schema
        lambda: ri.decode_hfile(good[:-100]),
        lambda: ri.decode_log_file(b"garbage"),
        lambda: ri.decode_log_file(encode_block(BlockType.COMMAND, {HeaderKey.INSTANT_TIME: "20240101000000000"}, b"")),
    ]
    for case in cases:
        with pytest.raises(TableFormatError):
            case()
    torn = ri.encode_log_file("20240101000000000", {"k": ri.Location("p", "raw", "20240101000000000")}, [], SCHEMA)
    assert ri.decode_log_file(torn[:-9]) == []  # a torn block is skipped, as Hudi's reader skips it
