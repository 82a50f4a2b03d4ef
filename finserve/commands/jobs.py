"""`finserve jobs submit|watch|results|resume` and `finserve worker`.

submit/watch/results talk to the gateway over HTTP (FINSERVE_GATEWAY_URL, FINSERVE_API_KEY or
the embedded stack's development key); resume and worker work on SQL and Redis directly.
"""
from __future__ import annotations

import json
import sys
import time
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from finserve.console import (
    CLIError,
    ExitCode,
    Output,
    OutputOpt,
    config_error,
    http_error,
    print_json,
    stderr,
    stdout,
)

if TYPE_CHECKING:
    import httpx

    from core.settings import Settings

jobs_app = typer.Typer(help="Bulk contract extraction jobs.", no_args_is_help=True)

UrlOpt = Annotated[str | None, typer.Option(metavar="URL", help="Gateway URL (default: FINSERVE_GATEWAY_URL, else http://127.0.0.1:8000).")]
KeyOpt = Annotated[str | None, typer.Option(metavar="KEY", help="API key (default: FINSERVE_API_KEY, else the development key of "
                                                    "`finserve up`).")]
JobIdArg = Annotated[str, typer.Argument(help="The job id `finserve jobs submit` printed (see `finserve jobs list`).")]


class JobState(str, Enum):  # as jobs.service.JobProgress.status names them
    queued = "queued"
    running = "running"
    completed = "completed"
    cancelled = "cancelled"


def _client(url: str | None, key: str | None) -> httpx.Client:
    import httpx

    from core.keys import client_api_key
    from core.settings import Settings

    settings = Settings()  # built per command (FINSERVE_* as they are now)
    try:
        raw = key or client_api_key(settings)
    except RuntimeError as exc:  # no key anywhere
        raise config_error(str(exc)) from None
    return httpx.Client(base_url=(url or settings.gateway_url).rstrip("/"), timeout=60.0,
                        headers={"Authorization": f"Bearer {raw}"})


def _check(resp: httpx.Response) -> dict[str, Any]:
    if resp.status_code >= 400:
        try:
            body = resp.json()
        except ValueError:
            body = resp.text
        raise http_error(resp.status_code, body, str(resp.request.url.copy_with(path="/", query=None)).rstrip("/"))
    doc: dict[str, Any] = resp.json()  # every jobs route answers a JSON object
    return doc


def _watch(client: httpx.Client, job_id: str, interval_s: float) -> dict[str, Any]:
    """A live progress bar (on stderr) until the job is completed or cancelled; returns the final job."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[detail]}"), TimeElapsedColumn())
    console = stderr()
    warned = False
    with Progress(*columns, console=console, disable=not console.is_terminal) as bar:
        task = bar.add_task(job_id, total=None, detail="")
        while True:
            job = _check(client.get(f"/v1/extraction-jobs/{job_id}"))
            if job.get("warning") and not warned:  # e.g. no worker consumes the queue (jobs/presence.py)
                console.print(f"warning: {job['warning']['message']}", markup=False, highlight=False)
                warned = True
            c = job["counts"]
            rate = f"{job['items_per_minute']:.1f}/min" if job["items_per_minute"] else "-"
            eta = f"eta {job['eta_s']:.0f}s" if job["eta_s"] is not None else ""
            bar.update(task, total=job["num_items"], completed=c["done"] + c["failed"] + c["cancelled"],
                       detail=f"{job['status']} running {c['running']} failed {c['failed']} {rate} {eta}")
            if job["status"] in ("completed", "cancelled"):
                return job
            time.sleep(interval_s)


def _read_items(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text()
        if path.suffix == ".json":
            data = json.loads(text)
            items: list[dict[str, Any]] = data["items"] if isinstance(data, dict) else data
            return items
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except (OSError, ValueError, KeyError) as exc:
        raise CLIError(f"cannot read items from {path}: {exc} (NDJSON lines {{\"id\", \"text\"}} or a JSON list)") from None


def _read_schema(path: Path) -> dict[str, Any]:
    try:
        schema: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CLIError(f"cannot read the JSON Schema {path}: {exc}") from None
    return schema


def _summary(job: dict[str, Any]) -> str:
    c = job["counts"]
    return (f"{job['id']}: {job['status']}, {job['num_items']} items: {c['done']} done, {c['failed']} failed, "
            f"{c['cancelled']} cancelled, {c['pending'] + c['running']} to go")


@jobs_app.command()
def submit(
    file: Annotated[Path, typer.Argument(help="Contracts: NDJSON lines {\"id\", \"text\"} or a JSON list.")],
    schema: Annotated[Path, typer.Option("--schema", help="JSON Schema of the fields to extract.")],
    max_tokens: Annotated[int | None, typer.Option(help="Answer budget per item.")] = None,
    idempotency_key: Annotated[str | None, typer.Option(help="Resubmitting with it never makes a second job.")] = None,
    wait: Annotated[bool, typer.Option(help="Show live progress (on stderr) until the job finishes.")] = True,
    url: UrlOpt = None,
    key: KeyOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Submit a job and follow it with a progress bar (--no-wait: print the job and return). Exits 7 when the
    finished job has failed items."""
    body: dict[str, Any] = {"schema": _read_schema(schema), "items": _read_items(file)}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    with _client(url, key) as client:
        job = _check(client.post("/v1/extraction-jobs", json=body, headers=headers))
        if output is Output.table:
            typer.echo(f"job {job['id']}: {job['num_items']} items")
        if job.get("warning") and not wait:  # with --wait, _watch says it
            typer.echo(f"warning: {job['warning']['message']}", err=True)
        if wait:
            job = _watch(client, job["id"], 0.5)
    if output is Output.json:
        print_json(job)
    elif wait:
        typer.echo(f"{job['status']}: {job['counts']['done']} done, {job['counts']['failed']} failed; "
                   f"results: finserve jobs results {job['id']}")
    if wait:
        _fail_on_failed_items(job)


def _fail_on_failed_items(job: dict[str, Any]) -> None:
    """Exit 7 (ExitCode.ITEMS_FAILED) when a finished job has failed items: a script must not read success."""
    failed = job["counts"]["failed"]
    if failed:
        raise CLIError(f"{failed} of {job['num_items']} items of job {job['id']} failed (each record says why: "
                       f"finserve jobs results {job['id']})", ExitCode.ITEMS_FAILED)


@jobs_app.command()
def watch(job_id: JobIdArg, url: UrlOpt = None, key: KeyOpt = None, output: OutputOpt = Output.table) -> None:
    """Follow a job's progress until it completes or is cancelled; exits 7 if items failed."""
    with _client(url, key) as client:
        job = _watch(client, job_id, 0.5)
    if output is Output.json:
        print_json(job)
    else:
        typer.echo(_summary(job))
    _fail_on_failed_items(job)


@jobs_app.command()
def results(job_id: JobIdArg,
            out: Annotated[Path | None, typer.Option("--out", "-o", help="Write NDJSON here instead of stdout.")] = None,
            url: UrlOpt = None, key: KeyOpt = None) -> None:
    """Download every item's result (or failure reason) as NDJSON."""
    with _client(url, key) as client, client.stream(
            "GET", f"/v1/extraction-jobs/{job_id}/results", params={"format": "ndjson"}) as resp:
        if resp.status_code >= 400:
            resp.read()
            _check(resp)
        stream = out.open("w") if out else sys.stdout
        try:
            for line in resp.iter_lines():
                if line:
                    stream.write(line + "\n")
        finally:
            if out:
                stream.close()


@jobs_app.command()
def cancel(job_id: JobIdArg, url: UrlOpt = None, key: KeyOpt = None, output: OutputOpt = Output.table) -> None:
    """Cancel a job: remaining items are skipped, finished results stay."""
    with _client(url, key) as client:
        job = _check(client.post(f"/v1/extraction-jobs/{job_id}/cancel"))
    if output is Output.json:
        print_json(job)
    else:
        typer.echo(f"{job['id']}: {job['status']} ({job['counts']['cancelled']} items cancelled)")


@jobs_app.command("list")
def list_jobs(
    status: Annotated[list[JobState] | None, typer.Option(
        help="Only jobs in this state; repeat for several.")] = None,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's jobs (default: every tenant).")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many jobs, newest first.")] = 20,
    output: OutputOpt = Output.table,
) -> None:
    """Recent jobs with their state and item counts, read from the database (FINSERVE_DATABASE_URL)."""
    states = {s.value for s in status or JobState}
    rows = recent_jobs(states, tenant, limit)
    if output is Output.json:
        print_json(rows)
        return
    if not rows:
        typer.echo("no jobs" + (f" in state {', '.join(sorted(states))}" if status else ""), err=True)
        return
    from rich.table import Table

    table = Table()
    for name in ("id", "tenant", "class", "status", "items", "done", "failed", "to go", "created (UTC)"):
        table.add_column(name, no_wrap=name in ("id", "created (UTC)"))  # ids are copied into other commands
    for r in rows:
        c = r["counts"]
        table.add_row(r["id"], r["tenant"], r["workload_class"] or "-", r["status"], str(r["num_items"]),
                      str(c["done"]), str(c["failed"]), str(c["pending"] + c["running"]),
                      r["created_at"].strftime("%Y-%m-%d %H:%M:%S"))
    stdout().print(table)


def recent_jobs(states: set[str], tenant: str | None, limit: int) -> list[dict[str, Any]]:
    """Newest jobs first, in `states`, with counts from jobs.service.progress (the API has no list route)."""
    from sqlalchemy import select

    from core.db.base import make_engine, make_session_factory
    from core.db.jobs_models import ExtractionJob
    from finserve.database import existing_database
    from jobs.service import progress

    engine = make_engine(existing_database())
    rows: list[dict[str, Any]] = []
    try:
        with make_session_factory(engine)() as session:
            query = select(ExtractionJob).order_by(ExtractionJob.created_at.desc())
            if tenant:
                query = query.where(ExtractionJob.tenant == tenant)
            for job in session.scalars(query):
                p = progress(session, job.id)
                if p.status(job) in states:
                    rows.append({"id": job.id, "tenant": job.tenant, "workload_class": job.workload_class,
                                 "status": p.status(job), "num_items": job.num_items, "counts": p.counts,
                                 "created_at": job.created_at, "cancelled_at": job.cancelled_at})
                if len(rows) >= limit:
                    break
    finally:
        engine.dispose()
    return rows


def resume_unfinished(settings: Settings | None = None) -> int:
    """Re-enqueue every item SQL says is unfinished (pending, or running past its lease)."""
    from core.db.base import make_engine, make_session_factory
    from core.settings import Settings
    from jobs.queue import enqueue_items
    from jobs.service import resumable_item_ids

    engine = make_engine((settings or Settings()).resolved_database_url)
    try:
        with make_session_factory(engine)() as session:
            ids = resumable_item_ids(session)
    finally:
        engine.dispose()
    return enqueue_items(ids) if ids else 0


@jobs_app.command()
def resume(output: OutputOpt = Output.table) -> None:
    """Re-enqueue unfinished items (after Redis lost its contents, or workers were lost)."""
    from core.settings import Settings
    from finserve.database import existing_database

    settings = Settings()
    existing_database(settings)
    n = resume_unfinished(settings)
    if output is Output.json:
        print_json({"reenqueued": n})
    else:
        typer.echo(f"re-enqueued {n} unfinished items")


def register(app: typer.Typer) -> None:
    app.add_typer(jobs_app, name="jobs")

    @app.command()
    def worker(concurrency: Annotated[int | None, typer.Option(
                   help="Items in flight (default: FINSERVE_WORKER_CONCURRENCY, else 4).")] = None,
               name: Annotated[str | None, typer.Option(help="Celery node name, e.g. w1@%h.")] = None,
               loglevel: Annotated[str | None, typer.Option(
                   help="DEBUG, INFO, WARNING or ERROR (default: FINSERVE_LOG_LEVEL, else INFO).")] = None,
               crash_history: Annotated[str | None, typer.Option(
                   hidden=True, help="Set by a restart in place after a crash (jobs/watchdog.py).")] = None) -> None:
        """Run a Celery worker for extraction items."""
        from core.logging import configure_logging
        from core.settings import get_settings
        from jobs.celery_app import celery_app, run_celery
        from jobs.watchdog import crashed_on_its_own, restart_after_crash
        from stack.processes import worker_argv

        settings = get_settings()  # the Celery app module's settings: one object in this process
        level = loglevel or settings.log_level.upper()
        configure_logging(json=settings.log_json, level=level.lower())
        # run_celery, not app.start or worker_main: both drop the exit code (a crashed worker would exit 0).
        code = run_celery(celery_app(), worker_argv(concurrency or settings.worker_concurrency, level, name))
        if crashed_on_its_own(code):
            restart_after_crash(int(code), crash_history)  # does not return: the same process starts over
        raise typer.Exit(int(code or 0))
