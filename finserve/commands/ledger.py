"""`finserve ledger verify` and `finserve ledger prune`: the SLO ledger's tamper evidence and retention.

verify walks each tenant's hash chain (ledger/verify.py) and names every row that was
edited or whose predecessor is missing; it exits 6 (ExitCode.INTEGRITY) when it finds one. It lists
the amendments (superseded positions) and prunes (checkpoints) it accepted; with
FINSERVE_LEDGER_HMAC_KEY, prune signs its checkpoints and verify refuses an unsigned or forged one.
prune deletes old rows behind a checkpoint and drops old step timelines (ledger/retention.py).
export writes the rows of a tenant and period as NDJSON or CSV (ledger/export.py), or with --evidence a
signed evidence pack (ledger/bundle.py) that `verify --bundle` checks offline; erase deletes evidence
behind a chained tombstone (finserve/commands/ledger_evidence.py).
"""
from __future__ import annotations

import sys
from contextlib import nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from finserve.commands import ledger_evidence, ledger_replay
from finserve.console import CLIError, ExitCode, JsonOpt, Output, OutputOpt, print_json


def register(app: typer.Typer) -> None:
    ledger_app = typer.Typer(help="The SLO ledger: verify its hash chain, prune old rows and timelines.",
                             no_args_is_help=True)
    app.add_typer(ledger_app, name="ledger")
    ledger_app.command("verify")(verify)
    ledger_app.command("prune")(prune)
    ledger_app.command("export")(export)
    ledger_app.command("erase")(ledger_evidence.erase)
    ledger_app.command("replay")(ledger_replay.replay)


def _engine() -> Any:
    return ledger_evidence.db_engine()


def _hmac_key() -> bytes | None:
    """FINSERVE_LEDGER_HMAC_KEY as bytes: signs prune checkpoints, and verify checks them with it."""
    from core.settings import Settings

    key = Settings().ledger_hmac_key
    return key.get_secret_value().encode() if key is not None and key.get_secret_value() else None


def _duration(option: str, text: str) -> Any:
    from ledger.reports import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise CLIError(f"{option}: {exc}") from None


def verify(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's chain (default: every tenant)")] = None,
    since: Annotated[str | None, typer.Option(metavar="TIME", help="Only rows that arrived from then on: ISO "
                                                 "8601 or a duration ago (24h); with the links around them")] = None,
    until: Annotated[str | None, typer.Option(metavar="TIME", help="Only rows that arrived before then: ISO "
                                                 "8601, 'now' or a duration ago")] = None,
    timelines: Annotated[bool, typer.Option("--timelines/--no-timelines", help="Also check each kept timeline "
                                            "against its chained digest (reads every timeline)")] = True,
    evidence: Annotated[bool, typer.Option("--evidence", help="Also decrypt every kept evidence record and check "
                                           "it against its row's chained hashes (needs FINSERVE_EVIDENCE_KEY)")] = False,
    bundle: Annotated[Path | None, typer.Option("--bundle", metavar="FILE", help="Check an evidence pack "
                                                   "offline instead (no database needed)")] = None,
    public_key: Annotated[str | None, typer.Option("--public-key", help="With --bundle: the Ed25519 public key "
                                                      "(base64) the pack must be signed with")] = None,
    json_out: JsonOpt = False,
    output: OutputOpt = Output.table,
) -> None:
    """Check every ledger row against its tenant's hash chain, the event chain and the kept evidence; name
    each edited row and each missing one."""
    from finserve.commands.db import parse_time
    from ledger.audit import verify_all

    if bundle is not None:
        ledger_evidence.verify_bundle_file(bundle, _hmac_key(), public_key, json_out or output is Output.json)
        return
    now = datetime.now(UTC)
    t0 = parse_time(since, now) if since else None
    t1 = parse_time(until, now) if until else None
    keyring = ledger_evidence.keyring(required=True) if evidence else None
    engine = _engine()
    try:
        with engine.connect() as conn:
            result, extra = verify_all(conn, tenant=tenant, since=t0, until=t1, check_timelines=timelines,
                                       hmac_key=_hmac_key(), keyring=keyring)
    finally:
        engine.dispose()
    if json_out or output is Output.json:
        print_json(result.to_dict() | extra)
    else:
        for p in result.problems:
            typer.echo(f"{p.kind}: {p.request_id or '-'} (tenant {p.partition}, chain position {p.seq}): {p.detail}")
        _echo_accepted(result)
        ledger_evidence.echo_audit(extra)
        unchained = f"; {result.rows_unchained} rows from before chaining (migration 0004) not covered" \
            if result.rows_unchained else ""
        typer.echo(f"ledger verified: {'yes' if result.ok else 'no'} ({result.rows_checked} rows in "
                   f"{result.partitions} tenant chains{unchained})")
    if not result.ok:
        first = result.problems[0]
        raise CLIError(f"the ledger failed verification: {len(result.problems)} problem(s), first: {first.kind} "
                       f"at {first.request_id or f'position {first.seq}'} (tenant {first.partition})",
                       ExitCode.INTEGRITY)


def _echo_accepted(result: Any) -> None:
    """The amendments and prunes verify accepted: the only ways a chain may legitimately differ from 1..head."""
    for a in result.amendments:
        typer.echo(f"amendment accepted: {a['request_id']} (tenant {a['partition']}): position {a['seq']} "
                   f"({a['old_status']}) superseded by position {a['rechained_at']} ({a['status']})")
    for c in result.prunes:
        auth = "authenticated by FINSERVE_LEDGER_HMAC_KEY" if c["authenticated"] else \
            "unauthenticated: no FINSERVE_LEDGER_HMAC_KEY, accepted because it is consistent"
        typer.echo(f"prune accepted: tenant {c['partition']}, positions up to {c['seq']} ({c['rows_pruned']} rows "
                   f"older than {c['older_than']}, pruned {c['created_at']}; {auth})")


def prune(
    older_than: Annotated[str | None, typer.Option(metavar="DURATION", help="Delete rows that arrived longer "
                                                      "ago than this (e.g. 90d); a checkpoint keeps the chain "
                                                      "verifiable")] = None,
    timelines_older_than: Annotated[str | None, typer.Option(metavar="DURATION", help="Drop the step "
                                                                "timelines of rows older than this (e.g. 7d); "
                                                                "the summary rows stay")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Count what would go; change nothing")] = False,
    expired_evidence: Annotated[bool, typer.Option("--expired-evidence", help="Only delete evidence past its "
                                                   "class's retention (every prune does that too)")] = False,
    json_out: JsonOpt = False,
    output: OutputOpt = Output.table,
) -> None:
    """Delete old ledger rows (behind a chain checkpoint), old step timelines and expired evidence."""
    from ledger.retention import prune as run_prune

    if older_than is None and timelines_older_than is None and not expired_evidence:
        raise CLIError("give --older-than (whole rows), --timelines-older-than (step timelines) and/or "
                       "--expired-evidence")
    now = datetime.now(UTC)
    rows_cut = now - _duration("--older-than", older_than) if older_than else None
    timelines_cut = now - _duration("--timelines-older-than", timelines_older_than) if timelines_older_than else None
    engine = _engine()
    try:
        result = run_prune(engine, older_than=rows_cut, timelines_older_than=timelines_cut, dry_run=dry_run,
                           hmac_key=_hmac_key())
    finally:
        engine.dispose()
    if json_out or output is Output.json:
        print_json(result.to_dict())
    else:
        verb = "would delete" if dry_run else "deleted"
        typer.echo(f"{verb} {result.rows_deleted} chained rows ({len(result.checkpoints)} tenant checkpoints) and "
                   f"{result.unchained_deleted} unchained rows; {'would drop' if dry_run else 'dropped'} "
                   f"{result.timelines_dropped} timelines; {verb} the evidence of {result.evidence_expired} requests "
                   "past its retention")
    if result.refused:
        first = result.refused[0]
        raise CLIError(f"not pruned: tenant {first.partition}'s old chain is broken ({first.kind} at "
                       f"{first.request_id or first.seq}); run `finserve ledger verify`", ExitCode.INTEGRITY)


def export(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's rows (default: every tenant)")] = None,
    since: Annotated[str | None, typer.Option(metavar="TIME", help="Rows that arrived from then on: ISO 8601 "
                                                 "or a duration ago (24h)")] = None,
    until: Annotated[str | None, typer.Option(metavar="TIME", help="Rows that arrived before then: ISO 8601, "
                                                 "'now' or a duration ago")] = None,
    format: Annotated[str, typer.Option("--format", help="ndjson (one JSON object a line) or csv")] = "ndjson",
    out: Annotated[Path | None, typer.Option("--out", help="Write to this file (default: stdout)")] = None,
    request_id: Annotated[str | None, typer.Option("--request-id", help="With --evidence: this request "
                                                      "only")] = None,
    evidence: Annotated[bool, typer.Option("--evidence", help="A signed evidence pack (rows, decrypted evidence, "
                                           "chain proof, versions) for `verify --bundle`")] = False,
) -> None:
    """Export ledger rows (every column but the step timeline), oldest first; running requests are left out."""
    from finserve.commands.db import parse_time
    from ledger.export import FORMATS, export_rows, render

    if request_id is not None and not evidence:
        raise CLIError("--request-id goes with --evidence (a pack for one request)")
    if format not in FORMATS:
        raise CLIError(f"--format: {format!r} is not one of {', '.join(FORMATS)}")
    now = datetime.now(UTC)
    t0 = parse_time(since, now) if since else None
    t1 = parse_time(until, now) if until else None
    if t0 is not None and t1 is not None and t1 <= t0:
        raise CLIError("--until must be after --since")
    if evidence:
        ledger_evidence.export_pack(_engine(), out, request_id=request_id, tenant=tenant, since=t0, until=t1,
                                    hmac_key=_hmac_key())
        return
    engine = _engine()
    try:
        with engine.connect() as conn, (open(out, "w", newline="") if out else nullcontext(sys.stdout)) as sink:
            for line in render(export_rows(conn, tenant=tenant, since=t0, until=t1), format):
                sink.write(line)
    finally:
        engine.dispose()
