"""Evidence: what a request of an evidence-keeping class asked and was answered, sealed for the ledger.

Which classes keep it is the policy's (`evidence = true`, `evidence_retention_days`, policies/model.py);
the gateway hands the ledger writer a plain `Evidence` with the final row, and the writer thread (never
the request path) seals it:

- `input` (messages / prompt / token ids, the output schema, every sampling parameter incl. the seed) and
  `output` (text, token ids, logprobs when asked) are hashed each with a random 16-byte salt:
  `input_sha256 = sha256("finserve-evidence-v1\\n" + salt + "\\n" + canonical JSON)`. The two hashes go into
  the ledger row and so into its chain hash: evidence cannot be swapped for other evidence without
  breaking the chain, and once the evidence (with its salt) is erased the hashes say nothing about it.
- `{salt, input, output}` is encrypted with AES-256-GCM under the current key of FINSERVE_EVIDENCE_KEY
  (`id:base64key[,id:base64key...]`, first entry encrypts, every entry decrypts: rotation is prepending a
  new key and keeping the old ones until the evidence under them expired), with the request id as
  associated data, so a ciphertext moved to another request's row does not decrypt.
- Stored in `request_evidence` (request id, tenant, class, key id, ciphertext, expiry) in the transaction
  that writes the row; spooled, when the database is down, in its sealed (encrypted) form only.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

EVIDENCE_VERSION = "finserve-evidence-v1"
KEY_BYTES = 32  # AES-256
NONCE_BYTES = 12
SALT_BYTES = 16
DEV_KEY_FILE = "evidence_key"  # under $FINSERVE_HOME when FINSERVE_EVIDENCE_KEY is unset (development only)


class EvidenceKeyError(ValueError):
    """FINSERVE_EVIDENCE_KEY is malformed, or names no key that can open a stored ciphertext."""


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True)


def evidence_hash(salt: str, part: Mapping[str, Any]) -> str:
    return hashlib.sha256(f"{EVIDENCE_VERSION}\n{salt}\n{canonical_json(part)}".encode()).hexdigest()


@dataclass(frozen=True)
class Evidence:
    """Plain evidence, in memory only (from the gateway to the writer thread)."""

    input: dict[str, Any]
    output: dict[str, Any]
    retention_days: float


@dataclass(frozen=True)
class SealedEvidence:
    """Evidence as it is stored and spooled: hashes in the clear, the rest encrypted."""

    key_id: str
    input_sha256: str
    output_sha256: str
    ciphertext: bytes
    expires_at: datetime

    def to_json_dict(self) -> dict[str, Any]:
        return {"key_id": self.key_id, "input_sha256": self.input_sha256, "output_sha256": self.output_sha256,
                "ciphertext": base64.b64encode(self.ciphertext).decode(), "expires_at": self.expires_at.isoformat()}

    @classmethod
    def from_json_dict(cls, d: Mapping[str, Any]) -> SealedEvidence:
        return cls(key_id=d["key_id"], input_sha256=d["input_sha256"], output_sha256=d["output_sha256"],
                   ciphertext=base64.b64decode(d["ciphertext"]), expires_at=datetime.fromisoformat(d["expires_at"]))


@dataclass(frozen=True)
class Opened:
    """Decrypted evidence, with whether it still matches the hashes its ledger row chains."""

    salt: str
    input: dict[str, Any]
    output: dict[str, Any]

    def matches(self, input_sha256: str | None, output_sha256: str | None) -> bool:
        return evidence_hash(self.salt, self.input) == input_sha256 and \
            evidence_hash(self.salt, self.output) == output_sha256


class Keyring:
    """The evidence keys: the first encrypts, all decrypt (by the key id stored with each ciphertext)."""

    def __init__(self, keys: list[tuple[str, bytes]]) -> None:
        if not keys:
            raise EvidenceKeyError("no evidence key")
        for kid, key in keys:
            if len(key) != KEY_BYTES:
                raise EvidenceKeyError(f"evidence key {kid!r} must be {KEY_BYTES} bytes, got {len(key)}")
        self.current = keys[0][0]
        self._keys = dict(keys)

    @classmethod
    def parse(cls, text: str) -> Keyring:
        """`id:base64[,id:base64...]` (standard or URL-safe base64 of 32 random bytes)."""
        keys: list[tuple[str, bytes]] = []
        for entry in (e.strip() for e in text.split(",")):
            if not entry:
                continue
            kid, sep, b64 = entry.partition(":")
            if not sep or not kid:
                raise EvidenceKeyError("FINSERVE_EVIDENCE_KEY entries are id:base64key, comma-separated")
            try:
                key = base64.b64decode(b64.strip() + "=" * (-len(b64.strip()) % 4), altchars=b"-_", validate=False)
            except ValueError as exc:
                raise EvidenceKeyError(f"evidence key {kid!r} is not base64: {exc}") from None
            keys.append((kid.strip(), key))
        return cls(keys)

    @staticmethod
    def generate_entry(kid: str) -> str:
        return f"{kid}:{base64.urlsafe_b64encode(secrets.token_bytes(KEY_BYTES)).decode().rstrip('=')}"

    @property
    def key_ids(self) -> list[str]:
        return list(self._keys)

    def seal(self, request_id: str, evidence: Evidence, *, now: datetime | None = None) -> SealedEvidence:
        salt = secrets.token_hex(SALT_BYTES)
        plain = canonical_json({"salt": salt, "input": evidence.input, "output": evidence.output}).encode()
        nonce = os.urandom(NONCE_BYTES)
        blob = nonce + AESGCM(self._keys[self.current]).encrypt(nonce, plain, request_id.encode())
        created = now or datetime.now(UTC)
        return SealedEvidence(key_id=self.current, input_sha256=evidence_hash(salt, evidence.input),
                              output_sha256=evidence_hash(salt, evidence.output), ciphertext=blob,
                              expires_at=created + timedelta(days=evidence.retention_days))

    def open(self, request_id: str, key_id: str, ciphertext: bytes) -> Opened:
        key = self._keys.get(key_id)
        if key is None:
            raise EvidenceKeyError(f"evidence of {request_id} is under key {key_id!r}, which FINSERVE_EVIDENCE_KEY "
                                   f"does not list (it has {', '.join(self._keys)}): keep retired keys listed")
        try:
            plain = AESGCM(key).decrypt(ciphertext[:NONCE_BYTES], ciphertext[NONCE_BYTES:], request_id.encode())
        except InvalidTag:
            raise EvidenceKeyError(f"evidence of {request_id} does not decrypt under key {key_id!r}: edited, "
                                   "moved from another request, or a different key under the same id") from None
        doc = json.loads(plain)
        return Opened(salt=doc["salt"], input=doc["input"], output=doc["output"])


def load_keyring(configured: str | None, home: Path, *, create: bool) -> Keyring | None:
    """The keyring from FINSERVE_EVIDENCE_KEY; unset: the development key file under $FINSERVE_HOME, made
    (0600) on first use when `create` (the gateway), read only otherwise (the CLI). None: no key at all."""
    if configured:
        return Keyring.parse(configured)
    path = home / DEV_KEY_FILE
    if not path.exists():
        if not create:
            return None
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it first: use that one
            return Keyring.parse(path.read_text().strip())
        with os.fdopen(fd, "w") as fh:
            fh.write(Keyring.generate_entry("dev1") + "\n")
    return Keyring.parse(path.read_text().strip())
