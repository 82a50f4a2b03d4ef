"""`finserve db upgrade`, `finserve keys create|list|revoke`, `finserve report`."""
from __future__ import annotations

import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from finserve.console import CLIError, Output, OutputOpt, print_json, stdout

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_time(text: str, now: datetime) -> datetime:
    """ISO 8601 (naive = UTC), 'now', or a duration before now such as 30m, 24h, 7d."""
    text = text.strip()
    if text == "now":
        return now
    m = _DURATION.match(text)
    if m:
        return now - timedelta(seconds=float(m.group(1)) * _UNIT_S[m.group(2)])
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise CLIError(f"{text!r}: use ISO 8601 (2025-03-01T09:00), 'now', or a duration like 24h") from None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _session() -> Session:
    from core.db.base import make_engine, make_session_factory
    from core.db.migrate import upgrade
    from core.settings import Settings

    url = Settings().resolved_database_url
    upgrade(url)  # idempotent and quick: a first `keys create` on a fresh install just works
    return make_session_factory(make_engine(url))()


def _check_classes(names: list[str]) -> None:
    """Refuse class names the policy in use (FINSERVE_POLICY) does not define, as the API does."""
    from core.settings import Settings
    from policies import load_policy

    known = set(load_policy(Settings().policy).classes)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise CLIError(f"unknown workload class {', '.join(unknown)}; known classes: {', '.join(sorted(known))}")


def register(app: typer.Typer) -> None:
    db_app = typer.Typer(help="Database schema (Alembic migrations).", no_args_is_help=True)
    keys_app = typer.Typer(help="Per-tenant API keys.", no_args_is_help=True)
    app.add_typer(db_app, name="db")
    app.add_typer(keys_app, name="keys")

    @db_app.command("upgrade")
    def db_upgrade(
        url: Annotated[str | None, typer.Option(help="Database URL (default: FINSERVE_DATABASE_URL)")] = None,
    ) -> None:
        """Create or upgrade the schema to the latest revision."""
        from core.db.base import redact_url
        from core.db.migrate import upgrade
        from core.settings import Settings

        url = url or Settings().resolved_database_url
        rev = upgrade(url)
        typer.echo(f"database at revision {rev} ({redact_url(url)})")

    @keys_app.command("create")
    def keys_create(
        tenant: Annotated[str, typer.Option(help="Tenant the key belongs to (created if new)")],
        classes: Annotated[str | None, typer.Option(help="Comma-separated classes the key may use (default: all)")] = None,
        admin: Annotated[bool, typer.Option("--admin", help="May read SLO reports and every tenant's data")] = False,
        worker: Annotated[bool, typer.Option("--worker", help="For extraction workers: may run a job's items as "
                                             "the job's owner (X-Finserve-Job-Item)")] = False,
        rate_limit: Annotated[float, typer.Option("--rate-limit", help="Requests per second")] = 50.0,
        default_class: Annotated[str | None, typer.Option(help="Class used when a request names none")] = None,
        output: OutputOpt = Output.table,
    ) -> None:
        """Create an API key. The key is printed once and stored only as a hash."""
        from core.keys import create_key

        class_list = [c.strip() for c in classes.split(",") if c.strip()] if classes else None
        if class_list or default_class:
            _check_classes((class_list or []) + ([default_class] if default_class else []))
        with _session() as session:
            try:
                raw = create_key(session, tenant, class_list, admin=admin, rate_limit_rps=rate_limit,
                                 default_class=default_class, worker=worker)
            except ValueError as exc:
                raise CLIError(str(exc)) from None
        if output is Output.json:  # for scripts: the key with what it may do, one document on stdout
            print_json({"key": raw, "tenant": tenant, "classes": class_list, "admin": admin, "worker": worker,
                        "rate_limit_rps": rate_limit, "default_class": default_class})
        else:
            typer.echo(raw)
        typer.echo("store this key now: it is not shown again", err=True)

    @keys_app.command("list")
    def keys_list(tenant: Annotated[str | None, typer.Option(help="Only this tenant")] = None,
                  output: OutputOpt = Output.table) -> None:
        """List keys (prefix only, never the key)."""
        from core.keys import list_keys

        with _session() as session:
            rows = [_key_row(k) for k in list_keys(session, tenant)]
        if output is Output.json:
            print_json(rows)
        else:
            _print_keys(rows)

    @keys_app.command("revoke")
    def keys_revoke(key_id: Annotated[str, typer.Argument(help="The key's id (see `finserve keys list`).")]) -> None:
        """Revoke a key by its id (see `finserve keys list`)."""
        from core.keys import revoke_key

        with _session() as session:
            if not revoke_key(session, key_id):
                raise CLIError(f"no active key {key_id} (see `finserve keys list`)")
        typer.echo(f"revoked {key_id}")

    @app.command("report")
    def report(
        window: Annotated[str | None, typer.Option(metavar="DURATION", help="Rolling window before --until: 24h, 7d, 28d (default 28d)")] = None,
        since: Annotated[str | None, typer.Option(metavar="TIME", help="Window start instead of --window: ISO 8601 or a duration ago")] = None,
        until: Annotated[str, typer.Option(metavar="TIME", help="Window end (exclusive): ISO 8601 or 'now'")] = "now",
        workload_class: Annotated[str | None, typer.Option("--class", metavar="CLASS", help="Only this class")] = None,
        tenant: Annotated[str | None, typer.Option(help="Only this tenant (default: all, with a per-tenant table)")] = None,
        fmt: Annotated[str, typer.Option("--format", help="json, csv or html (the report's document format)")] = "json",
        out: Annotated[Path | None, typer.Option(help="Write here instead of stdout")] = None,
    ) -> None:
        """SLO report per workload class from the request ledger: attainment, error budget, burn rates, alerts."""
        from ledger.reports import DEFAULT_WINDOW, FORMATS, build_report, parse_duration, render_report

        if fmt not in FORMATS:
            raise CLIError(f"--format must be one of {', '.join(FORMATS)}")
        if since is not None and window is not None:
            raise CLIError("give --since or --window, not both")
        if workload_class is not None:
            _check_classes([workload_class])
        now = datetime.now(UTC)
        t1 = parse_time(until, now)
        try:
            t0 = parse_time(since, now) if since is not None else t1 - (parse_duration(window) if window else DEFAULT_WINDOW)
        except ValueError as exc:
            raise CLIError(f"--window: {exc}") from None
        if t1 <= t0:
            raise CLIError("--until must be after --since")
        with _session() as session:
            text = render_report(build_report(session, t0, t1, workload_class, tenant), fmt)
        if out is None:
            sys.stdout.write(text)
        else:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text)
            typer.echo(f"wrote {out}", err=True)


def _key_row(k: Any) -> dict[str, Any]:
    return {"key_id": k.key_id, "prefix": k.prefix, "tenant": k.tenant, "classes": k.allowed_classes or None,
            "default_class": k.default_class, "admin": k.is_admin, "worker": k.is_worker,
            "rate_limit_rps": k.rate_limit_rps, "state": "revoked" if k.revoked_at else "active",
            "created_at": k.created_at, "revoked_at": k.revoked_at}


def _print_keys(rows: list[dict[str, Any]]) -> None:
    if not rows:
        typer.echo("no keys (create one with `finserve keys create --tenant NAME`)", err=True)
        return
    from rich.table import Table

    table = Table()
    for name in ("id", "prefix", "tenant", "classes", "admin", "worker", "rps", "state"):
        table.add_column(name, no_wrap=name in ("id", "prefix"))  # ids are copied into `keys revoke`
    for r in rows:
        table.add_row(r["key_id"], f"{r['prefix']}…", r["tenant"], ",".join(r["classes"] or ["all"]),
                      "yes" if r["admin"] else "no", "yes" if r["worker"] else "no", f"{r['rate_limit_rps']:g}",
                      r["state"])
    stdout().print(table)
