"""The record index against a model, over random sequences of writes and table services.

The model is a dict of the table's live keys under Hudi's global semantics (a key lives in one
partition: an upsert naming another updates it where it is, or moves it with
``update_partition_path``); after every step the rows hudi-rs reads equal the model, and the
record index names exactly those keys at their rows' file groups (:func:`_check_index`).
"""
from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import multiwriter as mw
from tests.oracle import hudi_read
from tests.table.test_metadata_record_index import _check_index

SCHEMA = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("v", pa.int64()), ("d", pa.string())])
KEYS = [f"k{i}" for i in range(12)]
PARTS = ["a", "b", "c"]

write = st.tuples(st.sampled_from(["upsert", "delete"]),
                  st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from(PARTS)), min_size=1, max_size=6,
                           unique_by=lambda x: x[0]))
service = st.sampled_from([("compact", []), ("cluster", []), ("overwrite", [])])
steps = st.lists(st.one_of(write, write, write, service), min_size=1, max_size=7)


def _apply(model: dict[str, tuple[str, int]], op: str, rows: list[tuple[str, str]], ts: int, move: bool) -> None:
    for k, p in rows:
        if op == "delete":
            model.pop(k, None)
        elif k in model and not move:
            model[k] = (model[k][0], ts)  # updated where it is
        else:
            model[k] = (p, ts)


@pytest.mark.parametrize("kind", ["cow", "mor"])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=steps, move=st.booleans())
@example(plan=[("upsert", [("k0", "a"), ("k1", "a")]), ("upsert", [("k0", "b")]), ("delete", [("k1", "c")])],
         move=False)
@example(plan=[("upsert", [("k0", "a"), ("k1", "a")]), ("upsert", [("k0", "b")]), ("compact", []),
               ("delete", [("k1", "c")])], move=True)
def test_the_record_index_follows_the_rows(kind, plan, move, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("ri") / "t")
    kw = {"table_type": "MERGE_ON_READ"} if kind == "mor" else {}
    mw.Table.create(path, name="m", schema=SCHEMA, record_key="id", partition_by=["d"], ordering_field="ts",
                    record_index=True, **kw)
    lock = mw.InProcessLock()
    model: dict[str, tuple[str, int]] = {}
    for ts, (op, rows) in enumerate(plan, start=1):
        if op in ("upsert", "delete"):
            batch = pa.Table.from_pylist([{"id": k, "ts": ts, "v": ts, "d": p} for k, p in rows], schema=SCHEMA)
            mw.write(batch, path, mw.WriterConfig(writer_id="w", lock=lock, operation=op, update_partition_path=move))
            _apply(model, op, rows, ts, move)
        elif op == "overwrite":
            batch = pa.Table.from_pylist([{"id": "k0", "ts": ts, "v": ts, "d": "a"}], schema=SCHEMA)
            mw.write(batch, path, mw.WriterConfig(writer_id="w", lock=lock, operation="insert_overwrite_table"))
            model = {"k0": ("a", ts)}
        else:
            with mw.Cleaner(path, lock=lock, retain_commits=1,
                            compaction=mw.CompactionConfig(delta_commits=1) if op == "compact" else None,
                            clustering=mw.ClusteringConfig(small_file_bytes=1 << 20, target_file_bytes=4 << 20,
                                                           max_bytes_per_run=64 << 20, min_file_groups=2)
                            if op == "cluster" else None) as cleaner:
                cleaner.run_once()
        got = {r["id"]: (r["_hoodie_partition_path"], r["v"]) for r in hudi_read(path).to_pylist()}
        assert hudi_read(path).num_rows == len(got), "a key stored twice"
        assert got == model, (op, rows)
        assert _check_index(path) == len(model)
