"""Compaction of a file slice whose every row is deleted: Hudi 1.1 writes an empty base file
(``HoodieCompactor.compact`` -> ``compactUsingFileGroupReader`` -> the compaction constructor of
``FileGroupReaderBasedMergeHandle``, whose ``init`` opens the new base file's writer before the
file group reader yields any record; ``close`` then leaves a Parquet file of zero rows). Ours
does alike, so the group's latest slice is that empty base, not the deleted rows' older slice."""
from __future__ import annotations

import pyarrow.parquet as pq

import multiwriter as mw
from tests.conftest import trips
from tests.oracle import hudi_read, rows
from tests.conftest import compact_slices as _compact


def test_a_slice_whose_rows_are_all_deleted_compacts_to_an_empty_base_file(mor_table, table_path):
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    mw.write(trips(["a", "b"]), table_path, cfg)
    mw.write(trips(["a", "b"]), table_path, mw.WriterConfig(writer_id="w", lock=mw.InProcessLock(), operation="delete"))
    assert mw.Table.open(table_path).read().num_rows == 0
    t = mw.Table.open(table_path)
    before = {n for n in t.storage.list_names("2024-01-01") if n.endswith(".parquet")}
    _compact(table_path)
    t = mw.Table.open(table_path)
    written = [n for n in t.storage.list_names("2024-01-01") if n.endswith(".parquet") and n not in before]
    assert len(written) == 2  # a and b fall in two buckets: one compacted slice each
    for name in written:
        empty = pq.read_table(t.storage.abs(f"2024-01-01/{name}"))
        assert empty.num_rows == 0 and {"_hoodie_record_key", "value"} <= set(empty.column_names)
    assert t.read().num_rows == 0
    assert rows(hudi_read(table_path), ["id"]) == []
