"""The merge rule with partial updates (log blocks marked ``IS_PARTIAL``): the winner is chosen as
for full records; a log winner's columns are the logs folded in place order (each new running
winner overlays the columns it carries, a delete that wins clears them), the rest the base
row's, as hudi-rs merges them. Literal expected rows, derived by hand."""
from __future__ import annotations

import pyarrow as pa

from multiwriter.table.merge_rule import Versions, merge
from multiwriter.table.schema import META_COLUMNS

SCHEMA = pa.schema([pa.field(c, pa.string()) for c in META_COLUMNS]
                   + [("ts", pa.int64()), ("v", pa.string()), ("n", pa.int64())])
META = frozenset(META_COLUMNS)


def recs(commit: str, *rows: dict) -> pa.Table:
    """Stored rows as a commit writes them: the meta columns, then the columns the rows hold."""
    n = len(rows)
    cols = {
        "_hoodie_commit_time": [commit] * n,
        "_hoodie_commit_seqno": [f"{commit}_0_{i}" for i in range(n)],
        "_hoodie_record_key": [r["k"] for r in rows],
        "_hoodie_partition_path": ["p1"] * n,
        "_hoodie_file_name": ["f1"] * n,
    }
    for c in ("ts", "v", "n"):
        if c in rows[0]:
            cols[c] = pa.array([r[c] for r in rows], SCHEMA.field(c).type)
    return pa.table(cols)


def partial(rank: int, commit: str, *rows: dict) -> Versions:
    """A partial-update source: it carries the meta columns and the columns its rows hold."""
    t = recs(commit, *rows)
    return Versions(rank, t, carries=frozenset(t.column_names))


def dels(*rows: tuple) -> pa.Table:
    return pa.table({"record_key": pa.array([r[0] for r in rows], pa.string()),
                     "partition_path": pa.array(["p1"] * len(rows), pa.string()),
                     "ordering_value": pa.array([r[1] for r in rows], pa.int64())})


def out(t: pa.Table) -> list[tuple]:
    """(key, commit time, ts, v, n) per output row, in output order."""
    d = t.to_pydict()
    return list(zip(d["_hoodie_record_key"], d["_hoodie_commit_time"], d["ts"], d["v"], d["n"], strict=True))


def event(*sources: Versions, schema: pa.Schema = SCHEMA) -> list[tuple]:
    return out(merge(sources, ordering_field="ts", schema=schema))


BASE = Versions(-1, recs("100", {"k": "k1", "ts": 1, "v": "a", "n": 10}, {"k": "k2", "ts": 1, "v": "b", "n": 20}))


def test_a_partial_update_keeps_the_base_values_of_the_columns_it_lacks():
    assert event(BASE, partial(0, "200", {"k": "k1", "ts": 2, "v": "A"})) == [
        ("k1", "200", 2, "A", 10), ("k2", "100", 1, "b", 20)]


def test_two_partial_updates_of_different_columns_both_survive():
    got = event(BASE, partial(0, "200", {"k": "k1", "ts": 2, "v": "A"}), partial(1, "300", {"k": "k1", "ts": 3, "n": 11}))
    assert got == [("k1", "300", 3, "A", 11), ("k2", "100", 1, "b", 20)]
    # the same with equal ordering values: the later place wins ties, column by column
    got = event(BASE, partial(0, "200", {"k": "k1", "ts": 1, "n": 12}), partial(1, "300", {"k": "k1", "ts": 1, "v": "B"}))
    assert got == [("k1", "300", 1, "B", 12), ("k2", "100", 1, "b", 20)]


def test_a_partial_update_with_a_lower_ordering_value_loses_every_column():
    assert event(BASE, partial(0, "200", {"k": "k1", "ts": 0, "v": "old"})) == [
        ("k1", "100", 1, "a", 10), ("k2", "100", 1, "b", 20)]


def test_a_lacking_column_comes_from_the_last_running_winner_that_carries_it():
    """Full versions at ts 1 (base) and 3, a partial one at ts 5 lacking n: n comes from ts 3
    when that version came first; when it came after the partial one it never led, so n is the
    base row's."""
    full = Versions(0, recs("200", {"k": "k1", "ts": 3, "v": "c", "n": 30}))
    later_full = Versions(1, recs("300", {"k": "k1", "ts": 3, "v": "c", "n": 30}))
    assert event(BASE, full, partial(1, "300", {"k": "k1", "ts": 5, "v": "P"}))[0] == ("k1", "300", 5, "P", 30)
    assert event(BASE, partial(0, "200", {"k": "k1", "ts": 5, "v": "P"}), later_full)[0] == ("k1", "200", 5, "P", 10)


def test_the_logs_fold_before_the_base_row_joins():
    """Base at ts 5; partial updates at ts 3 (v) then ts 6 (n): the logs' survivor (ts 6) beats
    the base and carries v from ts 3, which led the logs when it came."""
    base = Versions(-1, recs("100", {"k": "k1", "ts": 5, "v": "v5", "n": 5}))
    got = event(base, partial(0, "200", {"k": "k1", "ts": 3, "v": "v3"}), partial(1, "300", {"k": "k1", "ts": 6, "n": 60}))
    assert got == [("k1", "300", 6, "v3", 60)]
    # without the later update the base (ts 5) wins whole
    assert event(base, partial(0, "200", {"k": "k1", "ts": 3, "v": "v3"})) == [("k1", "100", 5, "v5", 5)]


def test_a_full_record_after_a_partial_one_replaces_every_column():
    got = event(BASE, partial(0, "200", {"k": "k1", "ts": 2, "v": "A"}),
                Versions(1, recs("300", {"k": "k1", "ts": 3, "v": "F", "n": None})))
    assert got[0] == ("k1", "300", 3, "F", None)


def test_a_partial_insert_reads_null_in_the_columns_it_lacks():
    assert event(BASE, partial(0, "200", {"k": "k9", "ts": 2, "v": "new"})) == [
        ("k1", "100", 1, "a", 10), ("k2", "100", 1, "b", 20), ("k9", "200", 2, "new", None)]
    # a log-only slice (no base file)
    assert event(partial(0, "200", {"k": "k9", "ts": 2, "n": 5})) == [("k9", "200", 2, None, 5)]


def test_a_delete_clears_the_logs_columns_and_the_base_row_fills_the_rest():
    """A partial update after a delete of its key in the same slice: the columns it lacks come
    from the base row (as hudi-rs and Hudi's JVM reader fold them: logs first, then the base),
    not from log versions before the delete."""
    again = partial(2, "400", {"k": "k1", "ts": 4, "v": "again"})
    before = Versions(0, recs("200", {"k": "k1", "ts": 2, "v": "x", "n": 50}))
    for delete in (dels(("k1", None)), dels(("k1", 3))):
        assert event(BASE, before, Versions(1, None, delete), again)[0] == ("k1", "400", 4, "again", 10)
    # a delete older than the version before it (ts 0 < 2) loses to it and clears nothing
    assert event(BASE, before, Versions(1, None, dels(("k1", 0))), again)[0] == ("k1", "400", 4, "again", 50)
    # without a base row the key reads null in them, as a new key does
    assert event(before, Versions(1, None, dels(("k1", 3))), again) == [("k1", "400", 4, "again", None)]


def test_commit_time_merging_keeps_the_latest_value_of_each_column():
    got = out(merge([BASE, partial(0, "200", {"k": "k1", "ts": 9, "v": "A"}), partial(1, "300", {"k": "k1", "ts": 0, "n": 7})],
                    ordering_field=None, schema=SCHEMA))
    assert got == [("k1", "300", 0, "A", 7), ("k2", "100", 1, "b", 20)]


def test_a_projection_merges_the_same_values():
    schema = pa.schema([SCHEMA.field(c) for c in ("_hoodie_commit_time", "_hoodie_record_key", "ts", "n")])
    t = merge([BASE, partial(0, "200", {"k": "k1", "ts": 2, "v": "A"})], ordering_field="ts", schema=schema)
    assert t.to_pylist() == [{"_hoodie_commit_time": "200", "_hoodie_record_key": "k1", "ts": 2, "n": 10},
                             {"_hoodie_commit_time": "100", "_hoodie_record_key": "k2", "ts": 1, "n": 20}]


def test_full_records_of_a_narrower_schema_are_not_partial():
    """A block without the partial mark whose schema lacks a column (written before the column
    was added) reads that column as null."""
    narrow = Versions(0, recs("200", {"k": "k1", "ts": 2, "v": "A"}))
    assert event(BASE, narrow)[0] == ("k1", "200", 2, "A", None)
