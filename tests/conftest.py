"""Shared fixtures: one real ZooKeeper per test worker, one SparkSession per run (the files that use
it run on one worker), temp tables."""
from __future__ import annotations

import functools
import os
import re
import sys
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# the JVM options of every Spark the tests start, this process's and its children's
os.environ.setdefault("SPARK_CONF_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "spark_conf"))

from tests.oracle import FIXTURES

TRIPS_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string()),
        pa.field("date", pa.string()),
        pa.field("ts", pa.int64()),
        pa.field("value", pa.float64()),
    ]
)


@pytest.fixture(scope="session")
def zk_server():
    """A real ZooKeeper server on 127.0.0.1 for the whole session."""
    import multiwriter as mw

    with mw.LocalZooKeeper(port=0) as zk:
        yield zk


@pytest.fixture()
def zk_base() -> str:
    """A fresh ZooKeeper base path per test (a chroot-like namespace)."""
    return f"/mwtest-{uuid.uuid4().hex[:8]}"


@pytest.fixture()
def zk_lock(zk_server, zk_base):
    """A factory of real ZooKeeper lock providers sharing one base path (one per writer/cleaner),
    closed at teardown."""
    import multiwriter as mw

    made: list = []

    def make():
        made.append(mw.ZooKeeperLock(connect=zk_server.connect, base_path=zk_base))
        return made[-1]

    yield make
    for lock in made:
        lock.close()


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the whole test session (~7 s to start)."""
    from pyspark.sql import SparkSession

    s = (
        SparkSession.builder.master("local[2]")
        .appName("multiwriter-tests")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def standalone_cluster(tmp_path_factory):
    """One standalone Spark master and single-core worker on 127.0.0.1 for the session (started
    on first use: two JVMs, ~10 s), shared by the tests of the multi-process executor path; jobs
    run one at a time on its one core. Yields ``(master_url, env, work_dir)``: ``env`` is the
    environment of the cluster and of a job's driver, ``work_dir`` the worker's, where each
    application gets a directory named by its id."""
    from tests.write.test_standalone_cluster import cluster_env, start_standalone_cluster

    root = tmp_path_factory.mktemp("standalone")
    env = cluster_env(root)
    with start_standalone_cluster(root, env) as master_url:
        yield master_url, env, root / "work"


@pytest.fixture()
def table_path(tmp_path) -> str:
    return str(tmp_path / "trips")


@pytest.fixture()
def trips_table(table_path):
    import multiwriter as mw

    return mw.Table.create(
        table_path, name="trips", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"], ordering_field="ts"
    )


@pytest.fixture()
def mor_table(table_path):
    """A Merge-on-Read trips table with Hudi's bucket index (4 buckets per partition)."""
    import multiwriter as mw

    return mw.Table.create(
        table_path, name="trips", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"], ordering_field="ts",
        table_type="MERGE_ON_READ", num_buckets=4,
    )


def trips(ids, date="2024-01-01", ts=1, value=1.0) -> pa.Table:
    ids = list(ids)
    return pa.table(
        {
            "id": pa.array([str(i) for i in ids], pa.string()),
            "date": pa.array([date] * len(ids), pa.string()),
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "value": pa.array([float(value)] * len(ids), pa.float64()),
        }
    )


def wait_hanging(fault_dir, thread, point: str = "after-data-files", timeout_s: float = 30.0) -> bool:
    """Wait until a ``hang`` fault at ``point`` announces itself in ``fault_dir`` (or ``thread``
    ends, or the timeout passes); True when it hangs there."""
    hanging = fault_dir / f"{point}.hanging"
    for _ in range(int(timeout_s / 0.05)):
        if hanging.exists():
            break
        thread.join(0.05)
    return hanging.exists()


#: about how long each of the slowest files runs (seconds on 2 cores, notebooks and fault
#: matrices as `make test` samples them). `make test` hands whole files to its workers in
#: collection order (``--dist loadfile --no-loadscope-reorder``; the files that use Spark as one
#: unit, first: :func:`pytest_xdist_make_scheduler`): these go next, the longest first, so the
#: run does not end with one worker alone on a long file.
SLOW_FILES = {
    "tests/test_faults.py": 100, "tests/test_frozen_commit.py": 100, "tests/lock/test_storage_lock.py": 64,
    "tests/table/test_metadata_faults.py": 60, "tests/test_s3_requests.py": 50, "tests/chaos/test_chaos_small.py": 50,
    "tests/model/test_commit_protocol.py": 49, "tests/write/test_standalone_cluster.py": 48,
    "tests/test_concurrency.py": 45, "tests/cleaner/test_rollback.py": 29, "tests/table/test_metadata_rollback.py": 28,
    "tests/test_clock_skew.py": 28, "tests/test_status_cli.py": 26, "tests/test_notebooks.py": 26,
    "tests/test_gcs.py": 26, "tests/write/test_late_spark_attempt.py": 24, "tests/write/test_task_retry.py": 22,
    "tests/test_zookeeper_ensemble.py": 22, "tests/table/test_metadata_table.py": 21,
    "tests/cleaner/test_merge_on_read_failures.py": 20,
}


#: a function of a test file that takes a parameter named ``spark`` (the session fixture, or a
#: helper handed it): the file's tests use the SparkSession
_TAKES_SPARK = re.compile(r"def \w+\([^)]*\bspark\b")


@functools.lru_cache(maxsize=None)
def uses_spark(root: str, file: str) -> bool:
    """Whether a test file's tests use the session's SparkSession (those under tests/spark/ all do)."""
    if file.startswith("tests/spark/"):
        return True
    try:
        return bool(_TAKES_SPARK.search(Path(root, file).read_text()))
    except OSError:
        return False


def pytest_xdist_make_scheduler(config, log):
    """Whole files to each worker, as ``--dist loadfile``; but the files that use Spark go to one
    worker together, as one unit: the SparkSession then starts once in the run, not once per
    worker (a JVM's start and warm-up, ~40-60 s of CPU that the other worker waited for)."""
    if config.getoption("dist") != "loadfile":
        return None  # another mode asked for: xdist's own
    from xdist.scheduler import LoadScopeScheduling

    root = str(config.rootpath)

    class SparkFilesTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = nodeid.split("::", 1)[0]
            return "spark" if uses_spark(root, file) else file

    return SparkFilesTogether(config, log)


def pytest_collection_modifyitems(config, items):
    root = str(config.rootpath)

    def order(item) -> int:  # stable: files stay whole; the Spark files' unit first, the longest
        file = item.nodeid.split("::", 1)[0]
        return -1000 if uses_spark(root, file) else -SLOW_FILES.get(file, 0)

    items.sort(key=order)
    if not FIXTURES.exists():
        skip = pytest.mark.skip(reason=f"shared fixtures not found at {FIXTURES}")
        for item in items:
            if "needs_fixtures" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def s3_server():
    """A real S3 endpoint (moto's server) on 127.0.0.1 with a free port, started on first use
    (:class:`testbed.moto_s3.MotoS3`: the standard AWS variables point this process and its
    children at it). Yields a factory of fresh buckets: ``s3_server()`` -> ``"s3://<bucket>"``,
    with ``.client`` (boto3), ``.endpoint`` and ``.writes`` (the :class:`SerializedWrites` middleware)."""
    from testbed.moto_s3 import MotoS3, SerializedWrites

    with MotoS3(wrap=SerializedWrites) as s3:  # moto's conditional writes made atomic, as S3's
        def bucket(versioned: bool = False) -> str:
            return s3.bucket(versioned)

        bucket.client = s3.client
        bucket.endpoint = s3.endpoint
        bucket.writes = s3.app
        yield bucket


@pytest.fixture(scope="session")
def gcs_server():
    """A Google Cloud Storage endpoint (``gcp-storage-emulator`` on 127.0.0.1 behind
    :class:`testbed.gcs_emulator.Front`, which decides generation preconditions atomically as
    Cloud Storage does); ``STORAGE_EMULATOR_HOST`` points this process and its children at it.
    Yields the :class:`~testbed.gcs_emulator.GcsEmulator`: ``gcs_server.bucket()`` -> ``"gs://<bucket>"``."""
    from testbed.gcs_emulator import GcsEmulator

    with GcsEmulator() as gcs:
        yield gcs


def compact_slices(path: str) -> None:
    """One companion-job run that compacts every Merge-on-Read slice with a log (a compaction
    must happen: tests compare readers before and after it)."""
    import multiwriter as mw

    with mw.Cleaner(path, lock=mw.InProcessLock(), clustering=None, heartbeat_interval_s=1.0,
                    heartbeat_tolerable_misses=1, compaction=mw.CompactionConfig(delta_commits=1)) as cleaner:
        assert cleaner.run_once().compaction_instants, "a compaction ran"
