"""The Merge-on-Read merge rule on hand-written file slices with literal expected rows, and on
random histories against a plain model that applies each key's versions one by one."""
from __future__ import annotations

import random

import pyarrow as pa
import pytest

from multiwriter.errors import TableFormatError
from multiwriter.table.merge_rule import Versions, merge
from multiwriter.format.schema import META_COLUMNS

INT64 = pa.int64()
SCHEMA = pa.schema([pa.field(c, pa.string()) for c in META_COLUMNS] + [("ts", pa.int64()), ("val", pa.string())])


def recs(commit: str, *rows: tuple, partition: str = "p1", ts_type: pa.DataType = INT64) -> pa.Table:
    """Stored rows (key, ts, val) as a commit writes them."""
    n = len(rows)
    return pa.table({
        "_hoodie_commit_time": [commit] * n,
        "_hoodie_commit_seqno": [f"{commit}_0_{i}" for i in range(n)],
        "_hoodie_record_key": [r[0] for r in rows],
        "_hoodie_partition_path": [partition] * n,
        "_hoodie_file_name": [f"f1_{commit}.parquet"] * n,
        "ts": pa.array([r[1] for r in rows], ts_type),
        "val": [r[2] for r in rows],
    })


def dels(*rows: tuple, ordering_type: pa.DataType = INT64, partition: str = "p1") -> pa.Table:
    """Deletes (key, ordering value or None)."""
    return pa.table({
        "record_key": pa.array([r[0] for r in rows], pa.string()),
        "partition_path": pa.array([partition] * len(rows), pa.string()),
        "ordering_value": pa.array([r[1] for r in rows], ordering_type),
    })


def rows(t: pa.Table) -> list[tuple]:
    """(key, commit time, ts, val) per output row, in output order."""
    d = t.to_pydict()
    return list(zip(d["_hoodie_record_key"], d["_hoodie_commit_time"], d["ts"], d["val"], strict=True))


def event(*sources: Versions, schema: pa.Schema = SCHEMA) -> list[tuple]:
    return rows(merge(sources, ordering_field="ts", schema=schema))


def commit_time(*sources: Versions) -> list[tuple]:
    return rows(merge(sources, ordering_field=None, schema=SCHEMA))


BASE = Versions(-1, recs("100", ("k1", 5, "a"), ("k2", 5, "b"), ("k3", 5, "c")))


def test_update_with_higher_ordering_wins():
    assert event(BASE, Versions(0, recs("200", ("k2", 6, "B")))) == [
        ("k1", "100", 5, "a"), ("k2", "200", 6, "B"), ("k3", "100", 5, "c"),
    ]


def test_late_update_with_lower_ordering_loses():
    assert event(BASE, Versions(0, recs("200", ("k2", 4, "B")))) == [
        ("k1", "100", 5, "a"), ("k2", "100", 5, "b"), ("k3", "100", 5, "c"),
    ]


def test_equal_ordering_goes_to_the_later_rank_not_the_list_order():
    logs = [Versions(1, recs("150", ("k1", 7, "late"))), Versions(0, recs("300", ("k1", 7, "early")))]
    assert event(BASE, *logs)[0] == ("k1", "150", 7, "late")
    assert event(BASE, Versions(0, recs("200", ("k1", 5, "A"))))[0] == ("k1", "200", 5, "A")


def test_equal_ordering_within_one_log_goes_to_the_later_position():
    log = Versions(0, recs("200", ("k1", 8, "x"), ("k1", 8, "y"), ("k1", 7, "z")))
    assert event(BASE, log)[0] == ("k1", "200", 8, "y")


def test_ordered_delete_wins_with_higher_or_equal_later_ordering():
    assert event(BASE, Versions(0, None, dels(("k1", 6)))) == [("k2", "100", 5, "b"), ("k3", "100", 5, "c")]
    assert event(BASE, Versions(0, None, dels(("k1", 5)))) == [("k2", "100", 5, "b"), ("k3", "100", 5, "c")]


def test_ordered_delete_with_lower_ordering_loses():
    assert event(BASE, Versions(0, None, dels(("k1", 4)))) == [
        ("k1", "100", 5, "a"), ("k2", "100", 5, "b"), ("k3", "100", 5, "c"),
    ]


def test_ordered_delete_loses_to_a_later_higher_update_and_beats_a_later_lower_one():
    logs = [Versions(0, None, dels(("k1", 6), ("k2", 6))), Versions(1, recs("300", ("k1", 7, "A"), ("k2", 5, "B")))]
    assert event(BASE, *logs) == [("k1", "300", 7, "A"), ("k3", "100", 5, "c")]


def test_plain_delete_kills_earlier_versions_whatever_their_ordering():
    logs = [Versions(0, recs("200", ("k1", 99, "A"))), Versions(1, None, dels(("k1", None), ("k2", None)))]
    assert event(BASE, *logs) == [("k3", "100", 5, "c")]


def test_plain_delete_yields_to_the_next_record_which_then_competes_with_the_base_row():
    """Hudi folds the logs, then merges the survivor with the base row (EventTimeRecordMerger):
    k1's plain delete replaces A (99) and yields to B (3), which beats C (2) but not the base
    row (5): the base row survives, as Hudi's JVM reader and compactor return it. k2: the plain
    delete yields to N, whose null ts is below the base's 5. k4 (no base): B is the survivor."""
    logs = [
        Versions(0, recs("200", ("k1", 99, "A"))),
        Versions(1, None, dels(("k1", None), ("k2", None), ("k4", None))),
        Versions(2, recs("400", ("k1", 3, "B"), ("k2", None, "N"), ("k4", 1, "B4"))),
        Versions(3, recs("500", ("k1", 2, "C"))),
    ]
    assert event(BASE, *logs) == [("k1", "100", 5, "a"), ("k2", "100", 5, "b"), ("k3", "100", 5, "c"),
                                  ("k4", "400", 1, "B4")]


def test_a_plain_delete_with_no_record_after_it_deletes_the_key_whatever_the_base():
    logs = [Versions(0, recs("200", ("k1", 99, "A"))), Versions(1, None, dels(("k1", None), ("k2", 8)))]
    assert event(BASE, *logs) == [("k3", "100", 5, "c")]


def test_deletes_right_after_a_plain_delete_are_absorbed_by_it():
    """deltaMergeDeleteRecord keeps a held commit-time delete: the ordered delete (4) after the
    plain one is dropped, so B (3), the next record, survives the logs; the base (5) then wins."""
    logs = [
        Versions(0, None, dels(("k1", None))),
        Versions(1, None, dels(("k1", 4))),
        Versions(2, recs("400", ("k1", 3, "B"), ("k9", 3, "B9"))),
    ]
    assert event(BASE, *logs) == [("k1", "100", 5, "a"), ("k2", "100", 5, "b"), ("k3", "100", 5, "c"),
                                  ("k9", "400", 3, "B9")]


def test_within_one_rank_deletes_come_after_records():
    log = Versions(0, recs("200", ("k1", 5, "A"), ("k2", 1, "B")), dels(("k1", 5), ("k2", None)))
    assert event(BASE, log) == [("k3", "100", 5, "c")]
    assert commit_time(BASE, log) == [("k3", "100", 5, "c")]


def test_null_ordering_is_lower_than_any_value_and_ties_by_rank():
    base = Versions(-1, recs("100", ("k1", 1, "a"), ("k2", None, "b"), ("k3", None, "c")))
    log = Versions(0, recs("200", ("k1", None, "A"), ("k2", None, "B"), ("k3", -5, "C")))
    assert event(base, log) == [("k1", "100", 1, "a"), ("k2", "200", None, "B"), ("k3", "200", -5, "C")]


def test_commit_time_mode_takes_the_latest_rank_ignoring_ordering():
    logs = [
        Versions(0, recs("200", ("k1", 1, "A"), ("k2", 9, "B"), ("k4", 0, "D"))),
        Versions(1, None, dels(("k2", 0), ("k3", None))),
        Versions(2, recs("400", ("k3", 0, "C"))),
    ]
    assert commit_time(BASE, *logs) == [("k1", "200", 1, "A"), ("k3", "400", 0, "C"), ("k4", "200", 0, "D")]


def test_base_only_returns_the_base_rows_as_stored_in_the_file_schema():
    base = recs("100", ("k2", 1, "b"), ("k1", 2, "a")).select(["val", "ts", *META_COLUMNS])
    out = merge([Versions(-1, base)], ordering_field="ts", schema=SCHEMA)
    assert out.schema == SCHEMA
    assert rows(out) == [("k2", "100", 1, "b"), ("k1", "100", 2, "a")]
    assert out.column("_hoodie_commit_seqno").to_pylist() == ["100_0_0", "100_0_1"]


def test_no_sources_and_only_empty_logs():
    assert merge([], ordering_field="ts", schema=SCHEMA).schema == SCHEMA
    assert merge([], ordering_field="ts", schema=SCHEMA).num_rows == 0
    empty = Versions(0, recs("200"), dels())
    assert event(BASE, empty) == rows(BASE.records)


def test_every_key_deleted_gives_an_empty_table():
    out = merge([BASE, Versions(0, None, dels(("k1", None), ("k2", None), ("k3", None)))],
                ordering_field="ts", schema=SCHEMA)
    assert out.num_rows == 0 and out.schema == SCHEMA


def test_rows_keep_base_order_then_new_keys_in_order_of_appearance():
    logs = [
        Versions(1, recs("300", ("k9", 1, "nine"), ("k3", 6, "C"))),
        Versions(0, recs("200", ("k7", 1, "seven"), ("k1", 6, "A"))),
    ]
    assert event(BASE, *logs) == [
        ("k1", "200", 6, "A"), ("k2", "100", 5, "b"), ("k3", "300", 6, "C"), ("k7", "200", 1, "seven"),
        ("k9", "300", 1, "nine"),
    ]


def test_winning_rows_are_returned_exactly_as_stored():
    log = recs("200", ("k2", 6, "B"))
    log = log.set_column(4, "_hoodie_file_name", pa.array(["log-file-name"]))
    out = merge([BASE, Versions(0, log)], ordering_field="ts", schema=SCHEMA)
    assert out.slice(1, 1).to_pylist() == [{
        "_hoodie_commit_time": "200", "_hoodie_commit_seqno": "200_0_0", "_hoodie_record_key": "k2",
        "_hoodie_partition_path": "p1", "_hoodie_file_name": "log-file-name", "ts": 6, "val": "B",
    }]


def test_schema_evolution_added_column_is_null_and_widened_ordering_compares():
    schema = pa.schema(list(SCHEMA) + [("extra", pa.string())])
    base = Versions(-1, recs("100", ("k1", 5, "a"), ("k2", 5, "b"), ts_type=pa.int32()))
    log = recs("200", ("k2", 7, "B"), ("k3", 1, "C")).append_column("extra", pa.array(["x2", "x3"]))
    out = merge([base, Versions(0, log.select(["extra", "val", "ts", *META_COLUMNS]))], ordering_field="ts",
                schema=schema)
    assert out.schema == schema
    assert out.select(["_hoodie_record_key", "ts", "val", "extra"]).to_pylist() == [
        {"_hoodie_record_key": "k1", "ts": 5, "val": "a", "extra": None},
        {"_hoodie_record_key": "k2", "ts": 7, "val": "B", "extra": "x2"},
        {"_hoodie_record_key": "k3", "ts": 1, "val": "C", "extra": "x3"},
    ]


def test_older_log_with_narrower_type_loses_by_ordering_across_types():
    base = Versions(-1, recs("100", ("k1", 3_000_000_000, "a")))
    old_log = Versions(0, recs("200", ("k1", 2_000_000_000, "A"), ts_type=pa.int32()))
    assert event(base, old_log) == [("k1", "100", 3_000_000_000, "a")]


def test_the_record_key_alone_identifies_a_record_in_a_slice():
    logs = [
        Versions(0, recs("200", ("k1", 6, "A"), partition="other")),
        Versions(1, None, dels(("k2", None), partition="")),
    ]
    assert event(BASE, *logs) == [("k1", "200", 6, "A"), ("k3", "100", 5, "c")]


def test_delete_ordering_values_of_the_same_java_class_are_cast_to_the_ordering_column_type():
    schema16 = pa.schema([f.with_type(pa.int16()) if f.name == "ts" else f for f in SCHEMA])
    base = Versions(-1, recs("100", ("k1", 5, "a"), ("k2", 5, "b"), ts_type=pa.int16()))
    by_int32 = Versions(0, None, dels(("k1", 6), ("k2", 4), ordering_type=pa.int32()))  # both Java Integers
    assert event(base, by_int32, schema=schema16) == [("k2", "100", 5, "b")]


def test_delete_ordering_values_that_do_not_fit_raise_naming_the_field():
    schema16 = pa.schema([f.with_type(pa.int16()) if f.name == "ts" else f for f in SCHEMA])
    base16 = Versions(-1, recs("100", ("k1", 1, "a"), ts_type=pa.int16()))
    with pytest.raises(TableFormatError, match="'ts'"):
        event(base16, Versions(0, None, dels(("k1", 2**20), ordering_type=pa.int32())), schema=schema16)


def test_ordering_field_missing_from_the_schema_raises():
    with pytest.raises(TableFormatError, match="'nope'"):
        merge([BASE], ordering_field="nope", schema=SCHEMA)


def test_no_logs_and_few_touched_keys_of_a_large_base():
    n = 10_000
    keys = [f"key{i:05d}" for i in range(n)]
    base = pa.table({
        "_hoodie_commit_time": ["100"] * n, "_hoodie_commit_seqno": [f"100_{i}" for i in range(n)],
        "_hoodie_record_key": keys, "_hoodie_partition_path": ["p"] * n, "_hoodie_file_name": ["f"] * n,
        "ts": pa.array(range(n), pa.int64()), "val": keys,
    })
    log = recs("200", ("key00003", 10**6, "new"), ("key00004", 0, "stale"), ("zz", 0, "fresh"))
    out = merge([Versions(-1, base), Versions(0, log, dels(("key09999", None)))], ordering_field="ts", schema=SCHEMA)
    assert out.num_rows == n
    assert out.column("val").to_pylist()[:6] == ["key00000", "key00001", "key00002", "new", "key00004", "key00005"]
    assert out.column("val").to_pylist()[-2:] == ["key09998", "fresh"]


# --- random histories against a plain model -------------------------------------------------


def model(base: list[tuple], logs: list[tuple[int, list[tuple], list[tuple]]], event_time: bool,
          int_field: bool = False) -> list[str]:
    """Expected output vals, in output order, by Hudi's JVM merge written out plainly: fold each
    key's log versions one by one (logs by rank: records, then deletes;
    ``BufferedRecordMergerFactory.EventTimeRecordMerger.deltaMerge``), then merge the survivor
    with the base row (``finalMerge``). Deletes come as (key, ts) with ts already None when plain
    (no value, ``Integer`` 0, or another Java class than the field's); a record's null ts is 0 on
    an ``int`` field (``int_field``), else below every value."""
    def value(ts):
        return 0 if ts is None and int_field else ts

    def at_least(a, b) -> bool:  # a >= b, a null below every value
        return b is None if a is None else (b is None or a >= b)

    def plain(v) -> bool:
        return v[0] == "del" and v[2] is None

    base_version = {k: ("rec", k, value(ts), val) for k, ts, val in base}
    first_seen = [k for k, _, _ in base]
    state: dict[str, tuple] = {}
    for _, records, deletes in sorted(logs, key=lambda log: log[0]):
        versions = [("rec", k, value(ts), val) for k, ts, val in records] + [("del", k, ts, None) for k, ts in deletes]
        for version in versions:
            kind, key, ts, _ = version
            if key not in first_seen:
                first_seen.append(key)
            held = state.get(key)
            if held is None or not event_time:
                state[key] = version
            elif kind == "rec":
                if plain(held) or at_least(ts, held[2]):  # shouldKeepNewerRecord
                    state[key] = version
            elif not plain(held) and (ts is None or at_least(ts, held[2])):  # deltaMergeDeleteRecord
                state[key] = version
    out = []
    for key in first_seen:
        b, s = base_version.get(key), state.get(key)
        if s is None:
            win = b
        elif b is None or not event_time or plain(s) or at_least(s[2], b[2]):
            win = s
        else:
            win = b
        if win[0] == "rec":
            out.append(win[3])
    return out


def _plain_by_hudi(v, dtype: pa.DataType, field_type: pa.DataType):
    """A delete's ordering value as the model sees it: None when Hudi takes it as plain (int32,
    int64 and string are three Java classes: Integer, Long, String)."""
    if v is None or dtype != field_type:
        return None
    return None if dtype == pa.int32() and v == 0 else v


@pytest.mark.parametrize("field_type", [pa.int64(), pa.int32()])
@pytest.mark.parametrize("seed", range(150))
def test_random_histories_match_the_model(seed: int, field_type: pa.DataType):
    rnd = random.Random(seed)
    schema = pa.schema([f.with_type(field_type) if f.name == "ts" else f for f in SCHEMA])
    pool = [f"k{i}" for i in range(6)]
    values = [None, 0, 1, 2, 3, -1]
    serial = iter(range(10_000))
    base_keys = rnd.sample(pool, rnd.randint(0, len(pool)))
    base = [(k, rnd.choice(values), f"v{next(serial)}") for k in base_keys]
    ranks = rnd.sample(range(10), rnd.randint(1, 4))
    logs, seen = [], []
    sources = [Versions(-1, recs("100", *base, ts_type=field_type))] if base or rnd.random() < 0.5 else []
    for r in ranks:
        records = [(rnd.choice(pool), rnd.choice(values), f"v{next(serial)}") for _ in range(rnd.randint(0, 4))]
        deletes = [(rnd.choice(pool), rnd.choice(values)) for _ in range(rnd.randint(0, 3))]
        dtype = rnd.choice([pa.int64(), pa.int32(), pa.string()])
        d = dels(*[(k, None if v is None else (str(v) if dtype == pa.string() else v)) for k, v in deletes],
                 ordering_type=dtype) if deletes or rnd.random() < 0.5 else None
        sources.append(Versions(r, recs(f"{200 + r}", *records, ts_type=field_type) if records else None, d))
        logs.append((r, records, deletes))
        seen.append((r, records, [(k, _plain_by_hudi(v, dtype, field_type)) for k, v in deletes] if d else []))
    for event_time in (True, False):
        out = merge(sources, ordering_field="ts" if event_time else None, schema=schema)
        expected = model(base, seen, event_time, int_field=field_type == pa.int32())
        assert out.column("val").to_pylist() == expected, (seed, event_time)
