"""The expiry rule every judge (cleaner, CLI, other writers) applies, from storage alone."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from multiwriter.heartbeat import expiry_bound_s, heartbeat_age_s, is_lapsed
from multiwriter.instant_time import format_time
from multiwriter.storage import Storage

NOW = 1_700_000_000.0  # an injected "now": judges take the clock as a parameter
BOUND = expiry_bound_s(1.0, 2)


@pytest.fixture()
def storage(tmp_path: Path) -> Storage:
    return Storage(str(tmp_path))


def put_beat(root: Path, instant: str, *, mtime: float, ts: float | None = None, raw: str | None = None) -> Path:
    """A heartbeat file as a writer (or a corrupting crash) would have left it."""
    f = root / ".hoodie" / ".heartbeat" / instant
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(raw if raw is not None else json.dumps({"ts_ms": int((mtime if ts is None else ts) * 1000)}))
    os.utime(f, (mtime, mtime))
    return f


def test_bound_is_interval_times_misses_plus_one():
    assert expiry_bound_s(10.0, 2) == 30.0
    assert expiry_bound_s(1.0, 0) == 1.0


def test_fresh_heartbeat_is_not_lapsed(storage, tmp_path):
    t = format_time(NOW - 100)  # an old instant whose writer is still beating
    put_beat(tmp_path, t, mtime=NOW - 0.5)
    assert heartbeat_age_s(storage, t, now=NOW) == pytest.approx(0.5, abs=0.01)
    assert not is_lapsed(storage, t, 1.0, 2, now=NOW)


def test_old_heartbeat_is_lapsed(storage, tmp_path):
    t = format_time(NOW - 100)
    put_beat(tmp_path, t, mtime=NOW - 10)
    assert heartbeat_age_s(storage, t, now=NOW) == pytest.approx(10, abs=0.01)
    assert is_lapsed(storage, t, 1.0, 2, now=NOW)


def test_lapsed_only_strictly_past_the_bound(storage, tmp_path):
    t = format_time(NOW - 100)
    put_beat(tmp_path, t, mtime=NOW - BOUND)
    assert not is_lapsed(storage, t, 1.0, 2, now=NOW)
    assert is_lapsed(storage, t, 1.0, 2, now=NOW + 0.01)


def test_the_newer_of_mtime_and_ts_counts(storage, tmp_path):
    t = format_time(NOW - 100)
    put_beat(tmp_path, t, mtime=NOW - 10, ts=NOW - 1)  # a store whose mtime lags
    assert heartbeat_age_s(storage, t, now=NOW) == pytest.approx(1, abs=0.01)
    put_beat(tmp_path, t, mtime=NOW - 1, ts=NOW - 10)  # a slow write: ts taken long before it landed
    assert heartbeat_age_s(storage, t, now=NOW) == pytest.approx(1, abs=0.01)


@pytest.mark.parametrize("raw", ["not json", "", "[1, 2]", '{"writer_id": "w"}', '{"ts_ms": "soon"}',
                                 '{"ts_ms": Infinity}', '{"ts_ms": NaN}'])
def test_corrupt_file_falls_back_to_its_mtime(storage, tmp_path, raw):
    t = format_time(NOW - 100)
    put_beat(tmp_path, t, mtime=NOW - 1, raw=raw)
    assert heartbeat_age_s(storage, t, now=NOW) == pytest.approx(1, abs=0.01)
    assert not is_lapsed(storage, t, 1.0, 2, now=NOW)
    put_beat(tmp_path, t, mtime=NOW - 10, raw=raw)
    assert is_lapsed(storage, t, 1.0, 2, now=NOW), "a corrupt file must not keep a dead writer alive"


def test_missing_heartbeat_of_a_young_instant_is_not_lapsed(storage):
    """HUDI-5675: a missing file read as expired got a just-completed instant rolled back."""
    young = format_time(NOW - 1)
    assert heartbeat_age_s(storage, young, now=NOW) is None
    assert not is_lapsed(storage, young, 1.0, 2, now=NOW)
    assert not is_lapsed(storage, format_time(NOW + 5), 1.0, 2, now=NOW), "an instant from a clock ahead"


def test_missing_heartbeat_of_an_old_instant_is_lapsed(storage):
    old = format_time(NOW - 60)
    assert is_lapsed(storage, old, 1.0, 2, now=NOW)


def test_judged_by_the_injected_clock(storage, tmp_path):
    t = format_time(NOW)
    put_beat(tmp_path, t, mtime=NOW)
    assert not is_lapsed(storage, t, 10.0, 2, now=NOW + 30)
    assert is_lapsed(storage, t, 10.0, 2, now=NOW + 30.5)
    assert not is_lapsed(storage, t, 10.0, 3, now=NOW + 30.5), "more tolerable misses, a later verdict"


def test_default_now_is_the_wall_clock(storage, tmp_path):
    t = format_time(time.time() - 100)
    put_beat(tmp_path, t, mtime=time.time())
    assert not is_lapsed(storage, t, 1.0, 0)
    put_beat(tmp_path, t, mtime=time.time() - 5)
    assert is_lapsed(storage, t, 1.0, 0)


@settings(max_examples=40, deadline=None)
@given(age=st.floats(min_value=0, max_value=1000), interval=st.floats(min_value=1, max_value=60),
       misses=st.integers(min_value=0, max_value=10), present=st.booleans())
def test_rule_matches_its_definition(tmp_path_factory, age, interval, misses, present):
    root = tmp_path_factory.mktemp("hb")
    storage = Storage(str(root))
    t = format_time(NOW - 10_000)
    bound = expiry_bound_s(interval, misses)
    if present:
        assume(abs(age - bound) > 1e-3)  # file times are not exact to the nanosecond
        put_beat(root, t, mtime=NOW - age)
        expected = age > bound
    else:
        expected = True  # missing, and the instant is far older than any bound here
    assert is_lapsed(storage, t, interval, misses, now=NOW) == expected
