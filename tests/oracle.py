"""hudi-rs (the ``hudi`` package) as an independent reader, and small table helpers for tests."""
from __future__ import annotations

import os
import shutil
import zipfile
from pathlib import Path

import pyarrow as pa

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
FIXTURES = SHARED / "fixtures" / "hudi-spark-written"
DATA_COLUMNS_SKIP = {"_hoodie_commit_seqno", "_hoodie_file_name"}


def hudi_read(path: str, as_of: str | None = None, *, read_optimized: bool = False,
              storage_options: dict[str, str] | None = None) -> pa.Table:
    from hudi import HudiReadOptions, HudiTableBuilder

    builder = HudiTableBuilder.from_base_uri(str(path))
    if storage_options:
        builder = builder.with_storage_options(storage_options)
    if read_optimized:
        builder = builder.with_hudi_option("hoodie.read.use.read_optimized.mode", "true")
    ht = builder.build()
    opts = HudiReadOptions().with_as_of_timestamp(as_of) if as_of else None
    batches = ht.read(opts) if opts else ht.read()
    if not batches:
        return pa.table({})
    return pa.Table.from_batches(batches)


def s3_storage_options(path: str) -> dict[str, str] | None:
    """hudi-rs's storage options for an ``s3://`` table from the standard AWS variables (an
    S3-compatible server such as moto's); None for other tables."""
    if not str(path).startswith("s3://"):
        return None
    names = {"AWS_ENDPOINT_URL": "aws_endpoint_url", "AWS_ACCESS_KEY_ID": "aws_access_key_id",
             "AWS_SECRET_ACCESS_KEY": "aws_secret_access_key", "AWS_REGION": "aws_region", "AWS_ALLOW_HTTP": "aws_allow_http"}
    return {opt: os.environ[var] for var, opt in names.items() if var in os.environ}


def rows(t: pa.Table, columns: list[str]) -> list[tuple]:
    """Sorted row tuples of some columns, for order-insensitive comparison."""
    if t.num_rows == 0:
        return []
    return sorted(zip(*[t.column(c).to_pylist() for c in columns], strict=True), key=repr)


def unzip_fixture(name: str, dest: Path, kind: str = "cow") -> Path:
    """Copy a Spark-written fixture table (``kind``: cow or mor) into ``dest``; its root."""
    z = FIXTURES / f"{kind}_{name}.zip"
    with zipfile.ZipFile(z) as zf:
        zf.extractall(dest)
    shutil.rmtree(dest / "__MACOSX", ignore_errors=True)
    return dest / name
