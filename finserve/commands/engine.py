"""`finserve engine`: one engine server (an engine replica behind a gateway; see docs/DEPLOY.md)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from core.settings import Settings


def run_engine_server(settings: Settings) -> None:
    import uvicorn

    from core.logging import configure_logging
    from core.web.server import uvicorn_options
    from gateway.replicas.server import create_engine_app

    configure_logging(json=settings.log_json, level=settings.log_level)
    uvicorn.run(create_engine_app(settings), host=settings.host, port=settings.port, **uvicorn_options(settings))


def register(app: typer.Typer) -> None:
    @app.command()
    def engine(
        host: Annotated[str | None, typer.Option(help="Bind address (default: FINSERVE_HOST, else 127.0.0.1).")] = None,
        port: Annotated[int | None, typer.Option(help="Port (default: FINSERVE_PORT, else 8000).")] = None,
        model: Annotated[Path | None, typer.Option(
            help="HF-format model folder (default: FINSERVE_MODEL, else the prepared SmolLM2).")] = None,
        threads: Annotated[int | None, typer.Option(
            help="Torch CPU threads (default: FINSERVE_THREADS, else one per usable core).")] = None,
        kv_memory: Annotated[int | None, typer.Option(
            "--kv-memory", help="KV cache bytes (default: FINSERVE_KV_CACHE_MEMORY_BYTES).")] = None,
        policy: Annotated[Path | None, typer.Option(
            help="Policy TOML file (default: FINSERVE_POLICY, else the bundled default.toml).")] = None,
    ) -> None:
        """Serve one engine replica (token ids in, NDJSON out; model-server metrics at /metrics). The other
        engine settings (FINSERVE_WEIGHTS, FINSERVE_KV_CACHE_DTYPE, ...) come from the environment."""
        from finserve.config import command_settings, settings_model

        settings = command_settings(host=host, port=port, model=model, threads=threads,
                                    kv_cache_memory_bytes=kv_memory, policy=policy)
        settings_model(settings, flag_given=model is not None)
        run_engine_server(settings)
