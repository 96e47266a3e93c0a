"""Bootstrap on Spark: the source is read by Spark on executors from exactly the files the scan
listed (partition values from each file's folder) and written through the writer's executor
path. Oracle: pyarrow reading the source files directly; hudi-rs reads the same rows; the files
are written by the bootstrap's Spark tasks; the source files never change; a bootstrap killed
after its executors wrote files is rolled back by the companion job and runs again."""
from __future__ import annotations

import datetime as dt
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import multiwriter as mw
from multiwriter.errors import BootstrapPendingError
from multiwriter.format.instant import FULL_BOOTSTRAP_TIME
from multiwriter.format.layout import parse_data_file
from multiwriter.write import spark as spark_path
from multiwriter.write.bootstrap import JOB_GROUP
from tests.oracle import hudi_read, rows
from tests.write.test_bootstrap import data_files, hashes

ROOT = Path(__file__).resolve().parents[1]
DATES = ("2024-01-01", "2024-01-02")
#: folder names Spark percent-encodes in the file paths it gives each row
ODD_DATES = ("2024-01-01", "a b+c%20ü")
FILES_PER_PARTITION = 3
ROWS_PER_FILE = 4
COLUMNS = ["id", "n", "name", "value", "flag", "day", "ts", "date"]


def make_source(root: Path, *, hive: bool, dates: tuple[str, ...] = DATES) -> None:
    """Two partitions of three files each, columns of the common Parquet types (a timestamp with
    a time zone: hudi-rs 0.5 reads no local timestamp)."""
    n = 0
    for d in dates:
        folder = root / (f"date={d}" if hive else d)
        folder.mkdir(parents=True, exist_ok=True)
        for f in range(FILES_PER_PARTITION):
            ids = list(range(n, n + ROWS_PER_FILE))
            n += ROWS_PER_FILE
            pq.write_table(pa.table({
                "id": pa.array(ids, pa.int64()), "n": pa.array(ids, pa.int32()), "name": [f"r{i}" for i in ids],
                "value": [i / 2 for i in ids], "flag": [i % 2 == 0 for i in ids],
                "day": [dt.date(2024, 1, 1 + i % 20) for i in ids],
                "ts": pa.array([dt.datetime(2024, 1, 1, 0, 0, i % 60) for i in ids], pa.timestamp("us", tz="UTC")),
            }), folder / f"part {f}.parquet")
    (root / "_SUCCESS").write_text("")


def source_rows(root: Path) -> list[tuple]:
    """The oracle: every source file read by pyarrow, its partition value from its folder."""
    tables = []
    for f in sorted(root.rglob("*.parquet")):
        t = pq.read_table(f)
        tables.append(t.append_column("date", pa.array([f.parent.name.rpartition("=")[2]] * t.num_rows)))
    return rows(pa.concat_tables(tables), COLUMNS)


def boot(src: Path, path: str, lock, **kw) -> mw.CommitResult:
    return mw.bootstrap(str(src), path, name=Path(path).name, record_key="id", partition_by=["date"],
                        ordering_field="n", lock=lock, **kw)


def bootstrap_stages(spark, name: str) -> set[int]:
    tracker = spark.sparkContext.statusTracker()
    return {s for j in tracker.getJobIdsForGroup(JOB_GROUP.format(name=name)) for s in tracker.getJobInfo(j).stageIds}


@pytest.mark.parametrize("hive,spread", [(True, True), (False, False)], ids=["hive-by-partition", "plain-one-task"])
def test_a_spark_bootstrap_writes_the_source_rows_on_executors(spark, tmp_path, monkeypatch, caplog, hive, spread):
    if spread:  # as a source too large for one task: each table partition's rows to a task
        monkeypatch.setattr(spark_path, "ONE_TASK_MAX_BYTES", 0)
    src = tmp_path / "src"
    make_source(src, hive=hive, dates=DATES if hive else ODD_DATES)
    before = hashes(src)
    name = f"t_{'hive' if hive else 'plain'}"
    path = str(tmp_path / name)
    lock = mw.InProcessLock()
    with caplog.at_level(logging.INFO, logger="multiwriter.write.bootstrap"):
        r = boot(src, path, lock, spark=spark)  # executor="spark": no row collected on the driver
    want = source_rows(src)
    assert r.instant.requested_time == FULL_BOOTSTRAP_TIME and r.num_inserts == len(want)
    table = mw.Table.open(path)
    assert table.config.hive_style_partitioning is hive
    assert rows(table.read(), COLUMNS) == want
    assert rows(hudi_read(path), ["id", "name", "value", "date"]) == [(i, s, v, d) for i, _, s, v, _, _, _, d in want]
    # the driver path writes the same rows with the same types
    driver = str(tmp_path / "driver")
    boot(src, driver, lock)
    assert mw.Table.open(driver).schema() == table.schema()
    assert rows(mw.Table.open(driver).read(), COLUMNS) == want
    # every file was written by a task of the bootstrap's Spark jobs (its token names the stage)
    tl = table.timeline()
    (instant,) = tl.completed_writes()
    stats = tl.commit_metadata(instant).all_stats()
    stages = bootstrap_stages(spark, name)
    assert stats and {int(parse_data_file(Path(s.path).name).write_token.split("-")[1]) for s in stats} <= stages
    assert len(stats) >= len(DATES)
    progress = [m for m in caplog.messages if "Spark job" in m]
    assert progress and all(f"bootstrap {path}" in m for m in progress), caplog.messages
    assert any("SUCCEEDED" in m for m in progress)
    assert hashes(src) == before, "the source files are never changed"


BOOT = """
import json, sys
from pyspark.sql import SparkSession
import multiwriter as mw
a = json.loads(sys.argv[1])
spark = (SparkSession.builder.master("local[1]").config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1").config("spark.ui.enabled", "false").getOrCreate())
mw.bootstrap(a["src"], a["path"], name="t", record_key="id", partition_by=["date"], ordering_field="n",
             lock=mw.FileSystemLock(lease_s=2.0), heartbeat_interval_s=1.0, heartbeat_tolerable_misses=0, spark=spark)
"""


@pytest.mark.skipif(os.environ.get("MW_FULL_MATRIX") != "1",
                    reason="a second JVM in a killed process (~15-40 s): `make test-full`; tests/write/test_bootstrap.py "
                           "kills a driver-path bootstrap in every `make test`")
def test_a_spark_bootstrap_killed_after_its_executors_wrote_is_rolled_back_and_run_again(spark, tmp_path):
    src = tmp_path / "src"
    make_source(src, hive=True)
    before = hashes(src)
    path = str(tmp_path / "t")
    env = dict(os.environ, MULTIWRITER_FAULTS="after-data-files=kill", PYTHONPATH=str(ROOT),
               PYSPARK_PYTHON=sys.executable)
    proc = subprocess.run([sys.executable, "-c", BOOT, json.dumps({"src": str(src), "path": path})], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, f"the bootstrap was killed: {proc.stderr[-2000:]}"
    assert data_files(path), "its executors had written files"
    lock = mw.FileSystemLock(lease_s=2.0)
    with pytest.raises(BootstrapPendingError):
        mw.write(pq.read_table(next(src.rglob("*.parquet"))).append_column("date", pa.array([DATES[0]] * ROWS_PER_FILE)),
                 path, mw.WriterConfig(writer_id="w", lock=lock))
    with mw.Cleaner(path, lock=lock, heartbeat_interval_s=1.0, clustering=None) as c:
        c.run_once()
    assert mw.Table.open(path).timeline().pending() == [] and data_files(path) == []
    r = boot(src, path, lock, spark=spark)
    assert r.instant.requested_time == FULL_BOOTSTRAP_TIME
    assert rows(mw.Table.open(path).read(), COLUMNS) == source_rows(src)
    assert hashes(src) == before, "the source files are never changed"


def test_the_command_line_bootstraps_on_spark(spark, tmp_path, capsys):
    from multiwriter.cli import main

    src = tmp_path / "src"
    make_source(src, hive=False)
    path = str(tmp_path / "t")
    assert main(["bootstrap", str(src), path, "--record-key", "id", "--partition-by", "date", "--ordering-field", "n",
                 "--file-lock", "--spark"]) == 0
    assert f"at instant {FULL_BOOTSTRAP_TIME}" in capsys.readouterr().out
    assert rows(mw.Table.open(path).read(), COLUMNS) == source_rows(src)
    assert not spark.sparkContext._jsc.sc().isStopped(), "the session it found running is left running"
