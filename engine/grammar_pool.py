"""Grammar compilation in child processes: a native crash or a runaway compile costs one request, never the process.

llguidance compiles and validates a grammar in native code that recurses with the schema: a `$ref` chain
of a few thousand definitions overflows its stack (SIGSEGV) and took the gateway and its engine down with
it. Every untrusted constraint is therefore validated, compiled and probed in a child process
(engine/grammar_child.py) whose compile thread has a bounded stack (`stack_bytes`) and a time limit
(`timeout_s`). The parent then builds its own matchers from the grammar text the child accepted: what
compiled within the child's stack compiles within any larger one (Python's threads get 8 MiB on Linux by
default, the child's default is half of that).

A child that dies (a signal, a panic that aborts) or runs past the limit is killed and replaced at once,
and the request that was in it fails with `GrammarCompilerFailed` (`grammar_compiler_crashed` or
`grammar_compile_timeout`, 400s: the client's grammar is at fault). One child serves one request at a
time; `workers` children serve that many in parallel (callers beyond that wait for one). The pool is one
per process (`pool()`), configured from the settings by the entry point (`configure`).
"""
from __future__ import annotations

import json
import os
import queue
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any

FRAME_HEADER = struct.Struct(">I")  # frame length in bytes, then that many bytes of UTF-8 JSON


def write_frame(stream: IO[bytes], message: dict[str, Any]) -> None:
    data = json.dumps(message, ensure_ascii=False).encode("utf-8", "surrogatepass")
    stream.write(FRAME_HEADER.pack(len(data)) + data)
    stream.flush()


def read_frame(stream: IO[bytes]) -> dict[str, Any] | None:
    """The next frame, or None at end of input (the parent closed the pipe or died)."""
    header = stream.read(FRAME_HEADER.size)
    if len(header) < FRAME_HEADER.size:
        return None
    (size,) = FRAME_HEADER.unpack(header)
    data = stream.read(size)
    if len(data) < size:
        return None
    message: dict[str, Any] = json.loads(data.decode("utf-8", "surrogatepass"))
    return message


@dataclass(frozen=True)
class GrammarPoolConfig:
    workers: int = 2  # child processes (FINSERVE_GRAMMAR_WORKERS)
    stack_bytes: int = 4 << 20  # the compile thread's stack in a child (FINSERVE_GRAMMAR_STACK_BYTES)
    timeout_s: float = 30.0  # one compile and probe (FINSERVE_GRAMMAR_TIMEOUT_S)


@dataclass(frozen=True)
class TokenizerSpec:
    """A vocabulary as a child needs it: the tokenizer's JSON and EOS ids, sent once per child (by key)."""

    key: str
    json: str
    eos: list[int] | None


@dataclass(frozen=True)
class Compiled:
    """A child's answer: the grammar (None when invalid), the schema text, why it is invalid, the probe's finding."""

    grammar: str | None
    schema: str | None
    error: str | None
    problem: str | None
    crashed: str | None = None  # set by a caller that keeps a crash as an outcome (engine/structured.py)


COMPILER_CODES = ("grammar_compiler_crashed", "grammar_compile_timeout")


class GrammarCompilerFailed(ValueError):
    """The child compiling this request's grammar died or ran out of time; `code` says which."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class _Died(Exception):
    pass


class _Proc:
    """One child process and the vocabularies it holds. Used by one thread at a time."""

    def __init__(self, config: GrammarPoolConfig) -> None:
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "engine.grammar_child", "--stack-bytes", str(config.stack_bytes)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True,
            start_new_session=True)  # a terminal's Ctrl-C is for the server; the child ends with its input
        self.tokenizers: set[str] = set()

    @property
    def pid(self) -> int:
        return self.popen.pid

    def ask(self, message: dict[str, Any], timeout_s: float, *, answer: bool = True) -> dict[str, Any]:
        """The child's answer to `message`; _Died if it exits, TimeoutError past `timeout_s`."""
        assert self.popen.stdin is not None and self.popen.stdout is not None
        try:
            write_frame(self.popen.stdin, message)
        except (BrokenPipeError, OSError):
            raise _Died() from None
        if not answer:
            return {}
        deadline = time.monotonic() + timeout_s
        (size,) = FRAME_HEADER.unpack(self._read(FRAME_HEADER.size, deadline))
        reply: dict[str, Any] = json.loads(self._read(size, deadline).decode("utf-8", "surrogatepass"))
        return reply

    def _read(self, n: int, deadline: float) -> bytes:
        assert self.popen.stdout is not None
        fd, parts, got = self.popen.stdout.fileno(), [], 0
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError()
            chunk = os.read(fd, n - got)
            if not chunk:
                raise _Died()
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)

    def kill(self) -> str:
        """Ends the child; returns how it ended ("SIGSEGV", "exit 1", ...)."""
        if self.popen.poll() is None:
            self.popen.kill()
        code = self.popen.wait()
        for stream in (self.popen.stdin, self.popen.stdout):
            if stream is not None:
                stream.close()
        if code < 0:
            try:
                return signal.Signals(-code).name
            except ValueError:
                return f"signal {-code}"
        return f"exit {code}"


class GrammarPool:
    """`workers` grammar children; `compile` borrows one, a dead or stuck one is replaced at once."""

    def __init__(self, config: GrammarPoolConfig) -> None:
        self.config = config
        # Children are started from this one thread: a child gets SIGKILL when the thread that started it ends
        # (PR_SET_PDEATHSIG, engine/grammar_child.py), and callers' threads come and go (an app's executor).
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="finserve-grammar-spawn")
        self._idle: queue.LifoQueue[_Proc | None] = queue.LifoQueue()
        for _ in range(config.workers):
            self._idle.put(None)  # started on first use
        self.replaced = 0  # children killed and replaced (crashed or timed out)

    def compile(self, kind: str, spec: str, tokenizer: TokenizerSpec | None) -> Compiled:
        """Validate `spec` (a schema's text, a regex, a JSON list of choices) as `kind`, and probe it with
        `tokenizer` when one is given. GrammarCompilerFailed when the child dies or times out."""
        proc = self._take()
        try:
            if tokenizer is not None and tokenizer.key not in proc.tokenizers:
                proc.ask({"op": "tokenizer", "key": tokenizer.key, "json": tokenizer.json, "eos": tokenizer.eos},
                         self.config.timeout_s)
                proc.tokenizers.add(tokenizer.key)
            reply = proc.ask({"op": "compile", "kind": kind, "spec": spec,
                              "tokenizer": tokenizer.key if tokenizer is not None else None}, self.config.timeout_s)
        except _Died:
            how = self._replace(proc)
            raise GrammarCompilerFailed("grammar_compiler_crashed", f"the grammar compiler died on this constraint "
                                        f"({how}); it is refused, the server goes on") from None
        except TimeoutError:
            self._replace(proc)
            raise GrammarCompilerFailed("grammar_compile_timeout", f"compiling this constraint took longer than "
                                        f"{self.config.timeout_s:g} s (FINSERVE_GRAMMAR_TIMEOUT_S)") from None
        self._idle.put(proc)
        return Compiled(reply["grammar"], reply["schema"], reply["error"], reply["problem"])

    def segfault_one(self) -> int:
        """Test-only: a child kills itself with SIGSEGV; returns its pid. The next compile replaces it."""
        proc = self._take()
        proc.ask({"op": "segfault"}, self.config.timeout_s, answer=False)
        proc.popen.wait()
        self._idle.put(proc)  # dead: the next borrower finds out, as after a crash nobody saw
        return proc.pid

    def pids(self) -> list[int]:
        """The live children's pids (tests)."""
        with self._idle.mutex:
            return [p.pid for p in self._idle.queue if p is not None and p.popen.poll() is None]

    def close(self) -> None:
        while True:
            try:
                proc = self._idle.get_nowait()
            except queue.Empty:
                break
            if proc is not None:
                proc.kill()
        self._spawner.shutdown(wait=False)

    def _take(self) -> _Proc:
        proc = self._idle.get()
        if proc is not None and proc.popen.poll() is None:
            return proc
        if proc is not None:
            proc.kill()
            self.replaced += 1
        try:
            return self._spawn()
        except BaseException:
            self._idle.put(None)
            raise

    def _replace(self, proc: _Proc) -> str:
        """Kills `proc` and puts a fresh child in its place; how `proc` ended."""
        how = proc.kill()
        self.replaced += 1
        try:
            self._idle.put(self._spawn())
        except OSError:
            self._idle.put(None)  # started again on next use
        return how

    def _spawn(self) -> _Proc:
        return self._spawner.submit(_Proc, self.config).result()


_pool: GrammarPool | None = None
_config = GrammarPoolConfig()
_lock = threading.Lock()


def configure(config: GrammarPoolConfig) -> None:
    """The process's pool settings (the entry point's, from Settings); a pool running with others is replaced."""
    global _pool, _config
    with _lock:
        if config == _config:
            return
        _config = config
        old, _pool = _pool, None
    if old is not None:
        old.close()


def pool() -> GrammarPool:
    """The process's grammar pool, started on first use."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = GrammarPool(_config)
        return _pool
