"""Markers: a writer that writes every file of its instant lists them all in Hudi's
timeline-server marker layout before the first data file, and every reader of markers (abort,
reconcile, the cleaner's rollback) finds the files through that list."""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import multiwriter as mw
from multiwriter import faults, markers
from multiwriter.storage import Storage
from multiwriter.format import layout
from multiwriter.write import merge
from tests.conftest import trips
from tests.oracle import hudi_read


def _marker_dir_files(path: str) -> dict[str, str]:
    """Every file under .hoodie/.temp with its text, by a plain directory walk."""
    temp = Path(path, ".hoodie", ".temp")
    return {str(p.relative_to(temp)): p.read_text() for p in temp.rglob("*") if p.is_file()}


def test_a_driver_write_lists_every_file_before_it_writes_one(trips_table, table_path, monkeypatch):
    seen: list[dict[str, str]] = []
    original = merge._write_parquet

    def first_sees_markers(storage, rel, out, *rest, **options):
        if not seen:
            seen.append(_marker_dir_files(table_path))
        return original(storage, rel, out, *rest, **options)

    monkeypatch.setattr(merge, "_write_parquet", first_sees_markers)
    batch = pa.concat_tables([trips(range(20)), trips(range(20, 40), date="2024-01-02"), trips(range(40, 45), date="2024-01-03")])
    r = mw.write(batch, table_path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w"))
    t = r.instant.requested_time
    at_first_file = seen[0]
    assert at_first_file[f"{t}/MARKERS.type"] == "TIMELINE_SERVER_BASED"
    assert not [k for k in at_first_file if k.endswith(".marker.CREATE")], "no marker file per data file"
    listed = {line.removesuffix(".marker.CREATE") for line in at_first_file[f"{t}/MARKERS0"].splitlines()}

    got = hudi_read(table_path)  # which files the commit made visible, as an independent reader sees them
    visible = {layout.data_file_path(p, f) for p, f in zip(got.column("_hoodie_partition_path").to_pylist(),
                                                          got.column("_hoodie_file_name").to_pylist(), strict=True)}
    assert len(visible) == 3 and listed == visible
    assert not Path(table_path, ".hoodie", ".temp", t).exists(), "markers are deleted after the commit"


def test_an_aborted_driver_write_deletes_every_listed_file(trips_table, table_path):
    mw.write(trips(range(5)), table_path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="seed"))
    before = sorted(p for p in Path(table_path).rglob("*.parquet") if ".hoodie" not in p.parts)
    faults.configure("after-data-files=error")
    try:
        with pytest.raises(faults.InjectedFault):
            mw.write(trips(range(100, 140)), table_path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w"))
    finally:
        faults.configure(None)
    after = sorted(p for p in Path(table_path).rglob("*.parquet") if ".hoodie" not in p.parts)
    assert after == before
    assert not list(Path(table_path, ".hoodie", ".temp").glob("*"))
    assert sorted(hudi_read(table_path).column("id").to_pylist()) == sorted(trips(range(5)).column("id").to_pylist())


def test_a_list_entry_leaving_the_table_is_skipped(tmp_path):
    root = tmp_path / "t"
    t = "20260101000000000"
    keep = f"2024/a1-0_0-0-0_{t}.parquet"
    outside = tmp_path / f"b1-0_0-0-0_{t}.parquet"
    hidden = root / ".hoodie" / f"c1-0_0-0-0_{t}.parquet"
    for p in (root / keep, outside, hidden):
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x")
    d = root / ".hoodie" / ".temp" / t
    d.mkdir(parents=True)
    (d / "MARKERS.type").write_text("TIMELINE_SERVER_BASED")
    (d / "MARKERS0").write_text(f"{keep}.marker.CREATE\n../{outside.name}.marker.CREATE\n.hoodie/{hidden.name}.marker.CREATE\n")
    storage = Storage(str(root))
    assert markers.data_paths(storage, t) == [keep]
    assert markers.delete_files(storage, t) == [keep]
    assert outside.exists() and hidden.exists() and not (root / keep).exists()


def test_started_writing_sees_either_layout(tmp_path):
    storage = Storage(str(tmp_path / "t"))
    listed, direct = "20260101000000001", "20260101000000002"
    assert not markers.started_writing(storage, listed) and not markers.started_writing(storage, direct)
    markers.create_all(storage, listed, [("2024", f"a1-0_0-0-0_{listed}.parquet")])
    markers.create(storage, direct, "2024", f"b1-0_1-2-3_{direct}.parquet")
    assert markers.started_writing(storage, listed) and markers.started_writing(storage, direct)
    assert markers.data_paths(storage, listed) == [f"2024/a1-0_0-0-0_{listed}.parquet"]
    assert markers.data_paths(storage, direct) == [f"2024/b1-0_1-2-3_{direct}.parquet"]
    assert markers.instants_with_markers(storage) == [listed, direct]


def test_an_aborted_write_deletes_a_file_of_its_instant_that_has_no_marker(trips_table, table_path, monkeypatch):
    """A file of the instant written without its marker (a second attempt of a merge that
    skipped marking) still goes with the abort: left behind, readers would take it for an
    archived commit's file once archival passed its instant."""
    import dataclasses

    from multiwriter.write import log_append

    mw.write(trips(range(5)), table_path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="seed"))
    before = sorted(p for p in Path(table_path).rglob("*.parquet") if ".hoodie" not in p.parts)
    real = log_append.merge_file_group

    def twice(storage, ctx, task, rows, token, **kw):
        real(storage, dataclasses.replace(ctx, markers_listed=True), task, rows, layout.write_token(task.task_index, 0, 9),
             **{**kw, "on_footer": None})  # written unmarked
        return real(storage, ctx, task, rows, token, **kw)

    monkeypatch.setattr(log_append, "merge_file_group", twice)
    faults.configure("after-data-files=error")
    try:
        with pytest.raises(faults.InjectedFault):
            mw.write(trips(range(100, 140)), table_path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w",
                                                                         executor="driver"))
    finally:
        faults.configure(None)
    after = sorted(p for p in Path(table_path).rglob("*.parquet") if ".hoodie" not in p.parts)
    assert after == before
    assert sorted(hudi_read(table_path).column("id").to_pylist()) == sorted(trips(range(5)).column("id").to_pylist())


def test_marker_folders_of_hudis_reserved_times_are_listed(tmp_path):
    """A bootstrap's instant has Hudi's 14-digit reserved time (``FULL_BOOTSTRAP_INSTANT_TS``):
    its marker folder is listed with the others, so the companion job's bookkeeping sees it."""
    storage = Storage(str(tmp_path))
    for t in ("00000000000002", "20240101000000000"):
        markers.create_all(storage, t, [("2024-01-01", f"f-0_0-0-0_{t}.parquet")])
    storage.makedirs(".hoodie/.temp/not-a-time")
    assert markers.instants_with_markers(storage) == ["00000000000002", "20240101000000000"]
