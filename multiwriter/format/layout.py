"""Where things live in a table: partition paths (validated), data file names, markers,
heartbeats. Every path is built here from validated parts, so no value can place a file outside
the table root or inside ``.hoodie``.
"""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..errors import InvalidRecordError, UnsafePathError

HOODIE = ".hoodie"
TEMP_DIR = f"{HOODIE}/.temp"
HEARTBEAT_DIR = f"{HOODIE}/.heartbeat"
#: writers' claims on file groups they lost a race on (``multiwriter.write.claims``)
CLAIMS_DIR = f"{TEMP_DIR}/claims"
PARTITION_METADATA = ".hoodie_partition_metadata"
DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
MAX_SEGMENT_BYTES = 255

_FILE_RE = re.compile(r"^(?P<fid>[^_/]+)_(?P<token>[^_/]+)_(?P<t>\d{14}|\d{17})\.parquet\Z")
#: Hudi's instant times: 17 digits (``yyyyMMddHHmmssSSS``), 14 in tables of older releases;
#: digits only, so a directory named by one cannot be another directory
INSTANT_TIME_RE = re.compile(r"^(?:[0-9]{17}|[0-9]{14})\Z")
_FORBIDDEN = re.compile(r"[/\\\x00-\x1f\x7f]")


@dataclass(frozen=True)
class DataFileName:
    file_id: str
    write_token: str
    instant_time: str

    @property
    def name(self) -> str:
        return f"{self.file_id}_{self.write_token}_{self.instant_time}.parquet"


@lru_cache(maxsize=1 << 16)
def parse_data_file(name: str) -> DataFileName | None:
    """Parse ``<fileId>_<writeToken>_<T>.parquet``; None for any other file. Remembered: every
    listing of a partition parses its file names again, a writer's once per batch."""
    m = _FILE_RE.match(name)
    return DataFileName(m.group("fid"), m.group("token"), m.group("t")) if m else None


def new_file_id() -> str:
    return f"{uuid.uuid4()}-0"


def write_token(task: int = 0, stage: int = 0, attempt: int = 0) -> str:
    return f"{task}-{stage}-{attempt}"


def task_write_token(tc: Any) -> str:
    """Hudi's write token of a Spark task attempt (``<partition>-<stage>-<taskAttemptId>``), from
    its TaskContext; outside a Spark task (None), the first attempt's."""
    return write_token(tc.partitionId(), tc.stageId(), tc.taskAttemptId()) if tc is not None else write_token()


def validate_partition_value(field: str, value: str) -> str:
    """Reject a partition value that could escape its directory; return it unchanged otherwise."""
    problem = None
    if value in (".", ".."):
        problem = "is a relative path component"
    elif value.startswith("."):
        problem = "starts with '.' (hidden and reserved directories such as .hoodie)"
    elif _FORBIDDEN.search(value):
        problem = "contains '/', '\\', NUL or a control character"
    elif len(value.encode("utf-8")) > MAX_SEGMENT_BYTES - len(field) - 1:
        problem = f"is longer than {MAX_SEGMENT_BYTES} bytes as a directory name"
    if problem:
        raise InvalidRecordError(
            f"partition value {value[:80]!r} of column {field!r} {problem}; "
            "clean the value before writing (nothing was written)"
        )
    return value


def partition_path(fields: tuple[str, ...], values: tuple[str | None, ...], hive_style: bool) -> str:
    """The relative partition path of one record; '' for a non-partitioned table."""
    parts = []
    for f, v in zip(fields, values, strict=True):
        v = DEFAULT_PARTITION if v is None or v == "" else validate_partition_value(f, v)
        parts.append(f"{f}={v}" if hive_style else v)
    return "/".join(parts)


def check_relative(rel: str) -> str:
    """Assert that an already-built relative path stays inside the table and out of .hoodie."""
    segs = rel.split("/") if rel else []
    if any(s in ("", ".", "..") or s.startswith(".") or "\x00" in s or "\\" in s for s in segs):
        raise InvalidRecordError(f"unsafe partition path {rel!r}")
    return rel


def data_file_path(partition: str, file_name: str) -> str:
    return f"{partition}/{file_name}" if partition else file_name


def checked_time(instant_time: str) -> str:
    """``instant_time`` when it is one (see :mod:`.paths`), else :class:`UnsafePathError`: the
    marker and heartbeat paths below delete whole directories named by it."""
    if not isinstance(instant_time, str) or not INSTANT_TIME_RE.match(instant_time):
        raise UnsafePathError(f"{str(instant_time)[:200]!r} is not an instant time; no marker or heartbeat path is "
                              "built from it", path=str(instant_time))
    return instant_time


#: a writer id as a file name: the characters ``WriterConfig`` admits, never ``.`` or ``..``
_WRITER_RE = re.compile(r"^(?!\.{1,2}\Z)[A-Za-z0-9_.-]{1,128}\Z")


def claim_path(writer_id: str) -> str:
    """``.hoodie/.temp/claims/<writer>.json``; :class:`UnsafePathError` for anything but a writer id."""
    if not isinstance(writer_id, str) or not _WRITER_RE.match(writer_id):
        raise UnsafePathError(f"{str(writer_id)[:200]!r} is not a writer id; no claim path is built from it",
                              path=str(writer_id))
    return f"{CLAIMS_DIR}/{writer_id}.json"


def marker_dir(instant_time: str) -> str:
    return f"{TEMP_DIR}/{checked_time(instant_time)}"


def marker_path(instant_time: str, partition: str, file_name: str) -> str:
    """Hudi's direct marker: ``.hoodie/.temp/<T>/<partition>/<file>.marker.CREATE``."""
    return f"{marker_dir(instant_time)}/{data_file_path(partition, file_name)}.marker.CREATE"


def marker_to_data_path(instant_time: str, marker_rel: str) -> str | None:
    prefix = marker_dir(instant_time) + "/"
    if not marker_rel.startswith(prefix) or not marker_rel.endswith(".marker.CREATE"):
        return None
    return marker_rel[len(prefix) : -len(".marker.CREATE")]


def heartbeat_path(instant_time: str) -> str:
    return f"{HEARTBEAT_DIR}/{checked_time(instant_time)}"


def partition_metadata_bytes(commit_time: str, depth: int) -> bytes:
    return f"#partition metadata\ncommitTime={commit_time}\npartitionDepth={depth}\n".encode()
