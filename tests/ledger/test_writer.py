"""The background ledger writer: batches, survives outages via the spool, never duplicates, flushes on close."""
from __future__ import annotations

import time

import pytest
from sqlalchemy import event, func, select

from core.db.models import RequestLedger
from ledger import LedgerWriter, chain
from tests.ledger.factories import T0, make_row


def count_rows(engine) -> int:
    with engine.connect() as conn:
        return conn.scalar(select(func.count()).select_from(RequestLedger))


def ids_in_db(engine) -> list[str]:
    with engine.connect() as conn:
        return sorted(conn.scalars(select(RequestLedger.request_id)))


def spool_lines(writer: LedgerWriter) -> int:
    paths = [writer.spool.path, writer.spool.replaying]
    return sum(len(p.read_text().splitlines()) for p in paths if p.exists())


@pytest.fixture
def make_writer(db_engine, tmp_path):
    made: list[LedgerWriter] = []

    def make(**kw) -> LedgerWriter:
        kw.setdefault("spool_path", tmp_path / "spool.ndjson")
        kw.setdefault("flush_interval_s", 0.02)
        kw.setdefault("retry_interval_s", 0.05)
        w = LedgerWriter(db_engine, **kw)
        made.append(w)
        return w

    yield make
    for w in made:
        w.close(timeout=10)


def test_rows_are_written_in_batches(db_engine, make_writer):
    commits = []
    event.listen(db_engine, "commit", lambda conn: commits.append(1))
    writer = make_writer(batch_size=500)
    for i in range(1200):  # queued before the thread starts: it sees them all at once
        writer.submit(make_row(f"r{i:04d}", at_s=i))
    writer.start()
    assert writer.flush() is True
    assert count_rows(db_engine) == 1200
    assert len(commits) == 3  # 500 + 500 + 200, not 1200 transactions


def test_row_round_trips_through_the_database(db_engine, make_writer):
    writer = make_writer().start()
    original = make_row("r1", status="aborted", finish_reason="abort", tpot_ms=None, ttft_met=False, slo_met=None)
    writer.submit(original)
    assert writer.flush()
    with db_engine.connect() as conn:
        stored = conn.execute(select(RequestLedger.__table__)).mappings().one()
    chained = {"chain_seq", "prev_hash", "row_hash", "timeline_sha256", "events_seq"}
    assert {k: v for k, v in stored.items() if k not in chained} == \
        {k: v for k, v in original.to_dict().items() if k not in chained}
    # A final row is chained as it is written: the first of its tenant, hashed over what was stored.
    assert (stored["chain_seq"], stored["prev_hash"], stored["events_seq"]) == (1, chain.GENESIS, 0)  # no event yet
    assert stored["row_hash"] == chain.row_hash(chain.GENESIS, stored)
    assert stored["timeline_sha256"] == chain.timeline_digest(original.timeline)


def test_same_request_id_is_written_once(db_engine, make_writer):
    writer = make_writer().start()
    writer.submit(make_row("dup", ttft_ms=1.0))
    writer.submit(make_row("dup", ttft_ms=2.0))
    assert writer.flush()
    writer.submit(make_row("dup", ttft_ms=3.0))
    assert writer.flush()
    with db_engine.connect() as conn:
        assert conn.scalars(select(RequestLedger.ttft_ms)).all() == [1.0]


def test_outage_spills_to_spool_and_replays_without_duplicates(db_engine, make_writer, db_outage):
    writer = make_writer().start()
    writer.submit(make_row("before"))
    assert writer.flush()
    with db_outage():
        for i in range(30):
            writer.submit(make_row(f"down{i:02d}"))
        assert writer.flush(timeout=20) is False  # handled, but not in the database
        assert writer.healthy is False
        assert spool_lines(writer) == 30  # every row went to disk at once, none waits in memory
    # Back up: the next attempt writes memory and spool, and the spool disappears.
    deadline = time.monotonic() + 20
    while not writer.flush() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert writer.healthy is True
    assert ids_in_db(db_engine) == sorted(["before"] + [f"down{i:02d}" for i in range(30)])
    assert not writer.spool.has_data()


def test_spool_left_by_a_crash_is_replayed_once(db_engine, make_writer):
    first = make_writer().start()
    first.submit(make_row("a"))
    assert first.flush()
    # A previous process spooled "a" (already in the database: it crashed after the insert) and "b".
    first.spool.append([make_row("a"), make_row("b")])
    first.close()
    second = make_writer().start()
    assert second.flush()
    assert ids_in_db(db_engine) == ["a", "b"]


def test_close_flushes_everything(db_engine, make_writer):
    writer = make_writer(flush_interval_s=1.0).start()
    for i in range(50):
        writer.submit(make_row(f"c{i}"))
    writer.close()
    assert count_rows(db_engine) == 50


def test_close_during_outage_spools_and_next_start_writes(db_engine, make_writer, db_outage):
    writer = make_writer().start()
    with db_outage():
        for i in range(25):
            writer.submit(make_row(f"x{i}"))
        writer.close(timeout=20)
        assert spool_lines(writer) == 25
        writer.submit(make_row("late"))  # after close: straight to the spool, not lost
        assert spool_lines(writer) == 26
    restarted = make_writer().start()
    assert restarted.flush()
    assert count_rows(db_engine) == 26


@pytest.mark.timing
def test_submit_never_blocks_when_the_queue_is_full(db_engine, make_writer):
    writer = make_writer(max_queue=5)  # not started: nothing drains the queue
    t0 = time.monotonic()
    for i in range(20):
        writer.submit(make_row(f"q{i:02d}"))
    assert time.monotonic() - t0 < 2.0
    assert spool_lines(writer) == 15
    writer.start()
    assert writer.flush()
    assert count_rows(db_engine) == 20


def test_a_bad_row_does_not_hold_up_the_others(db_engine, make_writer):
    writer = make_writer().start()
    writer.submit(make_row("good1"))
    writer.submit(make_row("bad", http_status=None))  # NOT NULL violation on every backend
    writer.submit(make_row("good2"))
    assert writer.flush()
    assert ids_in_db(db_engine) == ["good1", "good2"]
    rejected = writer.spool.path.with_name(writer.spool.path.name + ".rejected")
    assert '"request_id":"bad"' in rejected.read_text()


def statuses(engine) -> dict[str, str]:
    with engine.connect() as conn:
        return dict(conn.execute(select(RequestLedger.request_id, RequestLedger.status)).all())


def test_final_status_wins_whatever_order_rows_arrive_in(db_engine, make_writer):
    writer = make_writer().start()
    # Same batch: running then finished; separate batches: finished first, then a late running/interrupted.
    writer.submit(make_row("same", status="running", http_status=0))
    writer.submit(make_row("same", status="finished"))
    writer.submit(make_row("late", status="aborted", http_status=499))
    assert writer.flush()
    writer.submit(make_row("late", status="running", http_status=0))
    writer.submit(make_row("late", status="interrupted", http_status=0))
    writer.submit(make_row("crash", status="running", http_status=0))
    assert writer.flush()
    writer.submit(make_row("crash", status="interrupted", http_status=0))
    writer.submit(make_row("revived", status="interrupted", http_status=0))
    assert writer.flush()
    writer.submit(make_row("revived", status="finished"))  # its final row was spooled; it did finish
    writer.submit(make_row("crash", status="running", http_status=0))
    assert writer.flush()
    assert statuses(db_engine) == {"same": "finished", "late": "aborted", "crash": "interrupted",
                                   "revived": "finished"}


def test_a_refused_write_goes_to_the_spool_at_once(db_engine, make_writer, db_outage):
    writer = make_writer(retry_interval_s=60.0).start()
    with db_outage():
        durable = writer.submit(make_row("one", status="running", http_status=0))
        assert durable.result(timeout=10) is False  # durable, in the spool, not waiting in memory
        assert spool_lines(writer) == 1
        assert writer.submit(make_row("two")).result(timeout=10) is False
        assert spool_lines(writer) == 2
        assert writer.stats()["spool_bytes"] > 0
    writer.retry_interval_s = 0.05
    writer._next_try = 0.0
    deadline = time.monotonic() + 20
    while not writer.flush() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert statuses(db_engine) == {"one": "running", "two": "finished"}
    assert writer.submit(make_row("three")).result(timeout=10) is True  # in the database


def test_spool_bound_loses_loudly_never_silently(db_engine, make_writer, db_outage):
    writer = make_writer(retry_interval_s=60.0, max_spool_bytes=2000).start()
    with db_outage():
        results = [writer.submit(make_row(f"s{i}")) for i in range(10)]
        kept = lost = 0
        for f in results:
            try:
                f.result(timeout=10)
                kept += 1
            except OSError:
                lost += 1
    assert kept >= 1 and lost >= 1 and kept + lost == 10
    assert writer.stats()["lost"] == lost
    assert writer.spool.size_bytes() <= 2000


def test_restart_interrupts_only_its_own_earlier_running_rows(db_engine, make_writer, tmp_path):
    old = T0.timestamp() + 100  # rows before this belong to the previous run
    first = make_writer(gateway_id="gw-a").start()
    for rid, gw, at in (("a-old", "gw-a", 1), ("b-old", "gw-b", 1), ("a-new", "gw-a", 200)):
        first.submit(make_row(rid, status="running", http_status=0, at_s=at, timeline={"gateway": gw}))
    assert first.flush()
    first.close()
    # What the crashed run had only in its spool: one request still running, one that finished.
    first.spool.append([make_row("spooled-run", status="running", http_status=0, timeline={"gateway": "gw-a"}),
                        make_row("spooled-done", status="running", http_status=0, timeline={"gateway": "gw-a"}),
                        make_row("spooled-done", status="finished")])
    second = make_writer(gateway_id="gw-a")
    assert second.recover(old) == 1  # "spooled-run": interrupted in the spool before anything else
    second.start()
    assert second.flush()
    assert statuses(db_engine) == {"a-old": "interrupted", "b-old": "running", "a-new": "running",
                                   "spooled-run": "interrupted", "spooled-done": "finished"}
    with db_engine.connect() as conn:
        row = conn.execute(select(RequestLedger).where(RequestLedger.request_id == "a-old")).mappings().one()
    assert row["slo_met"] is False and row["input_tokens"] == 100  # a miss, with what was known


def test_a_waiter_that_gave_up_does_not_stop_the_writer(db_engine, make_writer):
    """A client that disconnects cancels its row's future; the writer must go on writing every later row
    (it used to die on set_result of the cancelled future, and every later request then waited forever)."""
    writer = make_writer()
    abandoned = writer.submit(make_row("gone"))
    assert abandoned.cancel()  # the waiter went away before the thread ran
    kept = writer.submit(make_row("kept"))
    writer.start()
    assert kept.result(timeout=10) is True
    later = writer.submit(make_row("later"))
    assert later.result(timeout=10) is True and writer.flush()
    assert ids_in_db(db_engine) == ["gone", "kept", "later"]  # the abandoned row is written all the same
    assert writer.stats()["alive"] and writer.stats()["cycle_failures"] == 0


def test_a_cycle_that_raises_is_logged_and_the_writer_goes_on(db_engine, make_writer, monkeypatch):
    writer = make_writer()
    real = writer._write
    calls = {"n": 0}

    def flaky(items, **kw):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("a bug in one cycle")
        return real(items, **kw)

    monkeypatch.setattr(writer, "_write", flaky)
    writer.start()
    first = writer.submit(make_row("first"))
    deadline = time.monotonic() + 10
    while writer.stats()["cycle_failures"] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert writer.stats()["cycle_failures"] == 1 and writer.stats()["alive"]
    assert writer.submit(make_row("second")).result(timeout=10) is True
    assert "second" in ids_in_db(db_engine)
    assert first.result(timeout=10) is False  # settled: kept in the spool by the failed cycle, not left waiting
    assert writer.flush() and "first" in ids_in_db(db_engine)  # then replayed into the database
