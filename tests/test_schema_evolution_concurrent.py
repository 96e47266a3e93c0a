"""Concurrent schema evolution: an ingestion writer evolves the schema while a backfill keeps
sending the older one. Two writer processes on a real ZooKeeper; the order "B begins, A
commits, B commits" is forced by holding B at a fault point until A has committed.

Oracles: hudi-rs (tests/oracle.py), the commit files read with fastavro, a directory listing
and plain pyarrow reads of the parquet files.
"""
from __future__ import annotations

import io
import json
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import multiwriter as mw
from multiwriter import faults
from multiwriter.errors import SchemaMismatchError
from multiwriter.schema_resolution import history_violations
from tests.oracle import hudi_read, rows
from tests.test_concurrency import base_args, result, spawn

OLD = [["id", "string"], ["date", "string"], ["ts", "int64"], ["value", "double"], ["n", "int16"]]
TABLE_SCHEMA = pa.schema([(n, pa.type_for_alias(t)) for n, t in OLD])


@pytest.fixture()
def table(table_path):
    mw.Table.create(table_path, name="trips", schema=TABLE_SCHEMA, record_key="id", partition_by=["date"], ordering_field="ts")
    mw.write(_rows(["s0", "s1"], "2024-01-01"), table_path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="seed"))
    return table_path


def _rows(ids, date, schema=TABLE_SCHEMA, **extra) -> pa.Table:
    cols = {"id": ids, "date": [date] * len(ids), "ts": [1] * len(ids), "value": [1.0] * len(ids), "n": [7] * len(ids)}
    cols.update({k: [v] * len(ids) for k, v in extra.items()})
    return pa.Table.from_pylist([dict(zip(cols, vals, strict=True)) for vals in zip(*cols.values(), strict=True)], schema=schema)


def _pylist(ids, date, **extra) -> list[dict]:
    return [{"id": i, "date": date, "ts": 1, "value": 1.0, "n": 7, **extra} for i in ids]


def _wait_for(path: Path, proc, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"writer exited before reaching its gate: {proc.communicate()}"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def _commit_files(path: str) -> list[Path]:
    """Completed commit files (``<requested>_<completion>.commit``) in completion order."""
    tl = Path(path) / ".hoodie" / "timeline"
    done = [p for p in tl.iterdir() if p.suffix == ".commit" and "_" in p.stem]
    return sorted(done, key=lambda p: (p.stem.split("_")[1], p.stem.split("_")[0]))


def _json_schema(p: Path) -> dict[str, object]:
    """Column -> type of a commit's extraMetadata.schema, read with fastavro (the Arrow type
    name where the field carries one, else the Avro type)."""
    [rec] = list(fastavro.reader(io.BytesIO(p.read_bytes())))
    avro = json.loads(rec["extraMetadata"]["schema"])
    return {f["name"]: f.get("arrowType", f["type"]) for f in avro["fields"]}


def _parquet_files(path: str) -> set[str]:
    root = Path(path)
    return {str(p.relative_to(root)) for p in root.rglob("*.parquet") if ".hoodie" not in p.parts}


def _b_begins_a_commits_b_commits(zk_server, zk_base, path, tmp_path, b_rows, b_schema, a_rows, a_schema, **b_args):
    """Run writer B to its gate (files written), writer A to completion, then release B."""
    gate = tmp_path / "gate"
    gate.mkdir()
    b = spawn("write_columns", base_args(zk_server, zk_base, path, writer="B", rows=b_rows, schema=b_schema, gate=str(gate), **b_args))
    _wait_for(gate / "reached", b)
    held_files = _parquet_files(path)
    a = result(spawn("write_columns", base_args(zk_server, zk_base, path, writer="A", rows=a_rows, schema=a_schema)))
    assert a["ok"], a
    after_a = _parquet_files(path)
    (gate / "release").touch()
    return a, result(b), held_files, after_a


def test_concurrent_added_column_survives_and_older_writer_keeps_committing(zk_server, zk_base, table, tmp_path):
    """B sends its older schema with allow_missing_columns (without it, B's commit is refused:
    tests/test_schema_two_writers.py)."""
    a, b, _, _ = _b_begins_a_commits_b_commits(
        zk_server, zk_base, table, tmp_path,
        _pylist(["b0", "b1"], "2024-01-02"), OLD,
        _pylist(["a0", "a1"], "2024-01-03", extra="x"), OLD + [["extra", "string"]],
        allow_missing_columns=True,
    )
    assert b["ok"], b
    assert b["instant"] < a["instant"] and a["completion"] < b["completion"], "B began first and committed last"

    # Case 1: the latest commit (B's) records the evolved schema; both readers keep `extra`.
    latest = _json_schema(_commit_files(table)[-1])
    assert _commit_files(table)[-1].stem.startswith(b["instant"])
    assert "extra" in latest
    expect = [("a0", "x"), ("a1", "x"), ("b0", None), ("b1", None), ("s0", None), ("s1", None)]
    assert rows(mw.Table.open(table).read(), ["id", "extra"]) == expect
    assert rows(hudi_read(table), ["id", "extra"]) == expect

    # Case 2: B goes on sending its older schema: refused, naming `extra` (Hudi's default,
    # hoodie.write.set.null.for.missing.columns=false), so B cannot blank A's values.
    b2 = result(spawn("write_columns", base_args(zk_server, zk_base, table, writer="B", rows=_pylist(["a0"], "2024-01-03"), schema=OLD)))
    assert not b2["ok"] and b2["error"] == "SchemaMismatchError" and "extra" in b2["message"], b2
    assert rows(mw.Table.open(table).read(), ["id", "extra"]) == expect
    assert rows(hudi_read(table), ["id", "extra"]) == expect
    assert "extra" in _json_schema(_commit_files(table)[-1])
    assert history_violations(mw.Table.open(table).timeline()) == []


@pytest.mark.parametrize(
    ("a_schema", "b_schema", "a_extra", "b_extra", "column"),
    [
        # the same new column, added with two types
        (OLD + [["extra", "string"]], OLD + [["extra", "int64"]], {"extra": "x"}, {"extra": 5}, "extra"),
        # one column retyped both ways (int16 widened to int32 by A, to int64 by B)
        ([c if c[0] != "n" else ["n", "int32"] for c in OLD], [c if c[0] != "n" else ["n", "int64"] for c in OLD], {}, {}, "n"),
    ],
    ids=["same-new-column", "retyped-both-ways"],
)
def test_incompatible_concurrent_evolution_fails_the_later_committer(
    zk_server, zk_base, table, tmp_path, a_schema, b_schema, a_extra, b_extra, column
):
    before = _parquet_files(table)
    a, b, held, after_a = _b_begins_a_commits_b_commits(
        zk_server, zk_base, table, tmp_path,
        _pylist(["b0", "b1"], "2024-01-02", **b_extra), b_schema,
        _pylist(["a0", "a1"], "2024-01-03", **a_extra), a_schema,
    )
    assert not b["ok"] and b["error"] == "SchemaMismatchError", b
    msg = b["message"]
    b_instant = next(n.rsplit("_", 1)[-1].split(".")[0] for n in held - before)
    assert a["instant"] in msg and b_instant in msg, msg
    a_type, b_type = dict(a_schema)[column], dict(b_schema)[column]
    assert f"{column}: {a_type}" in msg and f"{column}: {b_type}" in msg, msg

    # Nothing of B stays: its data files are gone, the table is exactly as A left it.
    a_files = after_a - held
    assert a_files and _parquet_files(table) == before | a_files
    assert not [str(p) for p in Path(table).rglob("*") if b_instant in p.name], "no file of the loser remains"
    ids = sorted(i for f in _parquet_files(table) for i in pq.read_table(Path(table) / f, columns=["id"])["id"].to_pylist())
    assert ids == ["a0", "a1", "s0", "s1"]
    assert _commit_files(table)[-1].stem.startswith(a["instant"])
    assert _json_schema(_commit_files(table)[-1])[column] == a_type
    assert sorted(hudi_read(table)["id"].to_pylist()) == ids == sorted(mw.Table.open(table).read()["id"].to_pylist())
    assert str(mw.Table.open(table).schema().field(column).type) == a_type


# -- one process, step by step --------------------------------------------------------------
@contextmanager
def held_at(point: str, thread_name: str):
    """Hold the thread named ``thread_name`` at fault point ``point`` until released."""
    reached, release = threading.Event(), threading.Event()
    original = faults.point

    def hook(name: str) -> None:
        if name == point and threading.current_thread().name == thread_name:
            reached.set()
            assert release.wait(60), "never released"

    faults.point = hook
    try:
        yield reached, release
    finally:
        release.set()
        faults.point = original


def run_interleaved(outer, inner):
    """``outer()`` in a thread held after its data files, ``inner()`` meanwhile; returns both
    outcomes (a result or the exception)."""
    out: dict[str, object] = {}

    def run_outer():
        try:
            out["outer"] = outer()
        except Exception as e:  # noqa: BLE001 - the test inspects it
            out["outer"] = e
        finally:
            reached.set()  # failed before its files (bad batch): the inner one simply runs after

    with held_at("after-data-files", "outer") as (reached, release):
        t = threading.Thread(target=run_outer, name="outer")
        t.start()
        assert reached.wait(60)
        try:
            out["inner"] = inner()
        except Exception as e:  # noqa: BLE001
            out["inner"] = e
        release.set()
        t.join(60)
    return out["outer"], out["inner"]


@pytest.mark.parametrize("allow_missing", [False, True])
def test_retry_after_conflict_revalidates_against_new_schema(table, allow_missing):
    """B's attempt loses a file-group conflict to A, which also added a column; the retry is
    validated against the evolved schema: refused by default, naming the column B lacks, or
    (allow_missing_columns) committed with nulls in the new column."""
    cfg = mw.WriterConfig(lock=mw.InProcessLock(), writer_id="B", max_conflict_retries=2, retry_backoff_s=0.0,
                          retry_backoff_max_s=0.0, allow_missing_columns=allow_missing)
    b_batch = _rows(["s0"], "2024-01-01")
    evolved = TABLE_SCHEMA.append(pa.field("extra", pa.string()))
    a_batch = _rows(["s1"], "2024-01-01", schema=evolved, extra="x")
    b, a = run_interleaved(lambda: mw.write(b_batch, table, cfg), lambda: mw.write(a_batch, table, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="A")))
    assert not isinstance(a, Exception), a
    if not allow_missing:
        assert isinstance(b, SchemaMismatchError) and "['extra']" in str(b), b
        want = [("s0", 1.0, None), ("s1", 1.0, "x")]
    else:
        assert not isinstance(b, Exception), b
        assert b.attempts == 2 and b.conflicts == 1
        want = [("s0", 1.0, None), ("s1", 1.0, "x")]
    assert rows(hudi_read(table), ["id", "value", "extra"]) == want
    assert rows(mw.Table.open(table).read(), ["id", "value", "extra"]) == want


def test_evolving_writer_retries_behind_a_later_requested_commit(table):
    """B adds a column; A, requested after B without it, completes first. Hudi's readers take
    the schema of the latest *requested* commit (A's), so B retries with a new instant
    instead of committing a column those readers would not show."""
    cfg = mw.WriterConfig(lock=mw.InProcessLock(), writer_id="B", max_conflict_retries=2, retry_backoff_s=0.0, retry_backoff_max_s=0.0)
    evolved = TABLE_SCHEMA.append(pa.field("extra", pa.string()))
    b_batch = _rows(["b0"], "2024-01-02", schema=evolved, extra="y")
    a_batch = _rows(["a0"], "2024-01-03")
    b, a = run_interleaved(lambda: mw.write(b_batch, table, cfg), lambda: mw.write(a_batch, table, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="A")))
    assert not isinstance(a, Exception) and not isinstance(b, Exception), (a, b)
    assert b.attempts == 2 and b.instant.requested_time > a.instant.requested_time
    expect = [("a0", None), ("b0", "y"), ("s0", None), ("s1", None)]
    assert rows(hudi_read(table), ["id", "extra"]) == expect == rows(mw.Table.open(table).read(), ["id", "extra"])
    assert history_violations(mw.Table.open(table).timeline()) == []


def test_omitted_column_is_refused_by_default_and_null_when_allowed(table):
    evolved = TABLE_SCHEMA.append(pa.field("extra", pa.string()))
    mw.write(_rows(["s0"], "2024-01-01", schema=evolved, extra="x"), table, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="A"))
    older = _rows(["s0", "s2"], "2024-01-01").drop_columns(["value"])
    with pytest.raises(SchemaMismatchError, match=r"\['value', 'extra'\]"):
        mw.write(older, table, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="B"))
    assert rows(hudi_read(table), ["id", "extra"]) == [("s0", "x"), ("s1", None)]
    allow = mw.WriterConfig.from_options({"hoodie.write.set.null.for.missing.columns": "true"}, lock=mw.InProcessLock(), writer_id="B")
    mw.write(older, table, allow)
    got = rows(hudi_read(table), ["id", "value", "extra"])
    assert got == [("s0", None, None), ("s1", 1.0, None), ("s2", None, None)]
    assert got == rows(mw.Table.open(table).read(), ["id", "value", "extra"])


def test_to_spark_reads_the_table_schema(spark, table):
    """Files older than an added column and a widened type read with the table schema."""
    widened = pa.schema([f if f.name != "n" else pa.field("n", pa.int64()) for f in TABLE_SCHEMA]).append(pa.field("extra", pa.string()))
    mw.write(_rows(["w0"], "2024-01-02", schema=widened, extra="x").set_column(4, "n", pa.array([1 << 40])), table, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="A"))
    df = mw.Table.open(table).to_spark(spark)
    got = sorted((r["id"], r["n"], r["extra"]) for r in df.select("id", "n", "extra").collect())
    assert got == [("s0", 7, None), ("s1", 7, None), ("w0", 1 << 40, "x")]
    assert got == rows(hudi_read(table), ["id", "n", "extra"])


# -- random evolutions across two writers ------------------------------------------------------
WIDER = {pa.int16(): pa.int32(), pa.int32(): pa.int64(), pa.float32(): pa.float64()}
NEW_TYPES = [pa.int32(), pa.string(), pa.float32()]
EVOLUTIONS = st.one_of(
    st.just(("keep",)),
    st.just(("refresh",)),
    st.tuples(st.just("add"), st.sampled_from(["c1", "c2"]), st.sampled_from(range(len(NEW_TYPES)))),
    st.tuples(st.just("widen"), st.sampled_from(["n", "value32", "c1", "c2"])),
)
STEPS = st.lists(st.tuples(st.sampled_from(["A", "B", "A inside B", "B inside A"]), EVOLUTIONS, EVOLUTIONS), min_size=1, max_size=5)
RANDOM_SCHEMA = pa.schema([("id", pa.string()), ("date", pa.string()), ("ts", pa.int64()), ("n", pa.int16()), ("value32", pa.float32())])
AVRO_ORDER = [["int8", "int16", "int32", "int64"], ["float", "double"]]


def _evolve(view: pa.Schema, evo: tuple, table_path: str) -> pa.Schema:
    if evo[0] == "refresh":
        return mw.Table.open(table_path).schema()
    if evo[0] == "add" and view.get_field_index(evo[1]) < 0:
        return view.append(pa.field(evo[1], NEW_TYPES[evo[2]]))
    if evo[0] == "widen" and view.get_field_index(evo[1]) >= 0 and view.field(evo[1]).type in WIDER:
        return view.set(view.get_field_index(evo[1]), pa.field(evo[1], WIDER[view.field(evo[1]).type]))
    return view


def _value(t: pa.DataType):
    return "s" if pa.types.is_string(t) else 1.5 if pa.types.is_floating(t) else 3


def _batch_for(view: pa.Schema, ids: list[str], writer: str) -> tuple[pa.Table, dict[str, dict]]:
    rows_ = [{f.name: _value(f.type) for f in view} | {"id": i, "date": f"2024-01-0{1 + (writer == 'B')}", "ts": 1} for i in ids]
    return pa.Table.from_pylist(rows_, schema=view), {r["id"]: r for r in rows_}


def _independent_superset(old: dict[str, object], new: dict[str, object]) -> bool:
    """Each column of ``old`` is in ``new`` with the same or a wider type (fastavro-read names)."""
    for name, t in old.items():
        if name not in new:
            return False
        u = new[name]
        if t != u and not any(t in chain and u in chain and chain.index(u) > chain.index(t) for chain in AVRO_ORDER):
            return False
    return True


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS)
def test_random_evolutions_of_two_writers_keep_every_commit_a_superset(steps):
    with tempfile.TemporaryDirectory() as d:
        path = f"{d}/t"
        mw.Table.create(path, name="r", schema=RANDOM_SCHEMA, record_key="id", partition_by=["date"], ordering_field="ts")
        views = {"A": RANDOM_SCHEMA, "B": RANDOM_SCHEMA}
        expected: dict[str, dict] = {}
        counter = iter(range(10_000))

        def writer_call(w: str, evo: tuple):
            views[w] = _evolve(views[w], evo, path)
            batch, sent = _batch_for(views[w], [f"{w}{next(counter)}" for _ in range(2)], w)

            def call():
                mw.write(batch, path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id=w))
                expected.update(sent)
            return call

        for mode, evo_a, evo_b in steps:
            if mode in ("A", "B"):
                outcomes = [_outcome(writer_call(mode, evo_a if mode == "A" else evo_b))]
            else:
                inner, outer = mode.split(" inside ")
                o = writer_call(outer, evo_a if outer == "A" else evo_b)
                i = writer_call(inner, evo_a if inner == "A" else evo_b)
                outcomes = list(run_interleaved(lambda o=o: _outcome(o), lambda i=i: _outcome(i)))
            for r in outcomes:
                assert r is None or isinstance(r, SchemaMismatchError), repr(r)

        table = mw.Table.open(path)
        assert history_violations(table.timeline()) == []
        schemas = [_json_schema(p) for p in _commit_files(path)]
        assert all(_independent_superset(a, b) for a, b in zip(schemas, schemas[1:], strict=False)), schemas
        names = table.schema().names
        want = sorted((tuple(row.get(c) for c in names) for row in expected.values()), key=repr)
        assert rows(table.read(), names) == want
        if expected:
            assert rows(hudi_read(path), names) == want


def _outcome(call):
    try:
        call()
    except SchemaMismatchError as e:
        return e
    return None
