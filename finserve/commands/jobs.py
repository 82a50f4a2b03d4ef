"""`finserve jobs submit|watch|results|resume` and `finserve worker`.

submit/watch/results talk to the gateway over HTTP (FINSERVE_GATEWAY_URL, FINSERVE_API_KEY or
the embedded stack's development key); resume and worker work on SQL and Redis directly.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

if TYPE_CHECKING:
    from core.settings import Settings

jobs_app = typer.Typer(help="Bulk contract extraction jobs.", no_args_is_help=True)


def _client(url: str | None, key: str | None):
    import httpx

    from core.settings import get_settings
    from jobs.worker import worker_api_key

    settings = get_settings()
    raw = key or worker_api_key(settings)
    return httpx.Client(base_url=(url or settings.gateway_url).rstrip("/"), timeout=60.0,
                        headers={"Authorization": f"Bearer {raw}"})


def _check(resp) -> dict:
    if resp.status_code >= 400:
        try:
            err = resp.json()["error"]
            typer.echo(f"error {resp.status_code} {err['code']}: {err['message']}", err=True)
        except (ValueError, KeyError, TypeError):
            typer.echo(f"error {resp.status_code}: {resp.text[:500]}", err=True)
        raise typer.Exit(1)
    return resp.json()


def _watch(client, job_id: str, interval_s: float) -> dict:
    """A live progress bar until the job is completed or cancelled; returns the final job."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[detail]}"), TimeElapsedColumn())
    with Progress(*columns, transient=False) as bar:
        task = bar.add_task(job_id, total=None, detail="")
        while True:
            job = _check(client.get(f"/v1/extraction-jobs/{job_id}"))
            c = job["counts"]
            rate = f"{job['items_per_minute']:.1f}/min" if job["items_per_minute"] else "-"
            eta = f"eta {job['eta_s']:.0f}s" if job["eta_s"] is not None else ""
            bar.update(task, total=job["num_items"], completed=c["done"] + c["failed"] + c["cancelled"],
                       detail=f"{job['status']} running {c['running']} failed {c['failed']} {rate} {eta}")
            if job["status"] in ("completed", "cancelled"):
                return job
            time.sleep(interval_s)


def _read_items(path: Path) -> list[dict]:
    text = path.read_text()
    if path.suffix == ".json":
        data = json.loads(text)
        return data["items"] if isinstance(data, dict) else data
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@jobs_app.command()
def submit(
    file: Annotated[Path, typer.Argument(help="Contracts: NDJSON lines {\"id\", \"text\"} or a JSON list.")],
    schema: Annotated[Path, typer.Option("--schema", help="JSON Schema of the fields to extract.")],
    max_tokens: Annotated[Optional[int], typer.Option(help="Answer budget per item.")] = None,
    idempotency_key: Annotated[Optional[str], typer.Option(help="Resubmitting with it never makes a second job.")] = None,
    wait: Annotated[bool, typer.Option(help="Show live progress until the job finishes.")] = True,
    url: Annotated[Optional[str], typer.Option(help="Gateway URL (default FINSERVE_GATEWAY_URL).")] = None,
    key: Annotated[Optional[str], typer.Option(help="API key (default FINSERVE_API_KEY or the dev key).")] = None,
) -> None:
    """Submit a job and follow it with a progress bar."""
    body = {"schema": json.loads(schema.read_text()), "items": _read_items(file)}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    with _client(url, key) as client:
        job = _check(client.post("/v1/extraction-jobs", json=body, headers=headers))
        typer.echo(f"job {job['id']}: {job['num_items']} items")
        if wait:
            job = _watch(client, job["id"], 0.5)
            typer.echo(f"{job['status']}: {job['counts']['done']} done, {job['counts']['failed']} failed; "
                       f"results: finserve jobs results {job['id']}")


@jobs_app.command()
def watch(job_id: str, url: Annotated[Optional[str], typer.Option()] = None,
          key: Annotated[Optional[str], typer.Option()] = None) -> None:
    """Follow a job's progress until it completes or is cancelled."""
    with _client(url, key) as client:
        _watch(client, job_id, 0.5)


@jobs_app.command()
def results(job_id: str, output: Annotated[Optional[Path], typer.Option("-o", help="Write NDJSON here.")] = None,
            url: Annotated[Optional[str], typer.Option()] = None,
            key: Annotated[Optional[str], typer.Option()] = None) -> None:
    """Download every item's result (or failure reason) as NDJSON."""
    with _client(url, key) as client, client.stream(
            "GET", f"/v1/extraction-jobs/{job_id}/results", params={"format": "ndjson"}) as resp:
        if resp.status_code >= 400:
            resp.read()
            _check(resp)
        out = output.open("w") if output else sys.stdout
        try:
            for line in resp.iter_lines():
                if line:
                    out.write(line + "\n")
        finally:
            if output:
                out.close()


@jobs_app.command()
def cancel(job_id: str, url: Annotated[Optional[str], typer.Option()] = None,
           key: Annotated[Optional[str], typer.Option()] = None) -> None:
    """Cancel a job: remaining items are skipped, finished results stay."""
    with _client(url, key) as client:
        job = _check(client.post(f"/v1/extraction-jobs/{job_id}/cancel"))
        typer.echo(f"{job['id']}: {job['status']} ({job['counts']['cancelled']} items cancelled)")


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
def resume() -> None:
    """Re-enqueue unfinished items (after Redis lost its contents, or workers were lost)."""
    n = resume_unfinished()
    typer.echo(f"re-enqueued {n} unfinished items")


def register(app: typer.Typer) -> None:
    app.add_typer(jobs_app, name="jobs")

    @app.command()
    def worker(concurrency: Annotated[Optional[int], typer.Option(help="Items in flight (default 4).")] = None,
               name: Annotated[Optional[str], typer.Option(help="Celery node name, e.g. w1@%h.")] = None,
               loglevel: Annotated[str, typer.Option()] = "INFO") -> None:
        """Run a Celery worker for extraction items."""
        from core.logging import configure_logging
        from core.settings import get_settings
        from finserve.stack import worker_argv
        from jobs.celery_app import app as celery_app

        configure_logging(level=loglevel.lower())
        celery_app.worker_main(worker_argv(concurrency or get_settings().worker_concurrency, loglevel, name))
