"""Tables as Hudi's JVM writers leave them, built with our own codecs: a deltacommit whose log
file starts a bucket (no base file: Hudi's non-blocking Spark and Flink writers), deltacommits
whose requested and completion times interleave, a compaction plan a JVM writer scheduled."""
from __future__ import annotations

import json

import pyarrow as pa

import multiwriter as mw
from multiwriter.table import bucket, timeline as tlmod
from multiwriter.format import instant as inst
from multiwriter.table.compaction_plan import CompactionOperation, CompactionPlan, encode_plan
from multiwriter.format.layout import data_file_path
from multiwriter.format.log_file import LogFileName, encode_log_file, parse_log_file, with_log_meta_columns
from multiwriter.table.metadata import CommitMetadata, WriteStat
from multiwriter.format.schema import arrow_to_avro_json
from multiwriter.write.merge import ensure_partition_metadata
from tests.conftest import TRIPS_SCHEMA

DATE = "2024-01-01"
NUM_BUCKETS = 4  # the mor_table fixture's


def at(n: int) -> str:
    """The n-th instant time of a hand-made timeline (before any our writers issue)."""
    return f"20240101000000{n:03d}"


def keys_in_bucket(b: int, count: int) -> list[str]:
    """``count`` record keys (trips ids) that Hudi's bucket index puts in bucket ``b``."""
    out, i = [], 0
    while len(out) < count:
        if bucket.bucket_id(str(i), NUM_BUCKETS) == b:
            out.append(str(i))
        i += 1
    return out


def bucket_group(b: int) -> str:
    """The file id Hudi's non-blocking writers give bucket ``b`` (fixed, shared by all writers)."""
    return bucket.new_file_id(b, fixed=True)


def deltacommit(table: mw.Table, requested: str, completed: str | None, file_id: str, *,
                upserts: list[tuple[str, int, float]] = (), deletes: pa.Table | None = None,
                partition: str = DATE) -> str:
    """One JVM deltacommit writing one log file into ``file_id`` (rows ``(id, ts, value)``, and
    ``deletes`` as a delete block); completed at ``completed`` (None: left inflight). Returns the
    log file's name."""
    storage, config = table.storage, table.config
    ensure_partition_metadata(storage, partition, requested, 1)
    records = None
    if upserts:
        data = pa.table({
            "id": pa.array([u[0] for u in upserts], pa.string()),
            "date": pa.array([partition] * len(upserts), pa.string()),
            "ts": pa.array([u[1] for u in upserts], pa.int64()),
            "value": pa.array([u[2] for u in upserts], pa.float64()),
        })
        records = with_log_meta_columns(data, record_keys=data.column("id"), partition_path=partition,
                                        file_id=file_id, instant_time=requested)
    schema = json.loads(arrow_to_avro_json(TRIPS_SCHEMA, "trips_record"))
    name = LogFileName(file_id, requested, 1, "1-0-1").name
    rel = data_file_path(partition, name)
    storage.write_bytes(rel, encode_log_file(instant_time=requested, schema=schema, records=records, deletes=deletes))
    tlmod.create_requested(storage, config, requested, inst.DELTA_COMMIT)
    tlmod.create_inflight(storage, config, requested, inst.DELTA_COMMIT)
    if completed is not None:
        stat = WriteStat(file_id=file_id, path=rel, partition_path=partition, prev_commit=requested,
                         num_writes=len(upserts), log_version=1, log_files=(name,))
        meta = CommitMetadata({partition: [stat]}, {"schema": arrow_to_avro_json(TRIPS_SCHEMA, "trips")},
                              "UPSERT")
        tlmod.create_completed(storage, config, requested, completed, inst.DELTA_COMMIT, data=meta.to_bytes())
    return name


def jvm_compaction_plan(table: mw.Table, requested: str, file_id: str, logs: list[str],
                        partition: str = DATE) -> None:
    """``<requested>.compaction.requested`` as a JVM writer schedules it for a log-only slice:
    no base file, the slice keyed by its first log's deltacommit, no cleaner of ours named."""
    first = min(parse_log_file(n).instant_time for n in logs)
    op = CompactionOperation.for_slice(partition, file_id, first, None, [(n, 0) for n in logs])
    tlmod.create_requested(table.storage, table.config, requested, inst.COMPACTION,
                           encode_plan(CompactionPlan((op,), {})))
