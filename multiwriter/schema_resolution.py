"""Concurrent schema evolution: which schema a commit records when another writer changed the
table schema after this writer's base, and the invariant that keeps readers whole.

The table schema is the schema of the latest completed commit (``Table.schema``), so a commit
must never record fewer columns or narrower types than the commit completed before it. Under
the lock at commit time, :func:`commit_schema` compares three schemas per column: the table's
at our base, ours (what our files were written with), and the table's now. A column changed
by one side only takes that side's (wider) type; a column changed by both sides to different
types is a conflict, and the later committer fails. This follows the rules of Hudi's
concurrent schema evolution check, but merges compatible evolutions of both sides instead of
failing them, since files lacking a column read as null and narrower types read widened.

Hudi's readers take the schema of the completed commit with the greatest *requested* time
instead, so a commit that adds to the schema also retries (``WriteConflictError``, with a new
instant) when a commit requested after it, lacking its new columns, completed first. Both
orders then show every commit's schema as a superset of the one before it.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import pyarrow as pa

from .errors import SchemaMismatchError, WriteConflictError
from .format import instant as inst
from .format.instant import Instant
from .format.schema import arrow_to_avro_json, avro_to_arrow, data_schema, evolve_type, missing_columns, widens
from .table.table import Table
from .table.timeline import Timeline

SCHEMA_KEY = "schema"


@dataclass(frozen=True)
class ColumnConflict:
    """One column both sides evolved differently (``None``: the side lacks the column)."""

    name: str
    base: pa.DataType | None
    ours: pa.DataType | None
    theirs: pa.DataType | None

    def describe(self) -> str:
        return f"{self.name} (base {_t(self.base)}, ours {_t(self.ours)}, theirs {_t(self.theirs)})"


@dataclass(frozen=True)
class Resolution:
    """The schema to record, or the conflicts that forbid committing."""

    schema: pa.Schema
    conflicts: tuple[ColumnConflict, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.conflicts


# -- pure rules ------------------------------------------------------------------------
def superset_violations(old: pa.Schema, new: pa.Schema) -> list[str]:
    """How ``new`` fails to keep every column of ``old`` with the same or a wider type."""
    out = []
    for f in data_schema(old):
        i = new.get_field_index(f.name)
        if i < 0:
            out.append(f"column {f.name!r} ({f.type}) is gone")
        elif not widens(f.type, new.field(i).type):
            out.append(f"column {f.name!r} changed from {f.type} to {new.field(i).type}")
    return out


def is_superset(new: pa.Schema, old: pa.Schema) -> bool:
    return not superset_violations(old, new)


def is_older(ours: pa.Schema, theirs: pa.Schema) -> bool:
    """True when ``theirs`` evolved from ``ours``: it keeps all of it and differs."""
    return is_superset(theirs, ours) and not data_schema(theirs).equals(data_schema(ours))


def resolve(base: pa.Schema, ours: pa.Schema, theirs: pa.Schema) -> Resolution:
    """Merge two evolutions of ``base``: the table's now (``theirs``) and this writer's (``ours``).

    Columns keep ``theirs``' order, ours-only columns follow; the result is a superset of
    ``theirs`` whenever there is no conflict.
    """
    base, ours, theirs = data_schema(base), data_schema(ours), data_schema(theirs)
    if ours.equals(theirs) or theirs.equals(base):
        return Resolution(ours)
    fields: list[pa.Field] = []
    conflicts: list[ColumnConflict] = []
    for f in theirs:
        o = _type_of(ours, f.name)
        t = _merge_type(_type_of(base, f.name), o, f.type)
        if t is None:
            conflicts.append(ColumnConflict(f.name, _type_of(base, f.name), o, f.type))
        else:
            fields.append(pa.field(f.name, t, nullable=f.nullable))
    fields += [pa.field(f.name, f.type, nullable=True) for f in ours if theirs.get_field_index(f.name) < 0]
    return Resolution(pa.schema(fields), tuple(conflicts))


def _merge_type(base: pa.DataType | None, ours: pa.DataType | None, theirs: pa.DataType) -> pa.DataType | None:
    """The type both sides' files read as, or None when the two evolutions contradict."""
    if ours is None or ours == theirs:
        return theirs
    ours_changed, theirs_changed = ours != base, theirs != base
    if ours_changed and theirs_changed:
        return _merge_nested(base, ours, theirs)  # else retyped both ways, or one new column with two types
    if theirs_changed:
        return theirs if widens(ours, theirs) else None
    return ours if widens(theirs, ours) else None


def _merge_nested(base: pa.DataType | None, ours: pa.DataType, theirs: pa.DataType) -> pa.DataType | None:
    """Both sides evolved one struct (or list or map of structs): each side's added fields are
    kept, theirs first; None when they contradict (one field retyped two ways)."""
    if base is None or not (widens(base, ours) and widens(base, theirs)):
        return None
    if not any(pa.types.is_struct(t) or pa.types.is_list(t) or pa.types.is_map(t) for t in (ours, theirs)):
        return None
    return evolve_type(theirs, ours, "", [])


def _type_of(schema: pa.Schema, name: str) -> pa.DataType | None:
    i = schema.get_field_index(name)
    return schema.field(i).type if i >= 0 else None


def _t(t: pa.DataType | None) -> str:
    return "absent" if t is None else str(t)


def describe(schema: pa.Schema) -> str:
    """``(id: string, ts: int64)``: short enough for an error message."""
    return "(" + ", ".join(f"{f.name}: {f.type}" for f in data_schema(schema)) + ")"


# -- on the timeline -----------------------------------------------------------------------
def schema_of(tl: Timeline, i: Instant) -> pa.Schema | None:
    """The schema a completed write recorded, or None when it recorded none."""
    avro = tl.commit_metadata(i).extra_metadata.get(SCHEMA_KEY)
    return avro_to_arrow(avro, source=tl.path_of(i)) if avro else None


def schema_history(tl: Timeline) -> list[tuple[Instant, pa.Schema]]:
    """Every completed write that recorded a schema, in completion order."""
    out = []
    for i in tl.completed_writes():
        s = schema_of(tl, i)
        if s is not None:
            out.append((i, s))
    return out


def history_violations(tl: Timeline) -> list[str]:
    """Each completed commit whose schema is not a superset of the previous commit's, in
    completion order (our reader) and in requested order (Hudi's readers).

    Empty on a healthy table; tests and the chaos checker assert that.
    """
    out = []
    by_completion = schema_history(tl)
    by_request = sorted(by_completion, key=lambda e: e[0].requested_time)
    for order, history in (("completion", by_completion), ("requested", by_request)):
        for (prev_i, prev), (i, s) in pairwise(history):
            for v in superset_violations(prev, s):
                out.append(
                    f"instant {i.requested_time} (completed {i.completion_time}) after {prev_i.requested_time} "
                    f"in {order} order: {v}"
                )
    return out


def commit_schema(
    table: Table,
    base_timeline: Timeline,
    timeline: Timeline,
    base_completion: str | None,
    instant: str,
    writer_id: str,
    ours_avro: str | None,
    *,
    allow_missing: bool = True,
) -> str | None:
    """The Avro schema the committing instant must record, or None to keep its own.

    Runs under the lock. Raises :class:`SchemaMismatchError` (naming both instants and all
    three schemas) when a commit completed since our base evolved the schema in a way ours
    contradicts; the caller then aborts, so nothing of ours stays. Every write commits
    through this step, table services included: a clustering commit that records the schema
    of its base still ends up recording the current table schema.
    """
    if not ours_avro:
        return None
    latest = _latest_schema_since(timeline, base_completion, instant)
    if latest is None:
        return None
    theirs_i, theirs = latest
    base = table.schema(base_timeline)
    ours = avro_to_arrow(ours_avro, source=f"instant {instant}")
    r = resolve(base, ours, theirs)
    if not r.ok:
        raise SchemaMismatchError(
            f"instant {instant} of writer {writer_id!r} wrote schema {describe(ours)}, but instant "
            f"{theirs_i.requested_time} (completed {theirs_i.completion_time}) changed the table schema "
            f"concurrently from {describe(base)} to {describe(theirs)}; conflicting columns: "
            f"{'; '.join(c.describe() for c in r.conflicts)}. The first committer wins: instant {instant} "
            "was not committed and its files are removed; align the writers' schemas, then resend the batch"
        )
    if not allow_missing:
        _check_not_lacking(ours, r.schema, theirs_i, instant, writer_id)
    _check_later_requested(timeline, base_completion, instant, writer_id, r.schema)
    if r.schema.equals(ours):
        return None
    return arrow_to_avro_json(r.schema, table.name)


def _check_not_lacking(ours: pa.Schema, schema: pa.Schema, theirs_i: Instant, instant: str, writer_id: str) -> None:
    """A writer that may not omit columns (Hudi's default) validated its batch before a
    concurrent commit added columns (or struct fields): its rows lack them, and under
    non-blocking concurrency nothing else would stop them from blanking the other writer's
    values. Refused as the same batch sent after that commit would be."""
    lacking = missing_columns(schema, ours)
    if lacking:
        raise SchemaMismatchError(
            f"instant {instant} of writer {writer_id!r} lacks table columns {lacking}, added by instant "
            f"{theirs_i.requested_time} (completed {theirs_i.completion_time}) meanwhile; its rows would write them "
            "as null. It was not committed and its files are removed: send every column, or set "
            "WriterConfig(allow_missing_columns=True) to write omitted columns as null"
        )


def _check_later_requested(tl: Timeline, base_completion: str | None, instant: str, writer_id: str, schema: pa.Schema) -> None:
    """Hudi readers (hudi-rs among them) take the schema of the completed commit with the
    greatest *requested* time. A commit requested after ours that completed first must
    therefore already hold every column of ours, or our new columns would vanish for them;
    if not, this attempt retries with a new (later) instant, as after a write conflict."""
    for i in tl.completed_after(base_completion):
        if i.action not in inst.WRITE_ACTIONS or i.requested_time <= instant:
            continue
        theirs = schema_of(tl, i)
        missing = superset_violations(schema, theirs) if theirs is not None else []
        if missing:
            raise WriteConflictError(
                f"instant {instant} of writer {writer_id!r} records schema {describe(schema)}, but instant "
                f"{i.requested_time}, requested later and completed first, recorded {describe(theirs)} "
                f"({'; '.join(missing)}); readers that take the schema of the latest requested commit "
                "would not see ours: retry the batch with a new instant (the writer does this)",
                instant=instant,
                winner=i.requested_time,
            )


def _latest_schema_since(tl: Timeline, base_completion: str | None, own: str) -> tuple[Instant, pa.Schema] | None:
    for i in reversed(tl.completed_after(base_completion)):
        if i.action not in inst.WRITE_ACTIONS or i.requested_time == own:
            continue
        s = schema_of(tl, i)
        if s is not None:
            return i, s
    return None
