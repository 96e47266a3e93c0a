"""Which rows of a table mark a delete of their key (Hudi's delete markers).

Hudi treats a record as a delete of its key, not as data, when (``RecordContext.isDeleteRecord``,
set up by ``DeleteContext``):

- the table schema has ``_hoodie_is_deleted`` and the row's value is true (a non-null boolean);
- the schema has the operation meta column ``_hoodie_operation`` and the row's value names
  ``HoodieOperation.DELETE`` (``D``) or ``UPDATE_BEFORE`` (``-U``);
- the table names a custom marker, a field and a value (``hoodie.payload.delete.field`` and
  ``hoodie.payload.delete.marker``; Hudi 1.1 records them in ``hoodie.properties`` prefixed with
  ``hoodie.record.merge.property.``, ``HoodieTableConfig.Builder``), and the row's field,
  printed as Java prints it, equals the value. One of the two without the other is refused, as
  ``DeleteContext`` refuses it.

Such a delete carries the row's ordering value: it competes with the key's other versions like
a delete block's delete that carries one (``BufferedRecord.isCommitTimeOrderingDelete``: only
the default ordering value, the ``Integer`` 0 or none, makes it a plain delete), see
:mod:`.merge_rule`. Hudi checks the markers of incoming records and of log records, never of a
base file's rows (``FileGroupRecordBuffer.hasNextBaseRecord`` builds the base record with
``isDelete`` false): its writers never put a flagged row in a base file.
"""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import SchemaMismatchError, TableFormatError
from .key_strings import java_key_strings
from .properties import PROPERTIES_FILE, TableConfig

IS_DELETED = "_hoodie_is_deleted"
OPERATION = "_hoodie_operation"
#: ``HoodieOperation`` names that make a record a delete: DELETE and UPDATE_BEFORE
DELETE_OPERATIONS = ("D", "-U")
DELETE_FIELD_KEY = "hoodie.payload.delete.field"
DELETE_MARKER_KEY = "hoodie.payload.delete.marker"
#: the prefix Hudi 1.1 gives merge properties in ``hoodie.properties``
MERGE_PROPERTY_PREFIX = "hoodie.record.merge.property."


@dataclass(frozen=True)
class DeleteMarkers:
    """The delete markers a table honours: the built-in columns (when a batch or file has them)
    and its custom field and value, if any."""

    custom_field: str | None = None
    custom_value: str | None = None

    @classmethod
    def of(cls, config: TableConfig | None) -> DeleteMarkers:
        """The table's markers (its custom marker from ``hoodie.properties``). None: the
        built-in columns only."""
        if config is None:
            return cls()
        field, value = _custom(config.raw)
        return cls(field, value)

    def columns(self, schema: pa.Schema) -> tuple[str, ...]:
        """The columns of ``schema`` that may mark a delete."""
        names = (IS_DELETED, OPERATION) + ((self.custom_field,) if self.custom_field else ())
        return tuple(n for n in names if schema.get_field_index(n) >= 0)

    def deleted(self, rows: pa.Table) -> pa.Array | None:
        """Which rows mark a delete of their key (a boolean mask without nulls); None when
        ``rows`` have no marker column, so none does (the usual case costs nothing)."""
        masks = []
        if rows.schema.get_field_index(IS_DELETED) >= 0:
            masks.append(_is_deleted(rows.column(IS_DELETED)))
        if rows.schema.get_field_index(OPERATION) >= 0:
            masks.append(pc.is_in(_strings(rows.column(OPERATION)), value_set=pa.array(DELETE_OPERATIONS)))
        if self.custom_field and rows.schema.get_field_index(self.custom_field) >= 0:
            printed = _strings(rows.column(self.custom_field))
            masks.append(pc.equal(printed, pa.scalar(self.custom_value, pa.string())))
        if not masks:
            return None
        out = masks[0]
        for m in masks[1:]:
            out = pc.or_kleene(out, m)
        out = pc.fill_null(out, False)
        return out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out


def any_deleted(mask: pa.Array | None) -> bool:
    """Whether a :meth:`DeleteMarkers.deleted` mask marks some row."""
    return mask is not None and mask.true_count > 0


def _custom(raw: dict[str, str]) -> tuple[str | None, str | None]:
    """The custom marker's field and value: the prefixed keys Hudi 1.1 records, else the plain
    ones. Refused when only one of the two is set (``DeleteContext``)."""
    field = raw.get(MERGE_PROPERTY_PREFIX + DELETE_FIELD_KEY) or raw.get(DELETE_FIELD_KEY) or None
    value = raw.get(MERGE_PROPERTY_PREFIX + DELETE_MARKER_KEY) or raw.get(DELETE_MARKER_KEY) or None
    if (field is None) != (value is None):
        missing = DELETE_MARKER_KEY if value is None else DELETE_FIELD_KEY
        raise TableFormatError(
            f"{PROPERTIES_FILE}: a custom delete marker needs both {DELETE_FIELD_KEY} and {DELETE_MARKER_KEY} "
            f"(with or without the {MERGE_PROPERTY_PREFIX} prefix); {missing} is missing. Hudi refuses such a table "
            "(DeleteContext): set both, or neither")
    return field, value


def _is_deleted(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """``_hoodie_is_deleted`` true. Hudi reads it as a boolean (``castToBoolean``); a column of
    another type is refused rather than guessed at."""
    if pa.types.is_boolean(col.type):
        return col
    if pa.types.is_null(col.type):
        return pa.chunked_array([pa.nulls(len(col), pa.bool_())])
    raise SchemaMismatchError(
        f"column {IS_DELETED!r} is {col.type}: Hudi reads it as a boolean delete flag; make it a boolean column "
        "(nothing was written)")


def _strings(col: pa.ChunkedArray) -> pa.ChunkedArray | pa.Array:
    """A column's values as Java's ``toString`` prints them (floats as ``1.0``, booleans as
    ``true``)."""
    if pa.types.is_dictionary(col.type):
        col = pc.cast(col, col.type.value_type)
    if pa.types.is_string(col.type):
        return col
    printed = java_key_strings(col)
    return printed if printed is not None else pc.cast(col, pa.string())
