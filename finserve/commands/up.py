"""`finserve up`: the whole stack on one machine: Redis, a Celery worker, the gateway with the engine.

Order of start: database schema and development key, Redis (127.0.0.1, in-memory), re-enqueue
whatever SQL says is unfinished (Redis starts empty), the worker (its own process group, so a
terminal Ctrl-C reaches only this process), then the gateway in the foreground. With `--replicas N` the gateway routes to N engine processes
(`finserve engine` on free loopback ports, the machine's threads split between them; they start before
the gateway and stop after it) instead of loading an engine of its own. On Ctrl-C or
SIGTERM uvicorn drains the gateway, then the worker gets SIGTERM (Celery's warm shutdown: items
in flight finish or, unacknowledged, go back to the queue; SQL keeps them pending either way),
then Redis stops.

Its children die with it, however it dies (kill -9, a crash): Redis, the worker and engine replicas get
SIGTERM from the kernel when `up` is gone (core/parent_death.py), so a new `up` can take the same ports.

It owns its processes: the HTTP port and a given --redis-port are checked before anything starts or
the banner prints (a taken port is one line and exit 3), and the Redis it talks to is the one it
started (jobs/redis_server.py). While it serves, a worker or Redis that dies is started again with
backoff (1 s doubling to 30 s), one `process_restarted` log line each (stack.processes.Supervisor); a
new Redis starts empty, so the unfinished items are re-enqueued from SQL at once, as on start.
"""
from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated

import typer


def _examples(url: str, key: str) -> str:
    """Commands that work against this stack as printed, whatever its port: each names the URL."""
    auth = f'-H "Authorization: Bearer {key}"'
    return f"""
  # the finserve client commands below read these (or take --url / --key)
  export FINSERVE_GATEWAY_URL={url} FINSERVE_API_KEY={key}

  # realtime_risk: score one event
  curl -s {url}/v1/risk/assess {auth} -H 'Content-Type: application/json' \\
    -d '{{"event": {{"event_type": "wire_transfer", "amount": 950000, "currency": "USD", "attributes": {{"country": "KY"}}}}, "question": "Is this suspicious?"}}'

  # document_qa: register a document, then ask about it
  curl -s {url}/v1/documents {auth} -H 'Content-Type: application/json' -d '{{"title": "Basel III", "text": "Banks must hold ..."}}'
  curl -s {url}/v1/documents/DOC_ID/questions {auth} -H 'Content-Type: application/json' -d '{{"question": "What must banks hold?"}}'

  # bulk_extraction: a job over the sample contracts
  curl -s {url}/v1/extraction-jobs {auth} -F items=@examples/contracts.ndjson -F schema=@examples/contract_schema.json
  finserve jobs submit examples/contracts.ndjson --schema examples/contract_schema.json --url {url}
  finserve jobs list

  # OpenAI-compatible
  curl -s {url}/v1/chat/completions {auth} -H 'Content-Type: application/json' \\
    -d '{{"messages": [{{"role": "user", "content": "Hello"}}], "max_tokens": 32}}'
"""


class _Stop(Exception):
    """SIGTERM, raised in the main thread once uvicorn has drained (it re-raises the signal it caught)."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Stop()


def register(app: typer.Typer) -> None:
    @app.command()
    def up(
        port: Annotated[int | None, typer.Option(
            help="Gateway HTTP port on FINSERVE_HOST (default: FINSERVE_PORT, else 8000).")] = None,
        redis_port: Annotated[int, typer.Option(help="Redis port on 127.0.0.1 (0: a free one, printed at start).")] = 0,
        workers: Annotated[int | None, typer.Option(
            min=1, help="Items in flight in the worker (default: FINSERVE_WORKER_CONCURRENCY, else 4).")] = None,
        model: Annotated[Path | None, typer.Option(
            help="HF-format model folder (default: FINSERVE_MODEL, else the prepared SmolLM2).")] = None,
        replicas: Annotated[int, typer.Option(min=0, help="Engine processes behind the gateway (0: the engine "
                                              "runs inside the gateway).")] = 0,
    ) -> None:
        """Start Redis, a worker and the gateway+engine (or N engine replicas); Ctrl-C stops everything.

        Ports opened: the gateway's HTTP port (--port, on FINSERVE_HOST, default 127.0.0.1:8000) and Redis
        (--redis-port, always 127.0.0.1; a free port unless given); with --replicas N, N engine ports on
        127.0.0.1 (free ones, printed at start). The worker opens none: it reaches Redis and
        the gateway. The printed example commands name the gateway URL, so they work on any --port.
        """
        from core.db.base import make_engine, make_session_factory
        from core.db.migrate import upgrade
        from core.keys import ensure_dev_key
        from finserve.commands.jobs import resume_unfinished
        from finserve.commands.serve import run_server
        from finserve.config import command_settings, settings_model
        from finserve.console import CLIError, ExitCode
        from jobs.celery_app import use_broker
        from jobs.redis_server import PortInUse, RedisServer, port_in_use
        from stack.announce import announce_when_ready
        from stack.processes import (
            EngineProcess,
            start_engines,
            start_worker,
            stop_engine,
            stop_worker,
            wait_engines_ready,
        )
        from stack.supervisor import Child, Supervisor

        settings = command_settings(port=port, model=model)
        settings_model(settings, flag_given=model is not None)
        if port_in_use(settings.host, settings.port):  # before anything starts or the banner prints
            raise CLIError(f"port {settings.port} on {settings.host} is already in use (another finserve?); pass "
                           "--port or set FINSERVE_PORT", ExitCode.CONFIG)
        db_url = settings.resolved_database_url
        upgrade(db_url)
        engine = make_engine(db_url)
        with make_session_factory(engine)() as session:
            dev_key = ensure_dev_key(session, settings.dev_key_path)
        engine.dispose()

        try:
            redis = RedisServer(port=redis_port, workdir=settings.home / "redis", binary=settings.redis_server).start()
        except PortInUse as exc:
            raise CLIError(str(exc), ExitCode.CONFIG) from None
        url = f"http://{settings.host}:{settings.port}"
        # One configuration for this process (it enqueues jobs) and the worker (it calls the gateway).
        settings = settings.model_copy(update={"broker_url": redis.url, "gateway_url": url,
                                               "api_key": settings.api_key or dev_key, "database_url": db_url})
        use_broker(redis.url)
        worker = None
        engines: list[EngineProcess] = []
        supervisor = Supervisor()
        # uvicorn handles SIGINT/SIGTERM while serving, then re-raises the signal once drained; without a
        # handler of ours a re-raised SIGTERM would kill this process before the worker and Redis stop.
        signal.signal(signal.SIGTERM, _on_sigterm)
        try:
            resumed = resume_unfinished(settings)
            if replicas:
                engines = start_engines(settings, replicas)
                typer.echo(f"starting {replicas} engine replicas: " + ", ".join(
                    f"{e.url} ({e.threads} threads, pid {e.proc.pid})" for e in engines))
                wait_engines_ready(engines)
                settings = settings.model_copy(update={"engines": ",".join(e.url for e in engines)})
            worker = start_worker(settings, concurrency=workers or settings.worker_concurrency)

            def restart_worker() -> None:
                nonlocal worker
                worker = start_worker(settings, concurrency=workers or settings.worker_concurrency)

            def restart_redis() -> dict[str, object]:
                nonlocal redis
                redis = RedisServer(port=redis.port, workdir=redis.workdir, binary=redis.binary).start()
                return {"reenqueued": resume_unfinished(settings)}  # it starts empty; SQL knows what is left

            supervisor.watch(Child("worker", lambda: worker.pid if worker else None,
                                   lambda: worker.poll() if worker else 0, restart_worker))
            supervisor.watch(Child("redis", lambda: redis.pid, lambda: redis.poll(), restart_redis))
            typer.echo(f"finserve is starting at {url} (docs: {url}/docs)")
            typer.echo(f"development key (tenant 'dev', admin): {dev_key}")
            typer.echo(f"redis: {redis.url} (pid {redis.pid}); worker pid {worker.pid}; "
                       f"re-enqueued {resumed} unfinished items")
            typer.echo(_examples(url, dev_key))
            supervisor.start()
            ready = announce_when_ready(url, dev_key)  # one human line on stderr once /readyz answers
            run_server(settings)  # blocks; uvicorn handles SIGINT/SIGTERM and drains
            ready.set()
        except (KeyboardInterrupt, _Stop):
            pass
        finally:
            # Bounded (worker stop timeout, then SIGKILL): a second Ctrl-C must not orphan the worker or Redis.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            typer.echo("stopping the worker, the engine replicas and Redis ...", err=True)
            supervisor.stop()  # first: nothing is restarted while it all stops
            if worker is not None:
                stop_worker(worker)
            for e in engines:
                stop_engine(e)
            redis.stop()
            supervisor.close()
            typer.echo("finserve stopped", err=True)
