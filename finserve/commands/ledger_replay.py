"""`finserve ledger replay REQUEST_ID`: run a ledgered request again from its evidence and compare, bitwise.

The evidence (FINSERVE_EVIDENCE_KEY) holds the prompt token ids the engine ran, every sampling parameter
(seed included), the output token ids and, when they were computed, their logprobs, and the engine's
fingerprint (batch invariance, kernel ISA, K/V dtype). The replay refuses, with the reason, when the
model, weights, weight format or policy loaded here are not the ones the ledger row recorded (`--force`
replays anyway and says so), loads the engine of this process's FINSERVE_* settings, runs the request
alone and reports identical or different: the first differing token, the largest logprob delta.
Exit codes: 0 identical, 6 different, 3 versions differ (without --force) or no evidence key, 1 unknown id.
"""
from __future__ import annotations

from typing import Annotated, Any

import typer

from finserve.commands import ledger_evidence
from finserve.console import CLIError, ExitCode, JsonOpt, Output, OutputOpt, print_json

VERSION_FIELDS = ("model_id", "weights_sha256", "weight_format", "policy_sha256")


def _recorded(request_id: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(ledger row, evidence input, evidence output) of `request_id`."""
    from sqlalchemy import select

    from core.db.models import RequestLedger
    from ledger.evidence_store import read_evidence

    db = ledger_evidence.db_engine()
    try:
        with db.connect() as conn:
            row = conn.execute(select(RequestLedger.__table__).where(
                RequestLedger.__table__.c.request_id == request_id)).mappings().first()
            if row is None:
                raise CLIError(f"no ledger row has request id {request_id!r}", ExitCode.USAGE)
            sealed = read_evidence(conn, [request_id]).get(request_id)
    finally:
        db.dispose()
    if sealed is None:
        raise CLIError(f"request {request_id} has no evidence (its class keeps none, or it was erased or expired)",
                       ExitCode.USAGE)
    ring = ledger_evidence.keyring(required=True)
    opened = ring.open(request_id, sealed["key_id"], sealed["ciphertext"])
    if not opened.matches(row["input_sha256"], row["output_sha256"]):
        raise CLIError(f"request {request_id}'s evidence does not match its ledger row's chained hashes: run "
                       "`finserve ledger verify --evidence`", ExitCode.INTEGRITY)
    return dict(row), opened.input, opened.output


def replay(
    request_id: Annotated[str, typer.Argument(help="The request id (X-Request-Id / the ledger row's id)")],
    force: Annotated[bool, typer.Option("--force", help="Replay even when the loaded model, weights, weight "
                                        "format or policy are not the recorded ones")] = False,
    json_out: JsonOpt = False,
    output: OutputOpt = Output.table,
) -> None:
    """Re-run a ledgered request from its evidence, alone, and report identical or different (bitwise)."""
    from core.logging import configure_logging
    from core.settings import Settings
    from engine.engine import LLMEngine
    from engine.fingerprint import engine_fingerprint
    from engine.replay import Recorded, sampling_from_dict
    from engine.replay import replay as run_replay
    from ledger.versions import compute_versions
    from policies import load_policy

    row, inp, out = _recorded(request_id)
    settings = Settings()
    configure_logging(json=settings.log_json, level=settings.log_level)  # engine logs on stderr; stdout: the result
    policy = load_policy(settings.policy)
    try:
        sampling = sampling_from_dict(inp["sampling"])
    except (ValueError, TypeError) as exc:
        raise CLIError(f"request {request_id}'s sampling parameters cannot be replayed here: {exc}",
                       ExitCode.CONFIG) from None
    engine = LLMEngine(settings.engine_config(policy))
    here = compute_versions(model_id=settings.model_id(),
                            model_folder=settings.model_path, weight_format=engine.runner.model.weight_format,
                            policy_source=policy.source, policy=policy,
                            cache_file=settings.home / "weights-sha256.json")
    differs = {f: {"recorded": row.get(f), "loaded": getattr(here, f)} for f in VERSION_FIELDS
               if row.get(f) is not None and row.get(f) != getattr(here, f)}
    if differs and not force:
        raise CLIError(f"request {request_id} was served by other versions than the ones loaded here: "
                       + "; ".join(f"{f} {v['recorded']} (recorded) vs {v['loaded']} (loaded)" for f, v in differs.items())
                       + " — load the recorded ones, or --force", ExitCode.CONFIG)
    recorded_engine = inp.get("engine") or {}
    fingerprint = engine_fingerprint(engine)
    engine_differs = {k: {"recorded": v, "loaded": fingerprint.get(k)} for k, v in recorded_engine.items()
                      if fingerprint.get(k) != v}
    lps = out.get("logprobs")
    rec = Recorded(prompt_token_ids=list(inp["prompt_token_ids"]), sampling=sampling,
                   workload_class=inp["workload_class"], output_token_ids=list(out.get("token_ids") or []),
                   output_logprobs=None if lps is None else [float(t[1]) for t in lps])
    result = run_replay(engine, rec)
    doc = {"request_id": request_id, "verdict": "identical" if result.identical else "different",
           **{k: v for k, v in result.to_dict().items() if k not in ("replayed_token_ids", "replayed_logprobs")},
           "tokens": len(rec.output_token_ids), "logprobs_recorded": lps is not None,
           "versions_differ": differs, "engine_differs": engine_differs, "engine": fingerprint,
           "guaranteed": bool(recorded_engine.get("batch_invariant")) and not engine_differs and not differs}
    if json_out or output is Output.json:
        print_json(doc)
    else:
        typer.echo(f"{request_id}: {doc['verdict']} ({doc['tokens']} tokens"
                   f"{', logprobs compared' if lps is not None else ', no logprobs recorded'})")
        if not result.identical:
            typer.echo(f"  first difference at output token {result.first_diff_index}: recorded "
                       f"{result.recorded_token}, replayed {result.replayed_token}; largest logprob delta "
                       f"{result.max_abs_logprob_delta}")
        for k, v in {**differs, **engine_differs}.items():
            typer.echo(f"  {k}: recorded {v['recorded']}, loaded {v['loaded']}")
        if not doc["guaranteed"]:
            typer.echo("  note: bit-exact replay is guaranteed only for a request recorded and replayed with "
                       "FINSERVE_BATCH_INVARIANT=true on the same kernel ISA, K/V dtype and versions")
    if not result.identical:
        raise typer.Exit(ExitCode.INTEGRITY)
