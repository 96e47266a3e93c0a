"""A bounded, thread-safe cache of what a process decoded once: files that never change once
written (metadata-table HFiles and logs, footers), keyed by table URI and path."""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from .threads import renew_in_child

K = TypeVar("K")
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    """At most ``size`` entries; the least recently used goes first."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()
        renew_in_child(self)

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def pop(self, key: K) -> None:
        with self._lock:
            self._items.pop(key, None)

    def drop(self, which: Callable[[K], bool]) -> None:
        """Forget every entry whose key ``which`` names."""
        with self._lock:
            for key in [k for k in self._items if which(k)]:
                del self._items[key]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
