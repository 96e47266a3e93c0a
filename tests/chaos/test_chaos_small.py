"""A small seeded chaos round runs in `make test` (`make chaos` runs long)."""
from __future__ import annotations

import pytest

from tests.chaos.run import run_round


@pytest.mark.slow
@pytest.mark.parametrize(("table_type", "metadata"), [("COPY_ON_WRITE", True), ("MERGE_ON_READ", False)])
def test_seeded_chaos_round_keeps_every_invariant(tmp_path, table_type, metadata):
    """One round per table type; the Copy-on-Write one keeps Hudi's metadata table, whose
    listing must end equal to storage's committed files."""
    s = run_round(seed=20261122, workdir=tmp_path, batches=6, max_seconds=180, table_type=table_type,
                  metadata=metadata)
    assert s.violations == [], f"{s.line()}\n" + "\n".join(s.violations)
    assert s.batches == 4 * 6
