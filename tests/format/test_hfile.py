"""The HFile codec: it reads the HFiles Hudi 1.1 wrote into its metadata table, and what it writes
reads back cell for cell (hudi-rs reading our files is checked where the metadata table is)."""
from __future__ import annotations

import io
import json
import struct
import zipfile

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiwriter.errors import TableFormatError
from multiwriter.format import hfile
from tests.oracle import FIXTURES


def _fixture_hfiles(name: str) -> dict[str, bytes]:
    with zipfile.ZipFile(FIXTURES / f"{name}.zip") as zf:
        return {n: zf.read(n) for n in zf.namelist() if n.endswith(".hfile") and "__MACOSX" not in n}


@pytest.mark.needs_fixtures
def test_reads_the_files_partition_hudi_wrote():
    """The newest base HFile of the fixture's ``files`` partition lists, per partition, the
    partition's files that were live when it was written: the names there are ones on storage."""
    with zipfile.ZipFile(FIXTURES / "mor_v9_txns_simple_meta.zip") as zf:
        names = set(zf.namelist())
    files = _fixture_hfiles("mor_v9_txns_simple_meta")
    newest = max((n for n in files if "/metadata/files/" in n), key=lambda n: n.rsplit("_", 1)[1])
    h = hfile.read(files[newest], source=newest)
    assert [k for k, _ in h.cells] == [b"__all_partitions__", b"region=apac", b"region=eu", b"region=us"]
    schema = fastavro.parse_schema(json.loads(h.file_info[b"schema"]))
    recs = {k.decode(): fastavro.schemaless_reader(io.BytesIO(v), schema) for k, v in h.cells}
    assert recs["__all_partitions__"]["type"] == 1
    assert set(recs["__all_partitions__"]["filesystemMetadata"]) == {"region=apac", "region=eu", "region=us"}
    root = newest.split("/.hoodie/")[0]
    for part in ("region=apac", "region=eu", "region=us"):
        listed = recs[part]["filesystemMetadata"]
        assert recs[part]["type"] == 2 and listed
        assert all(f"{root}/{part}/{f}" in names for f in listed), part
    assert "bloomFilter" in h.meta and h.file_info[b"minRecordKey"] == b"__all_partitions__"


@pytest.mark.needs_fixtures
def test_reads_every_hfile_of_the_fixtures():
    for name in ("mor_v9_txns_simple_meta", "cow_v9_txns_simple_meta"):
        for n, data in _fixture_hfiles(name).items():
            h = hfile.read(data, source=n)
            keys = [k for k, _ in h.cells]
            assert keys == sorted(keys), n


def test_round_trip_with_compression_and_meta_blocks():
    cells = [(f"key-{i:05d}", bytes([i % 251]) * (i % 300)) for i in range(5000)]
    for compress in (True, False):
        data = hfile.write(reversed(cells), meta={"bloomFilter": b"bits"}, compress=compress, created_ms=7)
        h = hfile.read(data)
        assert h.cells == [(k.encode(), v) for k, v in cells]
        assert h.meta == {"bloomFilter": b"bits"}
        assert h.file_info[b"hfile.LASTKEY"][2:2 + 9] == b"key-04999"
        assert struct.unpack(">q", h.file_info[b"MAX_MEMSTORE_TS_KEY"])[0] == 0
        assert len(data) % 1 == 0 and data[-4:] == b"\x00\x00\x00\x03"
    assert len(hfile.write(cells)) < len(hfile.write(cells, compress=False)), "GZ blocks"


def test_an_empty_hfile_reads_back():
    assert hfile.read(hfile.write([])).cells == []


def test_duplicate_keys_are_refused():
    with pytest.raises(ValueError, match="twice"):
        hfile.write([("a", b"1"), ("a", b"2")])


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=40), st.binary(max_size=200), max_size=60))
def test_any_cells_read_back_sorted(d):
    cells = [(k.encode(), v) for k, v in d.items()]
    assert hfile.read(hfile.write(cells)).cells == sorted(cells)


@pytest.mark.parametrize("damage", [
    lambda b: b[:-10],
    lambda b: b[:100] + b"\xff" * 8 + b[108:],
    lambda b: b"\x00" * 40 + b[40:],
    lambda b: b[:-4] + b"\x00\x00\x00\x02",
])
def test_a_damaged_hfile_is_a_typed_error(damage):
    data = hfile.write([(f"k{i}", b"v" * 50) for i in range(200)])
    with pytest.raises(TableFormatError):
        hfile.read(damage(data), source="x.hfile")


def test_vint_matches_hadoop_writable_utils():
    # Hadoop's WritableUtils.writeVInt: one byte in [-112, 127], else a length byte and big-endian bytes
    assert hfile._write_vint(127) == b"\x7f"
    assert hfile._write_vint(128) == b"\x8f\x80"
    assert hfile._write_vint(300) == b"\x8e\x01\x2c"
    assert hfile._write_vint(-113) == b"\x87\x70"
    for n in (0, 1, 127, 128, 255, 256, 65535, 2**31 - 1, -1, -112, -113, -(2**31)):
        assert hfile._read_vint(hfile._write_vint(n), 0) == (n, len(hfile._write_vint(n)))


@pytest.mark.needs_fixtures
@pytest.mark.parametrize("kind", ["mor", "cow"])
def test_hudi_rs_reads_the_table_the_same_with_our_hfiles_in_its_metadata_table(kind, tmp_path):
    """Every base HFile of the ``files`` partition re-encoded by our writer: hudi-rs, which lists
    the table's files from there, reads the same rows (it fails loudly on bytes it cannot parse,
    as it did while our file info lacked the schema)."""
    from tests.oracle import hudi_read, rows, unzip_fixture

    path = unzip_fixture("v9_txns_simple_meta", tmp_path, kind)
    before = rows(hudi_read(str(path)), ["txn_id", "amount", "txn_type"])
    own = (b"KEY_VALUE_VERSION", b"MAX_MEMSTORE_TS_KEY")
    rewritten = 0
    for f in (path / ".hoodie" / "metadata" / "files").glob("*.hfile"):
        h = hfile.read(f.read_bytes(), source=str(f))
        extra = {k: v for k, v in h.file_info.items() if not k.startswith(b"hfile.") and k not in own}
        f.write_bytes(hfile.write(h.cells, meta=h.meta, file_info=extra))
        rewritten += 1
    assert rewritten >= 1 and before
    assert rows(hudi_read(str(path)), ["txn_id", "amount", "txn_type"]) == before


# -- issue 55, 7: the fields Hudi 1.1 writes, field by field beside its files -----------------------


def _fields(data: bytes) -> dict:
    """The structure of an HFile as Hudi's readers see it: trailer fields, block magics, the root
    index and meta index keys, the file info keys and ``hfile.LASTKEY``, and where the last
    data block starts."""
    t = data[-hfile.TRAILER_SIZE + 8:]
    n, i = hfile._read_varint(t, 0)
    trailer = dict(hfile._pb_fields(t[i:i + n]))
    codec = int(trailer[12])
    blocks, pos = [], 0
    while pos < len(data) - hfile.TRAILER_SIZE:
        magic, on_disk, *_ = hfile.HEADER.unpack_from(data, pos)
        blocks.append((pos, magic))
        pos += hfile.HEADER.size + on_disk
    (_, root), at = hfile._block(data, int(trailer[2]), codec, "f")
    (_, metas), _ = hfile._block(data, at, codec, "f")
    h = hfile.read(data)
    data_payloads = [hfile._block(data, off, codec, "f")[0][1] for off, m in blocks if m == hfile.DATA]
    return {
        "trailer_fields": sorted(trailer),
        "trailer": trailer,
        "magics": [m for _, m in blocks],
        "last_data_block": max(off for off, m in blocks if m == hfile.DATA),
        "data_bytes": sum(len(p) for p in data_payloads),
        "root_keys": [k for _, _, k in hfile._index(root, int(trailer[5]))],
        "meta_keys": [k for _, _, k in hfile._index(metas, int(trailer[6]))],
        "info_keys": sorted(h.file_info),
        "info": h.file_info,
        "cells": h.cells,
        "meta": h.meta,
    }


def _ours_beside(fixture_data: bytes) -> tuple[dict, dict]:
    """The fixture's fields, and those of the base HFile our metadata table writes for the
    fixture's own records (same keys, same record schema)."""
    from multiwriter.table import metadata_files

    theirs = _fields(fixture_data)
    recs = metadata_files._decode_hfile(fixture_data, "fixture")
    h = hfile.read(fixture_data)
    schema = fastavro.parse_schema(json.loads(h.file_info[b"schema"]))
    named = fastavro.schemaless_reader(io.BytesIO(h.cells[0][1]), schema)["_hoodie_file_name"]
    ours = _fields(metadata_files._hfile(recs, theirs["info"][b"schema"].decode(), base=True, file_name=named))
    return theirs, ours


@pytest.mark.needs_fixtures
@pytest.mark.parametrize("which", ["bootstrap", "compacted"])
def test_our_base_hfile_has_the_fields_of_hudis(which):
    files = {n: d for n, d in _fixture_hfiles("mor_v9_txns_simple_meta").items() if "/metadata/files/" in n}
    pick = min if which == "bootstrap" else max
    name = pick(files, key=lambda n: n.rsplit("_", 1)[1])
    theirs, ours = _ours_beside(files[name])
    for key in ("trailer_fields", "magics", "info_keys", "meta_keys"):
        assert ours[key] == theirs[key], key
    assert [k for k, _ in ours["cells"]] == [k for k, _ in theirs["cells"]]
    # index and LASTKEY keys: the 2-byte length and the key, no KeyValue tail
    assert ours["root_keys"] == theirs["root_keys"] == [struct.pack(">h", 18) + b"__all_partitions__"]
    last = theirs["cells"][-1][0]
    assert ours["info"][b"hfile.LASTKEY"] == theirs["info"][b"hfile.LASTKEY"] == struct.pack(">h", len(last)) + last
    for f in (ours, theirs):  # field 10: where the last data block starts; field 3: the data's bytes
        assert f["trailer"][10] == f["last_data_block"] and f["trailer"][3] == f["data_bytes"]
        assert 4 not in f["trailer"]
    assert ours["trailer"][3] == theirs["trailer"][3]  # the same cells, byte for byte
    for k in (b"hfile.AVG_KEY_LEN", b"hfile.AVG_VALUE_LEN", b"KEY_VALUE_VERSION", b"MAX_MEMSTORE_TS_KEY",
              b"bloomFilterTypeCode", b"minRecordKey", b"maxRecordKey", b"schema"):
        assert ours["info"][k] == theirs["info"][k], k
    assert ours["meta"] == theirs["meta"], "the bloom filter of the same keys, bit for bit"


@pytest.mark.needs_fixtures
def test_the_bloom_filter_matches_every_hfile_hudi_wrote():
    """Hudi's ``DYNAMIC_V0`` bloom filter of a base file's keys, for every index of the
    fixtures (the record index's thousands of keys too): Hadoop's Murmur hash, tail and all."""
    for name in ("mor_v9_txns_simple_meta", "cow_v9_txns_simple_meta", "mor_v9_nonpartitioned_rollback"):
        for n, data in _fixture_hfiles(name).items():
            h = hfile.read(data, source=n)
            assert hfile.bloom_filter(k for k, _ in h.cells) == h.meta["bloomFilter"], n


def test_the_bloom_filter_grows_rows_then_takes_turns():
    import base64

    small = base64.b64decode(hfile.bloom_filter([str(i) for i in range(25)], entries=10, max_entries=20))
    head = struct.calcsize(">iibi")
    nr, count, rows = struct.unpack_from(">iii", small, head)
    assert (nr, rows) == (10, 2) and count == 15  # 10 + 10 keys fill two rows; the rest go in turn


@pytest.mark.needs_fixtures
def test_the_bootstrap_log_is_hudis_byte_for_byte(tmp_path):
    import multiwriter as mw
    from multiwriter.table import metadata_files
    from tests.conftest import TRIPS_SCHEMA

    with zipfile.ZipFile(FIXTURES / "mor_v9_txns_simple_meta.zip") as zf:
        theirs = zf.read(f"v9_txns_simple_meta/.hoodie/metadata/files/{metadata_files.BOOTSTRAP_LOG}")
    table = mw.Table.create(str(tmp_path / "t"), name="t", schema=TRIPS_SCHEMA, record_key="id", ordering_field="ts")
    rel = f"{metadata_files.MDT_DIR}/{metadata_files.PARTITION}/{metadata_files.BOOTSTRAP_LOG}"
    assert table.storage.read_bytes(rel) == theirs


def test_hudi_rs_reads_a_table_whose_files_partition_we_compacted(tmp_path):
    """Our base HFiles with Hudi's fields (bootstrap log, keyless-tail index, bloom filter):
    hudi-rs lists the same files from them as our reader, before and after a compaction."""
    import multiwriter as mw
    from multiwriter.table import metadata_files
    from tests.conftest import TRIPS_SCHEMA, trips
    from tests.oracle import hudi_read, rows

    path = str(tmp_path / "t")
    table = mw.Table.create(path, name="t", schema=TRIPS_SCHEMA, record_key="id", ordering_field="ts",
                            partition_by=["date"])
    for k in range(metadata_files.MAX_DELTA_COMMITS + 2):
        mw.write(trips(range(2 * k, 2 * k + 2), date=f"2024-01-0{1 + k % 3}"), path,
                 mw.WriterConfig(writer_id="w", lock=mw.InProcessLock(), executor="driver"))
    mt = metadata_files.MetadataTable(table.storage, table.config)
    assert mt.latest_compaction() is not None
    base, _, _ = mt.latest_slice()
    h = hfile.read(table.storage.read_bytes(f"{metadata_files.MDT_DIR}/files/{base}"))
    assert h.file_info[hfile.BLOOM_TYPE_KEY] == hfile.BLOOM_TYPE
    assert h.meta[hfile.BLOOM_META_BLOCK] == hfile.bloom_filter(k for k, _ in h.cells)
    cols = ["id", "date"]
    assert rows(hudi_read(path), cols) == rows(table.read(), cols) and len(rows(table.read(), cols)) == 24
