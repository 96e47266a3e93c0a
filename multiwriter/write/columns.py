"""Columns built from cached buffers instead of per row: a value repeated over a file (as a
one-entry dictionary) and prefixes of cached arrays. Every file of every batch shares them, so
a merge builds its constant columns in microseconds and without hashing any row."""
from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import pyarrow as pa


class Prefixes:
    """The first ``n`` values of an array ``build(size)`` makes, cut from one cached array that
    grows by doubling: every file of every batch shares it instead of building its own."""

    def __init__(self, build: Callable[[int], pa.Array]) -> None:
        self._build = build
        self._cached = build(0)

    def __call__(self, n: int) -> pa.Array:
        cached = self._cached  # one read: another merge thread may replace it meanwhile
        if len(cached) < n:
            cached = self._cached = self._build(max(n, 2 * len(cached), 1024))
        return cached.slice(0, n)


_zeros = Prefixes(lambda size: pa.array(np.zeros(size, dtype=np.int32)))


def constant(value: str, n: int) -> pa.DictionaryArray:
    """``n`` times ``value`` as a one-entry dictionary: nothing to build per row, and Parquet
    writes it as its dictionary page plus run-length indices without hashing ``n`` strings."""
    return pa.DictionaryArray.from_arrays(_zeros(n), _one_string(value), safe=False)


def constant_value(col: pa.Array | pa.ChunkedArray) -> str | None:
    """The one value of a column :func:`constant` built (a one-entry string dictionary without
    nulls), else None."""
    if not pa.types.is_dictionary(col.type) or col.null_count or not pa.types.is_string(col.type.value_type):
        return None
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    values = {v for c in chunks for v in c.dictionary.to_pylist()}
    return values.pop() if len(values) == 1 and all(len(c.dictionary) == 1 for c in chunks) else None


@functools.lru_cache(maxsize=1024)
def _one_string(value: str) -> pa.Array:
    """A one-value string array, built from its buffers (``pa.array`` costs several times more)
    and kept: the commit time and partition paths repeat over the files of a batch and beyond."""
    data = value.encode()
    return pa.StringArray.from_buffers(1, pa.py_buffer(np.array([0, len(data)], np.int32)), pa.py_buffer(data))
