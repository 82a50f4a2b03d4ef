"""Pydantic models at the HTTP edge, split by use (requests in, public views out)."""
