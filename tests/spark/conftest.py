"""Shared by the data source tests: the session with the source registered, Hudi write options."""
from __future__ import annotations

import pytest

import multiwriter as mw


@pytest.fixture(scope="module")
def sp(spark):
    mw.register(spark)
    return spark


def trips_write_options(zk_server, zk_base, **extra: str) -> dict[str, str]:
    """Hudi's keys for the trips table under the test ZooKeeper lock, plus ``extra``."""
    host, port = zk_server.connect.split(":")
    return {
        "hoodie.table.name": "trips",
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.partitionpath.field": "date",
        "hoodie.datasource.write.precombine.field": "ts",
        "hoodie.write.lock.zookeeper.url": host,
        "hoodie.write.lock.zookeeper.port": port,
        "hoodie.write.lock.zookeeper.base_path": zk_base,
        **extra,
    }
