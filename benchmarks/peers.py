"""The peers users would pick instead, and the no-transaction limits, behind one small interface."""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

import multiwriter as mw

from .data import SCHEMA


class Multiwriter:
    def __init__(self, root: Path, executor: str = "driver", spark=None, lock=None, operation: str = "upsert",
                 schema: pa.Schema = SCHEMA, label: str = "", **table: Any) -> None:
        """``table``: more ``Table.create`` settings (``metadata=True``, a Merge-on-Read layout,
        ``populate_meta_fields=False``); ``label``: tells the tables of one executor apart."""
        self.path = str(root / f"mw-{executor}{label}")
        self.spark = spark
        self.cfg = mw.WriterConfig(writer_id=f"bench-{executor}", executor=executor, lock=lock or mw.InProcessLock(),
                                   driver_max_rows=10_000_000, operation=operation)
        mw.Table.create(self.path, name="bench", schema=schema, record_key="id", partition_by=["date"], ordering_field="ts",
                        **table)
        self.last = None

    def _data(self, t: pa.Table):
        return self.spark.createDataFrame(t) if self.cfg.executor == "spark" else t

    def load(self, t: pa.Table) -> None:
        self.last = mw.write(self._data(t), self.path, self.cfg)

    upsert = append = load

    def count(self) -> int:
        return mw.Table.open(self.path).read(columns=["id"]).num_rows

    def read(self) -> pa.Table:
        return mw.Table.open(self.path).read(columns=["id", "ts", "amount"])


class DeltaLake:
    """deltalake's append and merge. The merge's predicate names the partition column and the
    key. ``streamed_exec=None`` keeps deltalake's default (as the string-key sections always
    ran); the event sections pass ``False``, as issue 35 measured it: the source is then
    materialized first, so deltalake can prune the target's partitions by the source's dates."""

    def __init__(self, root: Path, streamed_exec: bool | None = None) -> None:
        self.path = str(root / "delta")
        self.merge_options = {} if streamed_exec is None else {"streamed_exec": streamed_exec}

    def load(self, t: pa.Table) -> None:
        from deltalake import write_deltalake

        write_deltalake(self.path, t, partition_by=["date"], mode="append")

    append = load

    def upsert(self, t: pa.Table) -> None:
        from deltalake import DeltaTable

        (DeltaTable(self.path).merge(t, predicate="s.id = t.id AND s.date = t.date", source_alias="s", target_alias="t",
                                     **self.merge_options)
         .when_matched_update_all().when_not_matched_insert_all().execute())

    def count(self) -> int:
        from deltalake import DeltaTable

        return DeltaTable(self.path).to_pyarrow_table(columns=["id"]).num_rows

    def read(self) -> pa.Table:
        from deltalake import DeltaTable

        return DeltaTable(self.path).to_pyarrow_table(columns=["id", "ts", "amount"])


class Iceberg:
    def __init__(self, root: Path) -> None:
        from pyiceberg.catalog.sql import SqlCatalog

        wh = root / "iceberg"
        wh.mkdir(parents=True, exist_ok=True)
        self.catalog = SqlCatalog("bench", uri=f"sqlite:///{wh}/catalog.db", warehouse=f"file://{wh}")
        self.catalog.create_namespace_if_not_exists("b")
        self.table = self.catalog.create_table("b.t", schema=SCHEMA)
        with self.table.update_spec() as spec:
            spec.add_identity("date")

    def load(self, t: pa.Table) -> None:
        self.table.append(t)

    append = load

    def upsert(self, t: pa.Table) -> None:
        self.table.upsert(t, join_cols=["id"])

    def count(self) -> int:
        return self.table.scan(selected_fields=("id",)).to_arrow().num_rows

    def read(self) -> pa.Table:
        return self.table.scan(selected_fields=("id", "ts", "amount")).to_arrow()


class PyArrowLimit:
    """Plain Parquet writes of the same rows: no transaction, no index (the physical limit)."""

    def __init__(self, root: Path) -> None:
        self.path = root / "pyarrow"
        self.n = 0

    def load(self, t: pa.Table) -> None:
        self.n += 1
        ds.write_dataset(t, self.path, format="parquet", partitioning=["date"], basename_template=f"b{self.n}-{{i}}.parquet",
                         existing_data_behavior="overwrite_or_ignore")

    append = load

    def read(self) -> pa.Table:
        return ds.dataset(self.path, format="parquet").to_table(columns=["id", "ts", "amount"])


class PyArrowHudiFilesLimit:
    """The Parquet files a Hudi insert writes, with pyarrow and nothing else: one file per
    partition with Hudi's five meta columns (built as the writer builds them), the writer's
    encoding settings, on two threads. No transaction, index, bloom filter or marker: what
    the files alone cost, the floor for any Hudi writer built on pyarrow. ``meta_values=False``:
    the files of a table with virtual keys, whose meta columns hold nulls."""

    def __init__(self, root: Path, meta_values: bool = True) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.path, self.n = root / ("pyarrow-hudi" if meta_values else "pyarrow-hudi-virtual"), 0
        self.meta_values = meta_values
        self.pool = ThreadPoolExecutor(2)

    def append(self, t: pa.Table) -> None:
        import base64

        import numpy as np

        from multiwriter.write.merge import plain_columns, sequence_numbers

        self.n += 1
        instant = f"20260101000000{self.n:03d}"
        unique = {"_hoodie_commit_seqno", "_hoodie_record_key", "id"}
        plain = unique | set(plain_columns(t, [c for c in t.column_names if c != "id"]))

        def constant(value: str, n: int) -> pa.Array:
            return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([value]), safe=False)

        def one(day: str) -> None:
            part = t.filter(pc.equal(t["date"], day))
            n, name = part.num_rows, f"{self.n}-{day}.parquet"
            meta = {"_hoodie_commit_time": constant(instant, n),
                    "_hoodie_commit_seqno": sequence_numbers(f"{instant}_0", n),
                    "_hoodie_record_key": part["id"], "_hoodie_partition_path": constant(f"date={day}", n),
                    "_hoodie_file_name": constant(name, n)}
            if not self.meta_values:
                meta = dict.fromkeys(meta, pa.nulls(n, pa.string()))
            full = pa.table({**meta, **{c: part[c] for c in part.column_names}})
            stored = pa.schema([pa.field(f.name, pa.string()) if pa.types.is_dictionary(f.type) else f for f in full.schema])
            (self.path / day).mkdir(parents=True, exist_ok=True)
            with pq.ParquetWriter(self.path / day / name, full.schema, compression="snappy", store_schema=False,
                                  use_dictionary=[c for c in full.column_names if c not in plain],
                                  write_statistics=[c for c in full.column_names if c not in unique - {"id"}]) as w:
                w.write_table(full)
                w.add_key_value_metadata({b"ARROW:schema": base64.b64encode(stored.serialize().to_pybytes())})

        list(self.pool.map(one, pc.unique(t["date"]).to_pylist()))

    load = append

    def read(self) -> pa.Table:
        return ds.dataset(self.path, format="parquet").to_table(columns=["id", "ts", "amount"])


class SparkParquetLimit:
    """Spark's own Parquet write of the same Arrow batch: the cost of going through Spark."""

    def __init__(self, root: Path, spark) -> None:
        self.path, self.spark, self.n = root / "spark-parquet", spark, 0

    def append(self, t: pa.Table) -> None:
        self.n += 1
        self.spark.createDataFrame(t).write.parquet(str(self.path / f"b{self.n}"))

    load = append

    def read(self) -> pa.Table:
        return ds.dataset(self.path, format="parquet", exclude_invalid_files=True).to_table(columns=["id", "ts", "amount"])


class NaiveCopyOnWrite:
    """A naive copy-on-write upsert with pyarrow: rewrite every touched partition in full."""

    def __init__(self, root: Path) -> None:
        self.path = root / "naive"

    def load(self, t: pa.Table) -> None:
        for d in pc.unique(t["date"]).to_pylist():
            part = t.filter(pc.equal(t["date"], d))
            (self.path / d).mkdir(parents=True, exist_ok=True)
            pq.write_table(part, self.path / d / "data.parquet")

    def upsert(self, t: pa.Table) -> None:
        for d in pc.unique(t["date"]).to_pylist():
            new = t.filter(pc.equal(t["date"], d))
            f = self.path / d / "data.parquet"
            if f.exists():
                old = pq.read_table(f)
                old = old.filter(pc.invert(pc.is_in(old["id"], value_set=new["id"])))
                new = pa.concat_tables([old, new])
            f.parent.mkdir(parents=True, exist_ok=True)
            tmp = f.with_suffix(".tmp")
            pq.write_table(new, tmp)
            os.replace(tmp, f)

    def read(self) -> pa.Table:
        return pa.concat_tables([pq.read_table(f, columns=["id", "ts", "amount"]) for f in sorted(self.path.glob("*/data.parquet"))])


def reset(root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
