"""What served a request, written into every ledger row: model id, weights hash, weight format,
policy hash, finserve version.

Computed once per gateway process. Hashing the weights reads every byte of them (0.27 GB for
the default model, several GB for larger ones), so the digest is cached in a small JSON file
keyed by each weights file's path, size and modification time: a restart with the same files
hashes nothing, a replaced file (new size or mtime) is hashed again.

With engine replicas (FINSERVE_ENGINES) the gateway hashes its own model folder (the one its
tokenizer comes from, which the replicas are deployed with) and records the configured weight
format, since the replicas resolve `auto` themselves.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from ledger.row import LedgerRow

log = structlog.get_logger("finserve.ledger")

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Versions:
    """The row's `served_by` fields (ledger/fields.py VERSION_FIELDS), field for field."""

    model_id: str | None = None
    weights_sha256: str | None = None
    weight_format: str | None = None
    policy_sha256: str | None = None
    finserve_version: str | None = None

    def stamp(self, row: LedgerRow) -> LedgerRow:
        """`row` with these versions where it has none (a replayed row keeps the versions it was served with)."""
        if row.model_id is not None or row.finserve_version is not None or self == _UNKNOWN:
            return row
        return dataclasses.replace(row, **dataclasses.asdict(self))


_UNKNOWN = Versions()


def finserve_version() -> str:
    try:
        return importlib.metadata.version("finserve")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def policy_sha256(source: str, fallback: object) -> str:
    """sha256 of the policy file's bytes; of `repr(fallback)` (the frozen policy) when it has no file."""
    path = Path(source)
    if path.is_file():
        return _file_sha256(path)
    return hashlib.sha256(repr(fallback).encode()).hexdigest()


def weight_files(folder: Path) -> list[Path]:
    if folder.is_file():
        return [folder]
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in WEIGHT_SUFFIXES)


def weights_sha256(folder: Path, cache_file: Path | None) -> str | None:
    """One digest over the weights files of `folder` (sha256 of "name:sha256" lines, sorted by name);
    None when there are none. Per-file digests come from `cache_file` when path, size and mtime match."""
    files = weight_files(folder)
    if not files:
        return None
    cache = _read_cache(cache_file)
    lines, changed = [], False
    for f in files:
        st = f.stat()
        key = f"{f.resolve()}:{st.st_size}:{st.st_mtime_ns}"
        digest = cache.get(key)
        if digest is None:
            digest = _file_sha256(f)
            cache[key] = digest
            changed = True
        lines.append(f"{f.name}:{digest}\n")
    if changed and cache_file is not None:
        _write_cache(cache_file, cache)
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _read_cache(path: Path | None) -> dict[str, str]:
    if path is None or not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # a damaged cache only costs a re-hash
    return {k: v for k, v in data.items() if isinstance(v, str)} if isinstance(data, dict) else {}


def _write_cache(path: Path, cache: dict[str, str]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cache, indent=0, sort_keys=True))
        tmp.replace(path)
    except OSError as exc:
        log.warning("weights_hash_cache_unwritable", path=str(path), error=str(exc))


def loaded_weight_format(engine_client: Any) -> str | None:
    """The format the embedded engine resolved (`auto` becomes q4 or fp32, ...); None before it is loaded,
    and for engine replicas (they resolve it in their own process)."""
    model = getattr(getattr(getattr(engine_client, "engine", None), "runner", None), "model", None)
    fmt = getattr(model, "weight_format", None)
    return fmt if isinstance(fmt, str) else None


def compute_versions(*, model_id: str, model_folder: Path, weight_format: str | None, policy_source: str,
                     policy: object, cache_file: Path | None) -> Versions:
    return Versions(model_id=model_id, weights_sha256=weights_sha256(model_folder, cache_file),
                    weight_format=weight_format, policy_sha256=policy_sha256(policy_source, policy),
                    finserve_version=finserve_version())
