"""Prometheus metrics: real commits (one conflict) scraped from the real HTTP endpoint."""
from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

import multiwriter as mw
from multiwriter.metrics import Metrics, start_http_server
from multiwriter.transaction import Transaction
from multiwriter.write.writer import Writer
from tests.conftest import trips

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = {
    "multiwriter_commits_total": {"table", "writer", "outcome"},
    "multiwriter_commit_retries_total": {"table", "writer"},
    "multiwriter_batch_duration_seconds": {"table", "writer", "phase"},
    "multiwriter_lock_wait_seconds": {"table", "writer"},
    "multiwriter_lock_hold_seconds": {"table", "writer"},
    "multiwriter_records_written_total": {"table", "writer", "op"},
    "multiwriter_heartbeat_age_seconds": {"table", "writer"},
    "multiwriter_heartbeat_failures_total": {"table", "writer"},
    "multiwriter_rollbacks_total": {"table"},
    "multiwriter_cleaner_files_deleted_total": {"table", "kind"},
    "multiwriter_pending_instants": {"table"},
    "multiwriter_last_commit_timestamp_seconds": {"table", "writer"},
}


def scrape(port: int) -> dict[str, list]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        key = fam.name + "_total" if fam.type == "counter" else fam.name  # the parser drops _total
        out.setdefault(key, []).extend(fam.samples)
    return out


def value(samples, name, **labels) -> float:
    return sum(s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def test_real_commits_with_a_conflict_show_up_on_the_endpoint(trips_table, table_path):
    reg = CollectorRegistry()
    m = Metrics(reg)
    server = start_http_server(port=0, registry=reg)
    try:
        w = Writer(mw.Table.open(table_path), mw.WriterConfig(lock=mw.InProcessLock(), writer_id="a", heartbeat_interval_s=1.0, retry_backoff_s=0.01), metrics=m)
        w.write(trips(range(10), ts=1))
        # make writer a's next batch lose one conflict: writer b commits to the same file group
        # between a's begin and a's commit.
        rival = Writer(mw.Table.open(table_path), mw.WriterConfig(lock=mw.InProcessLock(), writer_id="b"), metrics=m)
        real_begin = Transaction.begin
        fired = {"done": False}

        def begin_then_rival(self, *a, **k):
            inst = real_begin(self, *a, **k)
            if self.writer_id == "a" and not fired["done"]:
                fired["done"] = True
                rival.write(trips(range(3), ts=5, value=7))
            return inst

        Transaction.begin = begin_then_rival
        try:
            r = w.write(trips(range(5), ts=9, value=2), batch_id=1)
        finally:
            Transaction.begin = real_begin
        assert r.attempts == 2 and r.conflicts == 1
        w.write(trips(range(5), ts=9), batch_id=1)  # replay: skipped
        m.rollback("trips")
        m.files_deleted("trips", "failed_write", 3)
        m.pending_instants("trips", 2)
        m.heartbeat_failure("trips", "a")
        s = scrape(server.port)
        for fam, labels in FAMILIES.items():
            assert fam in s, f"{fam} missing"
            got = {k for smp in s[fam] for k in smp.labels if k not in ("le", "quantile")}
            assert got == labels, (fam, got)
        assert value(s["multiwriter_commits_total"], "multiwriter_commits_total", writer="a", outcome="committed") == 2
        assert value(s["multiwriter_commits_total"], "multiwriter_commits_total", writer="a", outcome="conflict") == 1
        assert value(s["multiwriter_commits_total"], "multiwriter_commits_total", writer="a", outcome="skipped") == 1
        assert value(s["multiwriter_commits_total"], "multiwriter_commits_total", writer="b", outcome="committed") == 1
        assert value(s["multiwriter_commit_retries_total"], "multiwriter_commit_retries_total", writer="a") == 1
        assert value(s["multiwriter_records_written_total"], "multiwriter_records_written_total", writer="a", op="insert") == 10
        assert value(s["multiwriter_records_written_total"], "multiwriter_records_written_total", writer="a", op="update") == 5
        assert value(s["multiwriter_batch_duration_seconds"], "multiwriter_batch_duration_seconds_count", writer="a", phase="total") == 2
        assert value(s["multiwriter_lock_hold_seconds"], "multiwriter_lock_hold_seconds_count", writer="a") == 4, "begin + commit per commit"
        assert value(s["multiwriter_lock_wait_seconds"], "multiwriter_lock_wait_seconds_count", writer="a") == 2
        assert value(s["multiwriter_last_commit_timestamp_seconds"], "multiwriter_last_commit_timestamp_seconds", writer="a") > 1.7e9
        assert value(s["multiwriter_pending_instants"], "multiwriter_pending_instants", table="trips") == 2
        assert value(s["multiwriter_cleaner_files_deleted_total"], "multiwriter_cleaner_files_deleted_total", kind="failed_write") == 3
        w.close()
        rival.close()
    finally:
        server.stop()


def test_label_values_are_validated():
    m = Metrics(CollectorRegistry())
    with pytest.raises(ValueError, match="outcome"):
        m.commit("t", "w", "maybe")
    with pytest.raises(ValueError, match="phase"):
        m.phase("t", "w", "lunch", 1.0)
    with pytest.raises(ValueError, match="kind"):
        m.files_deleted("t", "misc", 1)


def test_one_instance_per_registry():
    reg = CollectorRegistry()
    assert Metrics(reg) is Metrics(reg)
    assert mw.metrics.default() is mw.metrics.default()


def test_http_server_binds_loopback_by_default():
    import inspect

    assert inspect.signature(start_http_server).parameters["addr"].default == "127.0.0.1"
    server = start_http_server(port=0, registry=CollectorRegistry())
    try:
        assert server.server.server_address[0] == "127.0.0.1"
    finally:
        server.stop()


def test_dashboard_expressions_name_existing_metrics():
    dash = json.loads((ROOT / "dashboards" / "multiwriter.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 12
    reg = CollectorRegistry()
    Metrics(reg)
    known = {fam.name for fam in reg.collect()}
    for e in exprs:
        for name in re.findall(r"multiwriter_[a-z_]+", e):
            base = re.sub(r"_(bucket|count|sum|created)$", "", name)
            base = base if base in known else re.sub(r"_total$", "", base)
            assert base in known, f"{name} in {e!r} is not a metric"
    titles = " ".join(p["title"].lower() for p in dash["panels"])
    for word in ("outcome", "conflict", "retries", "lock wait", "lock hold", "phase", "heartbeat age", "pending", "rollbacks",
                 "delta commits", "log bytes", "compaction duration", "compaction lag"):
        assert word in titles


def test_merge_on_read_writes_count_delta_commits_and_log_bytes(mor_table, table_path):
    reg = CollectorRegistry()
    w = Writer(mor_table, mw.WriterConfig(writer_id="m", lock=mw.InProcessLock()), metrics=Metrics(reg))
    try:
        w.write(trips(range(10)))
        r = w.write(trips(range(5), ts=2))
    finally:
        w.close()
    assert r.log_bytes > 0
    assert reg.get_sample_value("multiwriter_delta_commits_total", {"table": "trips", "writer": "m"}) == 2
    logs = [f for f in mor_table.snapshot().files() for f in f.logs]
    assert reg.get_sample_value("multiwriter_log_bytes_written_total", {"table": "trips", "writer": "m"}) == sum(f.size for f in logs)
