"""With Hudi's metadata table on, a snapshot read and an upsert list no data partition: the
number of storage listings they make is the same on a table of 8 partitions and one of 64
(issue 41, goal 2). Every listing call of the storage layer is counted, by the directory it
lists; without the metadata table the same operations list the data directories (the control)."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

import multiwriter as mw
from multiwriter.storage import Storage
from tests.oracle import hudi_read, rows

SCHEMA = pa.schema([("id", pa.string()), ("p", pa.string()), ("ts", pa.int64()), ("v", pa.float64())])
#: what may reach storage without naming a file: listings, and directory checks (on S3 a LIST each)
LISTING = ("list_dir", "list_subdirs", "walk_files", "is_dir")
TOUCHED = 4


def _rows(ids, partitions: int, ts: int) -> pa.Table:
    ids = np.asarray(ids)
    return pa.table({"id": [f"k{i:06d}" for i in ids], "p": [f"p{i % partitions:03d}" for i in ids],
                     "ts": np.full(len(ids), ts, dtype=np.int64), "v": np.full(len(ids), float(ts))}, schema=SCHEMA)


@pytest.fixture()
def counted(monkeypatch):
    """Every listing call on any :class:`Storage`, as (method, where): ``.hoodie`` paths by their
    first three segments, data paths as ``data``."""
    calls: Counter[tuple[str, str]] = Counter()
    for name in LISTING:
        orig = getattr(Storage, name)

        def wrapped(self, rel, *a, _orig=orig, _name=name, **kw):
            where = "/".join("<t>" if seg.isdigit() else seg for seg in rel.split("/")[:3]) \
                if rel.startswith(".hoodie") else "data"
            calls[(_name, where)] += 1
            return _orig(self, rel, *a, **kw)

        monkeypatch.setattr(Storage, name, wrapped)
    return calls


def _read_and_upsert(tmp_path, counted, partitions: int, metadata: bool, kind: str = "cow") -> tuple[Counter, Counter]:
    path = str(tmp_path / f"t{partitions}{metadata}")
    layout = {"table_type": "MERGE_ON_READ", "num_buckets": 2} if kind == "mor" else {}
    mw.Table.create(path, name="t", schema=SCHEMA, record_key="id", partition_by=["p"], ordering_field="ts",
                    metadata=metadata, **layout)
    cfg = mw.WriterConfig(writer_id="w", executor="driver", lock=mw.InProcessLock())
    mw.write(_rows(range(3 * partitions), partitions, 1), path, cfg)
    # updates and new keys in the same TOUCHED partitions, whatever the table's size
    upd = [i for i in range(3 * partitions) if i % partitions < TOUCHED]
    new = [3 * partitions + k * partitions + j for k in range(3) for j in range(TOUCHED)]
    counted.clear()
    mw.write(_rows(upd + new, partitions, 2), path, cfg)
    upsert = Counter(counted)
    counted.clear()
    got = mw.Table.open(path).read()
    read = Counter(counted)
    assert got.num_rows == 3 * partitions + len(new)
    assert rows(got, ["id", "ts"]) == rows(hudi_read(path), ["id", "ts"])
    return upsert, read


@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_with_the_metadata_table_reads_and_upserts_list_the_same_whatever_the_partitions(tmp_path, counted, kind):
    small = _read_and_upsert(tmp_path, counted, 8, True, kind)
    large = _read_and_upsert(tmp_path, counted, 64, True, kind)
    for op, s, l in zip(("upsert", "read"), small, large, strict=True):
        assert not [k for k in s if k[1] == "data"], f"{op} listed data directories: {s}"
        assert s == l, f"{op}: listings differ between 8 and 64 partitions"


def test_without_it_they_list_the_data_directories(tmp_path, counted):
    upsert, read = _read_and_upsert(tmp_path, counted, 8, False)
    assert read[("walk_files", "data")] == 1
    assert upsert[("list_dir", "data")] == TOUCHED
