"""SQL layer: declarative base, engine/session factory, and every model module.

Importing this package registers all tables on `Base.metadata` (core tables from
models.py, and the bulk-job tables from jobs_models.py once that module exists),
so Alembic's env.py and `Base.metadata` users see one complete schema.
"""
from __future__ import annotations

import importlib
import importlib.util

from gateway.db.base import Base, database_url, finserve_home, make_engine, make_session_factory, utcnow
from gateway.db import models  # noqa: F401  (registers the core tables)

if importlib.util.find_spec("gateway.db.jobs_models") is not None:
    importlib.import_module("gateway.db.jobs_models")

__all__ = ["Base", "database_url", "finserve_home", "make_engine", "make_session_factory", "models", "utcnow"]
