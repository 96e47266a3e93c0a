"""Bootstrap (Hudi's FULL_RECORD mode, ``SparkBootstrapCommitActionExecutor.fullBootstrap``): a
Parquet dataset becomes the table's first write at ``HoodieTimeline.FULL_BOOTSTRAP_INSTANT_TS``;
then writers and the companion job go on as usual, our reader and hudi-rs agree with a model, and
the source files are never changed."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import multiwriter as mw
from multiwriter.errors import BootstrapModeError, BootstrapPendingError, BootstrapSourceError
from multiwriter.format.instant import FULL_BOOTSTRAP_TIME
from multiwriter.format.layout import parse_data_file
from multiwriter.format.log_file import parse_log_file
from tests.oracle import hudi_read, rows

ROOT = Path(__file__).resolve().parents[2]
DATES = ("2024-01-01", "2024-01-02")
FILES_PER_PARTITION = 2
ROWS_PER_FILE = 6


def make_source(root: Path, *, hive: bool, string_keys: bool) -> dict:
    """Write the source dataset; returns the model (key -> (value, date))."""
    model = {}
    n = 0
    for d in DATES:
        folder = root / (f"date={d}" if hive else d)
        folder.mkdir(parents=True, exist_ok=True)
        for f in range(FILES_PER_PARTITION):
            ids = list(range(n, n + ROWS_PER_FILE))
            n += ROWS_PER_FILE
            keys = [f"k{i:03d}" for i in ids] if string_keys else ids
            pq.write_table(pa.table({"id": keys, "ts": [1] * len(ids), "value": [float(i) for i in ids]}),
                           folder / f"part-{f}.parquet")
            model.update({k: (float(i), d) for k, i in zip(keys, ids, strict=True)})
    (root / "_SUCCESS").write_text("")
    return model


def hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def keyed(t: pa.Table) -> list[tuple]:
    """(key as text, value) rows: hudi-rs and our reader agree on values, keys compared as text."""
    return sorted(((str(k), v) for k, v in rows(t, ["id", "value"])), key=repr)


def check_against_model(path: str, model: dict) -> None:
    want = sorted(((str(k), v) for k, (v, _) in model.items()), key=repr)
    assert keyed(mw.Table.open(path).read()) == want
    assert keyed(hudi_read(path)) == want


def check_against_model_ours(path: str, model: dict) -> None:
    """Our reader only: hudi-rs reads no bootstrap index (a METADATA_ONLY table's skeleton rows)."""
    want = sorted(((str(k), v) for k, (v, _) in model.items()), key=repr)
    assert keyed(mw.Table.open(path).read()) == want


def upsert(path: str, lock, writer: str, keys: list, value: float, dates: dict) -> None:
    batch = pa.table({"id": keys, "ts": [2] * len(keys), "value": [value] * len(keys),
                      "date": [dates.get(k, DATES[0]) for k in keys]})
    mw.write(batch, path, mw.WriterConfig(writer_id=writer, lock=lock))


@pytest.mark.parametrize("hive,string_keys,table_type", [
    (True, False, "COPY_ON_WRITE"),
    (False, True, "MERGE_ON_READ"),
])
def test_bootstrap_then_two_writers_and_the_companion_job(tmp_path, hive, string_keys, table_type):
    src = tmp_path / "src"
    model = make_source(src, hive=hive, string_keys=string_keys)
    before = hashes(src)
    path = str(tmp_path / "t")
    lock = mw.InProcessLock()
    extra = {"num_buckets": 2} if table_type == "MERGE_ON_READ" else {}
    r = mw.bootstrap(str(src), path, name="t", record_key="id", partition_by=["date"], ordering_field="ts",
                     table_type=table_type, lock=lock, **extra)
    assert r.instant.requested_time == FULL_BOOTSTRAP_TIME and r.num_inserts == len(model)
    table = mw.Table.open(path)
    assert table.config.raw["hoodie.bootstrap.base.path"] == str(src)
    assert table.config.hive_style_partitioning is hive
    assert sorted(p.name for p in Path(path).iterdir() if not p.name.startswith(".")) == \
        sorted(f"date={d}" if hive else d for d in DATES)
    check_against_model(path, model)
    # two writers at once: overlapping updates and new keys of their own
    keys = list(model)
    dates = {k: d for k, (_, d) in model.items()}
    new = [f"n{i}" for i in range(3)] if string_keys else [1000 + i for i in range(3)]
    a = threading.Thread(target=upsert, args=(path, lock, "a", keys[:8], 7.0, dates))
    b = threading.Thread(target=upsert, args=(path, lock, "b", keys[8:12] + new, 8.0, dates))
    a.start(), b.start(), a.join(), b.join()
    model.update({k: (7.0, dates[k]) for k in keys[:8]})
    model.update({k: (8.0, dates.get(k, DATES[0])) for k in keys[8:12] + new})
    check_against_model(path, model)
    with mw.Cleaner(path, lock=lock, heartbeat_interval_s=1.0, retain_commits=1,
                    compaction=mw.CompactionConfig(delta_commits=1) if table_type == "MERGE_ON_READ" else None,
                    clustering=mw.ClusteringConfig(min_file_groups=2) if table_type == "COPY_ON_WRITE" else None) as c:
        report = c.run_once()
    if table_type == "MERGE_ON_READ":
        assert report.compaction_instants, "the companion job compacted the writers' log files"
    else:
        assert report.old_versions_deleted, "the companion job cleaned the versions the writers replaced"
    upsert(path, lock, "a", keys[:2], 9.0, dates)
    model.update({k: (9.0, dates[k]) for k in keys[:2]})
    check_against_model(path, model)
    assert hashes(src) == before, "the source files are never changed"


def test_bad_input_is_refused_before_anything_is_written(tmp_path):
    src = tmp_path / "src"
    make_source(src, hive=True, string_keys=False)
    path = tmp_path / "t"
    lock = mw.InProcessLock()

    def boot(source=src, **kw):
        args = dict(name="t", record_key="id", partition_by=["date"], lock=lock) | kw
        return mw.bootstrap(str(source), str(path), **args)

    with pytest.raises(BootstrapSourceError, match="does not exist"):
        boot(source=tmp_path / "nope")
    with pytest.raises(BootstrapSourceError, match="'uid'"):
        boot(record_key="uid")
    with pytest.raises(BootstrapSourceError, match="hive_style=False"):
        boot(hive_style=False)
    with pytest.raises(BootstrapModeError, match="METADATA_ONLY"):  # a bucket index takes no skeleton file groups
        boot(mode="METADATA_ONLY", table_type="MERGE_ON_READ", num_buckets=2)
    with pytest.raises(BootstrapModeError, match="METADATA_ONLY"):
        boot(options={"hoodie.bootstrap.mode.selector": "org.apache.hudi.client.bootstrap.selector.BootstrapRegexModeSelector",
                      "hoodie.bootstrap.mode.selector.regex": "date=2024-01-02"}, table_type="MERGE_ON_READ", num_buckets=2)
    with pytest.raises(mw.errors.ConfigError, match="BootstrapModeSelector"):
        boot(options={"hoodie.bootstrap.mode.selector": "com.example.MySelector"})
    odd = src / "date=2024-01-02" / "odd.parquet"
    pq.write_table(pa.table({"id": [1], "ts": ["x"], "value": [1.0]}), odd)
    with pytest.raises(BootstrapSourceError, match="odd.parquet") as e:
        boot()
    assert "retyped: ['ts']" in str(e.value)
    assert not path.exists(), "nothing was written"
    odd.unlink()
    # the regex selector giving every partition FULL_RECORD is accepted
    boot(options={"hoodie.bootstrap.mode.selector": "org.apache.hudi.client.bootstrap.selector.BootstrapRegexModeSelector",
                  "hoodie.bootstrap.mode.selector.regex.mode": "FULL_RECORD"})
    with pytest.raises(mw.errors.ConfigError, match="already has completed write"):
        boot()


# -- a bootstrap killed at each step ---------------------------------------------------------

KILL_POINTS = ["bootstrap-after-table", "after-requested", "after-inflight", "after-data-files", "before-complete"]
BOOT = """
import json, sys
import multiwriter as mw
a = json.loads(sys.argv[1])
mw.bootstrap(a["src"], a["path"], name="t", record_key="id", partition_by=["date"], ordering_field="ts",
             lock=mw.FileSystemLock(lease_s=2.0), heartbeat_interval_s=1.0, heartbeat_tolerable_misses=0)
"""


def spawn_bootstrap(src: Path, path: str, point: str) -> subprocess.Popen:
    env = dict(os.environ, MULTIWRITER_FAULTS=f"{point}=kill", PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-c", BOOT, json.dumps({"src": str(src), "path": path})], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def data_files(path: str) -> list[str]:
    return [str(p) for p in Path(path).rglob("*") if ".hoodie" not in p.parts
            and (parse_data_file(p.name) or parse_log_file(p.name))]


def test_a_killed_bootstrap_is_rolled_back_by_the_companion_job_and_run_again(tmp_path):
    src = tmp_path / "src"
    model = make_source(src, hive=True, string_keys=False)
    before = hashes(src)
    paths = {p: str(tmp_path / p) for p in KILL_POINTS}
    procs = {p: spawn_bootstrap(src, paths[p], p) for p in KILL_POINTS}
    for p, proc in procs.items():
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == -9, f"{p}: the bootstrap was killed there: {err[-2000:]}"
    lock = mw.FileSystemLock(lease_s=2.0)  # the lock the killed bootstrap held lapses in 2 s
    for p, path in paths.items():  # writers are refused until the bootstrap completes
        with pytest.raises(BootstrapPendingError) as e:
            upsert(path, lock, "w", [0], 1.0, {})
        assert e.value.instant == (None if p == "bootstrap-after-table" else FULL_BOOTSTRAP_TIME)
        assert "mw.bootstrap" in str(e.value)

    def clean(path: str) -> None:
        with mw.Cleaner(path, lock=lock, heartbeat_interval_s=1.0, clustering=None) as c:
            c.run_once()

    cleaners = [threading.Thread(target=clean, args=(path,)) for path in paths.values()]
    [t.start() for t in cleaners], [t.join() for t in cleaners]
    for p, path in paths.items():
        tl = mw.Table.open(path).timeline()
        assert tl.pending() == [], f"{p}: pending instants left: {tl.pending()}"
        assert data_files(path) == [], f"{p}: the failed bootstrap's files are gone"
        assert not list(Path(path, ".hoodie", ".heartbeat").glob("*")), p
        r = mw.bootstrap(str(src), path, name="t", record_key="id", partition_by=["date"], ordering_field="ts", lock=lock)
        assert r.instant.requested_time == FULL_BOOTSTRAP_TIME
        check_against_model(path, model)
        upsert(path, lock, "w", [0], 5.0, {0: DATES[0]})
        check_against_model(path, {**model, 0: (5.0, DATES[0])})
    assert hashes(src) == before, "the source files are never changed"


def test_the_command_line_bootstraps(tmp_path, capsys):
    from multiwriter.cli import main

    src = tmp_path / "src"
    model = make_source(src, hive=False, string_keys=True)
    path = str(tmp_path / "t")
    refused = main(["bootstrap", str(src), path, "--record-key", "id", "--partition-by", "date", "--file-lock",
                    "--table-type", "MERGE_ON_READ", "--num-buckets", "2", "--hoodie-conf",
                    "hoodie.bootstrap.mode.selector=org.apache.hudi.client.bootstrap.selector.MetadataOnlyBootstrapModeSelector"])
    assert refused == 2 and "METADATA_ONLY" in capsys.readouterr().err
    assert not Path(path).exists()
    meta = str(tmp_path / "m")
    assert main(["bootstrap", str(src), meta, "--record-key", "id", "--partition-by", "date", "--ordering-field", "ts",
                 "--file-lock", "--mode", "METADATA_ONLY"]) == 0
    assert "at instant 00000000000001" in capsys.readouterr().out
    check_against_model_ours(meta, model)
    assert main(["bootstrap", str(src), path, "--record-key", "id", "--partition-by", "date", "--ordering-field", "ts",
                 "--file-lock"]) == 0
    assert f"at instant {FULL_BOOTSTRAP_TIME}" in capsys.readouterr().out
    assert mw.Table.open(path).config.hive_style_partitioning is False
    check_against_model(path, model)
