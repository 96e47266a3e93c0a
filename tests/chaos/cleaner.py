"""A chaos cleaner process: run_once in a loop until told to stop (a file appears)."""
from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    import multiwriter as mw
    from multiwriter.errors import MultiWriterError

    a = json.loads(sys.argv[1])
    from tests.chaos.writer import make_lock

    lock = make_lock(a["lock"])
    # clustering beside the writers: every few small file groups are stitched together
    clustering = mw.ClusteringConfig(small_file_bytes=1 << 20, target_file_bytes=4 << 20, max_bytes_per_run=64 << 20,
                                     min_file_groups=3)
    # compaction races the writers of a Merge-on-Read round (every two delta commits)
    compaction = mw.CompactionConfig(delta_commits=2) if a.get("compaction") else None
    cleaner = mw.Cleaner(a["path"], lock=lock, heartbeat_interval_s=1.0, heartbeat_tolerable_misses=2,
                         retain_commits=3, archive_keep_min=4, archive_keep_max=8, orphan_min_age_s=3600,
                         clustering=clustering, compaction=compaction)
    while not os.path.exists(a["stop"]):
        try:
            cleaner.run_once()
        except (MultiWriterError, OSError) as e:
            print(f"cleaner: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        time.sleep(0.7)


if __name__ == "__main__":
    main()
