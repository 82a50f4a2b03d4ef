"""Which model folder a command uses: the one asked for, else the configured one, else the prepared default."""
from __future__ import annotations

from core.settings import Settings
from engine.model.prepare import default_model_dir, ensure_default_model
from finserve.config import ENV_MODEL, check_model


def resolve_model(model: str | None, settings: Settings | None = None) -> str:
    """`model` if given; else FINSERVE_MODEL; else the default SmolLM2 under FINSERVE_HOME (prepared once).

    A folder named by the flag or the setting is checked (exit 3 with the fix when it is missing or
    unreadable); the default is prepared when it is not there yet."""
    if model:
        return str(check_model(model, "--model"))
    settings = settings or Settings()
    if settings.model is not None:
        return str(check_model(settings.model, ENV_MODEL))
    target = default_model_dir(settings.home)
    return str(ensure_default_model(home=settings.home) if target == settings.model_path else target)
