# shardtrain — the README's two commands:
#
#   make demo   create the environment, install, run the main job end to end on local storage
#   make test   create the environment, install, build/start MinIO, lint, run the whole suite
#   make test-fast   the fast tier alone (tests/unit: no TensorFlow, no servers), for the edit loop
#
# Everything the project needs is installed from here; nothing by hand. The Python
# environment lives in .venv (re-created when pyproject.toml or constraints.txt change);
# MinIO is built once per machine with `go install` into ~/.cache/shardtrain (scripts/).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: demo test test-fast lint env minio pipeline-yaml clean help

help:
	@echo "make demo   run the end-to-end demo on local storage (no server needed)"
	@echo "make test   lint and run the whole test suite against a live MinIO"
	@echo "make test-fast   the fast tier (tests/unit): no TensorFlow, no servers"

env: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "Python 3.11 is required, found " + sys.version.split()[0]'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24,<27"
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	@touch $(STAMP)

minio:
	@scripts/install-minio >/dev/null

PY_DIRS := src tests benchmarks

lint: env
	$(BIN)/ruff check $(PY_DIRS)
	$(BIN)/ruff format --check $(PY_DIRS)
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/hadolint Dockerfile

test: env minio lint
	$(BIN)/python -m pytest -v --durations=15 $(PYTEST_ARGS)

test-fast: env
	$(BIN)/python -m pytest -q tests/unit $(PYTEST_ARGS)

demo: env
	$(BIN)/shardtrain demo

# The compiled pipeline and components checked in at pipelines/ and components/ (a unit test
# fails when they differ from the package's definitions).
pipeline-yaml: env
	$(BIN)/shardtrain pipeline compile --all-to .

clean:
	rm -rf $(VENV) .pytest_cache build src/*.egg-info
