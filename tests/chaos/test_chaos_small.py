"""A small seeded chaos round runs in `make test` (`make chaos` runs long)."""
from __future__ import annotations

import os

import pytest

from tests.chaos.run import run_round


#: a Merge-on-Read round on S3 (moto) under the storage lock; ``MW_FULL_MATRIX=1`` adds a
#: Copy-on-Write round under ZooKeeper (the pair most other fault tests of `make test` run on) and
#: Merge-on-Read under ZooKeeper without the metadata table
ROUNDS = [("MERGE_ON_READ", True, "storage")] + \
    ([("COPY_ON_WRITE", True, "zookeeper"), ("MERGE_ON_READ", False, "zookeeper")]
     if os.environ.get("MW_FULL_MATRIX") == "1" else [])


@pytest.mark.slow
@pytest.mark.parametrize(("table_type", "metadata", "lock"), ROUNDS)
def test_seeded_chaos_round_keeps_every_invariant(tmp_path, table_type, metadata, lock):
    """Seeded rounds (:data:`ROUNDS`); the rounds with Hudi's metadata table also require its
    listing to end equal to storage's committed files."""
    s = run_round(seed=20261122, workdir=tmp_path, batches=6, max_seconds=180, table_type=table_type,
                  metadata=metadata, lock=lock)
    assert s.violations == [], f"{s.line()}\n" + "\n".join(s.violations)
    assert s.batches == 4 * 6
