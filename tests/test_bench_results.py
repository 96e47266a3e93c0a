"""benchmarks/RESULTS.md holds the latest figure of each section: a run replaces the blocks and
goal rows of the sections it ran and keeps the others; running again never makes it grow."""
from __future__ import annotations

from pathlib import Path

from benchmarks import goals, results_md
from benchmarks.run import write_results_md
from benchmarks.workloads import WORKLOADS

ROOT = Path(__file__).resolve().parents[1]


def _run(median_s: float, when: str, note: str = "") -> dict:
    return {"when": when, "size": "small", "sizes": {}, "note": note,
            "machine": {"platform": "Linux", "python": "3.11", "cpus": 2}, "versions": {"multiwriter": "0.1.0"},
            "results": {"failure": {"median_s": median_s, "all_s": [median_s], "bound_s": 3.0}}}


def test_a_section_run_replaces_its_block_and_keeps_the_others(tmp_path: Path):
    path = tmp_path / "RESULTS.md"
    other = results_md.block("timeline", "## Commit latency\n\nhand-written figures of an earlier run\n")
    path.write_text(results_md.update(None, WORKLOADS, {}, []) + other)

    write_results_md(_run(3.1, "2026-11-20T10:00:00+00:00", "busy machine"), path, tmp_path)
    first = path.read_text()
    assert "median 3.1 s" in first and "Taken 2026-11-20 10:00 UTC (busy machine)" in first
    assert "hand-written figures of an earlier run" in first
    # a new block goes where its section is in WORKLOADS
    names = [n for n in WORKLOADS if n in ("failure", "timeline")]
    assert first.index(f"section: {names[0]} -->") < first.index(f"section: {names[1]} -->")

    write_results_md(_run(4.2, "2026-11-21T10:00:00+00:00"), path, tmp_path)
    second = path.read_text()
    assert "median 4.2 s" in second and "median 3.1 s" not in second and "busy machine" not in second
    assert "hand-written figures of an earlier run" in second
    assert second.count("<!-- section: failure -->") == 1
    assert len(second.splitlines()) == len(first.splitlines())


def test_goal_rows_of_sections_not_run_are_kept():
    old = [results_md.goal_row("15.7 import multiwriter (s)", "goal_import", 0.3, 0.01, "2026-11-23", False),
           "| 99.9 a goal added by hand | 1.00 | <= 2.00 | yes | `stream` | 2026-11-01 |",
           "| 99.8 another | 1.00 | <= 2.00 | yes | `long_run` | 2026-11-01 |"]
    new = {"15.3 foreachBatch upsert vs deltalake merge in foreachBatch":
           results_md.goal_row("15.3 foreachBatch upsert vs deltalake merge in foreachBatch", "stream", 1.0, 0.5,
                               "2026-11-29", False)}
    rows = results_md.merge_goal_rows(old, new, goals.GOALS, {"stream"})
    text = "\n".join(rows)
    assert "| 15.7 import multiwriter (s) | 0.01 |" in text
    assert "| 15.3 foreachBatch upsert vs deltalake merge in foreachBatch | 0.50 |" in text
    assert "99.9" not in text and "99.8 another" in text  # a hand row goes with its section's run
    assert len(rows) == len(goals.GOALS) + 1


def test_the_published_file_has_one_block_per_section_and_every_goal():
    text = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    head, rows, blocks = results_md.parse(text)
    assert set(blocks) == set(WORKLOADS)
    assert {results_md.goal_of(r) for r in rows} >= {g for g, _, _ in goals.GOALS}
    assert results_md.update(text, WORKLOADS, {}, rows) == text
    for name, b in blocks.items():
        assert [ln for ln in b.splitlines() if ln.startswith("## ")] == [b.splitlines()[1]], name
        assert b.splitlines()[3].startswith("Taken "), name
