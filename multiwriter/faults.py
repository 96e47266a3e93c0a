"""Named fault points in the commit protocol, for reliability tests.

Off by default and cheap when off (one dict lookup). Switched on by the environment variable
``MULTIWRITER_FAULTS`` (``point=action[,point=action...]``) or programmatically with
:func:`configure`. Actions: ``crash`` (``os._exit(137)``: no cleanup, like SIGKILL), ``kill``
(SIGKILL self), ``hang`` (sleep ``MULTIWRITER_FAULT_HANG_S`` seconds, default 3600), ``error``
(raise :class:`InjectedFault`). An action may carry a count: ``after-data-files=crash@2`` fires
on the second pass only.

With ``MULTIWRITER_FAULT_DIR`` set, a hang announces itself by creating ``<dir>/<point>.hanging``
and ends early once ``<dir>/<point>.release`` exists, so tests wait on events, not on sleeps.
"""
from __future__ import annotations

import os
import signal
import time

from .errors import InjectedFault

POINTS = (
    "after-requested",
    "after-inflight",
    "after-data-files",
    "after-lock-acquired",
    "before-complete",
    "before-completed-file",
    "before-metadata-table",
    "mid-metadata-deltacommit",
    "after-metadata-table",
    "after-decision",
    "after-completed-file",
    "mid-metadata-compaction",
    "mid-metadata-rollback",
    "after-metadata-rollback",
    "mid-metadata-clean",
    "after-complete",
    "after-begin-ahead",
    "mid-rollback",
    "mid-clean",
    "mid-archival",
    "mid-clustering",
    "mid-log-append",
    "compaction-after-plan",
    "compaction-after-files",
    "compaction-before-complete",
    "bootstrap-after-table",
    "bootstrap-after-skeletons",
    "bootstrap-after-index",
    "bootstrap-after-metadata-only",
    "bootstrap-after-commit",
)
ACTIONS = ("crash", "kill", "hang", "error")


_rules: dict[str, tuple[str, int]] = {}
_hits: dict[str, int] = {}


def parse(spec: str) -> dict[str, tuple[str, int]]:
    rules: dict[str, tuple[str, int]] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        point, _, action = item.partition("=")
        action, _, nth = action.partition("@")
        if point not in POINTS or action not in ACTIONS:
            raise ValueError(f"bad fault rule {item!r}: points {POINTS}, actions {ACTIONS}")
        rules[point] = (action, int(nth) if nth else 1)
    return rules


def configure(spec: str | None) -> None:
    _rules.clear()
    _hits.clear()
    if spec:
        _rules.update(parse(spec))


def armed(name: str) -> bool:
    """Does a rule name this point? (A step that would do extra work only to stop half-way
    there, such as splitting one batch request in two, does it only then.)"""
    return name in _rules


def point(name: str) -> None:
    """Mark a fault point; does nothing unless a rule names it."""
    if not _rules:
        return
    rule = _rules.get(name)
    if rule is None:
        return
    _hits[name] = _hits.get(name, 0) + 1
    action, nth = rule
    if _hits[name] != nth:
        return
    if action == "crash":
        os._exit(137)
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "hang":
        _hang(name)
        return
    raise InjectedFault(f"injected fault at {name}")


def _hang(name: str) -> None:
    limit = time.monotonic() + float(os.environ.get("MULTIWRITER_FAULT_HANG_S", "3600"))
    signal_dir = os.environ.get("MULTIWRITER_FAULT_DIR")
    if not signal_dir:
        time.sleep(max(0.0, limit - time.monotonic()))
        return
    with open(os.path.join(signal_dir, f"{name}.hanging"), "w") as f:
        f.write(str(os.getpid()))
    release = os.path.join(signal_dir, f"{name}.release")
    while time.monotonic() < limit and not os.path.exists(release):
        time.sleep(0.02)


configure(os.environ.get("MULTIWRITER_FAULTS"))
