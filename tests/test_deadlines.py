"""Deadlines: one thread makes every due call, none that was cancelled, the soonest first."""
from __future__ import annotations

import threading
import time

from multiwriter.threads import Deadlines


def test_due_calls_run_in_order_and_cancelled_ones_never():
    d = Deadlines("test-deadlines")
    ran: list[str] = []
    done = threading.Event()
    d.call_after(0.3, lambda: (ran.append("late"), done.set()))
    cancel = d.call_after(0.1, lambda: ran.append("cancelled"))
    d.call_after(0.05, lambda: ran.append("soon"))  # sooner than what the thread waits for
    cancel()
    t0 = time.monotonic()
    assert done.wait(5)
    assert ran == ["soon", "late"] and time.monotonic() - t0 >= 0.25


def test_a_failing_call_leaves_the_others_running():
    d = Deadlines("test-deadlines-fail")
    done = threading.Event()
    d.call_after(0.0, lambda: 1 / 0)
    d.call_after(0.05, done.set)
    assert done.wait(5)
