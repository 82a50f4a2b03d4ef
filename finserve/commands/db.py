"""`finserve db upgrade`, `finserve keys create|list|revoke` (and the helpers `finserve report` shares)."""
from __future__ import annotations

import re
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


def db_session(*, create: bool = False) -> Session:
    """A session on the stack's database: created and migrated when `create` (a first `keys create` on a
    fresh install just works), else only an existing, migrated one (finserve/database.py)."""
    from core.db.base import make_engine, make_session_factory
    from core.db.migrate import upgrade
    from core.settings import Settings
    from finserve.database import existing_database

    if create:
        url = Settings().resolved_database_url
        upgrade(url)  # idempotent and quick
    else:
        url = existing_database()
    return make_session_factory(make_engine(url))()


def check_classes(names: list[str]) -> None:
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
        output: OutputOpt = Output.table,
    ) -> None:
        """Create or upgrade the schema to the latest revision."""
        from core.db.base import redact_url
        from core.db.migrate import upgrade
        from core.settings import Settings

        url = url or Settings().resolved_database_url
        rev = upgrade(url)
        if output is Output.json:
            print_json({"revision": rev, "database": redact_url(url)})
        else:
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
        file: Annotated[Path | None, typer.Option("--file", metavar="PATH", help="Write the key to this file (mode "
                                                  "0600; a process reads it with FINSERVE_API_KEY_FILE) instead of "
                                                  "printing it; a file that already holds an active key of the "
                                                  "tenant is kept, so an init step may run on every start")] = None,
        output: OutputOpt = Output.table,
    ) -> None:
        """Create an API key. The key is printed once (or written to --file) and stored only as a hash."""
        from core.keys import create_key, verify_key, write_key_file

        class_list = [c.strip() for c in classes.split(",") if c.strip()] if classes else None
        if class_list or default_class:
            check_classes((class_list or []) + ([default_class] if default_class else []))
        with db_session(create=True) as session:
            kept = verify_key(session, file.read_text().strip()) if file is not None and file.is_file() else None
            if kept is not None and kept.tenant == tenant:
                typer.echo(f"kept the active key of tenant {tenant} in {file} ({kept.key_id})", err=True)
                return
            try:
                raw = create_key(session, tenant, class_list, admin=admin, rate_limit_rps=rate_limit,
                                 default_class=default_class, worker=worker)
            except ValueError as exc:
                raise CLIError(str(exc)) from None
        if file is not None:
            write_key_file(file, raw)
            typer.echo(f"wrote a new key of tenant {tenant} to {file}", err=True)
            return
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

        with db_session() as session:
            rows = [_key_row(k) for k in list_keys(session, tenant)]
        if output is Output.json:
            print_json(rows)
        else:
            _print_keys(rows)

    @keys_app.command("revoke")
    def keys_revoke(key_id: Annotated[str, typer.Argument(help="The key's id (see `finserve keys list`).")],
                    output: OutputOpt = Output.table) -> None:
        """Revoke a key by its id (see `finserve keys list`)."""
        from core.keys import revoke_key

        with db_session() as session:
            if not revoke_key(session, key_id):
                raise CLIError(f"no active key {key_id} (see `finserve keys list`)")
        if output is Output.json:
            print_json({"key_id": key_id, "state": "revoked"})
        else:
            typer.echo(f"revoked {key_id}")


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
