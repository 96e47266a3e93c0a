"""The record index's compiled encoder and decoder (:class:`.avro_encoder.RecordIndexEncoder`,
:class:`.avro_decoder.RecordIndexDecoder`) against fastavro, an entry at a time: the same bytes
for any entries in our schema, in Hudi's (the fixtures' files declare it) and in variants of
their field and branch order; the same locations (or the same error) for any bytes, Hudi's own
files included."""
from __future__ import annotations

import copy
import datetime as dt
import json
import zipfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiwriter.errors import TableFormatError
from multiwriter.format import avro_encoder, hfile
from multiwriter.format import record_index as ri
from multiwriter.format.log_file import BlockType, read_log_blocks
from multiwriter.table import metadata_files
from tests.oracle import FIXTURES

CST = dt.timezone(dt.timedelta(hours=-6))
OURS = ri.with_record_index(metadata_files.RECORD_SCHEMA)
#: the fixture tables of Hudi 1.1 (table version 9) and 1.0 (version 8) keeping the record index
ZIPS = ("cow_v9_txns_simple_meta.zip", "mor_v9_txns_simple_meta.zip", "mor_v8_trips_8i3u1d.zip")


def _hudi_files(zip_name: str) -> dict[str, bytes]:
    """The record_index partition's base and log files of a fixture table, by name."""
    with zipfile.ZipFile(FIXTURES / zip_name) as z:
        return {n.rsplit("/", 1)[1]: z.read(n) for n in sorted(z.namelist())
                if "/.hoodie/metadata/record_index/" in n and "__MACOSX" not in n and not n.endswith("/")
                and (n.endswith(".hfile") or ".log." in n)}


def _hfiles(files: dict[str, bytes]) -> list[tuple[str, hfile.HFile]]:
    """Every HFile in ``files``: the base files and the log files' HFile data blocks."""
    out = []
    for name, data in files.items():
        if name.endswith(".hfile"):
            out.append((name, hfile.read(data, source=name)))
        else:
            out += [(name, hfile.read(b.content)) for b in read_log_blocks(data) if b.block_type == BlockType.HFILE_DATA]
    return out


@pytest.fixture(scope="module")
def hudi_schemas() -> list[str]:
    """The record schemas Hudi's record-index files declare (1.1's and 1.0's), as written."""
    return sorted({h.file_info[b"schema"].decode() for z in ZIPS for _, h in _hfiles(_hudi_files(z))})


def _variant(schema: dict, *, reverse_fields: bool, swap_unions: bool) -> dict:
    """``schema`` with ``HoodieRecordIndexInfo``'s fields in reverse order and/or each nullable
    union's branches as (type, null): the compiled code follows the order the schema declares."""
    out = copy.deepcopy(schema)
    [field] = [f for f in out["fields"] if f["name"] == "recordIndexMetadata"]
    info = next(b for b in field["type"] if isinstance(b, dict))
    if reverse_fields:
        info["fields"].reverse()
    if swap_unions:
        for f in info["fields"]:
            if isinstance(f["type"], list):
                f["type"].reverse()
                f.pop("default", None)
        field["type"].reverse()
        field.pop("default", None)
    return out


VARIANTS = [json.dumps(_variant(OURS, reverse_fields=r, swap_unions=s)) for r, s in ((True, False), (False, True),
                                                                                     (True, True))]

# -- entries ---------------------------------------------------------------------------------------
_KEY = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=16)
_FILE_ID = st.one_of(
    st.builds(lambda u, n: f"{u}-{n}", st.uuids(), st.integers(0, 2**31 - 1)),  # encoding 0, fileIndex n
    st.uuids().map(str),  # encoding 0, fileIndex -1
    st.text(max_size=12),  # mostly encoding 1 (raw)
    st.builds(lambda u, n: f"{u}-{n}".upper(), st.uuids(), st.integers(0, 9)),  # encoding 1
)
_WHEN = st.datetimes(dt.datetime(1970, 1, 2), dt.datetime(9999, 12, 30))
_INSTANT = st.one_of(_WHEN.map(lambda d: d.strftime("%Y%m%d%H%M%S")),
                     _WHEN.map(lambda d: d.strftime("%Y%m%d%H%M%S") + f"{d.microsecond // 1000:03d}"))
_POSITION = st.one_of(st.none(), st.none(), st.integers(-(2**63), 2**63 - 1))
_LOCATION = st.builds(ri.Location, st.text(max_size=12), _FILE_ID, _INSTANT, _POSITION)
#: few distinct locations shared by many keys (as in a table), and locations of their own
_ENTRIES = st.lists(_LOCATION, min_size=1, max_size=4).flatmap(
    lambda shared: st.dictionaries(_KEY, st.sampled_from(shared) | _LOCATION, max_size=40))
_FILE_NAME = st.none() | st.just(ri.base_file_name(ri.file_group_id(3), "0-0-0", "20240101000000000"))
_ZONE = st.sampled_from([ri.UTC, CST])


def _read_back(loc: ri.Location) -> ri.Location:
    """What the index gives back for ``loc``: an instant of seconds gets its 999 milliseconds."""
    t = loc.instant_time
    return ri.Location(loc.partition, loc.file_id, t + "999" if len(t) == 14 else t, loc.position)


def _same_as_fastavro(entries: dict[str, ri.Location], schema: str, zone: dt.tzinfo, file_name: str | None) -> None:
    """encode_cells writes fastavro's bytes, the compiled encoder wrote each of them itself,
    decode_cells reads them back and reads what fastavro reads, the compiled decoder read each
    itself."""
    cells = ri.encode_cells(entries, schema, zone=zone, file_name=file_name)
    assert cells == ri._fastavro_cells(entries, schema, zone=zone, file_name=file_name)
    codec = ri._codec(schema, "test")
    assert codec.encoder is not None and codec.decoder is not None
    frame = codec.frame(file_name)
    assert frame is not None
    for key, data in cells:
        loc = entries[key]
        parts = ri.encode_file_id(loc.file_id)
        values = (loc.partition, parts.high_bits, parts.low_bits, parts.file_index, parts.raw,
                  ri.instant_millis(loc.instant_time, zone), parts.encoding, loc.position)
        assert codec.encoder.encode(frame, values) == data, loc
        assert codec.decoder.read(data) == (ri.RECORD_TYPE, values), loc
    raw = [(k.encode(), v) for k, v in cells]
    decoded = ri.decode_cells(raw, schema, zone=zone)
    assert decoded == {k: _read_back(v) for k, v in entries.items()}
    assert decoded == ri._fastavro_decode_cells(raw, schema, zone=zone)


@given(_ENTRIES, _ZONE, _FILE_NAME)
@settings(max_examples=150, deadline=None)
def test_our_schema_encodes_and_decodes_as_fastavro(entries, zone, file_name):
    _same_as_fastavro(entries, json.dumps(OURS, separators=(",", ":")), zone, file_name)


@pytest.mark.needs_fixtures
@given(_ENTRIES, _ZONE, _FILE_NAME, st.data())
@settings(max_examples=150, deadline=None)
def test_hudis_schemas_encode_and_decode_as_fastavro(hudi_schemas, entries, zone, file_name, data):
    assert len(hudi_schemas) >= 1
    _same_as_fastavro(entries, data.draw(st.sampled_from(hudi_schemas)), zone, file_name)


@given(_ENTRIES, _ZONE, _FILE_NAME, st.sampled_from(VARIANTS))
@settings(max_examples=100, deadline=None)
def test_the_schemas_field_and_branch_order_is_followed(entries, zone, file_name, schema):
    _same_as_fastavro(entries, schema, zone, file_name)


def test_a_table_of_few_locations_shares_their_bytes_and_values():
    """Keys at the same location are one value's bytes, written and read once."""
    here = ri.Location("p=1", "07838327-b037-4532-a9df-3c5b05dd823d-0", "20240101000000001")
    there = ri.Location("p=2", "07838327-b037-4532-a9df-3c5b05dd823d", "20240101000000002", 4)
    entries = {f"k{i}": here if i % 3 else there for i in range(30)}
    cells = ri.encode_cells(entries, OURS)
    assert len({id(v) for _, v in cells}) == 2
    decoded = ri.decode_cells([(k.encode(), v) for k, v in cells], OURS)
    assert decoded == entries and len({id(v) for v in decoded.values()}) == 2


# -- Hudi's files ----------------------------------------------------------------------------
@pytest.mark.needs_fixtures
@pytest.mark.parametrize("zip_name", ZIPS)
def test_hudis_files_decode_as_fastavro_reads_them(zip_name):
    """Every cell of Hudi's record-index files: the compiled decoder reads it (no fallback), to
    the location fastavro's path gives, and the compiled encoder writes its bytes again."""
    checked = 0
    for name, h in _hfiles(_hudi_files(zip_name)):
        schema = h.file_info[b"schema"].decode()
        for zone in (ri.UTC, CST):
            decoded = ri.decode_cells(h.cells, schema, source=name, zone=zone)
            assert decoded == ri._fastavro_decode_cells(h.cells, schema, source=name, zone=zone)
        codec = ri._codec(schema, name)
        assert codec.decoder is not None and codec.encoder is not None
        for _, v in h.cells:
            record_type, values = codec.decoder.read(v)
            assert record_type == ri.RECORD_TYPE
            assert codec.encoder.encode(codec.frame(name if name.endswith(".hfile") else None), values) == v
        checked += len(h.cells)
    assert checked >= 5


# -- what the compiled code leaves to fastavro -----------------------------------------------
def _outcome(fn):
    try:
        return fn()
    except (TableFormatError, ValueError, TypeError) as e:
        return type(e).__name__, str(e)


@given(_ENTRIES.filter(bool), st.data())
@settings(max_examples=200, deadline=None)
def test_damaged_bytes_read_as_fastavro_reads_them(entries, data):
    """Bytes cut short, with a byte changed or appended: the same locations as fastavro's path,
    or the same error."""
    cells = [(k.encode(), v) for k, v in ri.encode_cells(entries, OURS)]
    i = data.draw(st.integers(0, len(cells) - 1))
    key, value = cells[i]
    how = data.draw(st.sampled_from(["cut", "change", "append"]))
    at = data.draw(st.integers(0, len(value) - 1))
    if how == "cut":
        value = value[:at]
    elif how == "change":
        value = value[:at] + bytes([data.draw(st.integers(0, 255))]) + value[at + 1:]
    else:
        value += data.draw(st.binary(min_size=1, max_size=4))
    cells[i] = (key, value)
    assert _outcome(lambda: ri.decode_cells(cells, OURS, source="f")) == \
        _outcome(lambda: ri._fastavro_decode_cells(cells, OURS, source="f"))


@pytest.mark.parametrize("record_type", [2, 3, 6, -5, 4, 5])
def test_other_record_types_are_no_entries(record_type):
    """A record of another type, though it holds a ``HoodieRecordIndexInfo``: fastavro's path
    says it is no record index entry."""
    [(_, value)] = ri.encode_cells({"k": ri.Location("p", "raw", "20240101000000000")}, OURS)
    at = value.index(b"\x0a", 5)  # the type after the five meta fields and the empty key
    assert at == 6
    cells = [(b"k", value[:at] + avro_encoder.varint(record_type) + value[at + 1:])]
    got = _outcome(lambda: ri.decode_cells(cells, OURS, source="f"))
    assert got == _outcome(lambda: ri._fastavro_decode_cells(cells, OURS, source="f"))
    assert (got == {"k": ri.Location("p", "raw", "20240101000000000")}) == (record_type == 5)


@pytest.mark.parametrize("varint", [b"\xff" * 9 + b"\x7f", b"\xff" * 9 + b"\x01", b"\xfe" * 9 + b"\x03",
                                    b"\xff" * 10 + b"\x01", b"\x80" * 9 + b"\x00", b"\x82\x00"])
def test_long_numbers_read_as_fastavro_reads_them(varint):
    """A position of ten bytes and beyond 64 bits, of eleven bytes, of needless bytes."""
    [(_, value)] = ri.encode_cells({"k": ri.Location("p", "raw", "20240101000000000", 1)}, OURS)
    assert value.endswith(b"\x02\x02\x00")  # position: branch 1, long 1; SecondaryIndexMetadata: null
    cells = [(b"k", value[:-2] + varint + b"\x00")]
    assert _outcome(lambda: ri.decode_cells(cells, OURS)) == _outcome(lambda: ri._fastavro_decode_cells(cells, OURS))


@pytest.mark.parametrize("position", [True, 1.0, 2**63, "7", -(2**63) - 1])
def test_values_the_encoder_does_not_expect_are_fastavros(position):
    """A position that is no Avro long in Python's int: what fastavro writes, or its error."""
    entries = {"a": ri.Location("p", "raw", "20240101000000000", 1),
               "b": ri.Location("p", "raw", "20240101000000000", position)}
    assert _outcome(lambda: ri.encode_cells(entries, OURS)) == _outcome(lambda: ri._fastavro_cells(entries, OURS))
    odd = {"a": ri.Location(b"p", "raw", "20240101000000000")}  # type: ignore[arg-type]
    assert _outcome(lambda: ri.encode_cells(odd, OURS)) == _outcome(lambda: ri._fastavro_cells(odd, OURS))


def test_a_schema_it_does_not_know_is_fastavros():
    """A ``HoodieRecordIndexInfo`` of a field neither knows (a later release's): fastavro
    writes and reads it all, the same entries."""
    schema = copy.deepcopy(OURS)
    [field] = [f for f in schema["fields"] if f["name"] == "recordIndexMetadata"]
    field["type"][1]["fields"].append({"name": "partitionTag", "type": ["null", "string"], "default": None})
    text = json.dumps(schema)
    codec = ri._codec(text, "test")
    assert codec.encoder is None and codec.decoder is None
    entries = {"k": ri.Location("p", "07838327-b037-4532-a9df-3c5b05dd823d-0", "20240101000000000")}
    cells = ri.encode_cells(entries, text)
    assert cells == ri._fastavro_cells(entries, text)
    assert ri.decode_cells([(b"k", cells[0][1])], text) == entries


def test_record_index_fields_are_hudis():
    """The encoder's value order is ``HoodieRecordIndexInfo``'s, as Hudi declares it."""
    [field] = [f for f in OURS["fields"] if f["name"] == avro_encoder.RECORD_INDEX_FIELD]
    assert avro_encoder.RECORD_INDEX_FIELDS == tuple(f["name"] for f in field["type"][1]["fields"])
