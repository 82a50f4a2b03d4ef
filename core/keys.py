"""Per-tenant API keys: created once, shown once, stored only as a SHA-256 hash.

Why a plain SHA-256 and no slow KDF (bcrypt/scrypt/argon2): a slow KDF exists to
make guessing *low-entropy* secrets (passwords) expensive. Our keys are 256 bits
from `secrets`, so an attacker holding the hash table still faces 2^256 guesses;
slowing each guess changes nothing, while it would add tens of milliseconds to
every authenticated request. A fast hash also lets verification be one indexed
lookup by hash. The lookup is not a timing oracle worth worrying about: an
attacker cannot steer the hash of a guess towards a stored one.
"""
from __future__ import annotations

import hashlib
import logging
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.db.base import utcnow
from core.db.models import ApiKey, Tenant

if TYPE_CHECKING:
    from core.settings import Settings

log = logging.getLogger(__name__)

KEY_PREFIX = "fsk_"  # recognisable in logs and secret scanners
DISPLAY_PREFIX_LEN = len(KEY_PREFIX) + 8  # "fsk_" + 8 random chars shown in listings
DEFAULT_RATE_LIMIT_RPS = 50.0
DEV_TENANT = "dev"
# Sent by a worker (worker or admin key) running a job item: the request acts as the item's owner.
JOB_ITEM_HEADER = "X-Finserve-Job-Item"


@dataclass(frozen=True)
class KeyInfo:
    """What a verified key may do. `allowed_classes` None means every class."""

    key_id: str
    tenant: str
    allowed_classes: frozenset[str] | None
    is_admin: bool
    rate_limit_rps: float
    default_class: str | None
    is_worker: bool = False  # may act as the owner of a running job item (X-Finserve-Job-Item)

    @property
    def may_act_for_items(self) -> bool:
        """Worker keys, and admin keys (which are trusted with every tenant's data anyway)."""
        return self.is_worker or self.is_admin

    def allows(self, workload_class: str) -> bool:
        return self.allowed_classes is None or workload_class in self.allowed_classes


def hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def create_key(
    session: Session,
    tenant: str,
    classes: list[str] | tuple[str, ...] | None = None,
    admin: bool = False,
    rate_limit_rps: float = DEFAULT_RATE_LIMIT_RPS,
    default_class: str | None = None,
    worker: bool = False,
) -> str:
    """Create a key for `tenant` (creating the tenant if new), commit, and return the raw key.

    The raw key is returned once and never stored. Class names are checked by the
    caller against the policy (the CLI does); `default_class` must be one of `classes`
    when both are given. A `worker` key may run job items as their owner (docs/JOBS.md).
    """
    if not tenant or len(tenant) > 64:
        raise ValueError("tenant name must be 1-64 characters")
    if rate_limit_rps <= 0:
        raise ValueError("rate_limit_rps must be positive")
    allowed = sorted(set(classes)) if classes else None
    if default_class is not None and allowed is not None and default_class not in allowed:
        raise ValueError(f"default class {default_class!r} is not among the key's classes {allowed}")

    raw = KEY_PREFIX + secrets.token_urlsafe(32)  # 32 random bytes = 256 bits
    if session.get(Tenant, tenant) is None:
        session.add(Tenant(name=tenant))
        session.flush()  # the key's foreign key needs the tenant row first
    session.add(
        ApiKey(
            key_id=secrets.token_hex(8),
            tenant=tenant,
            prefix=raw[:DISPLAY_PREFIX_LEN],
            key_hash=hash_key(raw),
            allowed_classes=allowed,
            is_admin=admin,
            rate_limit_rps=float(rate_limit_rps),
            default_class=default_class,
            is_worker=worker,
        )
    )
    session.commit()
    return raw


def verify_key(session: Session, raw: str | None) -> KeyInfo | None:
    """The key's permissions, or None for a missing, unknown or revoked key."""
    if not raw or not raw.startswith(KEY_PREFIX):
        return None
    return _info(session.scalar(select(ApiKey).where(ApiKey.key_hash == hash_key(raw))))


def key_info(session: Session, key_id: str) -> KeyInfo | None:
    """The permissions of the key with this id, or None when it is unknown or revoked."""
    return _info(session.get(ApiKey, key_id))


def _info(row: ApiKey | None) -> KeyInfo | None:
    if row is None or row.revoked_at is not None:
        return None
    return KeyInfo(
        key_id=row.key_id,
        tenant=row.tenant,
        allowed_classes=frozenset(row.allowed_classes) if row.allowed_classes is not None else None,
        is_admin=row.is_admin,
        rate_limit_rps=row.rate_limit_rps,
        default_class=row.default_class,
        is_worker=row.is_worker,
    )


class ItemNotRunning(Exception):
    """No such job item, or it is not running (finished, cancelled, or handed back): nobody to act for."""


class ItemOwnerUnavailable(Exception):
    """The item's job has no usable submitting key (revoked, or the job predates owner keys)."""


# The identity a running job item acts as (X-Finserve-Job-Item): its job's submitting key. Raises ItemNotRunning
# or ItemOwnerUnavailable. Jobs own their tables, so jobs provides it (jobs.owners.item_owner) and the app that
# mounts the jobs routes hands it to the HTTP edge (core.web.deps.serve_item_owners); core asks only this.
ItemOwnerLookup = Callable[[Session, int], KeyInfo]


def revoke_key(session: Session, key_id: str) -> bool:
    row = session.get(ApiKey, key_id)
    if row is None or row.revoked_at is not None:
        return False
    row.revoked_at = utcnow()
    session.commit()
    return True


def list_keys(session: Session, tenant: str | None = None) -> list[ApiKey]:
    stmt = select(ApiKey).order_by(ApiKey.tenant, ApiKey.created_at)
    if tenant is not None:
        stmt = stmt.where(ApiKey.tenant == tenant)
    return list(session.scalars(stmt))


def write_key_file(path: Path, raw: str) -> None:
    """`raw` into `path`, readable by its owner only (mode 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(raw + "\n")


def ensure_dev_key(session: Session, path: Path) -> str:
    """The development key of the embedded stack: an admin key of tenant "dev".

    Created on first start and kept at `path` (`Settings.dev_key_path`) (mode 0600) so
    later starts print the same key. If the file's key no longer verifies (the
    database was reset), a new one is created and the file rewritten.
    """
    if path.exists():
        raw = path.read_text().strip()
        if verify_key(session, raw) is not None:
            return raw
        log.warning("dev key in %s is not in the database; creating a new one", path)
    raw = create_key(session, DEV_TENANT, admin=True)
    write_key_file(path, raw)
    return raw


def client_api_key(settings: Settings) -> str:
    """The key a client of the gateway sends: FINSERVE_API_KEY, else the file FINSERVE_API_KEY_FILE names, else
    the development key `finserve up` wrote under FINSERVE_HOME. RuntimeError when there is none (the CLI says
    so; a worker cannot start)."""
    if settings.api_key:
        return settings.api_key
    if settings.api_key_file is not None:
        try:
            key = settings.api_key_file.read_text().strip()
        except OSError as exc:
            raise RuntimeError(f"FINSERVE_API_KEY_FILE: cannot read {settings.api_key_file} ({exc.strerror}); "
                               "create it with `finserve keys create --file`") from None
        if not key:
            raise RuntimeError(f"FINSERVE_API_KEY_FILE: {settings.api_key_file} is empty")
        return key
    path = settings.dev_key_path
    if not path.exists():
        raise RuntimeError(f"no FINSERVE_API_KEY set and no development key at {path}; start `finserve up` "
                           "or create a key with `finserve keys create` and export FINSERVE_API_KEY")
    return path.read_text().strip()
