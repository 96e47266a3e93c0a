"""A snapshot read merges many slices at once (:func:`~multiwriter.table.merge_rule.merge_prepared`):
each slice read and keyed on its own, the winners of all of them chosen in one pass, each column
assembled once. On random slices (hypothesis) whose keys repeat across slices, with deletes
(plain and ordered), log-only slices and partial updates, the result equals, value for value,
the slices merged one by one; a table of several partitions and buckets with updates, inserts
and deletes reads as hudi-rs reads it."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import multiwriter as mw
from multiwriter.table.merge_rule import Versions, merge, merge_prepared, prepare
from multiwriter.format.schema import META_COLUMNS
from tests.oracle import hudi_read
from tests.table.test_merge_assemble import FLOATS, SCHEMA, _exact, _table, versions

PARTIAL = frozenset([*META_COLUMNS, "ts", "s"])


def _deletes(items: list[tuple[int, int | None]]) -> pa.Table:
    """Deletes with an ordering value, or none (a plain delete)."""
    return pa.table({"record_key": pa.array([f"k{k:02d}" for k, _ in items], pa.string()),
                     "partition_path": pa.array(["p"] * len(items), pa.string()),
                     "ordering_value": pa.array([o for _, o in items], pa.int64())})


def log_source() -> st.SearchStrategy:
    """One log file: records, deletes (ordering value or plain) and whether its records are a partial update."""
    return st.tuples(st.lists(versions(FLOATS), max_size=5),
                     st.lists(st.tuples(st.integers(0, 11), st.one_of(st.none(), st.integers(1, 3))), max_size=2),
                     st.booleans())


def a_slice() -> st.SearchStrategy:
    """A slice: its base rows (None: a log-only slice) and its logs."""
    return st.tuples(st.one_of(st.none(), st.lists(versions(FLOATS), max_size=8, unique_by=lambda v: v[0])),
                     st.lists(log_source(), max_size=3), st.booleans())


def _sources(n: int, spec: tuple) -> list[Versions]:
    base, logs, partial_ok = spec
    out = [Versions(-1, _table(f"b{n}", base))] if base is not None else []
    for rank, (records, deletes, partial) in enumerate(logs):
        out.append(Versions(rank, _table(f"s{n}l{rank}", records) if records else None,
                            _deletes(deletes) if deletes else None,
                            PARTIAL if partial and partial_ok and records else None))
    return out


@pytest.mark.parametrize("ordering", ["ts", None], ids=["event time", "commit time"])
def test_slices_merged_at_once_equal_the_slices_merged_one_by_one(ordering):
    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(slices=st.lists(a_slice(), min_size=1, max_size=5))
    def check(slices):
        sources = [_sources(n, s) for n, s in enumerate(slices)]
        one_by_one = [merge(s, ordering_field=ordering, schema=SCHEMA) for s in sources]
        at_once = merge_prepared([prepare(s, ordering_field=ordering, schema=SCHEMA) for s in sources],
                                 ordering_field=ordering, schema=SCHEMA)
        assert _exact(at_once) == [r for t in one_by_one for r in _exact(t)]
        assert at_once.schema.equals(SCHEMA, check_metadata=False)

    check()


def test_equal_keys_of_two_slices_stay_two_records():
    """The same key in two slices (two partitions) is two records: each slice's versions
    compete among themselves, and a delete in one slice leaves the other's row."""
    a = [Versions(-1, _table("a", [(1, 5, "a", 1, 1.0, b"a"), (2, 0, "a", 1, 1.0, b"a")])),
         Versions(0, _table("al", [(1, 1, "old", 1, 1.0, b"a")]))]
    b = [Versions(-1, _table("b", [(1, 0, "b", 1, 1.0, b"b")])),
         Versions(0, _table("bl", [(1, 2, "new", 2, 2.0, b"b")]), _deletes([(2, None)]))]
    got = merge_prepared([prepare(s, ordering_field="ts", schema=SCHEMA) for s in (a, b)],
                         ordering_field="ts", schema=SCHEMA)
    assert got.column("s").to_pylist() == ["a", "a", "new"]
    assert got.column("_hoodie_record_key").to_pylist() == ["k01", "k02", "k01"]


@pytest.mark.parametrize("key_type", [pa.string(), pa.int64()])
def test_a_table_of_many_slices_reads_as_hudi_rs_reads_it(tmp_path, key_type):
    """3 partitions x 3 buckets, updates, inserts and deletes over 4 delta commits: our
    snapshot read (all columns and a few) equals hudi-rs's."""
    path = str(tmp_path / "t")
    schema = pa.schema([("id", key_type), ("date", pa.string()), ("ts", pa.int64()), ("user", pa.string()),
                        ("amount", pa.float64())])
    mw.Table.create(path, name="t", schema=schema, record_key="id", partition_by=["date"], ordering_field="ts",
                    table_type="MERGE_ON_READ", num_buckets=3)
    lock = mw.InProcessLock()

    def batch(ids: list[int], ts: int, amount: float) -> pa.Table:
        keys = [f"k{i:03d}" if key_type == pa.string() else i for i in ids]
        return pa.table({"id": pa.array(keys, key_type), "date": [f"2024-01-0{1 + i % 3}" for i in ids],
                         "ts": pa.array([ts] * len(ids), pa.int64()), "user": [f"u{i % 7}" for i in ids],
                         "amount": [amount + i for i in ids]}, schema=schema)

    def cfg(**kw) -> mw.WriterConfig:
        return mw.WriterConfig(writer_id="w", lock=lock, **kw)

    mw.write(batch(list(range(90)), 1, 0.5), path, cfg())
    mw.write(batch([3, 5, 8, 17, 40, 90, 91], 2, 100.0), path, cfg())
    mw.write(batch([5, 9, 41, 60, 92], 3, 200.0), path, cfg(operation="delete"))
    mw.write(batch([0, 3, 9, 39, 93], 4, 300.0), path, cfg())
    slices = mw.Table.open(path).snapshot().files()
    assert sum(1 for f in slices if f.logs) > 2
    ours, theirs = mw.Table.open(path).read(), hudi_read(path)
    order = [("id", "ascending")]
    cols = ["id", "date", "ts", "user", "amount", "_hoodie_record_key", "_hoodie_commit_time", "_hoodie_commit_seqno"]
    assert ours.num_rows == 90 + 4 - 4
    assert ours.select(cols).take(pc.sort_indices(ours, order)).equals(
        theirs.select(cols).cast(ours.select(cols).schema).take(pc.sort_indices(theirs, order)))
    few = mw.Table.open(path).read(columns=["id", "ts", "amount"])
    assert few.take(pc.sort_indices(few, order)).equals(
        ours.select(["id", "ts", "amount"]).take(pc.sort_indices(ours, order)))
