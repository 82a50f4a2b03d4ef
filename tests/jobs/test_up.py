"""`finserve up` owns its processes (issue 24 item 6) and brings them back (issue 23 finding 8), as real processes:
a taken HTTP port or a Redis port answered by another Redis is one line and exit 3 before anything starts;
a worker or Redis killed with SIGKILL is started again, with one `process_restarted` log line each."""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from jobs.redis_server import RedisServer, free_port
from stack.processes import FINSERVE
from tests.jobs.stack import wait_until

pytestmark = pytest.mark.slow


def up_env(home: Path, model: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FINSERVE_")}
    return env | {"FINSERVE_HOME": str(home), "FINSERVE_DATABASE_URL": f"sqlite:///{home / 'up.db'}",
                  "FINSERVE_MODEL": str(model), "FINSERVE_KV_CACHE_MEMORY_BYTES": str(16 << 20),
                  "FINSERVE_THREADS": "1", "FINSERVE_LOG_JSON": "true"}


def run_up(home: Path, model: Path, *args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([FINSERVE, "up", *args], env=up_env(home, model), capture_output=True, text=True,
                          timeout=timeout_s)


def test_a_taken_http_port_is_one_line_and_exit_3_before_anything_starts(tmp_path: Path, tiny_model_dir: Path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_up(tmp_path, tiny_model_dir, "--port", str(port))
    assert done.returncode == 3, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: port {port} on 127.0.0.1 is already in use (another finserve?); pass --port or set FINSERVE_PORT"]
    assert "finserve is starting" not in done.stdout  # no banner, and no Redis or worker was started
    assert not (tmp_path / "redis").exists()


def test_a_redis_port_answered_by_another_redis_is_refused(tmp_path: Path, tiny_model_dir: Path):
    theirs = RedisServer(workdir=tmp_path / "their-redis").start()
    try:
        done = run_up(tmp_path, tiny_model_dir, "--port", str(free_port()), "--redis-port", str(theirs.port))
        assert done.returncode == 3, done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(f"error: Redis port {theirs.port} on 127.0.0.1 is already in use"), line
        assert "finserve is starting" not in done.stdout
        assert redis.Redis(port=theirs.port).ping()  # theirs is left alone
    finally:
        theirs.stop()


@pytest.fixture
def up_stack(tmp_path: Path, make_tiny_model) -> Iterator[tuple[subprocess.Popen[bytes], Path, Path, int]]:
    port = free_port()
    out, err = tmp_path / "up.out", tmp_path / "up.err"
    model = make_tiny_model(max_position_embeddings=8192)  # the default policy's classes need an 8k context
    with out.open("wb") as o, err.open("wb") as e:
        proc = subprocess.Popen([FINSERVE, "up", "--port", str(port), "--workers", "1"],
                                env=up_env(tmp_path, model), stdout=o, stderr=e, start_new_session=True)
    try:
        yield proc, out, err, port
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(90)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _restarts(err: Path, process: str) -> list[dict]:
    found = []
    for line in err.read_text(errors="replace").splitlines():
        if '"process_restarted"' in line:
            event = json.loads(line)
            if event.get("process") == process:
                found.append(event)
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_up_restarts_a_killed_worker_and_redis_and_says_so(up_stack):
    proc, out, err, port = up_stack
    banner = wait_until(lambda: re.search(r"redis: redis://127\.0\.0\.1:(\d+)/0 \(pid (\d+)\); worker pid (\d+)",
                                          out.read_text()), 120, "the banner")
    redis_port, redis_pid, worker_pid = (int(g) for g in banner.groups())
    wait_until(lambda: _ready(port), 120, f"the gateway to be ready: {err.read_text()[-1500:]}")

    os.kill(worker_pid, signal.SIGKILL)
    (event,) = wait_until(lambda: _restarts(err, "worker"), 60, "the worker's restart line")
    assert event["old_pid"] == worker_pid and event["exit_code"] == -signal.SIGKILL and event["after_s"] >= 1
    assert event["new_pid"] != worker_pid and _alive(event["new_pid"])

    os.kill(redis_pid, signal.SIGKILL)
    (event,) = wait_until(lambda: _restarts(err, "redis"), 60, "Redis's restart line")
    assert event["old_pid"] == redis_pid and _alive(event["new_pid"]) and "reenqueued" in event
    assert redis.Redis(port=redis_port).ping()  # on the same port: the worker and gateway reconnect there

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(90) == 0, err.read_text()[-2000:]
    assert not _alive(event["new_pid"])  # the restarted Redis was stopped with the stack


def _ready(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie waits for whoever adopted it to reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return _alive(pid) if not Path("/proc").exists() else False
    return state != "Z"


def test_a_killed_up_takes_redis_and_its_worker_with_it_and_up_starts_again_on_the_same_port(
        tmp_path: Path, make_tiny_model) -> None:
    """Issue 45, finding 2: `finserve up` killed (kill -9, or a crash) left Redis and the worker running, so `up` on
    the same Redis port exited 3. Its children now get SIGTERM from the kernel when it dies."""
    model, redis_port = make_tiny_model(max_position_embeddings=8192), free_port()

    def start(name: str) -> tuple[subprocess.Popen[bytes], Path, Path, int]:
        port = free_port()
        out, err = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
        with out.open("wb") as o, err.open("wb") as e:
            proc = subprocess.Popen([FINSERVE, "up", "--port", str(port), "--redis-port", str(redis_port),
                                     "--workers", "1"], env=up_env(tmp_path, model), stdout=o, stderr=e,
                                    start_new_session=True)
        return proc, out, err, port

    first, out, err, port = start("first")
    second = None
    try:
        banner = wait_until(lambda: re.search(r"redis: redis://127\.0\.0\.1:(\d+)/0 \(pid (\d+)\); worker pid (\d+)",
                                              out.read_text()), 120, f"the banner: {err.read_text()[-1500:]}")
        redis_pid, worker_pid = int(banner[2]), int(banner[3])
        wait_until(lambda: _ready(port), 120, f"the gateway to be ready: {err.read_text()[-1500:]}")
        os.kill(first.pid, signal.SIGKILL)  # `up` alone: not its process group
        first.wait()
        wait_until(lambda: not _running(redis_pid) and not _running(worker_pid), 60,
                   "Redis and the worker to stop with their `finserve up`")
        second, out2, err2, port2 = start("second")
        wait_until(lambda: second.poll() is not None or _ready(port2), 120,
                   f"the second `up` to be ready: {err2.read_text()[-1500:]}")
        assert second.poll() is None, err2.read_text()[-2000:]  # not exit 3: the Redis port was free again
        assert f"redis: redis://127.0.0.1:{redis_port}/0" in out2.read_text()
        second.send_signal(signal.SIGTERM)
        assert second.wait(90) == 0, err2.read_text()[-2000:]
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
