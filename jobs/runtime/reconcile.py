"""The queue reconciler: an unfinished item whose message is nowhere in Redis is enqueued again.

SQL is the ledger of items, Redis only the queue of their ids, and the two can part ways:
- kombu's Redis transport pops a message (BRPOP) before it records it as unacknowledged; a worker
  killed between the two loses the message, and its item stays `pending` with nothing to run it;
- Redis restarted without its data (or was flushed): every queued id is gone;
- a publish failed after the items were committed (the submission answered 503).
`finserve jobs resume` repairs this by hand; the reconciler does it on its own, from inside every
worker process (a daemon thread; a Redis lock lets one worker at a time do a pass).

A pass lists the item ids that have a message in Redis (waiting in the queue, or delivered and not yet
acknowledged, which includes retries waiting for their countdown in a worker), and the items SQL says
are unfinished and unowned (pending, or running past their lease). An item missing from Redis is only
a suspect the first time; it is enqueued again when the next pass (at least one interval later) still
finds it missing, so the brief moments where a message is legitimately in no list (between a worker's
BRPOP and its unacked record, between a submission's commit and its publish) never cause a re-enqueue.
A duplicate message would be harmless anyway: every claim is a conditional UPDATE (jobs/service.py).

Two cases skip that second look, because something else already proves the item is abandoned:
- its lease ran out (a worker renews its items' leases on a heartbeat, jobs/runtime/worker.py): the worker died,
  and the message it holds unacknowledged would come back only after the broker's visibility timeout
  (jobs_lease_s, 600 s). It is re-enqueued at once unless a message for it is waiting in the queue;
- Redis lost its data (restarted empty, flushed): the pass finds the marker key it left in Redis gone
  (`EpochWatch`; each worker remembers the marker it last saw), and every missing item is re-enqueued in
  that same pass.
And one case where a message is in Redis but nothing will run it before the visibility timeout: a worker
killed after its message was delivered (unacknowledged) and before its task claimed the item (prefetched,
or between the ack of one task and the start of the next). The item is still `pending`, with no lease to
run out; with `stranded_after_s` set, a pending item whose every message was delivered (and due, past any
retry countdown) more than that long ago is re-enqueued as abandoned: a live worker claims a delivered
item within moments. (A worker that is only slow gets a duplicate message, which its claim makes a no-op.)
"""
from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import redis
import structlog
from sqlalchemy.orm import Session, sessionmaker

from jobs.service import expired_item_ids, resumable_item_ids

log = structlog.get_logger("finserve.jobs")

LOCK_KEY = "finserve:reconcile:lock"
SUSPECTS_KEY = "finserve:reconcile:suspects"
EPOCH_KEY = "finserve:reconcile:epoch"  # a marker: gone means this Redis lost its data since a worker saw it
UNACKED_KEY = "unacked"  # kombu's Redis transport: delivered, unacknowledged messages by delivery tag
UNACKED_INDEX_KEY = "unacked_index"  # ... and when each was delivered (a sorted set: delivery tag -> time())
MAX_SCAN = 200_000  # messages read per pass; with a bigger backlog the pass cannot tell what is missing


@dataclass(frozen=True)
class Pass:
    queued: int  # item ids with a message in Redis (-1: the backlog was too long to read)
    unfinished: int  # unfinished, unowned items in SQL
    suspects: int  # missing from Redis for the first time
    reenqueued: list[int]  # enqueued again: missing twice in a row, abandoned, or lost with Redis's data
    abandoned: int = 0  # of those: running past their lease (their worker stopped heartbeating)
    data_lost: bool = False  # this pass found Redis emptied since the last one
    stranded: int = 0  # of those re-enqueued: pending, delivered to a worker that never started them


class EpochWatch:
    """Tells a Redis that lost its data from one that never had any, with a marker key left in it.

    The first pass sets the marker; a later pass (by any worker) that finds it gone, after this worker
    saw it, knows Redis restarted empty or was flushed. Workers that do not get the lock `observe` the
    marker each interval, so whichever worker makes the next pass remembers it.
    """

    def __init__(self) -> None:
        self.seen: bytes | str | None = None

    def observe(self, r: redis.Redis) -> None:
        value = r.get(EPOCH_KEY)
        if value is not None:
            self.seen = value

    def lost(self, r: redis.Redis) -> bool:
        """True once per loss: the marker this worker saw is gone (a new one is set)."""
        value = r.get(EPOCH_KEY)
        if value is not None:
            self.seen = value
            return False
        r.set(EPOCH_KEY, uuid.uuid4().hex, nx=True)
        lost, self.seen = self.seen is not None, r.get(EPOCH_KEY)
        return lost


def _item_id(message: dict[str, Any], task: str) -> int | None:
    """The item id of a Celery task message as kombu stores it in Redis (protocol 2, JSON body)."""
    headers = message.get("headers") or {}
    if headers.get("task") != task:
        return None
    body: Any = message.get("body")
    try:
        if (message.get("properties") or {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        args = json.loads(body)[0]
        return int(args[0])
    except (TypeError, ValueError, IndexError, KeyError):
        return None


def queued_item_ids(r: redis.Redis, queue: str, task: str) -> set[int] | None:
    """Ids with a message waiting in `queue` (every priority list of it) or delivered and unacknowledged;
    None when the queue holds more than MAX_SCAN messages (what is missing cannot be told then)."""
    found = _queue_contents(r, queue, task)
    return None if found is None else found[0] | found[1]


def _queue_contents(r: redis.Redis, queue: str, task: str,
                    stale_s: float | None = None) -> tuple[set[int], set[int], set[int]] | None:
    """(ids waiting in the queue, ids delivered and unacknowledged, of those the ids whose every unacknowledged
    message was delivered and due more than `stale_s` ago: none when stale_s is None), or None past MAX_SCAN
    messages."""
    ids: set[int] = set()
    lists = [k for k in r.scan_iter(match=f"{queue}*", count=100) if r.type(k) in (b"list", "list")]
    if sum(r.llen(k) for k in lists) > MAX_SCAN:
        return None
    for key in lists:
        for raw in r.lrange(key, 0, -1):
            try:
                item = _item_id(json.loads(raw), task)
            except ValueError:
                continue
            if item is not None:
                ids.add(item)
    unacked: set[int] = set()
    recent: set[int] = set()  # ids with an unacknowledged message delivered or due within stale_s
    scored = cast(list[tuple[bytes, float]], r.zrange(UNACKED_INDEX_KEY, 0, -1, withscores=True))
    delivered = {_text(tag): float(at) for tag, at in scored}
    now = time.time()
    for tag, raw in r.hgetall(UNACKED_KEY).items():
        try:
            message = json.loads(raw)[0]
        except (ValueError, IndexError, KeyError, TypeError):
            continue
        item = _item_id(message, task) if isinstance(message, dict) else None
        if item is None:
            continue
        unacked.add(item)
        if stale_s is not None:
            since = max(delivered.get(_text(tag), now), _eta(message) or 0.0)
            if now - since < stale_s:
                recent.add(item)
    return ids, unacked, (unacked - recent) if stale_s is not None else set()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _eta(message: dict[str, Any]) -> float | None:
    """When a retry's countdown ends (the task message's `eta` header), as time(); None: due at once."""
    eta = (message.get("headers") or {}).get("eta")
    if not isinstance(eta, str):
        return None
    try:
        return datetime.fromisoformat(eta).timestamp()
    except ValueError:
        return None


def reconcile_once(r: redis.Redis, sessions: sessionmaker[Session], enqueue: Callable[[Iterable[int]], int], *,
                   queue: str, task: str, interval_s: float, epoch: EpochWatch | None = None,
                   stranded_after_s: float | None = None) -> Pass | None:
    """One pass, if no other worker holds the lock; None when another one does.

    `epoch`: this worker's EpochWatch (None: Redis data loss is not told apart, missing items take two passes).
    `stranded_after_s`: a pending item whose messages were all delivered that long ago is abandoned (None: off)."""
    # The lock is never released, it expires: passes are at least `interval_s` apart whoever makes them.
    if not r.set(LOCK_KEY, "1", nx=True, px=max(1, int(interval_s * 1000))):
        return None
    data_lost = epoch is not None and epoch.lost(r)
    with sessions() as s:
        unfinished = set(resumable_item_ids(s))
        expired = set(expired_item_ids(s))
    found = _queue_contents(r, queue, task, stranded_after_s)
    if found is None:  # a backlog too long to read: no suspects this pass (none enqueued twice by mistake)
        log.info("reconcile_skipped", reason=f"more than {MAX_SCAN} messages queued")
        r.delete(SUSPECTS_KEY)
        return Pass(-1, len(unfinished), 0, [])
    waiting, unacked, stale = found
    missing = unfinished - waiting - unacked
    # Leases that ran out: the message their dead worker holds unacknowledged comes back only after the
    # visibility timeout, so only a message waiting in the queue counts for them.
    abandoned = (expired & unfinished) - waiting
    # Pending items delivered long ago and never claimed: the same, with no lease to tell it.
    stranded = ((unfinished - expired) & stale) - waiting
    before = {int(x) for x in r.smembers(SUSPECTS_KEY)}
    confirmed = missing if data_lost else missing & before
    fresh = missing - before - abandoned if not data_lost else set()
    pipe = r.pipeline()
    pipe.delete(SUSPECTS_KEY)
    if fresh:
        pipe.sadd(SUSPECTS_KEY, *fresh)
        pipe.pexpire(SUSPECTS_KEY, max(1, int(interval_s * 3000)))
    pipe.execute()
    again = sorted(confirmed | abandoned | stranded)
    if again:
        enqueue(again)
        _log_reenqueued(sorted(abandoned), sorted(confirmed - abandoned - stranded), data_lost, sorted(stranded))
    return Pass(len(waiting | unacked), len(unfinished), len(fresh), again, len(abandoned), data_lost, len(stranded))


def _log_reenqueued(abandoned: list[int], missing: list[int], data_lost: bool, stranded: list[int]) -> None:
    """One line per cause, so an operator sees at once whether a worker died or Redis lost its queue."""
    if abandoned:
        log.warning("items_reenqueued", items=len(abandoned), item_ids=abandoned[:20], cause="worker_lost",
                    reason="running past their lease: the worker holding them stopped heartbeating")
    if stranded:
        log.warning("items_reenqueued", items=len(stranded), item_ids=stranded[:20], cause="worker_lost",
                    reason="pending, delivered to a worker that never started them: it stopped before their claim")
    if missing and data_lost:
        log.warning("items_reenqueued", items=len(missing), item_ids=missing[:20], cause="redis_data_lost",
                    reason="Redis lost its data (restarted empty or flushed): every unfinished item with no "
                           "message is enqueued again in this pass")
    elif missing:
        log.warning("items_reenqueued", items=len(missing), item_ids=missing[:20], cause="message_lost",
                    reason="unfinished in SQL and no message in Redis on two passes in a row")


class Reconciler:
    """Runs `reconcile_once` every `interval_s` in a daemon thread until stopped; errors are logged."""

    def __init__(self, redis_url: str, sessions: sessionmaker[Session], enqueue: Callable[[Iterable[int]], int], *,
                 queue: str, task: str, interval_s: float, stranded_after_s: float | None = None) -> None:
        self._redis = redis.Redis.from_url(redis_url, socket_timeout=10)
        self.stranded_after_s = stranded_after_s
        self._sessions, self._enqueue = sessions, enqueue
        self._queue, self._task, self.interval_s = queue, task, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="finserve-reconciler", daemon=True)
        self._epoch = EpochWatch()
        self.passes = 0

    def start(self) -> Reconciler:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._redis.close()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                if reconcile_once(self._redis, self._sessions, self._enqueue, queue=self._queue, task=self._task,
                                  interval_s=self.interval_s, epoch=self._epoch,
                                  stranded_after_s=self.stranded_after_s) is not None:
                    self.passes += 1
                else:  # another worker made this pass: remember the marker it keeps, for the next one we make
                    self._epoch.observe(self._redis)
            except Exception as exc:  # Redis or the database away: the next pass tries again
                log.warning("reconcile_failed", error=f"{type(exc).__name__}: {exc}"[:300])
