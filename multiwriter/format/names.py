"""Which table and column names a table may have, refused by name.

A partition column's name becomes a directory name on hive-style tables (``<column>=<value>``),
so it must be one plain directory name that cannot be ``.hoodie`` or a relative step: no ``/``,
``\\``, ``=``, leading ``.``, NUL or control character. Every column name (and the table name)
ends up in Avro schemas, ``hoodie.properties`` lines and log messages, where a newline or NUL
would forge a line. The same rule runs at ``Table.create``, on every open (a hand-edited
``hoodie.properties``) and on schema evolution (a batch adding a column).
"""
from __future__ import annotations

import re
from collections.abc import Iterable

from ..errors import MultiWriterError

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_PARTITION_FORBIDDEN = re.compile(r"[/\\=]")
MAX_NAME_BYTES = 255


def column_problem(name: object, *, partition: bool = False) -> str | None:
    """Why ``name`` cannot name a column (a partition column when ``partition``), or None."""
    if not isinstance(name, str) or not name:
        return "is empty or not a string"
    if _CONTROL.search(name):
        return "contains NUL, a newline or another control character"
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return f"is longer than {MAX_NAME_BYTES} bytes"
    if partition:
        if name.startswith("."):
            return "starts with '.' (a partition column names directories; .hoodie and '..' are reserved)"
        if _PARTITION_FORBIDDEN.search(name):
            return "contains '/', '\\' or '=' (a partition column names one directory, <column>=<value>)"
    return None


def table_name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a table (it keys locks, registrations and log lines), or None."""
    if not isinstance(name, str) or not name:
        return "is empty or not a string"
    if _CONTROL.search(name):
        return "contains NUL, a newline or another control character"
    if name in (".", "..") or "/" in name or "\\" in name:
        return "is a relative path or contains '/' or '\\'"
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return f"is longer than {MAX_NAME_BYTES} bytes"
    return None


def check(
    *,
    error: type[MultiWriterError],
    where: str,
    table_name: str | None = None,
    columns: Iterable[object] = (),
    partition_columns: Iterable[object] = (),
) -> None:
    """Raise ``error`` naming the first bad name (partition columns first) and ``where`` it came from."""
    found: list[tuple[str, object, str]] = []
    found += [("partition column", c, p) for c in partition_columns if (p := column_problem(c, partition=True))]
    found += [("column", c, p) for c in columns if (p := column_problem(c))]
    if table_name is not None and (p := table_name_problem(table_name)):
        found.append(("table name", table_name, p))
    if found:
        kind, name, problem = found[0]
        raise error(f"{where}: {kind} {str(name)[:120]!r} {problem}; rename it (nothing was written)")


__all__ = ["check", "column_problem", "table_name_problem"]
