"""The composition root: the `finserve` command (`cli.py`, `commands/`), a command's settings (`config.py`), console
output and exit codes (`console.py`), Prometheus rules generated from the policy (`deploy.py`)."""
