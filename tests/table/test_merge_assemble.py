"""How a merged slice's rows are assembled: when every base row stays, a column whose winning
values equal the base values they replace is kept as stored (no copy), a column of numbers
without nulls is assembled in numpy (the base values with the winners' written over), the others
are taken row by row. On random slices (hypothesis) the result equals, value for value, both a plain model
that applies each key's versions in order and the plain path (every column taken row by row);
floats are compared by their bits, so a 0.0 replacing a -0.0 (equal, not identical) shows.
A table written with such updates reads the same through hudi-rs."""
from __future__ import annotations

import math
import struct

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import multiwriter as mw
from multiwriter.table import merge_rule
from multiwriter.table.merge_rule import Versions, merge
from multiwriter.format.schema import META_COLUMNS
from tests.oracle import hudi_read

SCHEMA = pa.schema([pa.field(c, pa.string()) for c in META_COLUMNS]
                   + [("ts", pa.int64()), ("s", pa.string()), ("n", pa.int32()), ("f", pa.float64()),
                      ("b", pa.binary())])
FLOATS = [0.0, -0.0, 1.5, math.nan, math.inf, None]


def versions(floats: list) -> st.SearchStrategy:
    """One version: (key number, ordering value, s, n, f, b); small pools, so values repeat."""
    return st.tuples(st.integers(0, 11), st.integers(0, 3), st.sampled_from(["x", "y", None]),
                     st.sampled_from([1, 2, None]), st.sampled_from(floats), st.sampled_from([b"p", b"", None]))


def sources(floats: list) -> st.SearchStrategy:
    """One log source: its records and its deletes (key number, ordering value)."""
    return st.tuples(st.lists(versions(floats), max_size=6),
                     st.lists(st.tuples(st.integers(0, 11), st.integers(1, 3)), max_size=2))


def _table(commit: str, versions: list[tuple]) -> pa.Table:
    n = len(versions)
    return pa.table({
        "_hoodie_commit_time": [commit] * n,
        "_hoodie_commit_seqno": [f"{commit}_{i}" for i in range(n)],
        "_hoodie_record_key": [f"k{v[0]:02d}" for v in versions],
        "_hoodie_partition_path": ["p"] * n,
        "_hoodie_file_name": [f"f_{commit}"] * n,
        "ts": pa.array([v[1] for v in versions], pa.int64()),
        "s": pa.array([v[2] for v in versions], pa.string()),
        "n": pa.array([v[3] for v in versions], pa.int32()),
        "f": pa.array([v[4] for v in versions], pa.float64()),
        "b": pa.array([v[5] for v in versions], pa.binary()),
    }, schema=SCHEMA)


def _deletes(items: list[tuple[int, int]]) -> pa.Table:
    return pa.table({"record_key": pa.array([f"k{k:02d}" for k, _ in items], pa.string()),
                     "partition_path": pa.array(["p"] * len(items), pa.string()),
                     "ordering_value": pa.array([o for _, o in items], pa.int64())})


def _exact(t: pa.Table) -> list[tuple]:
    """Rows with floats as their bits (0.0 and -0.0 differ, a NaN equals itself)."""
    def bits(v):
        return struct.pack("<d", v) if isinstance(v, float) else v
    d = t.to_pydict()
    return [tuple(bits(d[c][i]) for c in t.column_names) for i in range(t.num_rows)]


def _model(base: list[tuple], logs: list[tuple[list[tuple], list[tuple[int, int]]]]) -> list[tuple]:
    """Event time with ordered deletes only: the highest ordering value wins, a tie goes to the
    later place (records before deletes within a source); output in first-appearance order."""
    rows = _exact(_table("b", base))
    best: dict[str, tuple[int, int, tuple | None]] = {r[2]: (r[5], -1, r) for r in rows}
    order = [r[2] for r in rows]
    place = 0
    for rank, (records, deletes) in enumerate(logs):
        for r in _exact(_table(f"l{rank}", records)):
            place += 1
            if r[2] not in best:
                order.append(r[2])
            if r[2] not in best or r[5] >= best[r[2]][0]:
                best[r[2]] = (r[5], place, r)
        for k, o in deletes:
            place += 1
            key = f"k{k:02d}"
            if key not in best:
                order.append(key)
            if key not in best or o >= best[key][0]:
                best[key] = (o, place, None)
    return [best[k][2] for k in order if best[k][2] is not None]


def _plain(stored_sources: list[Versions]) -> list[tuple]:
    """The plain path: the same merge with every column taken row by row (neither kept as
    stored nor assembled in numpy)."""
    keep, scatter = merge_rule._exact, merge_rule._scatterable
    merge_rule._exact = lambda t: False
    merge_rule._scatterable = lambda kept, logged: False
    try:
        return _exact(merge(stored_sources, ordering_field="ts", schema=SCHEMA))
    finally:
        merge_rule._exact, merge_rule._scatterable = keep, scatter


@pytest.mark.parametrize("floats", [FLOATS, [0.0, -0.0]], ids=["values", "signed zeros"])
def test_assembled_rows_equal_the_model_and_the_plain_path(floats):
    @settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(base=st.lists(versions(floats), max_size=10, unique_by=lambda v: v[0]),
           logs=st.lists(sources(floats), min_size=1, max_size=4))
    def check(base, logs):
        _check_slice(base, logs)

    check()


def _check_slice(base: list[tuple], logs: list[tuple]) -> None:
    sources = [Versions(-1, _table("b", base))]
    for rank, (records, deletes) in enumerate(logs):
        sources.append(Versions(rank, _table(f"l{rank}", records) if records else None,
                                _deletes(deletes) if deletes else None))
    got = _exact(merge(sources, ordering_field="ts", schema=SCHEMA))
    assert got == _model(base, logs)
    assert got == _plain(sources)


def test_unchanged_columns_are_the_stored_base_columns_and_changed_ones_are_replaced():
    """The fast paths themselves: an update that changes ``f`` (0.0 over -0.0) and ``ts`` keeps
    ``s``, ``n`` (numbers without nulls: compared by their bits in numpy) and ``b`` as the base
    stored them, and appends a new key's values."""
    base = _table("b", [(i, 0, "x", 1, -0.0, b"p") for i in range(6)])
    log = _table("l0", [(2, 1, "x", 1, 0.0, b"p"), (9, 1, "y", 2, 1.5, None)])
    out = merge([Versions(-1, base), Versions(0, log)], ordering_field="ts", schema=SCHEMA)
    for name in ("s", "n", "b"):  # the base's buffers themselves, then the new key's value
        assert out.column(name).num_chunks == 2
        assert out.column(name).chunk(0).buffers()[1].address == base.column(name).chunk(0).buffers()[1].address
    f = out.column("f")  # a copy with 0.0 written over: 0.0 equals -0.0 but is another value
    assert f.chunk(0).buffers()[1].address != base.column("f").chunk(0).buffers()[1].address
    assert f.to_pylist()[6] == 1.5
    assert _exact(out) == _model([(i, 0, "x", 1, -0.0, b"p") for i in range(6)],
                                 [([(2, 1, "x", 1, 0.0, b"p"), (9, 1, "y", 2, 1.5, None)], [])])
    assert struct.pack("<d", out.column("f")[2].as_py()) == struct.pack("<d", 0.0)


@pytest.mark.parametrize("key_type", [pa.string(), pa.int64()])
def test_a_table_whose_updates_leave_columns_unchanged_reads_as_hudi_rs_reads_it(tmp_path, key_type):
    """Updates that keep some columns (``user``, ``date``), change others and insert new keys,
    over 3 delta commits: our snapshot read (all columns and a few) equals hudi-rs's."""
    path = str(tmp_path / "t")
    schema = pa.schema([("id", key_type), ("date", pa.string()), ("ts", pa.int64()), ("user", pa.string()),
                        ("amount", pa.float64())])
    mw.Table.create(path, name="t", schema=schema, record_key="id", partition_by=["date"], ordering_field="ts",
                    table_type="MERGE_ON_READ", num_buckets=2)
    lock = mw.InProcessLock()

    def batch(ids: list[int], ts: int, amount: float) -> pa.Table:
        keys = [f"k{i:03d}" if key_type == pa.string() else i for i in ids]
        return pa.table({"id": pa.array(keys, key_type), "date": [f"2024-01-0{1 + i % 2}" for i in ids],
                         "ts": pa.array([ts] * len(ids), pa.int64()), "user": [f"u{i % 7}" for i in ids],
                         "amount": [amount + i for i in ids]}, schema=schema)

    mw.write(batch(list(range(40)), 1, -0.0), path, mw.WriterConfig(writer_id="w", lock=lock))
    for c, ids in enumerate([[3, 5, 8, 40], [5, 9, 41], [0, 3, 39, 42]]):
        mw.write(batch(ids, 2 + c, 100.0 * (c + 1)), path, mw.WriterConfig(writer_id="w", lock=lock))
    snap = mw.Table.open(path).snapshot().files()
    assert any(f.logs for f in snap)
    ours, theirs = mw.Table.open(path).read(), hudi_read(path)
    cols = ["id", "date", "ts", "user", "amount", "_hoodie_record_key", "_hoodie_commit_time"]
    order = [("id", "ascending")]
    assert ours.num_rows == 43
    assert ours.select(cols).take(pc.sort_indices(ours, order)).equals(
        theirs.select(cols).cast(ours.select(cols).schema).take(pc.sort_indices(theirs, order)))
    few = mw.Table.open(path).read(columns=["id", "ts", "amount"])
    assert few.take(pc.sort_indices(few, order)).equals(ours.select(["id", "ts", "amount"]).take(pc.sort_indices(ours, order)))


def test_numbers_with_nulls_are_taken_row_by_row_and_equal_the_numpy_assembly_without_them():
    """A column of numbers is assembled in numpy only when neither the base nor the logs hold a
    null; with one it takes the plain path, and either way the rows are the model's."""
    base = [(i, 0, "x", i, float(i), b"p") for i in range(8)]
    for n_new in (None, 5):
        logs = [([(1, 1, "y", n_new, -0.0, b"q"), (10, 1, "y", 3, 2.5, b"q")], [])]
        sources = [Versions(-1, _table("b", base)), Versions(0, _table("l0", logs[0][0]))]
        out = merge(sources, ordering_field="ts", schema=SCHEMA)
        assert merge_rule._scatterable(sources[0].records.column("n"), sources[1].records.column("n")) is (n_new is not None)
        assert _exact(out) == _model(base, logs) == _plain(sources)
