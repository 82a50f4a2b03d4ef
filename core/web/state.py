"""What every web package's routes share between requests: built once in the app's lifespan."""
from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from core.settings import Settings
from core.web.auth import Authenticator
from policies import Policy

STATE_ATTR = "finserve"  # app.state.finserve holds the state object (a CoreState or a subclass)


@dataclass
class CoreState:
    settings: Settings
    policy: Policy
    db: Engine
    sessions: sessionmaker[Session]
    auth: Authenticator
