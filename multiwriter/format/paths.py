"""The one rule for paths built from a table's own files.

Plans, manifests, write statistics and ``hoodie.properties`` are written by anyone who can write
the table's ``.hoodie/`` folder, while the companion job that reads them often runs with wider
rights. So every value from those files that becomes part of a path passes here first: an
instant time is 14 or 17 digits (Hudi's two formats; digits only, so it can name no other
directory), a partition path is a run of plain directory names, a data file is a base or log
file name, a history file is a plain name, and the timeline and history folders stay inside
``.hoodie``. Anything else raises :class:`~multiwriter.errors.UnsafePathError` naming the file the
value came from. :func:`multiwriter.storage.safe_relative` is the last line under this one: no
``..`` reaches a file system, and local listings and deletes do not follow symbolic links out.
"""
from __future__ import annotations

import logging
import posixpath
import re

from ..errors import InvalidRecordError, UnsafePathError
from ..storage import safe_relative
from . import layout
from .log_file import parse_log_file

log = logging.getLogger(__name__)

INSTANT_TIME_RE = layout.INSTANT_TIME_RE
#: the longest file or directory name a file system takes (``NAME_MAX``); a longer one is an
#: ``OSError`` at the first ``stat``, so it is refused as a value first
MAX_NAME_BYTES = layout.MAX_SEGMENT_BYTES
_CONTROL = re.compile(r"[\\\x00-\x1f\x7f]")


def _refuse(what: str, value: object, problem: str, source: str) -> UnsafePathError:
    text = str(value)[:200]
    return UnsafePathError(
        f"{source}: {what} {text!r} {problem}; it would lead outside the table, so nothing was read, written or "
        "deleted through it. Inspect that file (someone who can write the table's .hoodie folder wrote it)",
        path=text,
        source=source,
    )


def instant_time(t: object, *, source: str) -> str:
    """``t`` when it is an instant time (digits only), else :class:`UnsafePathError`."""
    if not isinstance(t, str) or not INSTANT_TIME_RE.match(t):
        raise _refuse("instant time", t, "is not a 14- or 17-digit instant time", source)
    return t


def partition(p: object, *, source: str) -> str:
    """A partition path of plain directory names ('' for a non-partitioned table): no ``..``,
    no absolute path, no hidden directory (``.hoodie``), no NUL, backslash or control character."""
    if not isinstance(p, str):
        raise _refuse("partition path", p, "is not a string", source)
    if _too_long(p):
        raise _refuse("partition path", p, f"has a directory name longer than {MAX_NAME_BYTES} bytes", source)
    try:
        safe_relative(p, source=source)
        if p and (_CONTROL.search(p) or not layout.check_relative(p)):
            raise InvalidRecordError(p)
    except (InvalidRecordError, UnsafePathError):
        raise _refuse("partition path", p, "is not a run of plain directory names", source) from None
    return p


def _too_long(rel: str) -> bool:
    return len(rel) > MAX_NAME_BYTES // 4 and any(len(s.encode("utf-8")) > MAX_NAME_BYTES for s in rel.split("/"))


def is_data_file_name(name: str) -> bool:
    """A base file's or a log file's name (and nothing else: no separator, no ``..``, no name
    longer than a file system takes)."""
    return ((layout.parse_data_file(name) is not None or parse_log_file(name) is not None)
            and not _too_long(name))


def file_name(name: object, *, source: str, what: str = "file name") -> str:
    """:func:`plain_name`, and no longer than a file system takes (:data:`MAX_NAME_BYTES`)."""
    plain_name(name, source=source, what=what)
    if _too_long(str(name)):
        raise _refuse(what, name, f"is longer than {MAX_NAME_BYTES} bytes, more than a file system takes", source)
    return str(name)


def data_file(rel: object, *, source: str) -> str:
    """A data file's path relative to the table root, as write statistics record it
    (``<partition>/<base or log file name>``)."""
    if not isinstance(rel, str):
        raise _refuse("data file path", rel, "is not a string", source)
    part, _, name = rel.rpartition("/")
    if _too_long(name):
        raise _refuse("data file path", rel, f"names a file longer than {MAX_NAME_BYTES} bytes", source)
    if not is_data_file_name(name):
        raise _refuse("data file path", rel, "does not name a base or log file", source)
    try:
        partition(part, source=source)
    except UnsafePathError:
        raise _refuse("data file path", rel, "is not in a partition of plain directory names", source) from None
    return rel


def plain_name(name: object, *, source: str, what: str = "file name") -> str:
    """One file name inside a folder the caller chose: no separator, not ``.`` or ``..``."""
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or _CONTROL.search(name):
        raise _refuse(what, name, "is not a plain file name", source)
    return name


def hoodie_subdir(key: str, value: str, *, source: str) -> str:
    """A folder a table property names under ``.hoodie`` (``hoodie.timeline.path``,
    ``hoodie.timeline.history.path``): relative plain names, staying inside once normalised."""
    segs = value.split("/")
    if (not value or any(s in ("", ".", "..") for s in segs) or _CONTROL.search(value)
            or posixpath.normpath(value) != value):
        raise _refuse(key, value, "must be a relative folder inside .hoodie (plain names, no '..')", source)
    safe_relative(value, source=source)
    return value


__all__ = ["INSTANT_TIME_RE", "MAX_NAME_BYTES", "data_file", "file_name", "hoodie_subdir", "instant_time",
           "is_data_file_name", "partition", "plain_name"]
