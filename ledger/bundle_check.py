"""`finserve ledger verify --bundle FILE`: check an evidence pack (ledger/bundle.py) offline.

Needs neither the database nor the evidence key: the pack carries the decrypted evidence and the salts.
An Ed25519 pack is checked against the public key it names, or against `public_key` when given (the one
the bank published: only that proves who signed it); an HMAC pack needs FINSERVE_LEDGER_HMAC_KEY.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ledger.bundle import FORMAT
from ledger.chain import hash_holds
from ledger.events import event_hash
from ledger.evidence import evidence_hash


@dataclass
class BundleCheck:
    rows: int = 0
    evidence: int = 0
    erasures: int = 0
    events: int = 0
    signed_by: str | None = None  # "ed25519:<public key>" or "hmac-sha256"
    anchors: list[dict[str, Any]] = field(default_factory=list)  # first prev_hash and head per tenant
    problems: list[dict[str, Any]] = field(default_factory=list)  # {kind, request_id/seq, detail}

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"verified": self.ok, **asdict(self)}

    def bad(self, kind: str, detail: str, **where: Any) -> None:
        self.problems.append({"kind": kind, **where, "detail": detail})


def _when(v: Any) -> Any:
    return datetime.fromisoformat(v) if isinstance(v, str) else v


def _signature(check: BundleCheck, body: bytes, sig: dict[str, Any], hmac_key: bytes | None,
               public_key: bytes | None) -> None:
    digest = hashlib.sha256(body).hexdigest()
    if sig.get("sha256") != digest:
        check.bad("tampered", "the pack's lines do not hash to the digest its signature covers: edited after export")
        return
    if sig.get("alg") == "ed25519":
        named = base64.b64decode(sig.get("public_key", ""))
        key = public_key or named
        if public_key is not None and public_key != named:
            check.bad("wrong_signer", "signed with a key other than the public key given")
        try:
            Ed25519PublicKey.from_public_bytes(key).verify(base64.b64decode(sig.get("signature", "")), digest.encode())
            check.signed_by = f"ed25519:{base64.b64encode(key).decode()}"
        except (InvalidSignature, ValueError):
            check.bad("bad_signature", "the Ed25519 signature does not verify: edited or not signed by that key")
    elif sig.get("alg") == "hmac-sha256":
        if hmac_key is None:
            check.bad("unverifiable", "an HMAC-signed pack needs FINSERVE_LEDGER_HMAC_KEY to be checked")
            return
        want = hmac.new(hmac_key, digest.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(want, str(sig.get("signature"))):
            check.bad("bad_signature", "the HMAC does not verify under FINSERVE_LEDGER_HMAC_KEY: edited or another key")
        else:
            check.signed_by = "hmac-sha256"
    else:
        check.bad("bad_signature", f"unknown signature algorithm {sig.get('alg')!r}")


def verify_bundle(path: Path, *, hmac_key: bytes | None = None, public_key: bytes | None = None) -> BundleCheck:
    check = BundleCheck()
    lines = path.read_bytes().splitlines(keepends=True)
    try:
        items = [json.loads(line) for line in lines if line.strip()]
    except ValueError as exc:
        check.bad("malformed", f"a line is not JSON: {exc}")
        return check
    if not items or items[0].get("type") != "header" or items[0].get("format") != FORMAT or \
            items[-1].get("type") != "signature":
        check.bad("malformed", f"not a {FORMAT} pack (a header first and a signature last)")
        return check
    _signature(check, b"".join(lines[:-1]), items[-1], hmac_key, public_key)
    by_type: dict[str, list[dict[str, Any]]] = {}
    for it in items[1:-1]:
        by_type.setdefault(it["type"], []).append(it)
    _rows_and_chain(check, by_type)
    _events(check, by_type.get("event", []) + by_type.get("event_link", []))
    return check


def _rows_and_chain(check: BundleCheck, by_type: dict[str, list[dict[str, Any]]]) -> None:
    evidence = {e["request_id"]: e for e in by_type.get("evidence", [])}
    erased = {e["request_id"] for e in by_type.get("erasure", [])}
    sups: dict[str, list[dict[str, Any]]] = {}
    positions: dict[str, dict[int, dict[str, Any]]] = {}
    for s in by_type.get("superseded", []):
        sups.setdefault(s["request_id"], []).append(s)
        positions.setdefault(s["tenant"], {})[s["seq"]] = s
    for lk in by_type.get("link", []):
        positions.setdefault(lk["tenant"], {})[lk["seq"]] = lk
    for item in by_type.get("row", []):
        r = {**item["row"], "arrival_at": _when(item["row"]["arrival_at"])}
        rid = r["request_id"]
        check.rows += 1
        positions.setdefault(r["tenant"], {})[r["chain_seq"]] = r
        bindings: list[dict[str, Any] | None] = [None, *[s for s in sups.get(rid, []) if s["seq"] < r["chain_seq"]]]
        if not any(hash_holds(r["row_hash"], r["prev_hash"], r, b) for b in bindings):
            check.bad("row_edited", "its columns do not hash to its row_hash", request_id=rid)
        if r.get("input_sha256") is None:
            continue
        ev = evidence.get(rid)
        if ev is not None:
            check.evidence += 1
            if evidence_hash(ev["salt"], ev["input"]) != r["input_sha256"] or \
                    evidence_hash(ev["salt"], ev["output"]) != r["output_sha256"]:
                check.bad("evidence_mismatch", "its evidence does not hash to what its row chains", request_id=rid)
        elif rid in erased:
            check.erasures += 1
        else:
            check.bad("evidence_missing", "its row chains evidence that the pack neither holds nor shows erased",
                      request_id=rid)
    heads = {h["tenant"]: h for h in by_type.get("head", [])}
    for tenant, pos in sorted(positions.items()):
        lo, hi = min(pos), max(pos)
        for n in range(lo + 1, hi + 1):
            if n not in pos:
                check.bad("missing_position", f"chain position {n} of tenant {tenant} is missing from the pack", seq=n)
            elif n - 1 in pos and pos[n]["prev_hash"] != pos[n - 1]["row_hash"]:
                check.bad("broken_link", f"position {n} of tenant {tenant} does not link to position {n - 1}", seq=n)
        check.anchors.append({"tenant": tenant, "first_seq": lo, "first_prev_hash": pos[lo]["prev_hash"],
                              "head": heads.get(tenant)})


def _events(check: BundleCheck, events: list[dict[str, Any]]) -> None:
    prev: dict[str, Any] | None = None
    for e in sorted(events, key=lambda e: e["seq"]):
        check.events += 1
        if e["type"] == "event" and event_hash(e["prev_hash"], {**e, "at": _when(e["at"])}) != e["row_hash"]:
            check.bad("event_edited", f"event {e['seq']} ({e['kind']}) does not hash to its row_hash", seq=e["seq"])
        if prev is not None and (e["seq"] != prev["seq"] + 1 or e["prev_hash"] != prev["row_hash"]):
            check.bad("event_broken_link", f"event {e['seq']} does not follow event {prev['seq']}", seq=e["seq"])
        prev = e
