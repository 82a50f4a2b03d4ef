"""The evidence side of `finserve ledger`: erase, the evidence pack (export --evidence, verify --bundle) and
the audit lines verify prints. Keys: FINSERVE_EVIDENCE_KEY (else the development key file under
$FINSERVE_HOME), FINSERVE_EVIDENCE_SIGNING_KEY (Ed25519 seed, base64) or FINSERVE_LEDGER_HMAC_KEY."""
from __future__ import annotations

import base64
import sys
from contextlib import nullcontext
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from finserve.console import CLIError, ExitCode, JsonOpt, Output, OutputOpt, print_json


def _settings() -> Any:
    from core.settings import Settings

    return Settings()


def db_engine() -> Any:
    """The ledger database of this process's settings: an existing, migrated one (finserve/database.py), never
    a new empty one that would verify as a clean ledger."""
    from core.db.base import make_engine
    from finserve.database import existing_database

    return make_engine(existing_database(_settings()))


def keyring(*, required: bool) -> Any:
    from ledger.evidence import EvidenceKeyError, load_keyring

    s = _settings()
    try:
        ring = load_keyring(s.evidence_key.get_secret_value() if s.evidence_key else None, s.home, create=False)
    except EvidenceKeyError as exc:
        raise CLIError(f"FINSERVE_EVIDENCE_KEY: {exc}", ExitCode.CONFIG) from None
    if ring is None and required:
        raise CLIError("no evidence key: set FINSERVE_EVIDENCE_KEY (or run where the gateway's "
                       "$FINSERVE_HOME/evidence_key is)", ExitCode.CONFIG)
    return ring


def _hmac_key() -> bytes | None:
    key = _settings().ledger_hmac_key
    return key.get_secret_value().encode() if key is not None and key.get_secret_value() else None


def erase(
    request_id: Annotated[str | None, typer.Option("--request-id", help="Erase this request's evidence")] = None,
    tenant: Annotated[str | None, typer.Option("--tenant", help="Erase every evidence record of this tenant")] = None,
    reason: Annotated[str, typer.Option("--reason", help="Why (recorded in the chained tombstone), e.g. a "
                                        "GDPR Art. 17 request's reference")] = "erasure request",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Name what would go; change nothing")] = False,
    json_out: JsonOpt = False,
    output: OutputOpt = Output.table,
) -> None:
    """Delete kept evidence (input and output) by request id or tenant; the ledger rows stay, and a chained
    tombstone records the erasure so `finserve ledger verify` still passes and shows it."""
    from ledger.evidence_store import erase as run_erase

    if (request_id is None) == (tenant is None):
        raise CLIError("give exactly one of --request-id and --tenant")
    engine = db_engine()
    try:
        result = run_erase(engine, request_id=request_id, tenant=tenant, reason=reason, dry_run=dry_run,
                           hmac_key=_hmac_key())
    finally:
        engine.dispose()
    if json_out or output is Output.json:
        print_json(result.to_dict())
        return
    verb = "would erase" if dry_run else "erased"
    typer.echo(f"{verb} the evidence of {len(result.erased)} requests"
               + (f" (tombstone event(s) {', '.join(map(str, result.events))})" if result.events else ""))


def export_pack(engine: Any, out: Path | None, *, request_id: str | None, tenant: str | None,
                since: datetime | None, until: datetime | None, hmac_key: bytes | None) -> None:
    from ledger.bundle import build, signing_key_from
    from ledger.evidence import EvidenceKeyError

    s = _settings()
    signer = signing_key_from(s.evidence_signing_key.get_secret_value()) if s.evidence_signing_key else None
    ring = keyring(required=True)
    try:
        with engine.connect() as conn:
            lines = list(build(conn, ring, request_id=request_id, tenant=tenant, since=since, until=until,
                               hmac_key=hmac_key, signing_key=signer))
    except (ValueError, EvidenceKeyError) as exc:
        raise CLIError(str(exc)) from None
    finally:
        engine.dispose()
    with (open(out, "w", encoding="utf-8") if out else nullcontext(sys.stdout)) as sink:
        sink.writelines(lines)


def verify_bundle_file(path: Path, hmac_key: bytes | None, public_key: str | None, as_json: bool) -> None:
    from ledger.bundle_check import verify_bundle

    if not path.is_file():
        raise CLIError(f"--bundle: no such file {path}")
    result = verify_bundle(path, hmac_key=hmac_key, public_key=base64.b64decode(public_key) if public_key else None)
    if as_json:
        print_json(result.to_dict())
    else:
        for p in result.problems:
            typer.echo(f"{p['kind']}: {p.get('request_id') or p.get('seq') or '-'}: {p['detail']}")
        for a in result.anchors:
            typer.echo(f"anchor: tenant {a['tenant']} from position {a['first_seq']} (prev_hash "
                       f"{a['first_prev_hash'][:16]}...), head {a['head']}")
        typer.echo(f"bundle verified: {'yes' if result.ok else 'no'} ({result.rows} rows, {result.evidence} "
                   f"evidence, {result.erasures} erased, {result.events} events; signed by {result.signed_by})")
    if not result.ok:
        first = result.problems[0]
        raise CLIError(f"the evidence pack failed verification: {first['kind']}: {first['detail']}",
                       ExitCode.INTEGRITY)


def echo_audit(extra: dict[str, Any]) -> None:
    for e in extra["erasures"]:
        typer.echo(f"erasure accepted: {e['request_id']} (tenant {e['tenant']}): {e['kind']} at event {e['seq']} "
                   f"({e['at']}; {e['reason']})")
    typer.echo(f"events verified: {extra['events_checked']} (head {extra['events_head']}); evidence records "
               f"checked: {extra['evidence_checked']}{' (decrypted)' if extra['evidence_decrypted'] else ''}")
