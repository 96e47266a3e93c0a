"""Change data capture (``Table.read_cdc``) checked against a model of the table's history:
every record (op, ts_ms, before, after) of every commit, on both table types, through two
writers, upserts, deletes, an insert-overwrite, compaction and clustering.

Names and values are Hudi's: ``op``/``ts_ms``/``before``/``after`` are
``HoodieCDCUtils.CDC_OPERATION_TYPE``/``CDC_COMMIT_TIMESTAMP``/``CDC_BEFORE_IMAGE``/
``CDC_AFTER_IMAGE``; ``i``/``u``/``d`` are ``HoodieCDCOperation.INSERT``/``UPDATE``/``DELETE``;
``ts_ms`` is the commit's requested instant time (``HoodieCDCFileSplit`` carries
``instant.getTimestamp()``, which ``CDCFileGroupIterator`` writes into every record)."""
from __future__ import annotations

from typing import Any

from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa
import pytest

import multiwriter as mw
from multiwriter import errors
from multiwriter.table import cdc
from tests.conftest import trips

Record = tuple[str, str, str | None, tuple | None, tuple | None]  # op, ts_ms, key, before, after


def cdc_records(t: pa.Table) -> Counter:
    """The records of a CDC read as (op, ts_ms, key, before, after), images as (id, ts, value)."""
    out: Counter = Counter()
    for r in t.to_pylist():
        img = [None if r[c] is None else (r[c]["id"], r[c]["ts"], r[c]["value"]) for c in (cdc.BEFORE, cdc.AFTER)]
        key = (img[0] or img[1])[0]
        out[(r[cdc.OP], r[cdc.TS], key, img[0], img[1])] += 1
    return out


def each_commit_read(t: Any, model: Any) -> Counter:
    """Assert ``read_cdc`` of each commit's range (from the one before) equals the model's records
    of that commit; returns all of them."""
    bounds = [None] + [c for c, _ in model.expected]
    everything: Counter = Counter()
    for n, (done, recs) in enumerate(model.expected):
        assert cdc_records(t.read_cdc(bounds[n], done)) == recs, (n, done)
        everything.update(recs)
    return everything


@dataclass
class Model:
    """The table as a dict key -> (ts, value), and the CDC records each commit must produce."""

    state: dict[str, tuple[int, float]] = field(default_factory=dict)
    expected: list[tuple[str, Counter]] = field(default_factory=list)  # (completion time, records)

    def commit(self, result: mw.CommitResult, new: dict[str, tuple[int, float]], *,
               retired_all: bool = False) -> None:
        """``new``: the state after the commit; ``retired_all``: an overwrite that retired every
        group (Copy-on-Write): each old row a delete, each new one an insert, as Hudi's
        ``REPLACE_COMMIT`` and ``BASE_FILE_INSERT`` cases give them."""
        ts = result.instant.requested_time
        recs: Counter = Counter()
        img = lambda k, v: (k, v[0], v[1])  # noqa: E731
        for k, v in self.state.items():
            if retired_all or k not in new:
                recs[(cdc.DELETE, ts, k, img(k, v), None)] += 1
        for k, v in new.items():
            if k not in self.state or retired_all:
                recs[(cdc.INSERT, ts, k, None, img(k, v))] += 1
            elif self.state[k] != v or k in self._written:
                recs[(cdc.UPDATE, ts, k, img(k, self.state[k]), img(k, v))] += 1
        self.state = dict(new)
        self.expected.append((result.instant.completion_time, recs))

    _written: set[str] = field(default_factory=set)

    def upsert(self, result: mw.CommitResult, ids, ts: int, value: float) -> None:
        new = dict(self.state)
        for i in ids:
            k = str(i)
            if k not in new or ts >= new[k][0]:  # a version with a lower ordering value loses: no change
                new[k] = (ts, float(value))
                self._written.add(k)
        self.commit(result, new)
        self._written = set()

    def delete(self, result: mw.CommitResult, ids, ts: int) -> None:
        """Deletes carrying the ordering field compete by it (a lower one loses: no change)."""
        gone = {str(i) for i in ids if str(i) in self.state and ts >= self.state[str(i)][0]}
        self.commit(result, {k: v for k, v in self.state.items() if k not in gone})

    def overwrite(self, result: mw.CommitResult, ids, ts: int, value: float, *, retired_all: bool) -> None:
        self._written = {str(i) for i in ids}
        self.commit(result, {str(i): (ts, float(value)) for i in ids}, retired_all=retired_all)
        self._written = set()


def _history(path: str, table_type: str) -> tuple[Model, list[str]]:
    """Two writers, one after the other: upserts, deletes, a re-insert, an insert-overwrite,
    and a table service (compaction on Merge-on-Read, clustering on Copy-on-Write) between."""
    lock = mw.InProcessLock()
    w1 = mw.WriterConfig(writer_id="w1", lock=lock)
    w2 = mw.WriterConfig(writer_id="w2", lock=lock)
    dele = mw.WriterConfig(writer_id="w1", lock=lock, operation="delete")
    over = mw.WriterConfig(writer_id="w2", lock=lock, operation="insert_overwrite_table")
    m = Model()
    services: list[str] = []
    m.upsert(mw.write(trips(range(6), ts=1, value=1), path, w1), range(6), 1, 1)
    m.upsert(mw.write(trips(range(3, 8), ts=2, value=2), path, w2), range(3, 8), 2, 2)
    m.upsert(mw.write(trips([2], ts=0, value=9), path, w1), [2], 0, 9)  # loses on ts: no change
    m.delete(mw.write(trips([1, 6, 3], ts=2), path, dele), [1, 6, 3], 2)
    m.upsert(mw.write(trips([20, 21], ts=1, value=1), path, w2), [20, 21], 1, 1)  # a new file group
    mor = table_type == "MERGE_ON_READ"
    small = mw.ClusteringConfig(small_file_bytes=1 << 20, target_file_bytes=4 << 20, max_bytes_per_run=64 << 20,
                                min_file_groups=2)
    with mw.Cleaner(path, lock=lock, retain_commits=50, clustering=None if mor else small,
                    compaction=mw.CompactionConfig(delta_commits=2) if mor else None) as cleaner:
        report = cleaner.run_once()
        services += report.compaction_instants if mor else report.clustering_instants
    m.upsert(mw.write(trips([0, 1], ts=3, value=3), path, w2), [0, 1], 3, 3)
    m.delete(mw.write(trips([7, 4], ts=2), path, dele), [7, 4], 2)
    m.overwrite(mw.write(trips([0, 10, 11], ts=4, value=4), path, over), [0, 10, 11], 4, 4, retired_all=not mor)
    m.upsert(mw.write(trips([10], ts=5, value=5), path, w1), [10], 5, 5)
    return m, services


@pytest.fixture(params=["COPY_ON_WRITE", "MERGE_ON_READ"])
def history(request, table_path):
    table_type = request.param
    if table_type == "MERGE_ON_READ":
        request.getfixturevalue("mor_table")
    else:
        request.getfixturevalue("trips_table")
    model, services = _history(table_path, table_type)
    return table_path, model, services


def test_every_commit_s_records_match_the_model(history):
    path, model, services = history
    assert services, "a table service ran"
    t = mw.Table.open(path)
    bounds = [None] + [c for c, _ in model.expected]
    for n, (done, recs) in enumerate(model.expected):
        assert cdc_records(t.read_cdc(bounds[n], done)) == recs, (n, done)
    everything = Counter()
    for _, recs in model.expected:
        everything.update(recs)
    assert cdc_records(t.read_cdc()) == everything
    # a range holding only the table service's commit is empty
    tl = t.timeline()
    for s in services:
        i = tl.find(s)
        before = max(c for c, _ in model.expected if c < i.completion_time)
        assert t.read_cdc(before, i.completion_time).num_rows == 0


def test_a_range_holding_only_a_delete_returns_the_delete(history):
    path, model, _ = history
    t = mw.Table.open(path)
    done, recs = model.expected[3]
    got = t.read_cdc(model.expected[2][0], done)
    assert sorted(got.column(cdc.OP).to_pylist()) == ["d", "d", "d"]
    assert cdc_records(got) == recs


def test_the_schema_names_and_ops_are_hudi_s(history):
    path, _, _ = history
    got = mw.Table.open(path).read_cdc()
    assert got.schema.names == ["op", "ts_ms", "before", "after"]
    assert set(got.column("op").to_pylist()) == {"i", "u", "d"}
    assert [f.name for f in got.schema.field("after").type] == ["id", "date", "ts", "value"]


def test_a_consumer_loop_on_read_cdc_batch_delivers_every_change_once(trips_table, table_path):
    lock = mw.InProcessLock()
    w = mw.WriterConfig(writer_id="w", lock=lock)
    path = table_path
    seen: Counter = Counter()
    offset = None
    expected: Counter = Counter()
    for k in range(4):
        r = mw.write(trips([k, k + 1], ts=k, value=k), path, w)
        batch = mw.Table.open(path).read_cdc_batch(offset)
        assert batch.start == offset and batch.end == r.instant.completion_time
        seen.update(cdc_records(batch.rows))
        offset = batch.end
        again = mw.Table.open(path).read_cdc_batch(offset)
        assert again.end == offset and again.rows.num_rows == 0
        expected.update({(cdc.INSERT if k == 0 or j == k + 1 else cdc.UPDATE, r.instant.requested_time, str(j))
                         for j in (k, k + 1)})
    assert Counter((op, ts, key) for op, ts, key, _, _ in seen.elements()) == expected


def test_cleaned_slices_are_refused_with_the_earliest_exact_start(trips_table, table_path):
    """A commit's changes need the slice before it too: the cleaner's deleting that one makes
    the commit's range refused (never partial), from ``earliest`` on reads are exact again."""
    lock = mw.InProcessLock()
    w = mw.WriterConfig(writer_id="w", lock=lock)
    rs = [mw.write(trips([1], ts=k, value=k), table_path, w) for k in range(5)]
    with mw.Cleaner(table_path, lock=lock, retain_commits=2) as cleaner:
        assert cleaner.run_once().old_versions_deleted > 0
    t = mw.Table.open(table_path)
    with pytest.raises(errors.InstantNotRetainedError, match="cleaner has deleted") as e:
        t.read_cdc(None, None)
    done = [r.instant.completion_time for r in rs]
    assert e.value.earliest in done
    got = cdc_records(t.read_cdc(e.value.earliest, None))
    want = {(cdc.UPDATE, r.instant.requested_time, "1", ("1", k - 1, k - 1.0), ("1", k, float(k)))
            for k, r in enumerate(rs) if r.instant.completion_time > e.value.earliest}
    assert set(got) == want and want


@pytest.mark.parametrize("mode", ["OP_KEY_ONLY", "DATA_BEFORE", "DATA_BEFORE_AFTER", "cdc_op_key"])
def test_every_supplemental_logging_mode_reads_full_records_as_hudi_s_query(trips_table, table_path, mode):
    """``HoodieCDCSupplementalLoggingMode`` says what Hudi's writer logs; its CDC query returns
    ``FULL_CDC_SPARK_SCHEMA`` (op, ts_ms, before, after) in every mode, computing the images
    the log lacks from the file slices (``CDCFileGroupIterator``)."""
    from multiwriter.table import properties as props

    w = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    mw.write(trips([1], ts=1, value=1), table_path, w)
    mw.write(trips([1], ts=2, value=2), table_path, w)
    props.modify(mw.Table.open(table_path).storage, lambda p: {**p, cdc.MODE_KEY: mode, cdc.ENABLED_KEY: "true"})
    got = cdc_records(mw.Table.open(table_path).read_cdc())
    assert sorted((op, b, a) for op, _, _, b, a in got.elements()) == [
        ("i", None, ("1", 1, 1.0)), ("u", ("1", 1, 1.0), ("1", 2, 2.0))]


def test_a_bad_supplemental_logging_mode_is_refused_by_name(trips_table, table_path):
    from multiwriter.table import properties as props

    props.modify(mw.Table.open(table_path).storage, lambda p: {**p, cdc.MODE_KEY: "EVERYTHING"})
    with pytest.raises(errors.TableFormatError, match="EVERYTHING"):
        mw.Table.open(table_path).read_cdc()


def test_cdc_log_files_no_commit_names_are_not_read(trips_table, table_path):
    """Hudi's reader takes the CDC log files a commit's ``cdcStats`` names
    (``HoodieCDCExtractor.parseWriteStat``); a stray one (a failed attempt's) is no change."""
    from multiwriter.table import properties as props

    r = mw.write(trips([1], ts=1, value=1), table_path, mw.WriterConfig(writer_id="w", lock=mw.InProcessLock()))
    t = mw.Table.open(table_path)
    props.modify(t.storage, lambda p: {**p, cdc.ENABLED_KEY: "true"})
    name = f"2024-01-01/.abc-0_{r.instant.requested_time}.log.1_0-1-1.cdc"
    t.storage.put_if_absent(name, b"")
    assert [x["op"] for x in mw.Table.open(table_path).read_cdc().to_pylist()] == ["i"]


def test_after_archival_ranges_answer_as_before_or_are_refused_with_the_earliest_start(trips_table, table_path):
    lock = mw.InProcessLock()
    w = mw.WriterConfig(writer_id="w", lock=lock)
    rs = [mw.write(trips([1], ts=k, value=k), table_path, w) for k in range(6)]
    starts = [None] + [r.instant.completion_time for r in rs]
    t = mw.Table.open(table_path)
    before = {s: t.read_cdc(s, None).to_pylist() for s in starts}
    with mw.Cleaner(table_path, lock=lock, retain_commits=5, archive_keep_min=1, archive_keep_max=2) as cleaner:
        assert cleaner.run_once().archived >= 1
    t = mw.Table.open(table_path)
    answered = 0
    for s in starts:
        try:
            got = t.read_cdc(s, None).to_pylist()
        except errors.InstantNotRetainedError as e:
            assert e.earliest > (s or "")
            assert t.read_cdc(e.earliest, None).to_pylist() == before[e.earliest]
            continue
        assert got == before[s], s
        answered += 1
    assert answered >= 5


def test_a_non_blocking_writer_s_before_is_the_row_committed_before_it_by_completion(mor_table, table_path, tmp_path,
                                                                                    monkeypatch):
    """Two deltacommits to the same keys under non-blocking concurrency, the one requested first
    completing last: its ``before`` is what the other committed, its ``after`` the merged row;
    where its version lost by the ordering field it has no record. Records come in completion
    order, so its ``ts_ms`` (its requested time) is below the previous record's."""
    import threading

    from multiwriter import faults
    from tests.conftest import wait_hanging

    lock = mw.InProcessLock()
    cfg = lambda w: mw.WriterConfig(writer_id=w, lock=lock)  # noqa: E731
    c0 = mw.write(trips([1, 2], ts=1, value=1), table_path, cfg("a"))
    monkeypatch.setenv("MULTIWRITER_FAULT_DIR", str(tmp_path))
    faults.configure("after-data-files=hang")
    slow_rows = pa.concat_tables([trips([1], ts=5, value=5), trips([2], ts=2, value=2)])
    box: dict = {}
    slow = threading.Thread(target=lambda: box.setdefault("r", mw.write(slow_rows, table_path, cfg("slow"))))
    try:
        slow.start()
        assert wait_hanging(tmp_path, slow)
        faults.configure(None)
        c1 = mw.write(trips([1, 2], ts=3, value=3), table_path, cfg("a"))
    finally:
        (tmp_path / "after-data-files.release").touch()
        slow.join(30)
    c2 = box["r"]
    assert c2.instant.requested_time < c1.instant.requested_time
    assert c2.instant.completion_time > c1.instant.completion_time
    got = mw.Table.open(table_path).read_cdc(c0.instant.completion_time, None)
    assert [r[cdc.TS] for r in got.to_pylist()] == [c1.instant.requested_time] * 2 + [c2.instant.requested_time]
    assert cdc_records(got) == Counter({
        (cdc.UPDATE, c1.instant.requested_time, "1", ("1", 1, 1.0), ("1", 3, 3.0)): 1,
        (cdc.UPDATE, c1.instant.requested_time, "2", ("2", 1, 1.0), ("2", 3, 3.0)): 1,
        (cdc.UPDATE, c2.instant.requested_time, "1", ("1", 3, 3.0), ("1", 5, 5.0)): 1,
    })
