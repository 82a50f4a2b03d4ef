"""Process wiring below both the CLI (`finserve/`) and the benchmarks (`bench/`): the gateway app with the
jobs routes mounted (`app.py`), starting workers, engines and the gateway in a thread (`processes.py`),
supervising `finserve up`'s children (`supervisor.py`), and which model folder a run uses (`models.py`).

Nothing is imported here: `import stack.models` stays cheap (no FastAPI, no Celery)."""
