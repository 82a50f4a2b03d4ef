"""Prune checkpoints that cannot be made up without a secret.

A checkpoint (`ledger_chain_checkpoints`) says "positions up to `seq` were pruned; the rest chains
from `row_hash`". Without a secret anyone who can write the database can insert one that hides the
deletion of a chain's oldest rows: every value in it is readable from the row after. With
`FINSERVE_LEDGER_HMAC_KEY` set, `finserve ledger prune` stores `mac` = HMAC-SHA256(key, the
checkpoint's fields) and `finserve ledger verify` (given the same key) refuses a checkpoint whose
mac is missing or wrong (`forged_checkpoint`). Without the key, verify accepts a checkpoint that is
consistent with the chain and reports it as unauthenticated.
"""
from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, cast

MAC_VERSION = "finserve-ledger-checkpoint-v1"


def _iso(v: Any) -> str:
    return cast(datetime, v).astimezone(UTC).isoformat()


def checkpoint_mac(key: bytes, cp: Mapping[str, Any]) -> str:
    """HMAC-SHA256 over the checkpoint's partition, seq, row_hash, rows_pruned, older_than and created_at."""
    text = "\n".join([MAC_VERSION, str(cp["partition"]), str(int(cp["seq"])), str(cp["row_hash"]),
                      str(int(cp["rows_pruned"])), _iso(cp["older_than"]), _iso(cp["created_at"])])
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def mac_ok(key: bytes, cp: Mapping[str, Any]) -> bool:
    mac = cp.get("mac")
    return isinstance(mac, str) and hmac.compare_digest(mac, checkpoint_mac(key, cp))
