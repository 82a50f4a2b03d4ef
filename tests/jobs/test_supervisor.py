"""The `finserve up` supervisor's rules on fake children: wait the backoff, double it while the child keeps
dying, start again from the minimum once it stayed up, retry a restart that failed, one line per restart."""
from __future__ import annotations

from structlog.testing import capture_logs

from stack.supervisor import Child, Supervisor


class Fake:
    def __init__(self) -> None:
        self.pid, self.code, self.fail = 100, None, False

    def restart(self) -> None:
        if self.fail:
            raise RuntimeError("port taken")
        self.pid, self.code = self.pid + 1, None


def test_restarts_with_doubling_backoff_and_one_line_each():
    fake, sup = Fake(), Supervisor(min_backoff_s=1, max_backoff_s=4, stable_s=60)
    child = sup.watch(Child("worker", lambda: fake.pid, lambda: fake.code, fake.restart, started=0.0))
    with capture_logs() as logs:
        fake.code = -9
        sup.check(now=10.0)  # seen dead: waits its backoff first
        assert fake.pid == 100
        sup.check(now=10.5)
        assert fake.pid == 100
        sup.check(now=11.0)
        assert fake.pid == 101 and child.restarts == 1
        fake.code = 1  # dies again at once: the next wait is 2 s, then 4 s (the cap), then 4 s
        sup.check(now=12.0), sup.check(now=13.9)
        assert fake.pid == 101
        sup.check(now=14.0)
        assert fake.pid == 102
        fake.code = 1
        sup.check(now=15.0), sup.check(now=19.0)
        assert fake.pid == 103 and child.backoff_s == 4
        sup.check(now=19.0 + 60)  # up for a minute: back to the minimum
        assert child.backoff_s == 1
    lines = [e for e in logs if e["event"] == "process_restarted"]
    assert [(e["old_pid"], e["new_pid"], e["after_s"]) for e in lines] == [(100, 101, 1), (101, 102, 2), (102, 103, 4)]
    assert lines[0]["exit_code"] == -9 and lines[0]["process"] == "worker"


def test_a_failed_restart_is_logged_and_tried_again():
    fake, sup = Fake(), Supervisor(min_backoff_s=1, max_backoff_s=30)
    sup.watch(Child("redis", lambda: fake.pid, lambda: fake.code, fake.restart, started=0.0))
    fake.code, fake.fail = -9, True
    with capture_logs() as logs:
        sup.check(now=1.0), sup.check(now=2.0)
        fake.fail = False
        sup.check(now=3.0)  # the retry waits the doubled backoff (2 s)
        assert fake.pid == 100
        sup.check(now=4.0)
    assert fake.pid == 101
    assert [e["event"] for e in logs] == ["process_restart_failed", "process_restarted"]


def test_nothing_is_restarted_after_stop():
    fake, sup = Fake(), Supervisor(min_backoff_s=0)
    sup.watch(Child("worker", lambda: fake.pid, lambda: fake.code, fake.restart, started=0.0))
    sup.stop()
    fake.code = -15
    sup.check(now=1.0), sup.check(now=2.0)
    assert fake.pid == 100
