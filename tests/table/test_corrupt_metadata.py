"""Corrupt or hostile metadata files: every parse fails with a TableFormatError naming the file,
and no file can make decoding take memory out of proportion to its size."""
from __future__ import annotations

import io
import json
import resource
import subprocess
import sys
import textwrap
import zlib
from collections.abc import Iterator
from contextlib import contextmanager

import fastavro
import pytest

from multiwriter.cleaner.retention import CleanPlan
from multiwriter.cleaner.rollback import RollbackPlan
from multiwriter.errors import TableFormatError
from multiwriter.format import lsm_timeline as lsm
from multiwriter.table import properties as props
from multiwriter.format.avro import zigzag
from multiwriter.table.metadata import CommitMetadata, decode_records

SYNC = b"\x00" * 16


def container(schema: dict, body: bytes, count: int = 1, codec: str = "null") -> bytes:
    """An Avro container of ``schema`` with one hand-made block (``count`` records of ``body``)."""
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(schema), [], sync_marker=SYNC, codec=codec)
    return buf.getvalue() + zigzag(count) + zigzag(len(body)) + body + SYNC


def null_array_bomb(n: int = 1 << 40) -> bytes:
    """A record holding an array of ``n`` nulls: under 200 bytes on disk."""
    schema = {"type": "record", "name": "X", "fields": [{"name": "a", "type": {"type": "array", "items": "null"}}]}
    return container(schema, zigzag(n) + b"\x00")


@contextmanager
def memory_cap(extra: int = 2 << 30) -> Iterator[None]:
    """At most ``extra`` more bytes of address space for this process meanwhile: were decoding
    unbounded, the test ends in a MemoryError instead of exhausting the machine."""
    with open("/proc/self/status") as f:
        size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (size + extra, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def avro_of(schema: object, records: list) -> bytes:
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(schema), records)
    return buf.getvalue()


BOUNDED_CHILD = textwrap.dedent("""
    import sys, time
    from multiwriter.errors import TableFormatError
    from multiwriter.table.metadata import decode_records
    data = open(sys.argv[1], "rb").read()
    t = time.monotonic()
    try:
        decode_records(data, source="bomb.avro")
        print("decoded")
    except TableFormatError as e:
        print(f"TableFormatError {time.monotonic() - t:.3f} {e}")
""")


def test_an_array_of_2_to_the_40_nulls_is_refused_quickly_with_bounded_memory(tmp_path):
    bomb = tmp_path / "bomb.avro"
    bomb.write_bytes(null_array_bomb())
    assert bomb.stat().st_size < 256

    def limit() -> None:  # 2 GiB of address space: the bomb needs 8 TiB for its list alone
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    try:
        p = subprocess.run([sys.executable, "-c", BOUNDED_CHILD, str(bomb)], preexec_fn=limit,
                           capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("decoding a 2^40-null array did not end within 60 s")
    assert p.returncode == 0, p.stderr[-2000:]
    out = p.stdout.strip()
    assert out.startswith("TableFormatError"), out
    assert "bomb.avro" in out and "no bytes" in out
    assert float(out.split()[1]) < 2.0


@pytest.mark.parametrize("make, why", [
    # the container's own records take no bytes: a block of 2^40 of them
    (lambda: container({"type": "record", "name": "E", "fields": []}, b"", count=1 << 40), "records take no bytes"),
    # zero-size fixed items, nested in a map of records
    (lambda: container({"type": "record", "name": "R", "fields": [{"name": "m", "type": {"type": "map", "values": {
        "type": "array", "items": {"type": "fixed", "name": "F", "size": 0}}}}]},
        zigzag(1) + zigzag(1) + b"k" + zigzag(1 << 40) + b"\x00" + b"\x00"), "no bytes"),
    # a block claiming more records than it has bytes
    (lambda: container({"type": "record", "name": "L", "fields": [{"name": "x", "type": "long"}]},
                       b"\x02", count=1 << 40), "declares"),
    # a block size beyond the end of the file
    (lambda: container({"type": "record", "name": "L", "fields": [{"name": "x", "type": "long"}]}, b"\x02")[:-17],
     "overruns"),
])
def test_containers_whose_decoding_is_not_bounded_by_their_size_are_refused(make, why):
    data = make()
    with memory_cap(), pytest.raises(TableFormatError, match=f"x.avro: .*{why}"):
        decode_records(data, source="x.avro")


def test_a_deflate_block_that_inflates_without_bound_is_refused(monkeypatch):
    from multiwriter.format import avro

    monkeypatch.setattr(avro, "MAX_BLOCK_BYTES", 1 << 20)
    raw = b"\x02" * (4 << 20)  # 4 Mi longs of 1: 4 MiB inflated
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    body = c.compress(raw) + c.flush()
    schema = {"type": "record", "name": "L", "fields": [{"name": "x", "type": "long"}]}
    with memory_cap(), pytest.raises(TableFormatError, match="inflates past"):
        decode_records(container(schema, body, count=len(raw), codec="deflate"), source="x.avro")
    # the same file inflating within the bound decodes
    monkeypatch.setattr(avro, "MAX_BLOCK_BYTES", 8 << 20)
    assert len(decode_records(container(schema, body, count=len(raw), codec="deflate"), source="x.avro")) == len(raw)


def test_ordinary_containers_still_decode():
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "a", "type": {"type": "array", "items": ["null", "string"]}},
        {"name": "m", "type": {"type": "map", "values": "null"}},
        {"name": "n", "type": "null"}]}
    recs = [{"a": [None, "x"], "m": {"k": None}, "n": None}] * 3
    assert decode_records(avro_of(schema, recs), source="ok.avro") == recs


# -- plans of the wrong shape -----------------------------------------------------------------

WRONG_SHAPES = [
    ("long", [5]),
    ({"type": "record", "name": "P", "fields": [{"name": "instantToRollback", "type": "string"}]},
     [{"instantToRollback": "20240101000000000"}]),
    ({"type": "record", "name": "P", "fields": [
        {"name": "instantToRollback", "type": {"type": "record", "name": "I", "fields": [
            {"name": "commitTime", "type": "string"}]}},
        {"name": "RollbackRequests", "type": {"type": "array", "items": "long"}}]},
     [{"instantToRollback": {"commitTime": "20240101000000000"}, "RollbackRequests": [1, 2]}]),
    ({"type": "record", "name": "P", "fields": [
        {"name": "instantToRollback", "type": {"type": "record", "name": "I", "fields": [
            {"name": "commitTime", "type": "long"}]}},
        {"name": "RollbackRequests", "type": {"type": "array", "items": {"type": "record", "name": "Q", "fields": [
            {"name": "partitionPath", "type": "long"}, {"name": "filesToBeDeleted", "type": "string"}]}}}]},
     [{"instantToRollback": {"commitTime": 7}, "RollbackRequests": [{"partitionPath": 3, "filesToBeDeleted": "ab"}]}]),
]


@pytest.mark.parametrize("schema, records", WRONG_SHAPES)
def test_a_rollback_plan_of_the_wrong_shape_is_a_table_format_error(schema, records):
    with pytest.raises(TableFormatError, match=r"\.hoodie/timeline/1\.rollback\.requested"):
        RollbackPlan.from_bytes("1", avro_of(schema, records), source=".hoodie/timeline/1.rollback.requested")


CLEAN_SHAPES = [
    ("string", ["x"]),
    ({"type": "record", "name": "C", "fields": [{"name": "earliestInstantToRetain", "type": "string"}]},
     [{"earliestInstantToRetain": "x"}]),
    ({"type": "record", "name": "C", "fields": [
        {"name": "filePathsToBeDeletedPerPartition", "type": {"type": "map", "values": {"type": "array",
                                                                                         "items": "long"}}}]},
     [{"filePathsToBeDeletedPerPartition": {"p": [1]}}]),
    ({"type": "record", "name": "C", "fields": [
        {"name": "filesToBeDeletedPerPartition", "type": {"type": "map", "values": "long"}}]},
     [{"filesToBeDeletedPerPartition": {"p": 1}}]),
]


@pytest.mark.parametrize("schema, records", CLEAN_SHAPES)
def test_a_clean_plan_of_the_wrong_shape_is_a_table_format_error(schema, records):
    with pytest.raises(TableFormatError, match=r"\.hoodie/timeline/1\.clean\.requested"):
        CleanPlan.from_bytes("1", avro_of(schema, records), source=".hoodie/timeline/1.clean.requested")


@pytest.mark.parametrize("doc", [
    b'{"partitionToWriteStats": {"p": [{"fileId": "f", "path": "p/f.parquet", "numWrites": 1e400}]}}',
    b'{"partitionToWriteStats": {"p": [{"fileId": "f", "path": "p/f.parquet", "numWrites": ' + b"9" * 5000 + b"}]}}",
    b'{"partitionToWriteStats": {"p": "notalist"}}',
    b'{"partitionToWriteStats": {"p": [5]}}',
    b'{"extraMetadata": ' + b"[" * 100000 + b"]" * 100000 + b"}",
])
def test_commit_metadata_of_the_wrong_shape_is_a_table_format_error(doc):
    with pytest.raises(TableFormatError, match=r"1_2\.commit"):
        CommitMetadata.from_bytes(doc, source=".hoodie/timeline/1_2.commit")


# -- hoodie.properties ------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "hoodie.table.name=a\\uZZZZb\n",
    "hoodie.table.name=a\\ud800b\n",  # a lone surrogate
    "hoodie.table.name=a\\u12\n",
])
def test_bad_escapes_in_properties_are_a_table_format_error(text):
    with pytest.raises(TableFormatError, match="t/.hoodie/hoodie.properties"):
        props.parse(text, source="t/.hoodie/hoodie.properties")


def test_a_surrogate_pair_in_properties_still_decodes():
    assert props.parse("k=\\ud83d\\ude00\n", source="p") == {"k": "\U0001F600"}


# -- the LSM history ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["evil.parquet", "../../victim/1_2_0.parquet", "1_2_0.parquet/../x", 7, None])
def test_a_history_manifest_naming_a_foreign_file_is_a_table_format_error(tmp_path, name):
    from multiwriter.storage import Storage

    st = Storage(str(tmp_path))
    hist = ".hoodie/timeline/history"
    st.write_bytes(f"{hist}/{lsm.MANIFEST_PREFIX}1", json.dumps({"files": [{"fileName": name, "fileLen": 1}]}).encode())
    st.write_bytes(f"{hist}/{lsm.VERSION_FILE}", b"1")
    with pytest.raises(TableFormatError, match=f"{hist}/{lsm.MANIFEST_PREFIX}1"):
        lsm.manifest_files(st, hist)
