"""The merge rule with partial updates (log blocks marked ``IS_PARTIAL``): the winner is chosen as
for full records; a log winner's columns are the logs folded in place order (each new running
winner overlays the columns it carries, a delete that wins clears them), the rest the base
row's, as hudi-rs merges them. Literal expected rows, derived by hand."""
from __future__ import annotations

import random

import pyarrow as pa
import pytest

from multiwriter.table.merge_rule import Versions, merge
from multiwriter.format.schema import META_COLUMNS

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


def test_a_lacking_column_comes_from_the_losing_version_too():
    """Full versions at ts 1 (base) and 3, a partial one at ts 5 lacking n: n comes from ts 3
    whether that version came before the partial one or after it and lost: Hudi's pairwise
    partial merge gives the winner the loser's values of the columns it lacks
    (``BufferedRecordMergerFactory.PartialUpdateBufferedRecordMerger.deltaMerge``, through
    ``HoodieRecordMerger.partialMerge``). hudi-rs differs in the second case: a version that
    never led adds nothing there, so it reads the base row's n (10)."""
    full = Versions(0, recs("200", {"k": "k1", "ts": 3, "v": "c", "n": 30}))
    later_full = Versions(1, recs("300", {"k": "k1", "ts": 3, "v": "c", "n": 30}))
    assert event(BASE, full, partial(1, "300", {"k": "k1", "ts": 5, "v": "P"}))[0] == ("k1", "300", 5, "P", 30)
    assert event(BASE, partial(0, "200", {"k": "k1", "ts": 5, "v": "P"}), later_full)[0] == ("k1", "200", 5, "P", 30)


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


# --- random histories against a plain fold ---------------------------------------------------


def fold(base: dict[str, dict], logs: list[tuple[str, dict | None]], event_time: bool) -> dict[str, tuple]:
    """(ts, v, n) per surviving key, by folding each key's versions one by one, as Hudi's JVM
    reader merges partial updates (``PartialUpdateBufferedRecordMerger``): in the logs the winner
    of the held version and the next (event time: ``ts`` at least the held one's, a null below
    every value; a plain delete always wins and the first record after it replaces it) takes the
    loser's values of the columns it lacks, unless either is a delete; then the survivor meets
    the base row the same way (``finalMerge``)."""
    def at_least(a, b) -> bool:
        return b is None if a is None else (b is None or a >= b)

    def pair(hi: dict, lo: dict) -> dict:
        if hi["kind"] == "rec" and lo["kind"] == "rec":
            return {**hi, "cols": {**lo["cols"], **hi["cols"]}}
        return hi

    state: dict[str, dict] = {}
    for key, version in logs:
        held = state.get(key)
        version = {**version, "cols": dict(version.get("cols", {}))}
        if held is None:
            state[key] = version
            continue
        if not event_time:
            wins = True
        elif version["kind"] == "rec":
            wins = held.get("plain") or at_least(version["ts"], held["ts"])
        else:
            wins = not held.get("plain") and (version.get("plain") or at_least(version["ts"], held["ts"]))
        state[key] = pair(version, held) if wins else pair(held, version)
    out = {}
    for key in {*base, *state}:
        b, s = base.get(key), state.get(key)
        if s is None:
            win = b
        elif b is None:
            win = s
        elif not event_time or s.get("plain") or at_least(s["ts"], b["ts"]):
            win = pair(s, b)
        else:
            win = pair(b, s)
        if win["kind"] == "rec":
            out[key] = (win["ts"], win["cols"].get("v"), win["cols"].get("n"))
    return out


@pytest.mark.parametrize("seed", range(200))
def test_random_partial_histories_match_the_fold(seed: int):
    rnd = random.Random(seed)
    pool = [f"k{i}" for i in range(5)]
    stamps = [None, 1, 2, 3]
    serial = iter(range(1, 10_000))
    base_rows = [{"k": k, "ts": rnd.choice(stamps), "v": f"v{next(serial)}", "n": next(serial)}
                 for k in rnd.sample(pool, rnd.randint(0, len(pool)))]
    sources = [Versions(-1, recs("100", *base_rows))] if base_rows else []
    base = {r["k"]: {"kind": "rec", "ts": r["ts"], "cols": {"v": r["v"], "n": r["n"]}} for r in base_rows}
    history: list[tuple[str, dict]] = []
    for rank in range(rnd.randint(1, 5)):
        carried = rnd.choice([("v", "n"), ("v",), ("n",)])
        rows = [{"k": rnd.choice(pool), "ts": rnd.choice(stamps), **{c: next(serial) if c == "n" else f"v{next(serial)}"
                                                                    for c in carried}}
                for _ in range(rnd.randint(0, 4))]
        deletes = [(rnd.choice(pool), rnd.choice(stamps)) for _ in range(rnd.randint(0, 2))]
        t = recs(f"{200 + rank}", *rows) if rows else None
        full = len(carried) == 2 and rnd.random() < 0.5
        sources.append(Versions(rank, t, dels(*deletes) if deletes else None,
                                None if full or t is None else frozenset(t.column_names)))
        history += [(r["k"], {"kind": "rec", "ts": r["ts"], "cols": {c: r[c] for c in carried}}) for r in rows]
        history += [(k, {"kind": "del", "ts": ts, "plain": ts is None}) for k, ts in deletes]
    for event_time in (True, False):
        got = merge(sources, ordering_field="ts" if event_time else None, schema=SCHEMA).to_pydict()
        ours = {k: (ts, v, n) for k, ts, v, n in zip(got["_hoodie_record_key"], got["ts"], got["v"], got["n"], strict=True)}
        assert ours == fold(base, history, event_time), (seed, event_time)
