"""Below gateway and jobs: the one Settings object, persistence (tables, sessions, migrations), API keys,
logging, and the HTTP edge kit both web packages share (errors, request context, auth)."""
