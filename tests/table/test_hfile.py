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
from multiwriter.table import hfile
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
