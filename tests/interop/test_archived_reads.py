"""Time travel and incremental reads over instants archived into Hudi's LSM history.

Oracle: hudi-rs, read BEFORE archival (hudi-rs does not read the LSM history, so its answers
after archival are not comparable). After archival our reader must give the same answer for
every as-of time and every incremental range, except where the cleaner deleted a file that
hudi-rs's answer was read from (its ``_hoodie_file_name`` column): only there may it refuse,
with InstantNotRetainedError.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import multiwriter as mw
from multiwriter import errors
from multiwriter.cleaner import archive
from multiwriter.format import instant as inst
from tests.conftest import trips
from tests.oracle import hudi_read, rows
from tests.table.test_incremental import hudi_incremental
from tests.table.test_replace import write_replacecommit

COLS = ["id", "date", "value", "_hoodie_commit_time"]
Answer = tuple[list[tuple], set[str]]  # rows, and the data files they were read from


def _answer(t) -> Answer:
    if t is None or t.num_rows == 0:
        return [], set()
    return rows(t, COLS), set(t.column("_hoodie_file_name").to_pylist())


def _record(path: str, commits: list[inst.Instant]) -> tuple[dict, dict]:
    """hudi-rs's answers now: as of every commit, and for every incremental range between
    completion times (None = open)."""
    as_of = {c.requested_time: _answer(hudi_read(path, as_of=c.requested_time)) for c in commits}
    bounds = [None] + [c.completion_time for c in commits]
    incr = {(s, e): _answer(hudi_incremental(path, s, e)) for a, s in enumerate(bounds) for e in bounds[a + 1:]}
    return as_of, incr


def _on_storage(path: str) -> set[str]:
    return {p.name for p in Path(path).rglob("*.parquet") if ".hoodie" not in p.parts}


def _check(read, expected: Answer, present: set[str], what) -> bool:
    """Our answer equals hudi-rs's pre-archival one, or (only when one of the files that answer
    was read from is gone) a typed refusal. Returns whether it answered."""
    want_rows, want_files = expected
    try:
        got = read()
    except errors.InstantNotRetainedError:
        assert want_files - present, f"{what}: refused, though every file it needs is on storage"
        return False
    assert rows(got, COLS) == want_rows, what
    return True


def _archived(table: mw.Table, commits: list[inst.Instant]) -> list[inst.Instant]:
    active = {i.requested_time for i in table.timeline().latest_states()}
    return [c for c in commits if c.requested_time not in active]


def test_reads_over_archived_instants_equal_hudi_rs_before_archival(trips_table, table_path):
    lock = mw.InProcessLock()
    cfg = mw.WriterConfig(writer_id="w", lock=lock)
    commits = [
        mw.write(trips(range(10), date="2024-01-01", ts=0, value=0), table_path, cfg).instant,
        mw.write(trips(range(100, 105), date="2024-01-02", ts=0, value=0), table_path, cfg).instant,
    ]
    for k in range(1, 7):  # updates of both partitions, and inserts
        commits.append(mw.write(trips([k, k + 1, 20 + k], date="2024-01-01", ts=k, value=k), table_path, cfg).instant)
        if k % 2:
            commits.append(mw.write(trips([100 + k % 5], date="2024-01-02", ts=k, value=k), table_path, cfg).instant)
    as_of, incr = _record(table_path, commits)

    with mw.Cleaner(table_path, lock=lock, clustering=None) as cleaner:  # archival only: nothing is cleaned
        report = archive.archive(cleaner._context(), keep_min=2, keep_max=3, retain_commits=0)
    t = mw.Table.open(table_path)
    archived = _archived(t, commits)
    assert report.archived >= len(commits) - 3 and len(archived) >= len(commits) - 3
    assert t.timeline().earliest_time() > archived[-1].requested_time

    present = _on_storage(table_path)
    for x, expected in as_of.items():
        assert _check(lambda x=x: t.read(as_of=x), expected, present, f"as of {x}")
    for (s, e), expected in incr.items():
        assert _check(lambda s=s, e=e: t.read_incremental(s, e), expected, present, f"incremental ({s}, {e}]")


@pytest.mark.needs_fixtures  # the replace commit is encoded with the schema Java Hudi wrote
def test_archived_replace_commit_retires_its_groups_and_cleaned_ranges_are_refused(trips_table, table_path):
    lock = mw.InProcessLock()
    cfg = mw.WriterConfig(writer_id="w", lock=lock)
    commits = [
        mw.write(trips(range(10), date="2024-01-01", value=1), table_path, cfg).instant,
        mw.write(trips(range(100, 105), date="2024-01-02", value=1), table_path, cfg).instant,
    ]
    t = mw.Table.open(table_path)
    (retired,) = [f for f in t.snapshot().files() if f.partition == "2024-01-01"]
    rt = str(int(t.timeline().max_time()) + 1)
    write_replacecommit(t, rt, str(int(rt) + 1), {"2024-01-01": [retired.file_id]})
    replace = t.timeline().find(rt, inst.REPLACE_COMMIT)
    commits.append(replace)
    for k in range(5):  # each into a partition of its own: no file of theirs is ever cleaned
        commits.append(mw.write(trips([200 + k], date=f"2024-02-{k + 1:02d}", value=k), table_path, cfg).instant)
    as_of, incr = _record(table_path, commits)

    with mw.Cleaner(table_path, lock=lock, retain_commits=1, archive_keep_min=1, archive_keep_max=2,
                    clustering=None) as cleaner:
        report = cleaner.run_once()
    assert report.old_versions_deleted >= 1 and not (Path(table_path) / retired.path).exists()
    archived = _archived(t, commits)
    assert rt in {c.requested_time for c in archived} and len(archived) >= 5

    present = _on_storage(table_path)
    answered = {x for x, expected in as_of.items()
                if _check(lambda x=x: t.read(as_of=x), expected, present, f"as of {x}")}
    # before the replace, the retired group's file is needed and gone; from it on, all is exact
    assert answered == {c.requested_time for c in commits[2:]}
    with pytest.raises(errors.InstantNotRetainedError) as e:
        t.read(as_of=commits[1].requested_time)
    assert e.value.earliest == rt
    n_incr = sum(_check(lambda s=s, e=e: t.read_incremental(s, e), expected, present, f"incremental ({s}, {e}]")
                 for (s, e), expected in incr.items())
    assert n_incr > len(incr) // 2

