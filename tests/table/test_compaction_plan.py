"""Compaction plans (``<T>.compaction.requested``): the plans Hudi on Spark wrote decode to slices
that exist on disk, and what we encode reads back under Hudi's own embedded schema."""
from __future__ import annotations

import io
import shutil
import zipfile
from pathlib import Path
from typing import Any

import fastavro
import pytest

from multiwriter.errors import TableFormatError
from multiwriter.table import compaction_plan as cp
from multiwriter.table import metadata
from tests.oracle import FIXTURES

FIXTURE = "mor_v8_trips_8i3u1d"
DATA_PLAN = ".hoodie/timeline/20251220210129235.compaction.requested"
MDT_PLAN = ".hoodie/metadata/.hoodie/timeline/20251220210130942.compaction.requested"
FID = "6e1d5cc4-c487-487d-abbe-fe9b30b1c0cc-0"
BASE = f"{FID}_2-986-2794_20251220210108078.parquet"
LOG1 = f".{FID}_20251220210127080.log.1_0-1072-3078"
LOG2 = f".{FID}_20251220210128625.log.1_0-1097-3150"
MB = 1024 * 1024


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> Path:
    """The unzipped fixture table (read only)."""
    dest = tmp_path_factory.mktemp("mor")
    with zipfile.ZipFile(FIXTURES / f"{FIXTURE}.zip") as zf:
        zf.extractall(dest)
    shutil.rmtree(dest / "__MACOSX", ignore_errors=True)
    return dest / "v8_trips_8i3u1d"


def read_container(data: bytes, reader_schema: Any = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(writer schema, records) of an Avro container, read by fastavro alone."""
    r = fastavro.reader(io.BytesIO(data), reader_schema=reader_schema)
    return r.writer_schema, list(r)


def hudi_schema(table: Path) -> dict[str, Any]:
    """The writer schema Hudi embedded in the data table's plan."""
    return read_container((table / DATA_PLAN).read_bytes())[0]


def plain(schema: Any) -> Any:
    """A schema without documentation and Java-only properties, ``{"type": t}`` written as ``t``."""
    if isinstance(schema, list):
        return [plain(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: plain(v) for k, v in schema.items() if k not in ("doc", "avro.java.string")}
    return out["type"] if out.keys() == {"type"} else out


def sample_plan() -> cp.CompactionPlan:
    return cp.CompactionPlan(
        operations=(
            cp.CompactionOperation.for_slice(
                "city=chennai", FID, "20251220210108078", (BASE, 3 * MB + 5), [(LOG1, 1000), (LOG2, 1117)]
            ),
            cp.CompactionOperation.for_slice(
                "stadt=Zürich/日付=2025-01-01", "f2-0", "20250101000000001", None,
                [(".f2-0_20250101000000001.log.1_0-1-1", 2 * MB)],
            ),
        ),
        extra_metadata={"_hoodie.spark.sql.writes.prepped": "true", "schlüssel": "wert ✓"},
    )


# -- what Hudi on Spark wrote --------------------------------------------------------------


@pytest.mark.needs_fixtures
@pytest.mark.parametrize("plan_path", [DATA_PLAN, MDT_PLAN])
def test_fixture_plans_name_files_that_exist_with_the_metrics_hudi_computed(table, plan_path):
    root = table if plan_path == DATA_PLAN else table / ".hoodie" / "metadata"
    plan = cp.decode_plan((table / plan_path).read_bytes(), source=plan_path)
    assert plan.version == 2 and plan.operations
    for op in plan.operations:
        part = root / op.partition_path
        assert op.delta_file_names
        logs = [part / n for n in op.delta_file_names]
        assert all(p.is_file() for p in logs), op
        base = None
        if op.data_file_name is not None:
            assert (part / op.data_file_name).is_file(), op
            assert op.data_file_name.startswith(f"{op.file_id}_")
            assert op.data_file_name.rsplit("_", 1)[1].split(".")[0] == op.base_instant_time
            base = (op.data_file_name, (part / op.data_file_name).stat().st_size)
        # the metrics follow from the sizes of the files on disk (log files are never rewritten)
        again = cp.CompactionOperation.for_slice(
            op.partition_path, op.file_id, op.base_instant_time, base,
            [(p.name, p.stat().st_size) for p in logs],
        )
        assert again == op


@pytest.mark.needs_fixtures
def test_fixture_data_plan_decodes_to_the_known_slices(table):
    plan = cp.decode_plan((table / DATA_PLAN).read_bytes(), source=DATA_PLAN)
    assert plan.extra_metadata == {"_hoodie.spark.sql.writes.prepped": "true"}
    assert {(op.partition_path, op.file_id) for op in plan.operations} == {
        ("city=chennai", FID),
        ("city=san_francisco", "036ded81-9ed4-479f-bcea-7145dfa0079b-0"),
        ("city=sao_paulo", "8aa68f7e-afd6-4c94-b86c-8a886552e08d-0"),
    }
    chennai = next(op for op in plan.operations if op.file_id == FID)
    assert chennai.data_file_name == BASE
    assert chennai.delta_file_names == (LOG1, LOG2)
    assert chennai.metrics[cp.TOTAL_LOG_FILES] == 2.0
    assert chennai.metrics[cp.TOTAL_LOG_FILES_SIZE] == 2117.0


@pytest.mark.needs_fixtures
def test_our_schema_is_hudis_schema(table):
    assert plain(cp.PLAN_SCHEMA) == plain(hudi_schema(table))


@pytest.mark.needs_fixtures
@pytest.mark.parametrize("plan_path", [DATA_PLAN, MDT_PLAN])
def test_re_encoded_fixture_plans_read_as_hudis_records(table, plan_path):
    """Hudi's record and ours, both read by fastavro under Hudi's schema, are equal."""
    data = (table / plan_path).read_bytes()
    schema, (theirs,) = read_container(data)
    ours = cp.encode_plan(cp.decode_plan(data, source=plan_path))
    _, (mine,) = read_container(ours, reader_schema=schema)
    assert mine == theirs
    assert list(mine["operations"][0]["metrics"]) == list(theirs["operations"][0]["metrics"])


# -- what we write ----------------------------------------------------------------------------


@pytest.mark.needs_fixtures
def test_encoded_plan_reads_under_hudis_schema(table):
    plan = sample_plan()
    _, (rec,) = read_container(cp.encode_plan(plan), reader_schema=hudi_schema(table))
    assert rec["version"] == 2
    assert rec["extraMetadata"] == plan.extra_metadata
    assert rec["strategy"] is None and rec["preserveHoodieMetadata"] is False
    assert rec["missingSchedulePartitions"] == []
    first, second = rec["operations"]
    assert first == {
        "baseInstantTime": "20251220210108078",
        "deltaFilePaths": [LOG1, LOG2],
        "dataFilePath": BASE,
        "fileId": FID,
        "partitionPath": "city=chennai",
        "metrics": {
            "TOTAL_LOG_FILES": 2.0, "TOTAL_IO_MB": 6.0, "TOTAL_IO_READ_MB": 3.0,
            "TOTAL_LOG_FILES_SIZE": 2117.0, "TOTAL_IO_WRITE_MB": 3.0,
        },
        "bootstrapFilePath": None,
    }
    assert second["partitionPath"] == "stadt=Zürich/日付=2025-01-01"
    assert second["dataFilePath"] is None
    assert second["metrics"]["TOTAL_IO_WRITE_MB"] == 120.0


def test_round_trip():
    plan = sample_plan()
    assert cp.decode_plan(cp.encode_plan(plan), source="p") == plan


def test_plan_without_base_file_and_empty_plan_round_trip():
    op = cp.CompactionOperation(
        "", "g-0", "20250101000000001", None, (".g-0_20250101000000001.log.1_0-1-1",), {"TOTAL_LOG_FILES": 1.0}
    )
    for plan in (cp.CompactionPlan((op,), {}), cp.CompactionPlan((), {})):
        back = cp.decode_plan(cp.encode_plan(plan), source="p")
        assert back == plan
    assert back.operations == () and back.extra_metadata == {}


def test_encoding_is_what_fastavro_writes_bar_the_sync_marker():
    """Whichever encoder runs, the bytes are fastavro's for the same record."""
    plan = sample_plan()
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(cp.PLAN_SCHEMA, named_schemas={}), [plan.to_avro()])
    ours = cp.encode_plan(plan)
    assert len(ours) == len(buf.getvalue())
    assert read_container(ours) == read_container(buf.getvalue())


def test_version_1_plans_hold_paths_and_decode_to_names():
    rec = sample_plan().to_avro()
    rec["version"] = 1
    for op in rec["operations"]:
        prefix = f"s3a://bucket/t/{op['partitionPath']}/"
        op["deltaFilePaths"] = [prefix + n for n in op["deltaFilePaths"]]
        if op["dataFilePath"]:
            op["dataFilePath"] = prefix + op["dataFilePath"]
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(cp.PLAN_SCHEMA, named_schemas={}), [rec])
    assert cp.decode_plan(buf.getvalue(), source="p") == sample_plan()


# -- metrics ----------------------------------------------------------------------------------


def test_metrics_round_down_to_whole_mebibytes():
    m = cp.compaction_metrics(MB - 1, [MB // 2, MB // 2 + 1, -1])
    assert m == {
        "TOTAL_LOG_FILES": 3.0, "TOTAL_IO_MB": 2.0, "TOTAL_IO_READ_MB": 2.0,
        "TOTAL_LOG_FILES_SIZE": float(MB + 1), "TOTAL_IO_WRITE_MB": 0.0,
    }
    assert cp.compaction_metrics(None, [10], max_base_file_size=64 * MB)["TOTAL_IO_WRITE_MB"] == 64.0
    assert cp.compaction_metrics(None, [])["TOTAL_IO_MB"] == 120.0


# -- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize("data", [b"", b"garbage, not avro", b"Obj\x01\x00\x00\x00"])
def test_garbage_is_a_table_format_error_naming_the_file(data):
    with pytest.raises(TableFormatError, match="20250101000000001.compaction.requested"):
        cp.decode_plan(data, source="20250101000000001.compaction.requested")


def test_truncated_plan_is_a_table_format_error():
    data = cp.encode_plan(sample_plan())
    with pytest.raises(TableFormatError, match="x.compaction.requested"):
        cp.decode_plan(data[: len(data) - 40], source="x.compaction.requested")


def test_another_record_is_not_a_plan():
    data = metadata.encode("rollback_plan", {"instantToRollback": None, "version": 1})
    with pytest.raises(TableFormatError, match="not a compaction plan"):
        cp.decode_plan(data, source="x.compaction.requested")


def test_only_a_skeleton_base_file_names_a_bootstrap_file():
    rec = sample_plan().to_avro()
    rec["operations"][0]["bootstrapFilePath"] = "s3a://b/src/part-0.parquet"
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(cp.PLAN_SCHEMA, named_schemas={}), [rec])
    with pytest.raises(TableFormatError, match="skeleton base file"):
        cp.decode_plan(buf.getvalue(), source="x.compaction.requested")
    op = rec["operations"][0]
    op["baseInstantTime"] = "00000000000001"
    op["dataFilePath"] = op["dataFilePath"].replace(op["dataFilePath"].rsplit("_", 1)[1], "00000000000001.parquet")
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(cp.PLAN_SCHEMA, named_schemas={}), [rec])
    plan = cp.decode_plan(buf.getvalue(), source="x.compaction.requested")
    assert plan.operations[0].bootstrap_file_path == "s3a://b/src/part-0.parquet"
    assert cp.decode_plan(cp.encode_plan(plan), source="again").operations[0].bootstrap_file_path == op["bootstrapFilePath"]


def test_foreign_file_in_a_plan_file_is_a_table_format_error():
    rec = sample_plan().to_avro()
    rec["operations"][0]["deltaFilePaths"] = [".other-0_20250101000000001.log.1_0-1-1"]
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(cp.PLAN_SCHEMA, named_schemas={}), [rec])
    with pytest.raises(TableFormatError, match="not a log file name"):
        cp.decode_plan(buf.getvalue(), source="x.compaction.requested")


@pytest.mark.parametrize("kwargs", [
    {"data_file_name": "city=a/" + BASE},  # a path, not a name
    {"data_file_name": "other-0_1-2-3_20251220210108078.parquet"},
    {"delta_file_names": (LOG1.replace(FID, "other-0"),)},
    {"delta_file_names": ("not-a-log",)},
    {"data_file_name": None, "delta_file_names": ()},
    {"base_instant_time": ""},
])
def test_invalid_operations_are_refused(kwargs):
    args = {
        "partition_path": "city=chennai", "file_id": FID, "base_instant_time": "20251220210108078",
        "data_file_name": BASE, "delta_file_names": (LOG1,), "metrics": {},
    }
    with pytest.raises(ValueError):
        cp.CompactionOperation(**{**args, **kwargs})


def test_a_file_group_planned_twice_is_refused():
    op = sample_plan().operations[0]
    with pytest.raises(ValueError, match="twice"):
        cp.CompactionPlan((op, op), {})
    with pytest.raises(ValueError, match="version"):
        cp.CompactionPlan((op,), {}, version=1)
