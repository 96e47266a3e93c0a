"""Rollback command blocks in a file slice's logs: which blocks a reader still applies.

Before table version 8, Hudi rolled back a failed deltacommit that had appended to a log file by
appending a *command block* (type ``ROLLBACK_BLOCK``) whose ``TARGET_INSTANT_TIME`` header names
the failed instant. Hudi's reader (``BaseHoodieLogRecordReader.scanInternalV1``) walks the slice's
log files in order, queueing each data, delete and corrupt block; at a rollback block it drops
every queued block written by the target instant (``INSTANT_TIME`` equal to it), whichever log
file of the slice it came from, and every queued corrupt block. Blocks queued after the rollback
block stay, even of the target instant; a rollback block matching nothing changes nothing (Hudi
logs "invalid or extra rollback command block"). Any other command is refused, as Hudi's reader
throws ``UnsupportedOperationException`` for it.
"""
from __future__ import annotations

from collections.abc import Sequence

from ..errors import CommandBlockError
from ..format.log_file import COMMAND, LogBlock


def surviving_blocks(logs: Sequence[tuple[str, Sequence[LogBlock]]]) -> list[list[LogBlock]]:
    """Per log file (``(path, blocks)`` in the slice's log order), the blocks a reader applies:
    its data, delete and corrupt blocks that no later rollback block drops, in block order.

    Raises :class:`CommandBlockError` naming the log file and the block's offset for a command
    block that is not a rollback, or a rollback without a target instant."""
    queued: list[tuple[int, LogBlock]] = []  # (log file, block), in reading order
    for i, (path, blocks) in enumerate(logs):
        for b in blocks:
            if b.kind != COMMAND:
                queued.append((i, b))
                continue
            target = _target(path, b)
            queued = [(f, q) for f, q in queued if q.kind != "corrupt" and q.instant_time != target]
    out: list[list[LogBlock]] = [[] for _ in logs]
    for i, b in queued:
        out[i].append(b)
    return out


def _target(path: str, block: LogBlock) -> str:
    """The instant a rollback command block rolls back."""
    if not block.is_rollback:
        kind = block.header.get("COMMAND_BLOCK_TYPE")
        raise CommandBlockError(f"{path}: the command block at offset {block.offset} is of type {kind!r}, not a "
                                "rollback (0); Hudi's reader refuses it too", path=path, offset=block.offset)
    target = block.target_instant_time
    if not target:
        raise CommandBlockError(f"{path}: the rollback block at offset {block.offset} names no TARGET_INSTANT_TIME",
                                path=path, offset=block.offset)
    return target
