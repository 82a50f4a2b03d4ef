"""`finserve engine`: one engine server (an engine replica behind a gateway; see docs/DEPLOY.md)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from core.settings import Settings


def run_engine_server(settings: Settings) -> None:
    import uvicorn

    from core.logging import configure_logging
    from gateway.replicas.server import create_engine_app

    configure_logging(json=settings.log_json, level=settings.log_level)
    uvicorn.run(create_engine_app(settings), host=settings.host, port=settings.port, log_config=None,
                access_log=False, timeout_graceful_shutdown=30)


def register(app: typer.Typer) -> None:
    @app.command()
    def engine(
        host: Annotated[Optional[str], typer.Option(help="Bind address (default 127.0.0.1).")] = None,
        port: Annotated[Optional[int], typer.Option(help="Port (default 8000).")] = None,
        model: Annotated[Optional[Path], typer.Option(help="HF-format model folder.")] = None,
        threads: Annotated[Optional[int], typer.Option(help="Torch CPU threads.")] = None,
        kv_memory: Annotated[Optional[int], typer.Option("--kv-memory", help="KV cache bytes.")] = None,
        policy: Annotated[Optional[Path], typer.Option(help="Policy TOML file.")] = None,
    ) -> None:
        """Serve one engine replica (token ids in, NDJSON out; model-server metrics at /metrics)."""
        from finserve.console import no_model

        given: dict[str, Any] = {"host": host, "port": port, "model": model, "threads": threads, "kv_cache_memory_bytes": kv_memory,
                 "policy": policy}
        settings = Settings(**{k: v for k, v in given.items() if v is not None})
        if not (settings.model_path / "config.json").is_file():
            raise no_model(settings.model_path)
        run_engine_server(settings)
