"""Property tests of the conflict check over random histories (pure logic, no I/O)."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from multiwriter.conflict import FileGroupOverlapStrategy
from multiwriter.instant_time import format_time
from multiwriter.format.instant import COMPLETED, REQUESTED, Instant
from multiwriter.table.metadata import CommitMetadata, WriteStat
from multiwriter.table.properties import TableConfig
from multiwriter.table.timeline import Timeline

GROUPS = [(p, f) for p in ("a", "b") for f in ("f1", "f2", "f3")]
group_sets = st.frozensets(st.sampled_from(GROUPS), max_size=4)


class _NoStorage:
    def read_bytes(self, rel):  # pending plans carry no bytes in these histories
        raise FileNotFoundError(rel)


def _timeline(history: list[tuple[int, int, frozenset]], pending_plans: list[frozenset]) -> Timeline:
    cfg = TableConfig(name="t", record_key=("id",))
    instants, cache = [], {}
    for n, (start, dur, groups) in enumerate(history):
        t = format_time(1_700_000_000 + start + n / 1000)
        c = format_time(1_700_000_000 + start + dur + 0.5 + n / 1000)
        i = Instant(t, "commit", COMPLETED, c)
        instants.append(i)
        meta = CommitMetadata()
        for p, f in groups:
            meta.partition_to_write_stats.setdefault(p, []).append(WriteStat(file_id=f, path="", partition_path=p))
        cache[f"{cfg.timeline_dir}/{i.file_name()}"] = meta
    for k, _ in enumerate(pending_plans):
        instants.append(Instant(format_time(1_800_000_000 + k), "replacecommit", REQUESTED))
    tl = Timeline(_NoStorage(), cfg, instants)  # type: ignore[arg-type]
    tl._meta_cache.update(cache)
    return tl


def _model_winner(history, base_at, ours):
    """The rule stated over the raw history (no timeline, no strategy code): among commits that
    completed strictly after the base, the one that completed first and shares a file group with
    ours wins; returns its index in ``history`` and the shared groups."""
    done = []
    for n, (start, dur, groups) in enumerate(history):
        completed_at = start + dur + 0.5 + n / 1000
        if base_at < 0 or completed_at > base_at:
            done.append((completed_at, n, groups))
    for _, n, groups in sorted(done):
        shared = {g for g in groups if g in ours}
        if shared:
            return n, frozenset(shared)
    return None


@settings(max_examples=300, deadline=None)
@given(
    history=st.lists(st.tuples(st.integers(0, 100), st.integers(0, 20), group_sets), max_size=8),
    base_at=st.integers(-1, 130),
    ours=group_sets,
)
def test_conflict_iff_overlap_with_a_commit_completed_after_base(history, base_at, ours):
    tl = _timeline(history, [])
    base = format_time(1_700_000_000 + base_at) if base_at >= 0 else None
    own = format_time(1_900_000_000)
    got = FileGroupOverlapStrategy().find_conflict(tl, base, own, set(ours))
    expected = _model_winner(history, base_at, ours)
    if expected is None:
        assert got is None
    else:
        n, shared = expected
        start, _, _ = history[n]
        assert got is not None
        assert got.winner.requested_time == format_time(1_700_000_000 + start + n / 1000)
        assert got.file_groups == shared


@given(history=st.lists(st.tuples(st.integers(0, 100), st.integers(0, 20), group_sets), max_size=8))
def test_nothing_conflicts_with_brand_new_groups(history):
    tl = _timeline(history, [])
    assert FileGroupOverlapStrategy().find_conflict(tl, None, format_time(1_900_000_000), set()) is None


def test_commits_completed_before_base_never_conflict():
    tl = _timeline([(0, 1, frozenset({("a", "f1")}))], [])
    base = tl.completed()[0].completion_time
    assert FileGroupOverlapStrategy().find_conflict(tl, base, format_time(1_900_000_000), {("a", "f1")}) is None
    assert FileGroupOverlapStrategy().find_conflict(tl, None, format_time(1_900_000_000), {("a", "f1")}) is not None
