"""Unique, monotonic instant and completion times.

Times are 17-digit UTC ``yyyyMMddHHmmssSSS``. :class:`InstantClock` issues a time strictly greater
than every time it is shown (the timeline's newest) and than the last one it issued itself, so a
clock that goes backwards or two requests in one millisecond still give distinct, increasing
times. Issued under the table lock, this makes times unique across writers.
"""
from __future__ import annotations

import datetime as _dt
import threading
import time
from collections.abc import Callable, Iterable

from .threads import renew_in_child

_FMT = "%Y%m%d%H%M%S"


def format_time(epoch_s: float) -> str:
    """Epoch seconds -> 17-digit UTC instant time."""
    ms = int(round(epoch_s * 1000))
    d = _dt.datetime.fromtimestamp(ms // 1000, tz=_dt.timezone.utc)
    return d.strftime(_FMT) + f"{ms % 1000:03d}"


def parse_time(t: str) -> float:
    """17-digit (or 14-digit, older Hudi) UTC instant time -> epoch seconds."""
    if len(t) not in (14, 17) or not t.isdigit():
        raise ValueError(f"not an instant time: {t!r}")
    if t.startswith("0000"):  # Hudi's reserved times (HoodieTimeline.INIT_INSTANT_TS, the bootstraps'): before all
        return 0.0
    d = _dt.datetime.strptime(t[:14], _FMT).replace(tzinfo=_dt.timezone.utc)
    ms = int(t[14:]) if len(t) == 17 else 0
    return d.timestamp() + ms / 1000.0


def next_after(t: str) -> str:
    """The smallest valid time strictly greater than ``t`` (one millisecond later)."""
    return format_time(parse_time(t) + 0.001)


class InstantClock:
    """Issues strictly increasing instant times; thread safe."""

    def __init__(self, wall_clock: Callable[[], float] = time.time) -> None:
        self._wall = wall_clock
        self._last = ""
        self._mu = threading.Lock()
        renew_in_child(self)

    def issue(self, newer_than: Iterable[str] = ()) -> str:
        with self._mu:
            t = format_time(self._wall())
            floor = max([self._last, *[x for x in newer_than if x]], default="")
            if floor and t <= floor:
                t = next_after(floor)
            self._last = t
            return t


#: one clock per process: times issued here never repeat within the process
PROCESS_CLOCK = InstantClock()
