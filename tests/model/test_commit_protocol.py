"""Every interleaving of the commit protocol model (tests/model/commit_protocol.py), for 2-3 actors.

The real protocol must keep every invariant in every reachable state; each mutant must be caught
(a counterexample trace found). The counterexamples print with ``-s``."""
from __future__ import annotations

import pytest

from tests.model.commit_protocol import Config, WriterSpec, check

W = WriterSpec

# Bounded so that each exploration stays well under a minute on two cores.
REAL = {
    # two writers that may each pause (heartbeat and lease lapse) at any step, the cleaner rolling
    # back and pruning the decision log, one consumer read
    "two writers pausing, cleaner": Config(writers=(W(), W()), cleaner_pauses=0, crashes=0),
    # a crash anywhere (a writer's or the cleaner's), the cleaner pausing, one writer pausing
    "crash, cleaner pausing": Config(writers=(W(), W(pauses=0)), cleaner_pauses=1, crashes=1),
    # three writers on one file group, two of them pausing, no cleaner
    "three writers": Config(writers=(W(), W(), W(pauses=0)), cleaner=False, crashes=0),
    # a writer committing two batches against one, a crash, two consumer reads
    "two batches, crash": Config(writers=(W(groups=("g", "g")), W()), cleaner=False, consumer_reads=2),
    # a Hudi JVM writer next to ours, while ours neither pauses nor crashes
    "JVM writer, ours steady": Config(writers=(W(pauses=0), W(kind="jvm")), crashes=0, cleaner_pauses=1),
    # two data files per batch, each after the liveness check: a writer pausing between them while
    # the cleaner rolls it back, beside a second writer
    "two files per batch, cleaner": Config(writers=(W(), W(pauses=0)), crashes=0, cleaner_pauses=0, files=2),
    # the next batch begun in the commit's hold (WriterConfig.begin_ahead_s): two writers of two
    # batches each, one pausing, the cleaner rolling back what lapsed
    "begin ahead, pausing, cleaner": Config(writers=(W(groups=("g", "g")), W(groups=("g", "g"), pauses=0)),
                                            cleaner_pauses=0, crashes=0, begin_ahead=True),
    # begin ahead beside a crash anywhere and two consumer reads
    "begin ahead, crash": Config(writers=(W(groups=("g", "g"), pauses=0), W()), cleaner=False, consumer_reads=2,
                                 begin_ahead=True),
}


@pytest.mark.parametrize("name", list(REAL))
def test_real_protocol_keeps_every_invariant(name):
    res = check(REAL[name], max_states=400_000)
    print(f"\n{name}: {res.states} states, {res.transitions} transitions, {res.final_states} quiescent, "
          f"{res.seconds:.1f}s")
    assert res.violation is None, str(res.violation)
    assert not res.deadlocks
    assert res.final_states > 0


MUTANTS = {
    # writers write their completed file without the atomic decision create
    "no-decision": ("conflict rule", None),
    # the old protocol: withdraw the completed file when another completion appeared
    "withdraw": ("visible commit never disappears", "visible commit never disappears"),
    # a holder that finds the newest decision unmaterialised ignores it
    "no-roll-forward": (None, None),
    # the cleaner deletes a pending writer's files without deciding
    "rollback-without-decision": (None, None),
}


#: the liveness check's mutants, explored with two data files per batch
FILE_MUTANTS = {
    # data files written with no check at all
    "no-liveness-check": "no data file after its instant's rollback",
    # the timeline listed at the first file only, the heartbeat client never asked
    "listing-once-without-client": "no data file after its instant's rollback",
}


@pytest.mark.parametrize("mutant", list(MUTANTS) + list(FILE_MUTANTS))
def test_mutant_is_caught(mutant):
    if mutant in FILE_MUTANTS:
        expected, only = FILE_MUTANTS[mutant], FILE_MUTANTS[mutant]
        cfg = Config(writers=(W(), W(pauses=0)), crashes=0, cleaner_pauses=0, files=2, mutant=mutant)
    else:
        expected, only = MUTANTS[mutant]
        cfg = Config(mutant=mutant)
    res = check(cfg, max_states=400_000, only=only)
    print(f"\n{mutant}: caught after {res.states} states, {res.seconds:.1f}s\n{res.violation}")
    assert res.violation is not None, f"mutant {mutant} not caught in {res.states} states"
    if expected is not None:
        assert res.violation.invariant == expected


def test_begin_ahead_keeps_times_unique_only_inside_the_hold():
    """Times untagged by issuer (the lock alone makes them unique), no pauses: the next instant
    begun inside the commit's hold never repeats a time; issued after the release from the view
    of the hold, it repeats the time a writer that began meanwhile issued."""
    cfg = dict(writers=(W(groups=("g", "g"), pauses=0), W(pauses=0)), cleaner=False, crashes=0, unique_times=False,
               begin_ahead=True)
    real = check(Config(**cfg), max_states=400_000)
    assert real.violation is None, str(real.violation)
    assert real.final_states > 0
    res = check(Config(**cfg, mutant="ahead-after-release"), max_states=400_000, only="instant times unique")
    print(f"\n{res.violation}")
    assert res.violation is not None
    assert any("(no lock) begins batch 1" in step for step in res.violation.trace)


# What the model finds in the protocol as first written (kept as tests: each is a counterexample
# the real code must not allow).

def test_finding_any_decision_above_ours_is_not_a_loss():
    """Creating decisions/<N+1> and then finding a decision above it does not mean the slot had
    been pruned: a later holder may have read ours as the newest, rolled it forward (the commit is
    visible) and decided N+2. Treating that as a loss deletes the data of a visible commit."""
    res = check(Config(rolled_forward_wins=False), max_states=400_000)
    print(f"\n{res.violation}")
    assert res.violation is not None
    assert res.violation.invariant == "completed commit's files exist"
    assert any("(its slot was pruned): lost" in step for step in res.violation.trace)


def test_finding_times_are_unique_only_under_a_held_lock():
    """Issued "above every time seen" from a view read under a lease that lapsed, a time can equal
    one another actor issued meanwhile (here the cleaner's rollback plan and a writer's instant)."""
    res = check(Config(unique_times=False), max_states=400_000)
    print(f"\n{res.violation}")
    assert res.violation is not None
    assert res.violation.invariant == "instant times unique"


@pytest.mark.parametrize("ours", [W(pauses=1), W(pauses=0)], ids=["ours pausing", "ours crashing"])
def test_finding_a_jvm_writer_ignores_the_decision_log(ours):
    """A Hudi JVM writer neither reads nor respects the decision log: a decision of ours that is
    not yet materialised (its writer paused or crashed between the decision and the completed
    file) is invisible to it, so it commits on the same base, and the later roll-forward makes
    both visible."""
    crashes = 0 if ours.pauses else 1
    res = check(Config(writers=(ours, W(kind="jvm")), crashes=crashes, cleaner_pauses=0), max_states=400_000)
    print(f"\n{res.violation}")
    assert res.violation is not None
    assert res.violation.invariant == "conflict rule"
