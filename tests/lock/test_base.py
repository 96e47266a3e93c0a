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
