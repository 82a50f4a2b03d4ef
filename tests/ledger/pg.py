"""A throwaway PostgreSQL server for the test suite (real server, real psycopg driver).

`PostgresServer.start()` runs initdb into a temp folder and starts `postgres`
listening on 127.0.0.1 only, on a free port, with its unix socket in that folder.
initdb refuses to run as root, so as root the binaries run as the `postgres`
user (`runuser -u postgres`) and the folder is chowned to it. Durability is
switched off (fsync, full_page_writes): a test database is thrown away anyway.

Reusable from any test package: `from tests.ledger.pg import PostgresServer, find_pg_bin`.
"""
from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import psycopg

PG_BIN_CANDIDATES = ("/usr/lib/postgresql/15/bin",)


def find_pg_bin() -> Path | None:
    """FINSERVE_PG_BIN, else the PostgreSQL 15 folder of the machine image, else `initdb` on PATH."""
    env = os.environ.get("FINSERVE_PG_BIN")
    candidates = [env] if env else list(PG_BIN_CANDIDATES)
    on_path = shutil.which("initdb")
    if on_path and not env:
        candidates.append(str(Path(on_path).parent))
    for c in candidates:
        if c and (Path(c) / "initdb").is_file() and (Path(c) / "pg_ctl").is_file():
            return Path(c)
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    def __init__(self, bin_dir: Path, user: str = "postgres") -> None:
        self.bin_dir = bin_dir
        self.os_user = user if os.geteuid() == 0 else None  # root must drop to the postgres user
        self.root = Path(tempfile.mkdtemp(prefix="finserve-pg-"))
        self.data = self.root / "data"
        self.port = 0
        self.superuser = "postgres"

    def _run(self, *args: str) -> None:
        cmd = [str(self.bin_dir / args[0]), *args[1:]]
        if self.os_user:
            cmd = ["runuser", "-u", self.os_user, "--", *cmd]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}\n{tail}")

    def start(self) -> PostgresServer:
        if self.os_user:
            pw = pwd.getpwnam(self.os_user)
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
        os.chmod(self.root, 0o700)
        self._run("initdb", "-D", str(self.data), "-U", self.superuser, "--auth=trust", "-E", "UTF8",
                  "--no-sync", "--no-instructions")
        self.port = _free_port()
        opts = (f"-h 127.0.0.1 -p {self.port} -k {self.root} -c fsync=off -c synchronous_commit=off "
                "-c full_page_writes=off -c max_connections=50")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-w", "-t", "60",
                  "-o", opts, "start")
        return self

    def stop(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def admin_conninfo(self, dbname: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user={self.superuser} dbname={dbname}"

    def url(self, dbname: str) -> str:
        return f"postgresql+psycopg://{self.superuser}@127.0.0.1:{self.port}/{dbname}"

    def create_database(self) -> str:
        """A fresh empty database; returns its SQLAlchemy URL."""
        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.admin_conninfo(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def replace_with_copy(self, dbname: str, template: str) -> None:
        """Make database `dbname` a copy of database `template` (PostgreSQL's CREATE DATABASE ... TEMPLATE, a file
        copy). Neither may have a connection open: PostgreSQL refuses to drop or copy a database in use."""
        with psycopg.connect(self.admin_conninfo(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{dbname}"')
            conn.execute(f'CREATE DATABASE "{dbname}" TEMPLATE "{template}"')

    def set_connections_allowed(self, dbname: str, allowed: bool) -> None:
        """Take a database 'down' (refuse and drop every connection) or bring it back."""
        with psycopg.connect(self.admin_conninfo(), autocommit=True) as conn:
            conn.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS {"true" if allowed else "false"}')
            if not allowed:
                conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                             "WHERE datname = %s AND pid <> pg_backend_pid()", (dbname,))
