"""Two teams on one table: team B adds column ``n``, team A's stream keeps sending the older
schema. Under the default (Hudi's ``hoodie.write.set.null.for.missing.columns=false``) A's batch
is refused, naming ``n``, whether it comes after B's commit or runs concurrently with it
(optimistic and non-blocking concurrency), so B's values of ``n`` survive; hudi-rs is the oracle."""
from __future__ import annotations

import pyarrow as pa
import pytest

import multiwriter as mw
from multiwriter.errors import SchemaMismatchError
from tests.oracle import hudi_read, rows
from tests.test_schema_evolution_concurrent import run_interleaved

OLD = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("v", pa.string())])
NEW = OLD.append(pa.field("n", pa.int64()))
MODES = [("COPY_ON_WRITE", None), ("MERGE_ON_READ", None), ("MERGE_ON_READ", 2)]
IDS = ["cow-optimistic", "mor-optimistic", "mor-non-blocking"]


@pytest.fixture(params=MODES, ids=IDS)
def table(request, table_path):
    table_type, buckets = request.param
    mw.Table.create(table_path, name="t", schema=OLD, record_key="id", ordering_field="ts", table_type=table_type,
                    num_buckets=buckets)
    mw.write(pa.Table.from_pylist([{"id": "e", "ts": 1, "v": "a0"}, {"id": "f", "ts": 1, "v": "a0"}], schema=OLD),
             table_path, _cfg("A"))
    return table_path


def _cfg(writer: str, **kw) -> mw.WriterConfig:
    return mw.WriterConfig(lock=mw.InProcessLock(), writer_id=writer, max_conflict_retries=2, retry_backoff_s=0.0,
                           retry_backoff_max_s=0.0, **kw)


def _b_adds_n() -> pa.Table:
    return pa.Table.from_pylist([{"id": "e", "ts": 2, "v": "b", "n": 7}], schema=NEW)


def _a_updates_e() -> pa.Table:
    return pa.Table.from_pylist([{"id": "e", "ts": 3, "v": "a1"}], schema=OLD)


def _check_n_kept(path: str) -> None:
    want = [("e", "b", 7), ("f", "a0", None)]
    assert rows(hudi_read(path), ["id", "v", "n"]) == want
    assert rows(mw.Table.open(path).read(), ["id", "v", "n"]) == want


def test_older_writer_after_the_evolution_is_refused(table):
    mw.write(_b_adds_n(), table, _cfg("B"))
    with pytest.raises(SchemaMismatchError, match=r"\['n'\]"):
        mw.write(_a_updates_e(), table, _cfg("A"))
    _check_n_kept(table)


def test_older_writer_concurrent_with_the_evolution_is_refused(table):
    """A validates its batch before B commits and writes its files; B commits meanwhile."""
    a, b = run_interleaved(lambda: mw.write(_a_updates_e(), table, _cfg("A")), lambda: mw.write(_b_adds_n(), table, _cfg("B")))
    assert not isinstance(b, Exception), b
    assert isinstance(a, SchemaMismatchError) and "['n']" in str(a), a
    _check_n_kept(table)
