"""The consumer watchdog (jobs/runtime/watchdog.py): a worker whose consumer stopped taking messages restarts in place.

Celery's own bug (a consumer that reconnects to Redis and never consumes again) cannot be produced on demand,
so the real-stack test stops the consumer the way an operator could (`celery control cancel_consumer`): to the
watchdog that is the same picture, an idle worker and a queue that does not drain.
"""
from __future__ import annotations

import pytest

from jobs.runtime.celery_app import QUEUE, celery_app
from jobs.runtime.watchdog import (
    CRASH_QUIET_S,
    ConsumerWatchdog,
    StallDetector,
    crash_backoff_s,
    crashed_on_its_own,
    with_option,
)
from tests.jobs.stack import Stack, wait_until
from tests.jobs.test_faults import assert_one_valid_result_per_contract, submit, wait_completed


def test_idle_with_messages_waiting_for_the_whole_window_is_a_stall():
    d = StallDetector(stall_s=10)
    assert not d.observe(0, held=0, queued=5, received=3)
    assert not d.observe(9.9, held=0, queued=5, received=3)
    assert d.observe(10, held=0, queued=4, received=3)


@pytest.mark.parametrize("interruption", [
    {"held": 1},  # busy: a task running, reserved or waiting on a countdown
    {"queued": 0},  # nothing waiting
    {"queued": None},  # Redis unreachable: the consumer's own reconnect is under way
    {"received": 4},  # a task came in (and finished between two checks)
])
def test_anything_a_live_consumer_shows_starts_the_window_again(interruption):
    d = StallDetector(stall_s=10)
    seen = {"held": 0, "queued": 5, "received": 3}
    assert not d.observe(0, **seen)
    assert not d.observe(8, **(seen | interruption))
    seen |= {k: v for k, v in interruption.items() if k == "received"}
    assert not d.observe(17, **seen)  # the window starts again at the first check after the interruption
    assert not d.observe(26.9, **seen)
    assert d.observe(27, **seen)


def test_a_crash_nobody_asked_for_restarts_a_requested_shutdown_does_not(monkeypatch):
    from celery.worker import state
    assert not crashed_on_its_own(0) and not crashed_on_its_own(None)
    assert crashed_on_its_own(1)  # "Unrecoverable error": Celery stopped itself with EX_FAILURE
    monkeypatch.setattr(state, "should_terminate", 1)  # a cold shutdown by signal also exits 1
    assert not crashed_on_its_own(1)


BROKEN_WORKER = """
import sys
from celery import Celery, bootsteps
from jobs.runtime.celery_app import run_celery

class Broken(bootsteps.StartStopStep):
    requires = {"celery.worker.components:Pool"}

    def start(self, worker):
        raise AttributeError("'NoneType' object has no attribute 'hostname'")  # as kombu raised it here

app = Celery("broken", broker="memory://")
app.steps["worker"].add(Broken)
code = run_celery(app, ["worker", "--pool", "solo", "--without-gossip", "--without-mingle", "--without-heartbeat",
                        "--loglevel", "CRITICAL"])
print("exit code", code, file=sys.__stdout__)  # the worker redirected sys.stdout to its logger
"""


def test_a_worker_that_stops_itself_on_an_error_reports_exit_code_1():
    """Celery's `app.start` returns None for it (click 8.2+ returns the code, Celery drops it), which made a crashed
    `finserve worker` exit 0 and never restart; `run_celery` hands the worker's code on."""
    import subprocess
    import sys
    from pathlib import Path

    done = subprocess.run([sys.executable, "-c", BROKEN_WORKER], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert "exit code 1" in done.stdout, done.stdout + done.stderr[-2000:]


def test_crash_restarts_back_off_and_forget_after_a_quiet_spell():
    wait, carried = crash_backoff_s(None, 1000.0)
    assert (wait, carried) == (1.0, "1:1000")
    waits = []
    for t in range(1001, 1008):
        wait, carried = crash_backoff_s(carried, float(t))
        waits.append(wait)
    assert waits == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert crash_backoff_s(carried, 1007 + CRASH_QUIET_S + 1) == (1.0, f"1:{1007 + CRASH_QUIET_S + 1:.0f}")
    assert crash_backoff_s("garbage", 5.0)[0] == 1.0


def test_the_crash_history_replaces_the_one_on_the_command_line():
    argv = ["python", "finserve", "worker", "--concurrency", "4"]
    assert with_option(argv, "--crash-history", "1:5") == [*argv, "--crash-history", "1:5"]
    again = with_option([*argv, "--crash-history", "1:5"], "--crash-history", "2:9")
    assert again == [*argv, "--crash-history", "2:9"]
    assert with_option([*argv, "--crash-history=1:5"], "--crash-history", "2:9") == again


def test_redis_away_is_never_a_stall():
    restarts: list[int] = []
    dog = ConsumerWatchdog("redis://127.0.0.1:1/0", QUEUE, stall_s=0.01, held=lambda: 0, received=lambda: 0,
                           restart=lambda: restarts.append(1))
    try:
        assert dog.queued() is None
        assert not any(dog.check() for _ in range(5))
    finally:
        dog.stop()
    assert not restarts


def test_a_stalled_worker_restarts_in_place_and_its_job_completes(stack: Stack, sessions):
    worker = stack.start_worker("w1", env={"FINSERVE_JOBS_STALL_S": "3"})
    control = celery_app().control
    wait_until(lambda: control.ping(timeout=1.0), 60, "the worker to answer a ping")
    replies = control.cancel_consumer(QUEUE, reply=True, timeout=5.0)  # the consumer no longer takes messages
    assert replies and all("ok" in r for reply in replies for r in reply.values()), replies
    job_id = submit(stack, 12)
    wait_completed(stack, job_id, 90)
    assert worker.poll() is None  # the same process (pid) throughout: a supervisor sees no exit
    log = (stack.home / "worker-w1.log").read_text(errors="replace")
    assert '"event": "consumer_stalled"' in log and log.count('"event": "worker_started"') == 2
    assert_one_valid_result_per_contract(stack, job_id, 12, sessions)
