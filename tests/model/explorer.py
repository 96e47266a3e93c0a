"""A small explicit-state explorer: breadth-first search over every interleaving of a model.

Generic over the model: a state is any hashable value (frozen dataclasses, named tuples, tuples of
frozensets), ``successors(state)`` yields ``(label, next_state)`` pairs, one per enabled step of any
actor, and the invariants are functions of one state that return ``None`` when it is fine or a
message when it is not. Visited states are memoised (a dict from state to the step that first
reached it), so each state is expanded once and a violation comes with the shortest trace that
reaches it (breadth first). ``final`` is checked on the states where the model says the system is
quiescent (``is_final``), or, without ``is_final``, on states with no successors.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterable, Optional, Sequence, Tuple

State = Hashable
Successors = Callable[[State], Iterable[Tuple[str, State]]]
Check = Callable[[State], Optional[str]]


@dataclass
class Violation:
    """A reachable state breaking an invariant, with the steps from the initial state to it."""

    invariant: str
    message: str
    trace: list[str]
    state: State

    def __str__(self) -> str:
        steps = "\n".join(f"  {i + 1:2d}. {label}" for i, label in enumerate(self.trace))
        return f"{self.invariant}: {self.message}\n{steps}"


@dataclass
class Result:
    states: int = 0
    transitions: int = 0
    final_states: int = 0
    seconds: float = 0.0
    violation: Optional[Violation] = None
    deadlocks: list[State] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.violation is None and not self.deadlocks


class StateLimitExceeded(RuntimeError):
    pass


def explore(
    initial: State,
    successors: Successors,
    invariants: Sequence[Tuple[str, Check]] = (),
    final: Sequence[Tuple[str, Check]] = (),
    is_final: Optional[Callable[[State], bool]] = None,
    max_states: int = 5_000_000,
) -> Result:
    """Visit every state reachable from ``initial``; stop at the first violation.

    A state with no successors that ``is_final`` does not accept is a deadlock (recorded, and the
    search goes on). Raises :class:`StateLimitExceeded` past ``max_states`` (a bound on the model
    gone wrong, not a result)."""
    t0 = time.perf_counter()
    parent: dict[State, Optional[Tuple[State, str]]] = {initial: None}
    queue: deque[State] = deque([initial])
    res = Result()

    def trace(s: State) -> list[str]:
        steps: list[str] = []
        while (p := parent[s]) is not None:
            s, label = p
            steps.append(label)
        return steps[::-1]

    def check(s: State, checks: Sequence[Tuple[str, Check]]) -> Optional[Violation]:
        for name, fn in checks:
            msg = fn(s)
            if msg is not None:
                return Violation(name, msg, trace(s), s)
        return None

    res.violation = check(initial, invariants)
    while queue and res.violation is None:
        s = queue.popleft()
        n = 0
        for label, nxt in successors(s):
            n += 1
            res.transitions += 1
            if nxt in parent:
                continue
            parent[nxt] = (s, label)
            if len(parent) > max_states:
                raise StateLimitExceeded(f"more than {max_states} states")
            v = check(nxt, invariants)
            if v is not None:
                res.violation = v
                break
            queue.append(nxt)
        if res.violation is not None:
            break
        quiescent = is_final(s) if is_final is not None else n == 0
        if quiescent:
            res.final_states += 1
            res.violation = check(s, final)
        elif n == 0:
            res.deadlocks.append(s)
    res.states = len(parent)
    res.seconds = time.perf_counter() - t0
    return res
