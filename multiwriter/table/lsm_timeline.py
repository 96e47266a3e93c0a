"""Hudi's archived timeline (table version 8): an LSM tree of Parquet files under
``.hoodie/timeline/history/``, read and written the way Hudi's JVM writers do.

Layout (one directory, all names fixed by Hudi):

* ``<minInstant>_<maxInstant>_<layer>.parquet``: a batch of archived instants, one
  ``HoodieLSMTimelineInstant`` record each (``instantTime``, ``completionTime``, ``action``,
  ``metadata`` = the completed file's bytes, ``plan`` = the plan's bytes, ``version``); the names
  carry the batch's first and last requested time; archival writes layer 0.
* ``manifest_<N>``: JSON ``{"files": [{"fileName": ..., "fileLen": ...}]}``, the files of snapshot N.
* ``_version_``: the latest snapshot number as text; when absent or unreadable, the highest
  ``manifest_<N>`` counts.

A Parquet file that no manifest lists is not part of the timeline (a write that crashed before
its manifest). Compaction of layer 0 into deeper layers is not done here; Hudi's archiver does it
when it runs, and files of any layer are read.
"""
from __future__ import annotations

import io
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import TableFormatError
from ..storage import Storage

VERSION_FILE = "_version_"
MANIFEST_PREFIX = "manifest_"
MANIFEST_RE = re.compile(r"^manifest_(\d+)\Z")
DATA_FILE_RE = re.compile(r"^(\d+)_(\d+)_(\d+)\.parquet\Z")
#: HoodieLSMTimelineInstant's record version written by Hudi 1.x
RECORD_VERSION = 1

#: HoodieLSMTimelineInstant as Parquet, typed as Hudi's Avro schema declares it: nullable
#: unions of null with string or bytes, and a required int version
SCHEMA = pa.schema([
    pa.field("instantTime", pa.string()),
    pa.field("completionTime", pa.string()),
    pa.field("action", pa.string()),
    pa.field("metadata", pa.binary()),
    pa.field("plan", pa.binary()),
    pa.field("version", pa.int32(), nullable=False),
])
AVRO_SCHEMA = {
    "type": "record",
    "name": "HoodieLSMTimelineInstant",
    "namespace": "org.apache.hudi.avro.model",
    "fields": [
        {"name": "instantTime", "type": ["null", "string"], "default": None},
        {"name": "completionTime", "type": ["null", "string"], "default": None},
        {"name": "action", "type": ["null", "string"], "default": None},
        {"name": "metadata", "type": ["null", "bytes"], "default": None},
        {"name": "plan", "type": ["null", "bytes"], "default": None},
        {"name": "version", "type": "int", "default": RECORD_VERSION},
    ],
}


@dataclass(frozen=True)
class LsmInstant:
    """One archived instant as Hudi records it."""

    instant_time: str
    completion_time: str | None
    action: str
    metadata: bytes | None = None
    plan: bytes | None = None


def data_file_name(first: str, last: str, layer: int = 0) -> str:
    if not (first.isdigit() and last.isdigit()):
        raise ValueError(f"instant times must be digits, got {first!r}, {last!r}")
    return f"{first}_{last}_{int(layer)}.parquet"


def is_lsm_file(name: str) -> bool:
    """A file name of the LSM layout (data, manifest or version file)."""
    return name == VERSION_FILE or bool(MANIFEST_RE.match(name) or DATA_FILE_RE.match(name))


# -- reading ---------------------------------------------------------------------------------


def latest_version(storage: Storage, history: str) -> int:
    """The latest snapshot number, -1 when the history has none."""
    try:
        text = storage.read_bytes(f"{history}/{VERSION_FILE}").decode().strip()
        if text.isdigit():
            return int(text)
    except FileNotFoundError:
        pass
    versions = [int(m.group(1)) for e in storage.list_dir(history, files_only=True)
                if (m := MANIFEST_RE.match(e.path.rsplit("/", 1)[-1]))]
    return max(versions, default=-1)


def manifest_files(storage: Storage, history: str, version: int | None = None) -> list[tuple[str, int]]:
    """(file name, length) of every data file of a snapshot (the latest by default)."""
    v = latest_version(storage, history) if version is None else version
    if v < 0:
        return []
    rel = f"{history}/{MANIFEST_PREFIX}{v}"
    try:
        doc = json.loads(storage.read_bytes(rel))
        return [(str(f["fileName"]), int(f["fileLen"])) for f in doc.get("files") or []]
    except (FileNotFoundError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise TableFormatError(
            f"{rel}: not a readable LSM timeline manifest ({e}); the archived timeline cannot be read: restore "
            f"it, or remove {history}/{VERSION_FILE} so that readers fall back to the previous manifest"
        ) from e


def read_file(storage: Storage, rel: str) -> list[LsmInstant]:
    try:
        table = pq.read_table(io.BytesIO(storage.read_bytes(rel)))
    except (OSError, pa.ArrowInvalid) as e:
        raise TableFormatError(f"{rel}: not a readable LSM timeline file ({e}); restore it from backup") from e
    missing = {"instantTime", "action"} - set(table.column_names)
    if missing:
        raise TableFormatError(f"{rel}: LSM timeline file without columns {sorted(missing)}")
    cols = {n: table.column(n).to_pylist() if n in table.column_names else [None] * table.num_rows
            for n in ("instantTime", "completionTime", "action", "metadata", "plan")}
    return [
        LsmInstant(t, c, a, m, p)
        for t, c, a, m, p in zip(cols["instantTime"], cols["completionTime"], cols["action"], cols["metadata"],
                                 cols["plan"], strict=True)
        if t is not None and a is not None
    ]


def read_instants(storage: Storage, history: str) -> list[LsmInstant]:
    """Every instant of the latest snapshot, by requested time (one record per instant and
    action; a record a crashed compaction left in two files is read once)."""
    seen: dict[tuple[str, str], LsmInstant] = {}
    for name, _ in manifest_files(storage, history):
        for r in read_file(storage, f"{history}/{name}"):
            seen.setdefault((r.instant_time, r.action), r)
    return sorted(seen.values(), key=lambda r: (r.instant_time, r.action))


# -- writing ---------------------------------------------------------------------------------


def encode(records: Iterable[LsmInstant]) -> bytes:
    rows = list(records)
    table = pa.table(
        {
            "instantTime": [r.instant_time for r in rows],
            "completionTime": [r.completion_time for r in rows],
            "action": [r.action for r in rows],
            "metadata": [r.metadata for r in rows],
            "plan": [r.plan for r in rows],
            "version": [RECORD_VERSION] * len(rows),
        },
        schema=SCHEMA.with_metadata({"parquet.avro.schema": json.dumps(AVRO_SCHEMA)}),
    )
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="gzip")
    return buf.getvalue()


def append(storage: Storage, history: str, records: list[LsmInstant]) -> str:
    """Add a layer-0 file holding ``records`` (by requested time) and a manifest listing it.

    As Hudi's writer: a file of the same name that the latest manifest lists means this batch
    was archived already (returns its name); one that no manifest lists is a crashed write and is
    replaced. The manifest is written before ``_version_``; a reader that finds the version file
    missing takes the highest manifest."""
    if not records:
        raise ValueError("no instants to archive")
    records = sorted(records, key=lambda r: r.instant_time)
    name = data_file_name(records[0].instant_time, records[-1].instant_time)
    version = latest_version(storage, history)
    listed = manifest_files(storage, history, version)
    if any(n == name for n, _ in listed):
        return name
    data = encode(records)
    storage.write_bytes(f"{history}/{name}", data)
    write_manifest(storage, history, [*listed, (name, len(data))], version)
    return name


def write_manifest(storage: Storage, history: str, files: list[tuple[str, int]], current: int) -> int:
    """Write manifest ``current + 1`` with ``files``, then point ``_version_`` at it."""
    new = 1 if current < 0 else current + 1
    doc = {"files": [{"fileName": n, "fileLen": int(size)} for n, size in files]}
    storage.write_bytes(f"{history}/{MANIFEST_PREFIX}{new}", json.dumps(doc).encode())
    storage.write_bytes(f"{history}/{VERSION_FILE}", str(new).encode())
    return new


__all__ = ["LsmInstant", "append", "is_lsm_file", "latest_version", "manifest_files", "read_instants"]
