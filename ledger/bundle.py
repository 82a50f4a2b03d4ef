"""The evidence pack: `finserve ledger export --evidence` writes it, `finserve ledger verify --bundle` checks it
offline (no database, no evidence key).

One NDJSON file, one object a line, each with a `type`:
  header     format, when, the scope asked for (request id, or tenant and period)
  row        a ledger row's hashed columns with prev_hash and row_hash (every exported request)
  evidence   its decrypted input and output, with the salt its chained hashes were made with
  erasure    for a row whose evidence was erased or expired: the chained event that says so
  link       the hash and link of a position between exported rows (another request: no content)
  superseded a superseded position in that range (ledger/chain.py)
  head       each tenant's chain head when the pack was made
  event      the chained events of the period (starts with versions and clock state, changes, erasures)
  versions   the distinct (model, weights, format, policy, finserve) tuples the rows were served with
  signature  last: sha256 of every line before it, signed (Ed25519 with FINSERVE_EVIDENCE_SIGNING_KEY, else
             HMAC-SHA256 with FINSERVE_LEDGER_HMAC_KEY)
The check: the signature; each row's hash from its columns; positions contiguous from the first exported
row to the last, each prev_hash the previous position's hash; each evidence's hashes the row's; the events'
hashes and links. The first position's prev_hash and the heads are anchors: compare them with a copy kept
outside the database (or run `finserve ledger verify` online) to tie the pack to the whole chain.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import select

from ledger.chain import LEDGER, SUPERSEDED
from ledger.events import ERASURE_KINDS, read_events, tombstones
from ledger.evidence import Keyring
from ledger.evidence_store import read_evidence
from ledger.fields import HASHED_COLUMNS, VERSION_FIELDS
from ledger.verify import Db, read_head

FORMAT = "finserve-evidence-pack-v1"


def _text(v: Any) -> Any:
    return v.astimezone(UTC).isoformat() if isinstance(v, datetime) else v


def _line(obj: dict[str, Any]) -> str:
    return json.dumps({k: _text(v) for k, v in obj.items()}, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False, default=_text) + "\n"


def signing_key_from(text: str) -> Ed25519PrivateKey:
    """FINSERVE_EVIDENCE_SIGNING_KEY: base64 of a 32-byte Ed25519 seed."""
    return Ed25519PrivateKey.from_private_bytes(base64.b64decode(text.strip() + "=" * (-len(text.strip()) % 4)))


def build(db: Db, keyring: Keyring, *, request_id: str | None = None, tenant: str | None = None,
          since: datetime | None = None, until: datetime | None = None, hmac_key: bytes | None = None,
          signing_key: Ed25519PrivateKey | None = None) -> Iterator[str]:
    """The pack's lines (signature last). Raises ValueError when nothing can sign it or nothing matches."""
    if hmac_key is None and signing_key is None:
        raise ValueError("an evidence pack must be signed: set FINSERVE_EVIDENCE_SIGNING_KEY (Ed25519) or "
                         "FINSERVE_LEDGER_HMAC_KEY")
    cols = [LEDGER.c[n] for n in HASHED_COLUMNS] + [LEDGER.c.prev_hash, LEDGER.c.row_hash]
    stmt = select(*cols).where(LEDGER.c.chain_seq.is_not(None))
    if request_id is not None:
        stmt = stmt.where(LEDGER.c.request_id == request_id)
    if tenant is not None:
        stmt = stmt.where(LEDGER.c.tenant == tenant)
    if since is not None:
        stmt = stmt.where(LEDGER.c.arrival_at >= since)
    if until is not None:
        stmt = stmt.where(LEDGER.c.arrival_at < until)
    rows = [dict(r) for r in db.execute(stmt.order_by(LEDGER.c.tenant, LEDGER.c.chain_seq)).mappings()]
    if not rows:
        raise ValueError("no chained ledger row matches: nothing to pack")
    digest = hashlib.sha256()

    def out(obj: dict[str, Any]) -> str:
        text = _line(obj)
        digest.update(text.encode())
        return text

    yield out({"type": "header", "format": FORMAT, "created_at": datetime.now(UTC),
               "scope": {"request_id": request_id, "tenant": tenant, "since": since, "until": until}})
    stored, stones = read_evidence(db, [r["request_id"] for r in rows]), tombstones(db)
    for r in rows:
        yield out({"type": "row", "row": r})
        ev = stored.get(r["request_id"])
        if ev is not None:
            opened = keyring.open(r["request_id"], ev["key_id"], ev["ciphertext"])
            yield out({"type": "evidence", "request_id": r["request_id"], "salt": opened.salt, "input": opened.input,
                       "output": opened.output, "key_id": ev["key_id"], "expires_at": ev["expires_at"]})
        elif r["request_id"] in stones:
            yield out({"type": "erasure", "request_id": r["request_id"], **stones[r["request_id"]]})
    for p in sorted({r["tenant"] for r in rows}):
        seqs = [r["chain_seq"] for r in rows if r["tenant"] == p]
        lo, hi, have = min(seqs), max(seqs), set(seqs)
        for lk in db.execute(select(LEDGER.c.chain_seq, LEDGER.c.prev_hash, LEDGER.c.row_hash).where(
                LEDGER.c.tenant == p, LEDGER.c.chain_seq.between(lo, hi)).order_by(LEDGER.c.chain_seq)).mappings():
            if lk["chain_seq"] not in have:
                yield out({"type": "link", "tenant": p, "seq": lk["chain_seq"], "prev_hash": lk["prev_hash"],
                           "row_hash": lk["row_hash"]})
        for s in db.execute(select(SUPERSEDED).where(SUPERSEDED.c.partition == p,
                                                     SUPERSEDED.c.seq <= hi)).mappings():
            yield out({"type": "superseded", "tenant": p, **{k: s[k] for k in ("seq", "request_id", "prev_hash",
                                                                              "row_hash", "old_status")}})
        head = read_head(db, p)
        if head is not None:
            yield out({"type": "head", "tenant": p, "seq": head.seq, "hash": head.hash})
    packed = {r["request_id"] for r in rows}
    for e in read_events(db):  # the whole event chain: erasures of other requests by their hashes only
        erasure = e["kind"] in ERASURE_KINDS
        if erasure and not any(q["request_id"] in packed for q in e["detail"].get("requests", [])):
            yield out({"type": "event_link", "seq": e["seq"], "prev_hash": e["prev_hash"], "row_hash": e["row_hash"]})
        else:
            yield out({"type": "event", **{k: e[k] for k in ("seq", "kind", "at", "tenant", "detail", "prev_hash",
                                                            "row_hash")}})
    versions = sorted({tuple(r[f] or "" for f in VERSION_FIELDS) for r in rows})
    yield out({"type": "versions", "versions": [dict(zip(VERSION_FIELDS, v, strict=True)) for v in versions]})
    body = digest.hexdigest()
    if signing_key is not None:
        pub = signing_key.public_key().public_bytes_raw()
        sig = {"alg": "ed25519", "public_key": base64.b64encode(pub).decode(),
               "signature": base64.b64encode(signing_key.sign(body.encode())).decode()}
    else:
        assert hmac_key is not None
        sig = {"alg": "hmac-sha256", "signature": hmac.new(hmac_key, body.encode(), hashlib.sha256).hexdigest()}
    yield _line({"type": "signature", "sha256": body, **sig})
