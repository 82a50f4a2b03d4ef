"""What every `finserve` command shares: exit codes, one-line errors, `--output table|json`, progress.

Errors: a command raises (or lets through) an exception; `FinserveGroup.invoke` turns the known ones
into one line on stderr, `error: <cause> (<fix>)`, and the exit code below. Tracebacks only with
`finserve --debug ...`. The table of known exceptions is `explain()`; adding a failure mode is one
branch there and one test in tests/cli/test_errors.py.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum, IntEnum
from typing import Annotated, Any

import typer
from rich.console import Console
from typer.core import TyperGroup
from typer.exceptions import TyperException


class ExitCode(IntEnum):
    OK = 0
    USAGE = 1  # bad arguments or input the API would refuse (unknown class, bad window, bad file)
    UNREACHABLE = 2  # the gateway, Redis or the database could not be reached (or is locked)
    CONFIG = 3  # no model prepared, a bad policy file, bad FINSERVE_* settings
    REFUSED = 4  # the gateway refused the request (HTTP 4xx): bad key, unknown job, ...
    SERVER = 5  # the gateway failed (HTTP 5xx)
    INTEGRITY = 6  # `finserve ledger verify` found an edited or deleted ledger row
    ITEMS_FAILED = 7  # `finserve jobs submit|watch`: the job finished but some items failed (see their results)
    INTERNAL = 70  # a bug in finserve: rerun with --debug and report the traceback


EXIT_CODES_HELP = (
    "Exit codes: 0 ok; 1 usage or validation error; 2 a service is unreachable (gateway, Redis, database); "
    "3 bad configuration (no model prepared, bad policy file, bad settings); 4 the gateway refused the request "
    "(4xx); 5 gateway error (5xx); 6 the ledger failed verification (an edited or deleted row); "
    "7 a job finished with failed items; 70 internal error. Errors are one line on stderr; --debug adds the traceback. "
    "Commands that print data take --output json."
)


class CLIError(Exception):
    """A failure the user can act on: one line saying what went wrong and how to fix it, and its exit code."""

    def __init__(self, message: str, code: ExitCode = ExitCode.USAGE) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def config_error(message: str) -> CLIError:
    return CLIError(message, ExitCode.CONFIG)


# ---- output ----------------------------------------------------------------------------------
class Output(str, Enum):
    table = "table"
    json = "json"


OutputOpt = Annotated[Output, typer.Option(
    "--output", case_sensitive=False,
    help="table: for people (rich tables, text); json: one JSON document on stdout, for scripts.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Same as --output json: one JSON document on stdout.")]


def print_json(doc: Any) -> None:
    """One JSON document on stdout (datetimes and paths as strings)."""
    typer.echo(json.dumps(doc, indent=2, default=str))


def stdout() -> Console:
    """Tables on stdout; piped (not a terminal), as wide as they need: rich would squeeze them into 80 columns."""
    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 240)
    return console


def stderr() -> Console:
    return Console(stderr=True)


@contextmanager
def status(message: str) -> Iterator[None]:
    """A spinner and the elapsed time on stderr while a long step runs; nothing when stderr is not a terminal.

    stdout is left alone (rich's default would route it through the spinner's console, i.e. to stderr), so a
    benchmark's JSON on stdout stays there; stderr lines (logs) print above the spinner."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = stderr()
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console,
                  transient=True, redirect_stdout=False, disable=not console.is_terminal) as bar:
        bar.add_task(message, total=None)
        yield


# ---- errors ----------------------------------------------------------------------------------
def http_error(status_code: int, body: Any, url: str) -> CLIError:
    """The gateway's answer to a refused or failed request, as one line (body: the parsed JSON or text)."""
    err = body.get("error") if isinstance(body, dict) else None
    detail = f"{err.get('code')}: {err.get('message')}" if isinstance(err, dict) else str(body)[:300]
    if status_code == 401:
        return CLIError(f"the gateway at {url} refused the API key (401 {detail}); pass --key or set "
                        "FINSERVE_API_KEY (create one with `finserve keys create --tenant NAME`)", ExitCode.REFUSED)
    if status_code < 500:
        return CLIError(f"the gateway refused the request ({status_code} {detail})", ExitCode.REFUSED)
    return CLIError(f"the gateway at {url} failed ({status_code} {detail}); see its logs", ExitCode.SERVER)


def explain(exc: BaseException) -> CLIError | None:
    """The one-line error for an exception we know, or None (an unexpected failure).

    The libraries are imported here, on the error path only, so that `finserve --help` stays quick."""
    import httpx
    import pydantic
    import sqlalchemy.exc
    from kombu.exceptions import OperationalError as BrokerError
    from redis.exceptions import ConnectionError as RedisConnectionError

    from engine.model.families import UnsupportedModel
    from jobs.queue import QueueUnavailable
    from policies.errors import PolicyError
    from stack.models import ModelUnavailable

    if isinstance(exc, CLIError):
        return exc
    if isinstance(exc, ModelUnavailable):
        return config_error(str(exc))
    if isinstance(exc, UnsupportedModel):  # a model loaded without stack.models.check_model
        return config_error(f"the model cannot be served: {_first_line(exc)} (docs/MODELS.md lists what finserve runs)")
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        return CLIError(f"cannot reach the gateway at {_base_url(exc)} (is `finserve serve` or `finserve up` "
                        "running? pass --url or set FINSERVE_GATEWAY_URL)", ExitCode.UNREACHABLE)
    if isinstance(exc, httpx.TimeoutException):
        return CLIError(f"the gateway at {_base_url(exc)} did not answer in time ({type(exc).__name__}); "
                        "is it overloaded? see its logs", ExitCode.UNREACHABLE)
    if isinstance(exc, (RedisConnectionError, BrokerError, QueueUnavailable)):
        return CLIError(f"cannot reach Redis ({_first_line(exc)}); is `finserve up` running? "
                        "set FINSERVE_BROKER_URL to your Redis", ExitCode.UNREACHABLE)
    if isinstance(exc, sqlalchemy.exc.OperationalError):
        return _database_error(exc)
    if isinstance(exc, PolicyError):
        return config_error(f"bad policy: {_first_line(exc)} (fix the file FINSERVE_POLICY / --policy names)")
    if isinstance(exc, pydantic.ValidationError) and exc.title == "Settings":
        return config_error(f"bad settings: {_settings_errors(exc)} (fix the FINSERVE_* variables or options)")
    return None


def _base_url(exc: BaseException) -> str:
    try:
        url = exc.request.url  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError):
        return "the configured URL"
    return f"{url.scheme}://{url.netloc.decode()}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _database_error(exc: BaseException) -> CLIError:
    from core.db.base import redact_url

    orig = str(getattr(exc, "orig", exc))
    if "database is locked" in orig:
        return CLIError("the database is locked by another process (a long write, or a stuck `finserve`); "
                        "retry, or use PostgreSQL (FINSERVE_DATABASE_URL) for several writers", ExitCode.UNREACHABLE)
    if "no such table" in orig or "does not exist" in orig:
        return config_error(f"the database at {redact_url(_database_url())} has no finserve tables "
                            "(run `finserve db upgrade`, or check FINSERVE_DATABASE_URL)")
    return CLIError(f"cannot use the database at {redact_url(_database_url())} ({orig.splitlines()[0] if orig else 'OperationalError'}); "
                    "check FINSERVE_DATABASE_URL and that the server is up", ExitCode.UNREACHABLE)


def _database_url() -> str:
    from core.settings import Settings

    try:
        return Settings().resolved_database_url
    except ValueError:  # bad settings: the message then names the variables instead
        return "FINSERVE_DATABASE_URL"


def _settings_errors(exc: BaseException) -> str:
    errors = exc.errors()  # type: ignore[attr-defined]
    parts = [f"FINSERVE_{'_'.join(str(p) for p in e['loc']).upper() or '?'}: {e['msg']}" for e in errors[:3]]
    return "; ".join(parts) + (f" (and {len(errors) - 3} more)" if len(errors) > 3 else "")


def fail(err: CLIError) -> typer.Exit:
    typer.echo(f"error: {err.message}", err=True)
    return typer.Exit(int(err.code))


class FinserveGroup(TyperGroup):
    """The root `finserve` group: usage errors exit 1, known exceptions become one line, flags show no type."""

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        _quiet_flags(self)  # here, not in __init__: typer adds the completion options after building the group
        with _usage_exit_code():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: Any) -> Any:
        try:
            with _usage_exit_code():
                return super().invoke(ctx)
        except (TyperException, typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:
            if ctx.params.get("debug"):
                raise
            err = explain(exc) or CLIError(
                f"{type(exc).__name__}: {_first_line(exc)} (unexpected: rerun with --debug and report the traceback)",
                ExitCode.INTERNAL)
            raise fail(err) from None


@contextmanager
def _usage_exit_code() -> Iterator[None]:
    """A usage error (unknown option or command, a bad value) is one line on stderr and exit 1, as every other
    failure: click would print the usage, a hint and a boxed message, and exit 2, which finserve keeps for an
    unreachable service. A group called without a command still prints its help."""
    from typer._click.exceptions import ClickException, NoArgsIsHelpError

    try:
        yield
    except TyperException as exc:
        if isinstance(exc, ClickException) and not isinstance(exc, NoArgsIsHelpError):
            raise fail(CLIError(_usage_line(exc))) from None
        if exc.exit_code == 2:
            exc.exit_code = int(ExitCode.USAGE)
        raise


def _usage_line(exc: Any) -> str:
    """`exc`'s message on one line, and where the command's help is."""
    message = "; ".join(line.strip() for line in exc.format_message().splitlines() if line.strip())
    ctx = getattr(exc, "ctx", None)
    message = message.rstrip(".")
    return f"{message} (see `{ctx.command_path} --help`)" if ctx is not None else message


def _quiet_flags(cmd: Any) -> None:
    """No `<bool>` after an on/off flag: it takes no value, so the placeholder only misleads. A `--json` flag is
    the deprecated spelling of `--output json`: it still works, and help lists `--output` only."""
    for param in cmd.params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
        if getattr(param, "is_flag", False) and param.opts == ["--json"]:
            param.hidden = True
    _quiet_help_option(cmd)
    for sub in getattr(cmd, "commands", {}).values():
        _quiet_flags(sub)


def _quiet_help_option(cmd: Any) -> None:
    from typer._click.core import Context

    opt = cmd.get_help_option(Context(cmd))
    if opt is not None:
        opt.metavar = ""
