"""Streaming checkpoints: which batch id each writer committed last.

Each commit stores ``{writer_id: batch_id}`` under Hudi's ``_hudi_streaming_sink_checkpoint`` key
of ``extraMetadata``. Every commit carries the whole map forward (the newest commit's map plus its
own writer's entry), so the newest commit alone knows every writer's checkpoint: a writer that
stopped for good neither pins archival at its last commit nor loses its checkpoint when that
commit is archived.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .table.metadata import CommitMetadata
    from .table.timeline import Timeline

CHECKPOINT_KEY = "_hudi_streaming_sink_checkpoint"


def parse(meta: CommitMetadata) -> dict[str, int]:
    """The checkpoint map of one commit; unreadable entries are skipped (other tools write this
    key too, with their own values)."""
    raw = meta.extra_metadata.get(CHECKPOINT_KEY)
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    out: dict[str, int] = {}
    for writer, batch in value.items():
        try:
            out[str(writer)] = int(batch)
        except (TypeError, ValueError):
            continue
    return out


def of(meta: CommitMetadata, writer_id: str) -> int | None:
    """This writer's batch id in one commit, if it has one."""
    return parse(meta).get(writer_id)


def last(timeline: Timeline, writer_id: str) -> int | None:
    """The newest batch id this writer committed: scans back from the newest commit (the first
    map that names the writer wins, which is the newest commit once every commit carries the
    map forward)."""
    for i in reversed(timeline.completed_writes()):
        got = of(timeline.commit_metadata(i), writer_id)
        if got is not None:
            return got
    return None


def carried_forward(timeline: Timeline) -> dict[str, int]:
    """Every writer's newest checkpoint as far as the active timeline knows it: the union of the
    maps, newest commit first (older tables carry only each commit's own writer)."""
    out: dict[str, int] = {}
    for i in reversed(timeline.completed_writes()):
        for writer, batch in parse(timeline.commit_metadata(i)).items():
            out.setdefault(writer, batch)
    return out


def encode(checkpoints: dict[str, int]) -> str:
    """The JSON stored under :data:`CHECKPOINT_KEY` (batch ids as strings, as Hudi stores them)."""
    return json.dumps({w: str(b) for w, b in sorted(checkpoints.items())})
