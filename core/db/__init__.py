"""SQL layer: declarative base, engine/session factory, and every model module.

Importing this package registers all tables on `Base.metadata` (core tables from
models.py, and the bulk-job tables from jobs_models.py once that module exists),
so Alembic's env.py and `Base.metadata` users see one complete schema.
"""
from __future__ import annotations

import importlib
import importlib.util

from core.db import models  # noqa: F401  (registers the core tables)
from core.db.base import Base, make_engine, make_session_factory, utcnow

if importlib.util.find_spec("core.db.jobs_models") is not None:
    importlib.import_module("core.db.jobs_models")

__all__ = ["Base", "make_engine", "make_session_factory", "models", "utcnow"]
