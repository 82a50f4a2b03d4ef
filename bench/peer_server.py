"""The two HTTP servers `finserve bench http-peer` compares, each started and stopped as its own process.

- finserve: `finserve serve` on 127.0.0.1 with its own temporary home (SQLite database, one API key made
  here, unthrottled), the weights format and thread count asked for.
- llama.cpp: `python -m llama_cpp.server` run by another interpreter (`peer_python`, a venv with
  llama-cpp-python; never a dependency of finserve) on a GGUF of the same model. The shipped file is
  Q4_1; other types are re-quantized from it once into a cache folder with bench/peer_llamacpp.py.
  `interrupt_requests` is turned off: by default llama_cpp.server cuts a streaming answer short as soon
  as another request arrives, which would make concurrent streams meaningless.
Both bind to 127.0.0.1 only.
"""
from __future__ import annotations

import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

from core.processes import stop_process

PEER_GGUF_TYPES = ("Q4_1", "Q8_0", "F32")  # what bench/peer_llamacpp.py can quantize to
STOP_TIMEOUT_S = 20.0


@dataclass
class Server:
    """One running server: its URL, the headers a client sends, and what to report about it."""

    name: str
    url: str
    proc: subprocess.Popen[bytes]
    headers: dict[str, str] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    cleanup: tempfile.TemporaryDirectory[str] | None = None

    def stop(self) -> None:
        stop_process(self.proc, STOP_TIMEOUT_S)
        if self.cleanup is not None:
            self.cleanup.cleanup()


def peer_unavailable(python: str | None) -> str | None:
    """Why the llama.cpp peer cannot run from `python` (None when it can)."""
    if not python:
        return "no --peer-python given"
    try:
        out = subprocess.run([python, "-c", "import llama_cpp.server.app, uvicorn"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{python} cannot be run: {e}"
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        return (f"llama_cpp.server (llama-cpp-python[server]) is not importable from {python}: {last}")
    return None


PEER_SCRIPT = Path(__file__).with_name("peer_llamacpp.py")  # run by the peer's interpreter


def peer_version(python: str) -> str:
    out = subprocess.run([python, "-c", "import llama_cpp; print(llama_cpp.__version__)"], capture_output=True,
                         text=True, check=True)
    return out.stdout.strip()


def parse_gguf_types(text: str) -> list[str]:
    types = [t.strip().upper() for t in text.split(",") if t.strip()]
    unknown = [t for t in types if t not in PEER_GGUF_TYPES]
    if unknown:
        raise ValueError(f"unknown GGUF types {unknown}; known: {list(PEER_GGUF_TYPES)}")
    return types


def peer_gguf(python: str, gguf_type: str, cache: Path, source: str | Path | None = None) -> Path:
    """`source` (a GGUF file; None: the shipped Q4_1) when it is of `gguf_type`, else its re-quantization to
    `gguf_type` (made once into `cache`, bench/gguf_files.py)."""
    from bench import gguf_files

    file, file_type, shipped = gguf_files.source(source)
    if gguf_type == file_type:
        return file
    out = gguf_files.derived_path(cache, file, shipped, gguf_type)
    if not out.exists():
        cache.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".part")
        subprocess.run([python, str(PEER_SCRIPT), "quantize", str(file), str(tmp), gguf_type.lower()],
                       check=True, capture_output=True)
        tmp.rename(out)  # a quantization cut short never leaves a file that looks finished
    return out


def _ready(server: Server, path: str, timeout_s: float) -> Server:
    """`server` once `path` answers 200; stopped (its files removed too) if it never does."""
    try:
        _wait_ready(server.url, server.proc, path, timeout_s)
    except BaseException:
        server.stop()
        raise
    return server


def _wait_ready(url: str, proc: subprocess.Popen[bytes], path: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=2.0) as client:  # one client: a new one per poll re-reads the CA store (~50 ms CPU)
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the server for {url} exited with {proc.returncode} before it was ready")
            try:
                r = client.get(f"{url}{path}")
                if r.status_code == 200:
                    return
                if path == "/readyz":
                    if (live := client.get(f"{url}/healthz")).status_code != 200:
                        raise RuntimeError(f"{url} failed to start: {live.text[:500]}")
                    if _load_failed(r.text):  # finserve's engine failed to load: it will never be ready
                        raise RuntimeError(f"{url} failed to start: {r.text[:500]}")
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url}{path} did not answer 200 within {timeout_s:.0f} s")
            time.sleep(0.25)


def _load_failed(readyz_body: str) -> bool:
    """Whether finserve's /readyz 503 says the engine failed to load (not: still loading, or restarting)."""
    return "engine not ready" in readyz_body and not any(
        word in readyz_body for word in ("is loading", "restarting", "database"))


def start_finserve(model: str, *, threads: int, weights: str, log: IO[bytes] | None,
                   timeout_s: float = 300.0, extra_env: dict[str, str] | None = None) -> Server:
    """`finserve serve` on a free 127.0.0.1 port, with a fresh home and an unthrottled key (and `extra_env` on
    top of its environment)."""
    from core.db.base import make_engine, make_session_factory
    from core.db.migrate import upgrade
    from core.keys import create_key
    from core.settings import Settings
    from jobs.runtime.redis_server import free_port
    from stack.processes import FINSERVE, worker_env

    home = tempfile.TemporaryDirectory(prefix="finserve-bench-http-peer-")
    db_url = f"sqlite:///{Path(home.name) / 'finserve.db'}"
    port = free_port()
    settings = Settings(home=Path(home.name), database_url=db_url, model=Path(model), threads=threads,
                        weights=weights, host="127.0.0.1", port=port, log_json=True, log_level="warning")
    upgrade(db_url)
    db = make_engine(db_url)
    try:
        with make_session_factory(db)() as s:
            key = create_key(s, "bench", rate_limit_rps=1e9)
    finally:
        db.dispose()
    env = worker_env(settings, OMP_NUM_THREADS=str(threads), **(extra_env or {}))
    proc = subprocess.Popen([FINSERVE, "serve"], env=env,
                            stdout=log, stderr=subprocess.STDOUT if log is not None else None,
                            start_new_session=True)
    server = Server("finserve", f"http://127.0.0.1:{port}", proc, {"Authorization": f"Bearer {key}"},
                    {"weights": weights, "threads": threads, "model": model}, home)
    return _ready(server, "/readyz", timeout_s)


def start_llamacpp(python: str, gguf: Path, gguf_type: str, *, threads: int, n_ctx: int, log: IO[bytes] | None,
                   timeout_s: float = 120.0) -> Server:
    """llama_cpp.server on a free 127.0.0.1 port; requests are served one at a time (its lock)."""
    from jobs.runtime.redis_server import free_port

    port = free_port()
    argv = [python, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1", "--port", str(port),
            "--n_threads", str(threads), "--n_threads_batch", str(threads), "--n_ctx", str(n_ctx),
            "--interrupt_requests", "False", "--verbose", "False"]
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT if log is not None else None,
                            start_new_session=True)
    server = Server(f"llama.cpp {gguf_type}", f"http://127.0.0.1:{port}", proc,
                    info={"gguf_type": gguf_type, "gguf": gguf.name, "gguf_bytes": gguf.stat().st_size,
                          "threads": threads, "n_ctx": n_ctx, "llama_cpp_python": peer_version(python)})
    return _ready(server, "/v1/models", timeout_s)
