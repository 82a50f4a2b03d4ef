"""`finserve serve`: migrate the database, then serve the gateway and the engine with uvicorn."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from engine import kv_dtypes
from engine.model import formats

if TYPE_CHECKING:
    from core.settings import Settings


def run_server(settings: Settings) -> None:
    """Upgrade the schema, then serve until interrupted (also used by `finserve up`)."""
    import uvicorn

    from core.db.migrate import upgrade
    from core.logging import configure_logging
    from core.web.server import uvicorn_options
    from stack.app import create_app

    configure_logging(json=settings.log_json, level=settings.log_level)
    upgrade(settings.resolved_database_url)
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, **uvicorn_options(settings))


def register(app: typer.Typer) -> None:
    @app.command()
    def serve(
        host: Annotated[str | None, typer.Option(help="Bind address (default: FINSERVE_HOST, else 127.0.0.1).")] = None,
        port: Annotated[int | None, typer.Option(help="Gateway port (default: FINSERVE_PORT, else 8000); clients: --url or FINSERVE_GATEWAY_URL.")] = None,
        model: Annotated[Path | None, typer.Option(help="HF-format model folder (default: FINSERVE_MODEL, else the prepared SmolLM2).")] = None,
        device: Annotated[str | None, typer.Option(help="cpu or cuda[:N] (default: FINSERVE_DEVICE, else cpu).")] = None,
        dtype: Annotated[str | None, typer.Option(help="auto, float32, bfloat16 or float16 (default: FINSERVE_DTYPE, else auto).")] = None,
        weights: Annotated[str | None, typer.Option(
            help=f"Matmul weight format: {formats.help_text()}; auto: q4 for 4-bit weights, else the checkpoint's "
                 "precision (default: FINSERVE_WEIGHTS, else auto).")] = None,
        kv_dtype: Annotated[str | None, typer.Option(
            "--kv-dtype", help=f"KV cache precision: {kv_dtypes.AUTO_HELP}, {kv_dtypes.help_text()}; 16 bits "
                               "hold twice "
                               "the tokens (default: FINSERVE_KV_CACHE_DTYPE).")] = None,
        kv_memory: Annotated[int | None, typer.Option("--kv-memory", help="KV cache size in bytes (default: FINSERVE_KV_CACHE_MEMORY_BYTES).")] = None,
        threads: Annotated[int | None, typer.Option(help="Torch CPU threads (default: FINSERVE_THREADS, else one per usable core).")] = None,
        policy: Annotated[Path | None, typer.Option(help="Workload policy TOML (default: FINSERVE_POLICY, else the bundled default.toml).")] = None,
        database_url: Annotated[str | None, typer.Option(help="SQLAlchemy URL of the database (default: FINSERVE_DATABASE_URL, else SQLite under FINSERVE_HOME).")] = None,
    ) -> None:
        """Serve the HTTP gateway and the engine (settings also come from FINSERVE_* variables)."""
        from finserve.config import command_settings, settings_model

        settings = command_settings(host=host, port=port, model=model, device=device, dtype=dtype, weights=weights,
                                    kv_cache_dtype=kv_dtype, kv_cache_memory_bytes=kv_memory, threads=threads,
                                    policy=policy, database_url=database_url)
        settings_model(settings, flag_given=model is not None)  # exit 3 with the fix before anything starts
        run_server(settings)
