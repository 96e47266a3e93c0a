"""Pure logic: instant file names, instant times, properties."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from multiwriter.instant_time import InstantClock, format_time, next_after, parse_time
from multiwriter.table import properties
from multiwriter.format.instant import COMPLETED, INFLIGHT, REQUESTED, Instant, decode_file_name


@pytest.mark.parametrize(
    "name,expected",
    [
        ("20250713011315930.commit.requested", Instant("20250713011315930", "commit", REQUESTED)),
        ("20250713011315930.inflight", Instant("20250713011315930", "commit", INFLIGHT)),
        ("20250713011315930_20250713011316231.commit", Instant("20250713011315930", "commit", COMPLETED, "20250713011316231")),
        ("20250713011315930.rollback.inflight", Instant("20250713011315930", "rollback", INFLIGHT)),
        ("20250713011315930_20250713011316231.clean", Instant("20250713011315930", "clean", COMPLETED, "20250713011316231")),
        ("20240418173550988.commit", Instant("20240418173550988", "commit", COMPLETED, None)),
    ],
)
def test_decode(name, expected):
    assert decode_file_name(name) == expected
    if expected.completion_time or expected.state != COMPLETED:
        assert expected.file_name() == name


@pytest.mark.parametrize("name", ["history", "x.commit", "2025.commit", "20250713011315930.commit.tmp", "20250713011315930_1.commit"])
def test_decode_rejects(name):
    assert decode_file_name(name) is None


@given(st.integers(min_value=0, max_value=4_000_000_000_000))
def test_time_roundtrip(ms):
    t = format_time(ms / 1000)
    assert len(t) == 17 and t.isdigit()
    assert format_time(parse_time(t)) == t
    assert next_after(t) > t


def test_clock_is_strictly_increasing_even_backwards():
    now = [2000.0]
    c = InstantClock(lambda: now[0])
    a = c.issue()
    now[0] = 1000.0  # clock goes backwards
    b = c.issue()
    assert b > a
    assert c.issue(["29991231235959999"]) > "29991231235959999"


@given(st.dictionaries(st.text(min_size=1).filter(lambda s: s.strip() == s and "\r" not in s), st.text().filter(lambda s: s.strip() == s and "\r" not in s), max_size=5))
def test_properties_roundtrip(d):
    assert properties.parse(properties.render(d)) == d
