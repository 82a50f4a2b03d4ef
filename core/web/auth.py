"""API-key authentication with a short in-memory cache in front of the database lookup.

Keys are SHA-256-hashed in SQL (gateway/keys.py). Caching a verified key for a few
seconds keeps the database off the hot path of every request (the gateway's overhead
budget, `finserve bench gateway`); the price is that revoking a key takes up to `ttl_s` to apply.
Unknown keys are never cached, so a key created a moment ago works at once.
"""
from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable

from sqlalchemy.orm import Session, sessionmaker

from core.keys import KeyInfo, verify_key


class Authenticator:
    def __init__(self, sessions: sessionmaker[Session], *, ttl_s: float = 30.0, max_entries: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._sessions = sessions
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._clock = clock
        self._cache: dict[str, tuple[KeyInfo, float]] = {}
        self._lock = threading.Lock()

    def cached(self, raw: str) -> KeyInfo | None:
        """The cached permissions of `raw`, without touching the database."""
        entry = self._cache.get(_digest(raw))
        if entry is None or entry[1] < self._clock():
            return None
        return entry[0]

    def verify(self, raw: str) -> KeyInfo | None:
        """Cached permissions, else one database lookup (blocking: call from a worker thread)."""
        hit = self.cached(raw)
        if hit is not None:
            return hit
        with self._sessions() as session:
            info = verify_key(session, raw)
        if info is not None and self._ttl_s > 0:
            with self._lock:
                if len(self._cache) >= self._max_entries:
                    self._cache.clear()
                self._cache[_digest(raw)] = (info, self._clock() + self._ttl_s)
        return info

    def forget_all(self) -> None:
        with self._lock:
            self._cache.clear()


def _digest(raw: str) -> str:
    # The cache never holds raw keys, only their digests.
    return hashlib.sha256(raw.encode()).hexdigest()
