"""The column_stats and partition_stats partitions of the metadata table, against what Hudi wrote.

Oracles: the fixtures' records themselves (Hudi 1.1.1 and 1.0 computed the keys and stats), the
Parquet footers as pyarrow reads them, the live file slices as hudi-rs lists them, and the
system's libxxhash for the hash."""
from __future__ import annotations

import ctypes
import ctypes.util
import datetime as dt
import decimal
import json
import os
import re
import uuid
import zipfile
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiwriter.errors import TableFormatError
from multiwriter.format import avro_encoder
from multiwriter.format import column_stats as cs
from multiwriter.format import hfile
from multiwriter.table.metadata_files import RECORD_SCHEMA
from tests.oracle import FIXTURES, unzip_fixture

V9 = [("cow", "v9_txns_simple_meta"), ("mor", "v9_txns_simple_meta")]
ALL = [*V9, ("mor", "v8_trips_8i3u1d"), ("mor", "v9_nonpartitioned_rollback")]


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    out = {}
    for kind, name in ALL:
        out[(kind, name)] = unzip_fixture(name, tmp_path_factory.mktemp(f"{kind}_{name}"), kind)
    return out


def _completed(root: Path, timeline: str) -> list[str]:
    """Requested times of the completed instants of a timeline folder, sorted."""
    return sorted({n.split("_")[0] for n in os.listdir(root / timeline)
                   if re.fullmatch(r"\d{17}_\d{17}\.\w+", n)})


def _groups(root: Path, partition: str) -> dict[str, list[str]]:
    d = root / ".hoodie" / "metadata" / partition
    out: dict[str, list[str]] = {}
    for n in os.listdir(d):
        m = re.match(r"\.?([a-z-]+-\d{4}-0)_", n)
        if m:
            out.setdefault(m.group(1), []).append(n)
    return out


def _all_records(root: Path, partition: str) -> list[tuple[str, cs.StatsRecord]]:
    """(file group id, record) of every base file and log block of the partition."""
    d = root / ".hoodie" / "metadata" / partition
    out = []
    for group, names in _groups(root, partition).items():
        for n in names:
            data = (d / n).read_bytes()
            if n.endswith(".hfile"):
                out += [(group, r) for r in cs.decode_hfile(data, source=n)]
            else:
                out += [(group, r) for _, rs in cs.decode_log_file(data, source=n) for r in rs]
    return out


def _latest(root: Path, partition: str) -> dict[str, cs.ColumnStats]:
    """Each key's value in the latest slices: the newest base, then the log blocks of completed
    deltacommits after it, merged as Hudi's reader merges them."""
    d = root / ".hoodie" / "metadata" / partition
    done = set(_completed(root / ".hoodie" / "metadata", ".hoodie/timeline"))
    recs: list[cs.StatsRecord] = []
    for _group, names in sorted(_groups(root, partition).items()):
        bases = sorted((n.rsplit("_", 1)[1].split(".")[0], n) for n in names if n.endswith(".hfile"))
        base_time, base = bases[-1] if bases else ("0", None)
        if base:
            recs += cs.decode_hfile((d / base).read_bytes(), source=base)
        for t, n in sorted((n.split("_")[1].split(".")[0], n) for n in names if ".log." in n):
            if t > base_time and t in done:
                recs += [r for _, rs in cs.decode_log_file((d / n).read_bytes(), source=n) for r in rs]
    return cs.latest(recs)


def _partitions(root: Path) -> list[str]:
    out = [""]
    for dirpath, _dirs, files in os.walk(root):
        if ".hoodie" in Path(dirpath).relative_to(root).parts:
            continue
        if ".hoodie_partition_metadata" in files and Path(dirpath) != root:
            out.append(str(Path(dirpath).relative_to(root)))
    return out


def _slices(root: Path, as_of: str | None = None):
    from hudi import HudiReadOptions, HudiTableBuilder

    table = HudiTableBuilder.from_base_uri(str(root)).build()
    return table.get_file_slices(HudiReadOptions().with_as_of_timestamp(as_of) if as_of else None)


def _footer(path: Path) -> dict[str, tuple]:
    """Per column, what pyarrow reads from the footer: (min, max, nulls, values, compressed size,
    uncompressed size), row groups folded."""
    meta = pq.ParquetFile(path).metadata
    out: dict[str, tuple] = {}
    for g in range(meta.num_row_groups):
        for i in range(meta.num_columns):
            c = meta.row_group(g).column(i)
            s = c.statistics
            lo, hi = (s.min, s.max) if s is not None and s.has_min_max else (None, None)
            nulls = s.null_count if s is not None and s.has_null_count else c.num_values
            row = (lo, hi, nulls, c.num_values, c.total_compressed_size, c.total_uncompressed_size)
            if c.path_in_schema in out:
                o = out[c.path_in_schema]
                row = (min(x for x in (o[0], lo) if x is not None) if (o[0], lo) != (None, None) else None,
                       max(x for x in (o[1], hi) if x is not None) if (o[1], hi) != (None, None) else None,
                       *(a + b for a, b in zip(o[2:], row[2:], strict=True)))
            out[c.path_in_schema] = row
    return out


def _create_schema(root: Path) -> dict:
    for line in (root / ".hoodie" / "hoodie.properties").read_text().splitlines():
        if line.startswith("hoodie.table.create.schema="):
            return json.loads(line.split("=", 1)[1].replace("\\:", ":").replace("\\=", "="))
    raise AssertionError("no create schema")


# -- keys and file groups ---------------------------------------------------------------------
def test_xxh64_matches_libxxhash():
    name = ctypes.util.find_library("xxhash")
    if not name:
        pytest.skip("libxxhash is not installed")
    lib = ctypes.CDLL(name)
    lib.XXH64.restype = ctypes.c_uint64
    lib.XXH64.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64]
    data = bytes(range(256)) * 3
    for n in [*range(0, 80), 255, 700]:
        for seed in (0, 1, cs._HASH_SEED):
            assert cs.xxh64(data[:n], seed) == lib.XXH64(data[:n], n, seed), (n, seed)


def test_file_group_of_a_key_follows_java_string_hash():
    # "polygenelubricants".hashCode() is Integer.MIN_VALUE: Math.abs leaves it negative, and
    # abs(MIN_VALUE % 3) is 2**31 % 3
    assert cs._java_hash("polygenelubricants") == -(2 ** 31)
    assert cs.file_group_index("polygenelubricants", 3) == 2
    assert cs._java_hash("Aa") == cs._java_hash("BB") == 2112
    assert cs.file_group_index("Aa", 5) == 2112 % 5
    assert cs.file_group_id(cs.COLUMN_STATS, 1) == "col-stats-0001-0"
    assert cs.file_group_id(cs.PARTITION_STATS, 0) == "partition-stats-0000-0"
    with pytest.raises(ValueError):
        cs.file_group_index("k", 0)


@pytest.mark.needs_fixtures
@pytest.mark.parametrize("table", ALL, ids=lambda t: f"{t[0]}_{t[1]}")
def test_fixture_keys_are_ours_and_in_our_file_group(tables, table):
    """Every record Hudi wrote: its key is ours for its (column, partition, file) and it lies in
    the file group our mapping names; column-stats keys start with the partition-stats key."""
    root = tables[table]
    partitions = _partitions(root)
    seen = 0
    for partition in (cs.COLUMN_STATS, cs.PARTITION_STATS):
        if not (root / ".hoodie" / "metadata" / partition).exists():
            continue
        n_groups = len(_groups(root, partition))
        assert n_groups == cs.DEFAULT_FILE_GROUPS[partition]
        for group, r in _all_records(root, partition):
            s = r.stats
            assert r.record_type == cs.RECORD_TYPE[partition] and r.partition == partition
            if partition == cs.COLUMN_STATS:
                matches = [p for p in partitions if cs.column_stats_key(s.column, p, s.file_name) == r.key]
                assert len(matches) == 1, (r.key, s.column, s.file_name)
                assert r.key.startswith(cs.partition_stats_key(s.column, matches[0]))
                assert len(r.key) == 48
            else:
                assert r.key == cs.partition_stats_key(s.column, s.file_name)
                assert len(r.key) == 24
            assert cs.file_group_id(partition, cs.file_group_index(r.key, n_groups)) == group
            seen += 1
    assert seen


# -- values against the Parquet footers ---------------------------------------------------------
@pytest.mark.needs_fixtures
@pytest.mark.parametrize("table", [*V9, ("mor", "v8_trips_8i3u1d")], ids=lambda t: f"{t[0]}_{t[1]}")
def test_column_stats_of_live_base_files_equal_their_footers(tables, table):
    root = tables[table]
    version = 2 if "v9" in table[1] else 1
    latest = _latest(root, cs.COLUMN_STATS)
    columns = cs.columns_to_index(_create_schema(root))
    defs = json.loads((root / ".hoodie" / ".index_defs" / "index.json").read_text())
    assert columns == defs["indexDefinitions"]["column_stats"]["sourceFields"]
    files = 0
    for fs in _slices(root):
        if not fs.base_file_name:
            continue
        path = root / fs.partition_path / fs.base_file_name
        footer = _footer(path)
        for column in columns:
            got = latest[cs.column_stats_key(column, fs.partition_path, fs.base_file_name)]
            assert (got.file_name, got.column, got.is_deleted) == (fs.base_file_name, column, False)
            assert (got.min, got.max, got.null_count, got.value_count, got.total_size,
                    got.total_uncompressed_size) == footer[column], (fs.base_file_name, column)
            assert (got.value_type is None) == (version == 1)
        ours = {s.column: s for s in cs.parquet_stats(pq.ParquetFile(path).metadata, fs.base_file_name, columns,
                                                      version=version)}
        assert sorted(ours) == sorted(columns)
        for column, s in ours.items():
            assert s == latest[cs.column_stats_key(column, fs.partition_path, fs.base_file_name)]
        files += 1
    assert files >= 3


@pytest.mark.needs_fixtures
def test_v9_value_types_of_the_fixture(tables):
    latest = _latest(tables[V9[0]], cs.COLUMN_STATS)
    kinds = {(s.column, s.value_type, s.wrapper, s.decimal) for s in latest.values() if s.min is not None}
    assert ("amount", cs.ValueType.DECIMAL, "BytesWrapper", (15, 2)) in kinds
    assert ("fee_amount", cs.ValueType.DECIMAL, "BytesWrapper", (10, 2)) in kinds
    assert ("txn_date", cs.ValueType.DATE, "IntWrapper", None) in kinds
    assert ("txn_datetime", cs.ValueType.TIMESTAMP_MICROS, "LongWrapper", None) in kinds
    assert ("txn_ts", cs.ValueType.LONG, "LongWrapper", None) in kinds
    assert ("is_international", cs.ValueType.BOOLEAN, "BooleanWrapper", None) in kinds
    assert ("currency", cs.ValueType.STRING, "StringWrapper", None) in kinds


@pytest.mark.needs_fixtures
@pytest.mark.parametrize("table", V9, ids=lambda t: t[0])
def test_partition_stats_are_the_merge_of_the_partition_files(tables, table):
    """Tight partition stats: the merge of the column stats of the files the partition's last
    write saw (``getPartitionLatestFileSlicesIncludingInflight``): the live files, and when that
    write was a clustering, also the file groups it replaced (its replacecommit was still inflight
    then). So they equal the live files' merge, or widen it."""
    root = tables[table]
    stats = _latest(root, cs.PARTITION_STATS)
    columns = cs.columns_to_index(_create_schema(root))
    instants = _completed(root / ".hoodie", "timeline")
    live: dict[str, list[str]] = {}
    for fs in _slices(root):
        live.setdefault(fs.partition_path, []).append(fs.base_file_name)
    exact = 0
    for partition, names in live.items():
        last_write = max(n.rsplit("_", 1)[1].split(".")[0] for n in names)
        before = max(t for t in instants if t < last_write)
        seen = set(names) | {fs.base_file_name for fs in _slices(root, before) if fs.partition_path == partition}

        def merged(files, partition=partition):
            per_file = [s for n in files for s in cs.parquet_stats(
                pq.ParquetFile(root / partition / n).metadata, n, columns)]
            return {s.column: s for s in cs.partition_stats(partition, per_file)}

        expected, tight_live = merged(seen), merged(names)
        for column in columns:
            got = stats[cs.partition_stats_key(column, partition)]
            assert got.is_tight_bound and not got.is_deleted and got.file_name == partition
            assert got == expected[column], (partition, column)
            lv = tight_live[column]
            assert got.min <= lv.min and got.max >= lv.max and got.value_count >= lv.value_count
            exact += got == lv
    assert exact >= 2 * len(columns)  # two of the three partitions were last written by a plain commit


# -- encoding ---------------------------------------------------------------------------------
@pytest.mark.needs_fixtures
@pytest.mark.parametrize("table", [*V9, ("mor", "v8_trips_8i3u1d")], ids=lambda t: f"{t[0]}_{t[1]}")
def test_reencoding_hudis_base_files_gives_hudis_bytes(tables, table):
    """Each record of Hudi's compacted base HFiles, decoded and encoded again in the file's own
    schema, is the very value Hudi wrote."""
    root = tables[table]
    count = 0
    for partition in (cs.COLUMN_STATS, cs.PARTITION_STATS):
        d = root / ".hoodie" / "metadata" / partition
        for n in sorted(os.listdir(d)):
            if not n.endswith(".hfile"):
                continue
            h = hfile.read((d / n).read_bytes(), source=n)
            schema = json.loads(h.file_info[b"schema"])
            records = cs.decode_cells(h.cells, h.file_info[b"schema"], source=n)
            assert dict(cs.encode_cells(records, schema, file_name=n)) == {k.decode(): v for k, v in h.cells}
            count += len(records)
    assert count


def _v2(column, vt, lo, hi, dec=None):
    return cs.ColumnStats("f1.parquet", column, lo, hi, 1, 10, 100, 200, value_type=vt, decimal=dec,
                          wrapper=cs._PRIMITIVE_WRAPPER.get(vt))


def _v1(column, wrapper, lo, hi):
    return cs.ColumnStats("f1.parquet", column, lo, hi, 0, 3, 30, 40, wrapper=wrapper)


UTC = dt.timezone.utc
V2_STATS = [
    _v2("b", cs.ValueType.BOOLEAN, False, True),
    _v2("i", cs.ValueType.INT, -(2 ** 31), 2 ** 31 - 1),
    _v2("l", cs.ValueType.LONG, -(2 ** 63), 2 ** 63 - 1),
    _v2("f", cs.ValueType.FLOAT, -1.5, 2.25),
    _v2("d", cs.ValueType.DOUBLE, -1e300, 1e-300),
    _v2("s", cs.ValueType.STRING, "", "zé\U0001f600"),
    _v2("y", cs.ValueType.BYTES, b"", b"\x00\xff"),
    _v2("x", cs.ValueType.FIXED, b"\x01\x02", b"\xfe\xff"),
    _v2("dec", cs.ValueType.DECIMAL, decimal.Decimal("-128.00"), decimal.Decimal("99999999999.99"), (13, 2)),
    _v2("u", cs.ValueType.UUID, uuid.UUID(int=1), uuid.UUID(int=2 ** 128 - 1)),
    _v2("day", cs.ValueType.DATE, dt.date(1900, 1, 1), dt.date(2999, 12, 31)),
    _v2("tms", cs.ValueType.TIME_MILLIS, dt.time(0, 0), dt.time(23, 59, 59, 999000)),
    _v2("tus", cs.ValueType.TIME_MICROS, dt.time(0, 0, 0, 1), dt.time(23, 59, 59, 999999)),
    _v2("ms", cs.ValueType.TIMESTAMP_MILLIS, dt.datetime(1960, 1, 1, tzinfo=UTC), dt.datetime(2030, 1, 1, 0, 0, 0, 1000, tzinfo=UTC)),
    _v2("us", cs.ValueType.TIMESTAMP_MICROS, dt.datetime(1970, 1, 1, tzinfo=UTC), dt.datetime(2024, 1, 15, 10, 30, 0, 7, tzinfo=UTC)),
    _v2("ns", cs.ValueType.TIMESTAMP_NANOS, -5, 1_700_000_000_000_000_001),
    _v2("lms", cs.ValueType.LOCAL_TIMESTAMP_MILLIS, dt.datetime(2000, 2, 29, 1, 2, 3, 4000), dt.datetime(2000, 3, 1)),
    _v2("lus", cs.ValueType.LOCAL_TIMESTAMP_MICROS, dt.datetime(1999, 12, 31, 23, 59, 59, 999999), dt.datetime(2000, 1, 1)),
    _v2("lns", cs.ValueType.LOCAL_TIMESTAMP_NANOS, 0, 1),
    _v2("nothing", cs.ValueType.NULL, None, None),
]
V1_STATS = [
    _v1("b", "BooleanWrapper", True, True),
    _v1("i", "IntWrapper", -7, 7),
    _v1("l", "LongWrapper", 1700000000001, 1700000000003),
    _v1("f", "FloatWrapper", 0.5, 0.75),
    _v1("d", "DoubleWrapper", 19.1, 93.5),
    _v1("y", "BytesWrapper", b"\x00", b"\x80"),
    _v1("s", "StringWrapper", "driver-K", "driver-O"),
    _v1("day", "DateWrapper", dt.date(2024, 1, 15), dt.date(2024, 1, 19)),
    _v1("ld", "LocalDateWrapper", dt.date(1969, 12, 31), dt.date(1970, 1, 1)),
    _v1("dec", "DecimalWrapper", decimal.Decimal("-0.000000000000001"), decimal.Decimal("123456789012345.5")),
    _v1("t", "TimeMicrosWrapper", dt.time(1, 2, 3, 4), dt.time(23, 0)),
    _v1("ts", "TimestampMicrosWrapper", dt.datetime(2024, 1, 15, 10, 30, tzinfo=UTC), dt.datetime(2024, 1, 16, tzinfo=UTC)),
]


def _same(a: cs.ColumnStats, b: cs.ColumnStats) -> bool:
    if a.wrapper == "DecimalWrapper":  # written at the wrapper's scale of 15
        return a.min == b.min and a.max == b.max and b.min.as_tuple().exponent == -cs.DECIMAL_SCALE \
            and a == replace(b, min=a.min, max=a.max)
    return a == b


@pytest.mark.parametrize("version,stats", [(9, V2_STATS), (8, V1_STATS)], ids=["v9", "v8"])
def test_round_trip_through_our_hfile_and_log_block(version, stats):
    schema = cs.record_schema(RECORD_SCHEMA, version)
    assert [f["name"] for f in schema["fields"]] == [f["name"] for f in RECORD_SCHEMA["fields"]]
    records = [cs.column_stats_record("year=2024/month=01", s) for s in stats]
    records += [cs.partition_stats_record(replace(s, file_name="year=2024/month=01", is_tight_bound=True))
                for s in stats]
    records += cs.deleted_file("year=2024/month=01", "gone.parquet", ["a", "b"], version=2 if version >= 9 else 1)
    records += cs.deleted_partition("year=2023", ["a"], version=2 if version >= 9 else 1)
    data = cs.encode_hfile(records, schema, base=True, file_name="col-stats-0000-0_0-1-2_20240101000000000.hfile")
    h = hfile.read(data)
    assert [k for k, _ in h.cells] == sorted(r.key.encode() for r in records)
    assert hfile.BLOOM_META_BLOCK in h.meta and h.file_info[b"minRecordKey"] == min(r.key for r in records).encode()
    back = {r.key: r for r in cs.decode_hfile(data)}
    assert len(back) == len(records)
    for r in records:
        assert back[r.key].record_type == r.record_type and _same(r.stats, back[r.key].stats), r.stats.column
    block = cs.encode_log_block(records, schema, "20240101000000000")
    [(instant, in_block)] = cs.decode_log_file(block)
    assert instant == "20240101000000000" and {r.key for r in in_block} == set(back)
    tomb = back[cs.column_stats_key("a", "year=2024/month=01", "gone.parquet")].stats
    assert tomb.is_deleted and tomb.null_count == tomb.value_count == tomb.total_size == -1 and tomb.min is None


def test_decimal_is_written_as_minimal_twos_complement():
    for n, raw in [(0, b"\x00"), (8999, b"#'"), (-1, b"\xff"), (127, b"\x7f"), (128, b"\x00\x80"), (-129, b"\xff\x7f")]:
        assert cs._unscaled_bytes(n) == raw
    s = _v2("dec", cs.ValueType.DECIMAL, decimal.Decimal("89.99"), decimal.Decimal("-1.28"), (15, 2))
    assert cs._avro_stats(s, 9)["minValue"] == ("org.apache.hudi.avro.model.BytesWrapper", {"value": b"#'"})
    assert cs._avro_stats(s, 9)["valueType"] == {"typeOrdinal": 10, "additionalInfo": "15,2"}


def test_merging_records_of_one_key():
    old = _v2("c", cs.ValueType.LONG, 5, 9)
    new = _v2("c", cs.ValueType.LONG, 1, 6)
    widened = cs.merge_records(old, new)
    assert (widened.min, widened.max, widened.value_count, widened.total_size) == (1, 9, 20, 200)
    tight = replace(new, is_tight_bound=True)
    assert cs.merge_records(old, tight) == tight
    tomb = replace(new, is_deleted=True)
    assert cs.merge_records(old, tomb) == tomb and cs.merge_records(tomb, old) == old
    # Java orders strings by UTF-16 units: U+FFFD sorts above U+1F600 there
    a, b = _v2("s", cs.ValueType.STRING, "\ufffd", "\ufffd"), _v2("s", cs.ValueType.STRING, "\U0001f600", "\U0001f600")
    assert cs.merge_ranges(a, b).max == "\ufffd"


def test_default_columns_to_index():
    fields = [{"name": "_hoodie_commit_time", "type": ["null", "string"]},
              {"name": "a", "type": "int"},
              {"name": "rec", "type": {"type": "record", "name": "r", "fields": []}},
              {"name": "big", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 30, "scale": 2}]},
              {"name": "ok", "type": ["null", {"type": "fixed", "name": "f", "size": 7, "logicalType": "decimal",
                                              "precision": 15, "scale": 2}]},
              *({"name": f"c{i}", "type": "string"} for i in range(40))]
    cols = cs.columns_to_index({"fields": fields})
    assert cols[:5] == ["_hoodie_commit_time", "_hoodie_partition_path", "_hoodie_record_key", "a", "ok"]
    assert len(cols) == 3 + cs.MAX_COLUMNS and "rec" not in cols and "big" not in cols
    assert cs.columns_to_index({"fields": fields}, meta_fields=False, column_list=["c3", "_hoodie_record_key"]) == ["c3"]


# -- the compiled encoder against fastavro ------------------------------------------------------
_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_INT = st.integers(-(2 ** 31), 2 ** 31 - 1)
_LONG = st.integers(-(2 ** 63), 2 ** 63 - 1)
_COUNT = st.none() | _LONG
_BIG_COUNT = st.integers(2 ** 63, 2 ** 64)  # beyond a long: fastavro refuses it
_INSTANT = st.datetimes(timezones=st.just(UTC))
_NAIVE = st.datetimes()


@st.composite
def _decimal(draw, precision: int, scale: int) -> decimal.Decimal:
    """A decimal of up to ``precision`` digits, ``scale`` of them after the point; often next
    to a byte boundary of its two's complement (a power of two 2^(8j-1) or 2^8j, one off,
    either sign), where the size of its bytes turns."""
    bound = 10 ** precision - 1
    edge = st.builds(lambda j, top, d, sign: sign * (2 ** (8 * j - top) + d), st.integers(1, max(1, bound.bit_length() // 8)),
                     st.integers(0, 1), st.integers(-1, 1), st.sampled_from([1, -1]))
    unscaled = draw(st.integers(-bound, bound) | edge.filter(lambda n: abs(n) <= bound))
    return decimal.Decimal(f"{unscaled}E-{scale}")  # exact: the default context rounds to 28 digits


#: a strategy of the in-memory values of each V2 value type
_V2_VALUES = {
    cs.ValueType.BOOLEAN: st.booleans(), cs.ValueType.INT: _INT, cs.ValueType.LONG: _LONG,
    cs.ValueType.FLOAT: st.floats(width=32), cs.ValueType.DOUBLE: st.floats(), cs.ValueType.STRING: _TEXT,
    cs.ValueType.BYTES: st.binary(max_size=12), cs.ValueType.FIXED: st.binary(max_size=12),
    cs.ValueType.UUID: st.uuids(), cs.ValueType.DATE: st.dates(), cs.ValueType.TIME_MILLIS: st.times(),
    cs.ValueType.TIME_MICROS: st.times(), cs.ValueType.TIMESTAMP_MILLIS: _INSTANT,
    cs.ValueType.TIMESTAMP_MICROS: _INSTANT, cs.ValueType.TIMESTAMP_NANOS: _LONG,
    cs.ValueType.LOCAL_TIMESTAMP_MILLIS: _NAIVE, cs.ValueType.LOCAL_TIMESTAMP_MICROS: _NAIVE,
    cs.ValueType.LOCAL_TIMESTAMP_NANOS: _LONG,
}
#: ... and of each V1 wrapper (a float wrapper also takes ints, and doubles beyond a float's range)
_V1_VALUES = {
    "BooleanWrapper": st.booleans(), "IntWrapper": _INT, "LongWrapper": _LONG,
    "FloatWrapper": st.floats(width=32) | st.integers(-(2 ** 24), 2 ** 24) | st.floats(),
    "DoubleWrapper": st.floats() | st.integers(-(2 ** 53), 2 ** 53), "BytesWrapper": st.binary(max_size=12),
    "StringWrapper": _TEXT, "DateWrapper": st.dates(), "LocalDateWrapper": st.dates(),
    "DecimalWrapper": _decimal(cs.DECIMAL_PRECISION, cs.DECIMAL_SCALE), "TimeMicrosWrapper": st.times(),
    "TimestampMicrosWrapper": _INSTANT,
}


@st.composite
def _stats(draw, version: int) -> cs.ColumnStats:
    """A column's stats of either index version, every value type or wrapper, values or none."""
    if version >= 9:
        vt = draw(st.sampled_from([*_V2_VALUES, cs.ValueType.NULL]))
        dec = None
        if vt is cs.ValueType.NULL:
            values = st.none()
        elif draw(st.booleans()) and vt in (cs.ValueType.BYTES, cs.ValueType.FIXED):  # a decimal instead
            # (V2 decimals become bytes before the encoder; _to_v2 unscales them in the default
            # context of 28 digits)
            precision = draw(st.integers(1, 28))
            vt, dec = cs.ValueType.DECIMAL, (precision, draw(st.integers(0, precision)))
            values = _decimal(*dec)
        else:
            values = _V2_VALUES[vt]
        kind = {"wrapper": cs._PRIMITIVE_WRAPPER.get(vt), "value_type": vt, "decimal": dec}
    else:
        wrapper = draw(st.sampled_from(sorted(_V1_VALUES)))
        values, kind = _V1_VALUES[wrapper], {"wrapper": wrapper}
    lo, hi = draw(st.none() | values), draw(st.none() | values)
    return cs.ColumnStats(draw(_TEXT), draw(_TEXT), lo, hi, draw(_COUNT), draw(_COUNT), draw(_COUNT), draw(_COUNT),
                          draw(st.booleans()), draw(st.booleans()), **kind)


@st.composite
def _records(draw, version: int) -> list[cs.StatsRecord]:
    """Column-stats and partition-stats records, and the tombstones of a file and a partition."""
    out = []
    for s in draw(st.lists(_stats(version), max_size=6)):
        partition = draw(_TEXT)
        out.append(cs.column_stats_record(partition, s) if draw(st.booleans())
                   else cs.partition_stats_record(replace(s, file_name=partition)))
    columns = draw(st.lists(_TEXT, max_size=2))
    index = cs.index_version(version)
    out += cs.deleted_file(draw(_TEXT), draw(_TEXT), columns, version=index)
    out += cs.deleted_partition(draw(_TEXT), columns, version=index)
    return draw(st.permutations(out))


def _hudi_schema(zip_name: str) -> dict:
    """The record schema of Hudi's first column_stats base HFile in a fixture table."""
    with zipfile.ZipFile(FIXTURES / zip_name) as z:
        name = min(n for n in z.namelist() if "/.hoodie/metadata/column_stats/" in n and n.endswith(".hfile")
                   and "__MACOSX" not in n)
        return json.loads(hfile.read(z.read(name)).file_info[b"schema"])


@pytest.fixture(scope="module")
def hudi_schemas():
    return {9: _hudi_schema("cow_v9_txns_simple_meta.zip"), 8: _hudi_schema("mor_v8_trips_8i3u1d.zip")}


def _outcome(encode):
    """The cells, or the message of the error encoding them raises."""
    try:
        return encode()
    except cs.StatsFormatError as e:
        return str(e)


def _compiled_writes_fastavros_bytes(schema: dict, records: list[cs.StatsRecord], file_name: str | None) -> None:
    """encode_cells gives fastavro's cells (or its error), and the compiled encoder wrote every
    record itself but those whose float value a float cannot hold (fastavro writes infinity)."""
    assert _outcome(lambda: cs.encode_cells(records, schema, file_name=file_name)) == \
        _outcome(lambda: cs._fastavro_cells(records, schema, file_name=file_name))
    version = cs._table_version(schema)
    enc = cs._compiled(json.dumps(schema, separators=(",", ":")))
    assert enc is not None
    for r in records:
        values = cs._stats_values(r.stats, version)
        try:
            got = enc.encode(enc.frame(r.record_type, file_name), values)
        except avro_encoder.Unsupported:
            huge = [v for v in (r.stats.min, r.stats.max) if r.stats.wrapper == "FloatWrapper" and
                    isinstance(v, float) and abs(v) > 3.4028234663852886e38 and v == v]
            too_big = [n for n in (r.stats.value_count, r.stats.null_count, r.stats.total_size,
                                   r.stats.total_uncompressed_size) if n is not None and n >= 2 ** 63]
            assert huge or too_big, r.stats
            continue
        assert [(r.key, got)] == cs._fastavro_cells([r], schema, file_name=file_name), r.stats


_FILE_NAME = st.none() | st.just("col-stats-0000-0_0-1-2_20240101000000000.hfile")


@settings(max_examples=150, deadline=None)
@given(version=st.sampled_from([8, 9]), data=st.data(), file_name=_FILE_NAME)
def test_compiled_encoder_writes_fastavros_bytes_in_our_schema(version, data, file_name):
    _compiled_writes_fastavros_bytes(cs.record_schema(RECORD_SCHEMA, version), data.draw(_records(version)), file_name)


@pytest.mark.needs_fixtures
@settings(max_examples=150, deadline=None)
@given(version=st.sampled_from([8, 9]), data=st.data(), file_name=_FILE_NAME)
def test_compiled_encoder_writes_fastavros_bytes_in_hudis_schema(hudi_schemas, version, data, file_name):
    _compiled_writes_fastavros_bytes(hudi_schemas[version], data.draw(_records(version)), file_name)


@settings(max_examples=300, deadline=None)
@given(lo=_V1_VALUES["DecimalWrapper"], hi=_V1_VALUES["TimeMicrosWrapper"], file_name=_FILE_NAME)
def test_compiled_encoder_writes_fastavros_logical_types(lo, hi, file_name):
    """The two logical types of Hudi's wrappers, which the encoder converts as fastavro does:
    ``DecimalWrapper``'s decimal(30,15) and ``TimeMicrosWrapper``'s time-micros."""
    records = [cs.column_stats_record("p", _v1("dec", "DecimalWrapper", lo, lo.copy_negate())),
               cs.column_stats_record("p", _v1("t", "TimeMicrosWrapper", hi, None))]
    _compiled_writes_fastavros_bytes(cs.record_schema(RECORD_SCHEMA, 8), records, file_name)


def test_counts_beyond_a_long_are_refused_as_fastavro_refuses_them():
    s = replace(V2_STATS[2], value_count=2 ** 63)
    schema = cs.record_schema(RECORD_SCHEMA, 9)
    with pytest.raises(cs.StatsFormatError, match="does not encode"):
        cs.encode_cells([cs.column_stats_record("p", s)], schema)


def test_a_schema_the_encoder_does_not_know_is_left_to_fastavro():
    """A column-stats field it does not know, or a field that cannot be null, and no encoder
    is compiled: fastavro writes the records."""
    schema = cs.record_schema(RECORD_SCHEMA, 9)
    stats = schema["fields"][[f["name"] for f in schema["fields"]].index("ColumnStatsMetadata")]["type"][1]
    stats["fields"].append({"name": "extra", "type": ["null", "long"], "default": None})
    text = json.dumps(schema, separators=(",", ":"))
    assert cs._compiled(text) is None
    records = [cs.column_stats_record("p", s) for s in V2_STATS]
    assert cs.encode_cells(records, schema) == cs._fastavro_cells(records, schema)
    assert cs.decode_cells([(k.encode(), v) for k, v in cs.encode_cells(records, schema)], text)
    required = {**RECORD_SCHEMA, "fields": [*RECORD_SCHEMA["fields"], {"name": "must", "type": "string", "default": ""}]}
    assert cs._compiled(json.dumps(cs.record_schema(required, 9), separators=(",", ":"))) is None


# -- bad input --------------------------------------------------------------------------------
def _one_cell(version=9) -> tuple[list[tuple[bytes, bytes]], str]:
    schema = cs.record_schema(RECORD_SCHEMA, version)
    [(k, v)] = cs.encode_cells([cs.column_stats_record("p", V2_STATS[8] if version >= 9 else V1_STATS[0])], schema)
    return [(k.encode(), v)], json.dumps(schema)


def test_malformed_records_are_typed_errors():
    cells, schema = _one_cell()
    with pytest.raises(cs.StatsFormatError, match="does not decode"):
        cs.decode_cells([(cells[0][0], cells[0][1][:-7])], schema)
    with pytest.raises(cs.StatsFormatError, match="Avro schema"):
        cs.decode_cells(cells, "{not json")
    bad_ordinal = json.loads(schema)
    rec = {"typeOrdinal": 99, "additionalInfo": None}
    with pytest.raises(cs.StatsFormatError, match="do not decode"):
        cs.decode_stats({"fileName": "f", "columnName": "c", "isDeleted": False, "valueType": rec})
    with pytest.raises(cs.StatsFormatError, match="precision and scale"):
        cs.decode_stats({"fileName": "f", "columnName": "c", "isDeleted": False,
                         "minValue": ("org.apache.hudi.avro.model.BytesWrapper", {"value": b"\x01"}),
                         "valueType": {"typeOrdinal": 10, "additionalInfo": None}})
    with pytest.raises(cs.StatsFormatError, match="no wrapper record"):
        cs.decode_stats({"fileName": "f", "columnName": "c", "isDeleted": False, "minValue": 3})
    with pytest.raises(TableFormatError):
        cs.decode_hfile(b"\x00" * 5000, source="junk.hfile")
    assert bad_ordinal  # the schema itself is fine


def test_what_the_format_cannot_hold_is_refused():
    with pytest.raises(cs.StatsFormatError, match="writes no value type"):
        cs.encode_cells([cs.column_stats_record("p", V2_STATS[1])], cs.record_schema(RECORD_SCHEMA, 8))
    with pytest.raises(cs.StatsFormatError, match="without its wrapper"):
        cs.encode_cells([cs.column_stats_record("p", replace(V1_STATS[1], wrapper=None))],
                        cs.record_schema(RECORD_SCHEMA, 8))
    with pytest.raises(ValueError, match="ColumnStatsMetadata"):
        cs.record_schema({"fields": [{"name": "key", "type": "string"}]}, 9)


def test_wide_decimals_keep_every_digit(tmp_path):
    """Decimals of 29 to 38 digits (Parquet's decimal128) are read from the footer and written
    back whole: Python's default decimal context keeps 28 digits, which rounded them (a stats
    range narrower than the values would skip a file holding them). Oracle: pyarrow's own
    min and max of the rows."""
    import decimal

    import pyarrow as pa
    import pyarrow.parquet as pq

    values = [decimal.Decimal("99999999999999999999999.999999999999999"),
              decimal.Decimal("-12345678901234567890123.456789012345678"),
              decimal.Decimal("0.000000000000001")]
    t = pa.table({"d": pa.array(values, pa.decimal128(38, 15))})
    pq.write_table(t, tmp_path / "f.parquet")
    (st,) = cs.parquet_stats(pq.read_metadata(tmp_path / "f.parquet"), "f.parquet", ["d"], version=2)
    assert (st.min, st.max) == (min(values), max(values))
    assert cs._unscaled(st.max, 15) == 99999999999999999999999999999999999999
    assert cs._decimal_of(10**30 - 1, 15) == decimal.Decimal("999999999999999.999999999999999")
