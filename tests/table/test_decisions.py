"""The decision log (:mod:`multiwriter.table.decisions`): one create decides each completion.

Local disk and S3 (moto's server, its writes serialized by a WSGI middleware,
``testbed.moto_s3.SerializedWrites``: moto's own conditional PUT is not atomic under concurrency,
so without it the test would prove nothing)."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

import multiwriter as mw
from multiwriter.errors import CommitDecisionLostError, TableFormatError
from multiwriter.storage import Storage
from multiwriter.table import decisions
from multiwriter.table.decisions import COMPLETE, ROLLBACK, Decision, DecisionLog
from tests.conftest import trips
from tests.oracle import hudi_read, rows


def _log(path: str) -> DecisionLog:
    t = mw.Table.open(path)
    return DecisionLog(t.storage, t.config)


def _complete(t: str, c: str, actor: str = "w") -> Decision:
    return Decision(COMPLETE, t, "commit", actor, completion=c, data=b"{}")


def test_the_next_decision_goes_to_one_completer_only(trips_table, table_path):
    log = _log(table_path)
    assert log.newest() is None
    first = log.decide(None, _complete("20260101000000001", "20260101000000002"))
    assert first.seq == 1 and log.newest() == first
    with pytest.raises(CommitDecisionLostError, match="decision 1 was taken"):
        log.decide(None, _complete("20260101000000003", "20260101000000004", "lapsed"))
    assert log.newest() == first, "the loser left nothing"
    second = log.decide(first, Decision(ROLLBACK, "20260101000000005", "rollback", "job", target="20260101000000003"))
    assert second.seq == 2 and log.newest().target == "20260101000000003"


def test_a_holder_that_slept_through_the_deletion_of_old_decisions_still_loses(trips_table, table_path):
    """Old decisions are deleted; a holder frozen since decision 1 finds 2 free again, creates
    it, sees the newer ones, deletes its stray object and is refused."""
    log = _log(table_path)
    d = None
    for n in range(decisions.PRUNE_EVERY * 3):
        d = log.decide(d, _complete(f"2026010100{n:07d}", f"2026010101{n:07d}"))
    assert not Path(table_path, decisions.path_of(2)).exists(), "old decisions were deleted"
    first = Decision(COMPLETE, "20250101000000001", "commit", "w", completion="20250101000000002", data=b"{}", seq=1)
    with pytest.raises(CommitDecisionLostError, match="exist already"):
        log.decide(first, _complete("20260102000000001", "20260102000000002", "lapsed"))
    assert not Path(table_path, decisions.path_of(2)).exists(), "the stray decision was removed"
    assert log.newest() == d


def test_a_decider_frozen_right_after_its_create_won_though_a_newer_decision_exists(trips_table, table_path,
                                                                                     monkeypatch):
    """Frozen between its create and its look at the log, a decider finds the next decision made
    by a completer that rolled its own forward first: it won (its completed file is there), and
    it must neither delete its decision nor refuse (that would drop a visible commit's files)."""
    log = _log(table_path)
    real = Storage.create_exclusive
    ours = _complete("20260101000000001", "20260101000000002")

    def create_then_freeze(self, rel, data):
        created = real(self, rel, data)
        monkeypatch.setattr(Storage, "create_exclusive", real)  # meanwhile, another completer:
        newest, tl = decisions.settle(log, mw.Table.open(table_path).timeline)
        assert tl.find(ours.instant, "commit").is_completed, "it rolled ours forward"
        log.decide(newest, _complete("20260101000000003", "20260101000000004", "other"))
        return created

    monkeypatch.setattr(Storage, "create_exclusive", create_then_freeze)
    won = log.decide(None, ours)
    assert won.seq == 1 and log.read(1).instant == ours.instant and log.newest().seq == 2
    tl = mw.Table.open(table_path).timeline()
    assert [i.requested_time for i in tl.completed()] == [ours.instant], "still completed, nothing withdrawn"


def test_a_decided_commit_is_rolled_forward_by_the_next_writer(trips_table, table_path):
    """A writer decided its commit and died before its completed file: the next writer's commit
    writes it from the decision, so both batches are in the table (hudi-rs agrees)."""
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    mw.write(trips([1, 2], value=1.0), table_path, cfg)
    table = mw.Table.open(table_path)
    done = table.timeline().last_completed_write()
    rel = f"{table.config.timeline_dir}/{done.file_name(table.config.version)}"
    data = Path(table_path, rel).read_bytes()
    Path(table_path, rel).unlink()  # as if the writer died right after its decision
    assert dict(rows(mw.Table.open(table_path).read(), ["id", "value"])) == {}
    mw.write(trips([3], value=3.0), table_path, cfg)
    assert Path(table_path, rel).read_bytes() == data, "rolled forward byte for byte"
    want = {"1": 1.0, "2": 1.0, "3": 3.0}
    assert dict(rows(mw.Table.open(table_path).read(), ["id", "value"])) == want
    assert dict(rows(hudi_read(table_path), ["id", "value"])) == want


def test_a_corrupt_decision_is_a_typed_error_naming_it(trips_table, table_path):
    log = _log(table_path)
    Path(table_path, decisions.DIR).mkdir(parents=True, exist_ok=True)
    Path(table_path, decisions.path_of(7)).write_bytes(b'{"seq": 7, "kind": "complete", "instant": "../x"}')
    with pytest.raises(TableFormatError, match="00000000000000000007.json"):
        log.newest()


def test_racing_completers_on_s3_decide_each_step_once(s3_server):
    """Six threads, each with its own view, race to decide 40 steps on S3: every step has one
    decider, every decider's create was conditional, and each winner's bytes are what is stored."""
    uri, middleware = s3_server() + "/t", s3_server.writes
    before = middleware.conditional
    wins: dict[int, str] = {}
    losses = [0]
    mu = threading.Lock()

    def racer(n: int) -> None:
        log = DecisionLog(Storage(uri), None)
        while True:
            d = log.newest()
            if d is not None and d.seq >= 40:
                return
            mine = _complete(f"2026010100{n:02d}{(d.seq if d else 0):05d}", "20270101000000000", actor=f"r{n}")
            try:
                won = log.decide(d, mine)
            except CommitDecisionLostError:
                with mu:
                    losses[0] += 1
                continue
            with mu:
                assert won.seq not in wins, f"step {won.seq} decided twice"
                wins[won.seq] = won.actor

    threads = [threading.Thread(target=racer, args=(n,)) for n in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    log = DecisionLog(Storage(uri), None)
    assert sorted(wins) == list(range(1, len(wins) + 1)) and len(wins) >= 40
    assert log.read(len(wins) - 1).actor == wins[len(wins) - 1]
    assert losses[0] > 0, "the racers really raced"
    assert middleware.conditional - before >= len(wins) + losses[0], "every decision was a conditional create"


def test_a_create_whose_answer_was_lost_and_retried_into_a_412_is_still_ours(s3_server, monkeypatch):
    """The SDK retries a conditional PUT whose first answer was lost; the retry gets HTTP 412
    for our own object. Taking that for a loss would abort a decided commit and delete its
    files: the object's bytes tell whose it is."""
    from botocore.exceptions import ClientError

    from multiwriter import s3

    storage = Storage(s3_server() + "/t")
    client = s3.data_client(None)
    real = client.put_object

    def lost_answer_then_412(**kw):
        real(**kw)
        raise ClientError({"Error": {"Code": "PreconditionFailed"}, "ResponseMetadata": {"HTTPStatusCode": 412}},
                          "PutObject")

    monkeypatch.setattr(client, "put_object", lost_answer_then_412)
    assert storage.create_exclusive("d/1.json", b'{"nonce": "ours"}') is True
    assert storage.create_exclusive("d/1.json", b'{"nonce": "theirs"}') is False
