"""A task attempt that outlived the commit's reconciliation (speculation Spark did not stop) left
a second base file of one file group and instant: readers pick the file the commit names, and
the cleaner deletes the other once it is old enough. Oracles: the commit's Avro metadata read
with fastavro, the named file read with pyarrow, and hudi-rs after the sweep."""
from __future__ import annotations

import time
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import multiwriter as mw
from tests.conftest import trips
from tests.oracle import hudi_read, rows


def named_file(table_path: str) -> Path:
    commits = sorted(Path(table_path, ".hoodie", "timeline").glob("*_*.commit"))
    with open(commits[-1], "rb") as f:
        rec = next(iter(fastavro.reader(f)))
    (stat,) = [s for stats in rec["partitionToWriteStats"].values() for s in stats]
    return Path(table_path, stat["path"])


def plant_losing_attempt(committed: Path) -> Path:
    """The same file group and instant under a later write token, with other values."""
    fid, _token, rest = committed.name.split("_", 2)
    loser = committed.with_name(f"{fid}_9-9-9_{rest}")
    t = pq.read_table(committed)
    t = t.set_column(t.schema.get_field_index("value"), "value", pa.array([99.0] * t.num_rows))
    t = t.set_column(t.schema.get_field_index("_hoodie_file_name"), "_hoodie_file_name", pa.array([loser.name] * t.num_rows))
    pq.write_table(t, loser)
    return loser


def test_readers_pick_the_committed_file_and_the_cleaner_deletes_the_loser(trips_table, table_path):
    lock = mw.InProcessLock()
    mw.write(trips(range(4), value=1), table_path, mw.WriterConfig(writer_id="w", lock=lock))
    committed = named_file(table_path)
    expected = rows(pq.read_table(committed), ["id", "value"])
    loser = plant_losing_attempt(committed)

    ours = mw.Table.open(table_path).read()
    assert rows(ours, ["id", "value"]) == expected
    assert set(pc.unique(ours["_hoodie_file_name"]).to_pylist()) == {committed.name}

    time.sleep(2.5)  # the sweep only judges instants older than its safe age (1 bound = 2 s here)
    with mw.Cleaner(table_path, lock=lock, heartbeat_interval_s=1.0, heartbeat_tolerable_misses=1,
                    failed_write_min_age_bounds=1.0, clustering=None) as cleaner:
        report = cleaner.run_once()
    assert not loser.exists() and committed.exists()
    assert str(loser.relative_to(table_path)) in report.failed_writes_swept
    assert rows(hudi_read(table_path), ["id", "value"]) == expected
