"""Record-key strings as Hudi's JVM key generators write them.

A key column's value becomes the record key by Java's ``toString`` of the value Hudi reads from
the Avro record (``HoodieAvroUtils.getNestedFieldValAsString``): a float or double as Java's
``Float.toString`` / ``Double.toString`` print it (``1.0``, ``1.0E7``, ``1.5E-5``, not Arrow's
``1``), and a timestamp as its Avro long (micros or millis since the epoch, Hudi's default
without ``hoodie.datasource.write.keygenerator.consistent.logical.timestamp.enabled``). A JVM
writer and ours then name a record alike, so its updates find it. Dates (``LocalDate``:
``2024-01-05``), decimals (``BigDecimal``), integers and booleans print alike already.
"""
from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..format.log_file import avro_time_unit

__all__ = ["java_float_string", "java_key_strings"]


def java_key_strings(col: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray | None:
    """``col``'s values as Java prints them where Arrow's cast to string differs (floating
    point, timestamps); None for other types (Arrow's cast agrees)."""
    t = col.type
    if pa.types.is_floating(t):
        single = t in (pa.float16(), pa.float32())
        distinct = pc.unique(col)
        texts = [None if v is None else java_float_string(v, single=single) for v in distinct.to_pylist()]
        return pc.take(pa.array(texts, pa.string()), pc.index_in(col, value_set=distinct))
    if pa.types.is_timestamp(t):
        stored = pc.cast(col, pa.timestamp(avro_time_unit(t), tz=t.tz), safe=False)
        return pc.cast(pc.cast(stored, pa.int64()), pa.string())
    return None


def java_float_string(v: float, *, single: bool = False) -> str:
    """Java's ``Double.toString`` (``Float.toString`` with ``single``) of ``v``: the shortest
    digits that read back as the same value (JDK 19+), positional with at least one fraction
    digit when 10**-3 <= |v| < 10**7, else ``d.dddE<n>``."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    if v == 0:
        return "-0.0" if math.copysign(1.0, v) < 0 else "0.0"
    x = np.float32(v) if single else np.float64(v)
    mantissa, exponent = np.format_float_scientific(x, unique=True).split("e")
    sign = "-" if mantissa.startswith("-") else ""
    digits = mantissa.lstrip("-").replace(".", "").rstrip("0") or "0"
    e = int(exponent)
    if 1e-3 <= abs(float(x)) < 1e7:
        if e >= 0:
            whole, fraction = digits[: e + 1].ljust(e + 1, "0"), digits[e + 1:]
        else:
            whole, fraction = "0", "0" * (-e - 1) + digits
        return f"{sign}{whole}.{fraction or '0'}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{e}"
