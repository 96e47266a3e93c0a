"""The shared parts of the lock contract: ids, holder records, timeouts."""
from __future__ import annotations

import json
import os
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from multiwriter.errors import ConfigError
from multiwriter.lock import HolderInfo, validate_table_id, validate_writer_id
from multiwriter.lock.base import describe_holder, resolve_timeout

SAFE = re.compile(r"[A-Za-z0-9_.-]+")


@given(st.text(max_size=300))
def test_table_ids_are_accepted_exactly_when_safe_for_zookeeper(s):
    ok = SAFE.fullmatch(s) is not None and len(s) <= 255 and s not in (".", "..")
    if ok:
        assert validate_table_id(s) == s
    else:
        with pytest.raises(ConfigError, match="table id"):
            validate_table_id(s)


@given(st.text(max_size=200))
def test_writer_ids_are_accepted_exactly_when_safe(s):
    ok = SAFE.fullmatch(s) is not None and len(s) <= 128 and s not in (".", "..")
    if ok:
        assert validate_writer_id(s) == s
    else:
        with pytest.raises(ConfigError, match="writer id"):
            validate_writer_id(s)


def test_holder_round_trips_and_describes_itself():
    h = HolderInfo("ingest", "host-a", 12, "20240101000000000")
    assert HolderInfo.from_dict(json.loads(h.to_json())) == h
    assert describe_holder(h.to_json()) == "writer 'ingest' (pid 12 on host-a, instant 20240101000000000)"
    assert describe_holder({**h.to_dict(), "token": "x"}).startswith("writer 'ingest'")
    assert HolderInfo.current("w").pid == os.getpid()
    assert "released" in describe_holder(None)
    assert "unknown" in describe_holder(b"\xffnot json")
    assert "unknown" in describe_holder("{}")


def test_timeouts():
    assert resolve_timeout(None, 30.0) == 30.0
    assert resolve_timeout(0, 30.0) == 0.0
    with pytest.raises(ConfigError):
        resolve_timeout(-0.1, 30.0)


def test_wait_clock_splits_an_acquire_by_cause():
    from multiwriter.lock.base import WAIT_HOLDER, WAIT_RECONNECT, WAIT_STALE_OWN_NODE, WaitClock

    now = [100.0]
    clock = WaitClock(now=lambda: now[0])  # starts in round trips
    now[0] += 0.5
    assert clock.switch(WAIT_RECONNECT) is True
    now[0] += 3.0
    assert clock.switch(WAIT_RECONNECT) is False  # same cause: the span goes on
    now[0] += 1.0
    clock.switch(WAIT_STALE_OWN_NODE)
    now[0] += 0.25
    clock.switch(WAIT_HOLDER)
    now[0] += 2.0
    assert clock.stop() == {"calls": 0.5, "reconnect": 4.0, "stale_own_node": 0.25, "holder": 2.0}
    assert clock.cause is None
    assert clock.describe() == ("4.0s waiting for reconnection, 2.0s behind another holder, 0.5s in round trips, "
                                "0.2s waiting for a stale own lock node to go")
    now[0] += 9.0  # stopped: time no longer counts
    assert clock.stop()["holder"] == 2.0
    with pytest.raises(ValueError, match="wait cause 'gc'"):
        clock.switch("gc")


def test_the_lock_wait_metric_knows_every_wait_cause():
    from multiwriter.lock.base import WAIT_CAUSES
    from multiwriter.metrics import LOCK_WAIT_CAUSES

    assert LOCK_WAIT_CAUSES == WAIT_CAUSES
