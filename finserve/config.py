"""How a command gets its configuration: the one `Settings` object, with the options that were given on top.

Precedence (README, "Configuration"): a flag that was given > FINSERVE_* environment > `.env` file > default.
Every option that mirrors a setting therefore defaults to None ("not given"): a default of its own would
replace the user's FINSERVE_* value without a word (tests/cli/test_settings_options.py walks every command).
A command that wants another default than the setting's (a smaller KV pool for one prompt) applies it only
to a setting nobody set (`command_defaults`).
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from finserve.console import CLIError
from stack.models import ENV_MODEL, check_model

if TYPE_CHECKING:
    from core.settings import Settings
    from engine.config import EngineConfig

__all__ = ["ENV_MODEL", "check_model", "command_defaults", "command_settings", "engine_config", "model_source",
           "settings_model"]


def command_settings(**given: object) -> Settings:
    """FINSERVE_* settings (environment, then .env) with the options that were given (not None) on top.

    A bad value given as a flag is a usage error naming the flag (exit 1); a bad FINSERVE_* value stays
    `bad settings` (exit 3, console.explain)."""
    import pydantic

    from core.settings import Settings

    flags = {name: value for name, value in given.items() if value is not None}
    try:
        return Settings(**flags)
    except pydantic.ValidationError as exc:
        bad = [e for e in exc.errors() if e["loc"] and e["loc"][0] in flags]
        if not bad:
            raise
        raise CLIError("; ".join(f"{_flag(str(e['loc'][0]))}: not {e['input']!r} ({e['msg']})" for e in bad)) from None


def _flag(field: str) -> str:
    """The running command's option for setting `field`: a command names the parameter of an option that mirrors
    a setting as the setting (its flag may be shorter: `kv_cache_dtype` is --kv-dtype)."""
    from typer._click.globals import get_current_context  # typer's own click (as finserve/console.py uses it)

    ctx = get_current_context(silent=True)
    for param in ctx.command.params if ctx else ():
        if param.name == field and param.opts:
            return param.opts[0]
    return "--" + field.replace("_", "-")


def command_defaults(settings: Settings, **defaults: object) -> Settings:
    """`settings` with a command's own defaults for the fields that neither a flag nor FINSERVE_* set."""
    unset = {name: value for name, value in defaults.items() if name not in settings.model_fields_set}
    return settings.model_copy(update=unset) if unset else settings


def model_source(settings: Settings, flag_given: bool) -> str:
    """Where the model folder came from, for the error that names it."""
    if flag_given:
        return "--model"
    return ENV_MODEL if settings.model is not None else "the default model folder under FINSERVE_HOME"


def settings_model(settings: Settings, flag_given: bool) -> Path:
    """settings.model_path, checked (serve, engine, up: they never prepare the default model themselves;
    stack.models.ModelUnavailable is exit 3, finserve/console.py)."""
    return check_model(settings.model_path, model_source(settings, flag_given))


def engine_config(settings: Settings, overrides: Mapping[str, object] | None = None) -> EngineConfig:
    """The engine `settings` describe, as `finserve serve` builds it (Settings.engine_config with the policy
    FINSERVE_POLICY names); `overrides`: EngineConfig fields a command sets whatever the settings say."""
    from policies import load_policy

    return settings.engine_config(load_policy(settings.policy), **dict(overrides or {}))
