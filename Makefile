# shardtrain — the README's two commands:
#
#   make demo   create the environment, install, run the main job end to end on local storage
#   make test   create the environment, install, build MinIO and fake-gcs-server, lint, run the
#               whole suite (the tests start and stop the servers)
#   make docs   build the documentation site (docs/) into site/, broken links as errors
#   make test-fast   the fast tier alone (tests/unit: no TensorFlow, no servers), for the edit loop
#   make test-pythons   the fast tier and one end-to-end shard + train on the other supported
#                       Pythons (3.12, 3.13), each in its own .venv-3.X (CI runs it after `make test`)
#
# Everything the project needs is installed from here; nothing by hand. The Python
# environment lives in .venv (re-installed when pyproject.toml or constraints.txt change,
# re-created when PYTHON is another version); MinIO, fake-gcs-server (the GCS emulator) and the
# Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, the training
# operator, JobSet, Kubeflow Trainer) are built once per machine from Go modules into
# ~/.cache/shardtrain (scripts/install-minio, install-fake-gcs, install-k8s).
#
# Python 3.11, 3.12 and 3.13 are supported (pyproject's requires-python); PYTHON picks the
# interpreter, e.g. `make test PYTHON=python3.12`. constraints.txt's pins install on all three.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PY_VERSION := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
STAMP  := $(VENV)/.installed-$(PY_VERSION)
PYTEST_ARGS ?=
# The Pythons `make test-pythons` checks besides the main one (found by scripts/find-python).
EXTRA_PYTHONS ?= 3.12 3.13

.PHONY: demo test test-fast test-cluster test-pythons smoke lint docs env minio gcs crd k8s node image pipeline-yaml clean help

help:
	@echo "make demo   run the end-to-end demo on local storage (no server needed)"
	@echo "make test   lint and run the whole test suite against live MinIO and fake-gcs-server"
	@echo "make test-fast   the fast tier (tests/unit): no TensorFlow, no servers"
	@echo "make test-cluster   our image's jobs in real pods: a kubelet node (root; CI runs it)"
	@echo "make test-pythons   fast tier + end-to-end shard/train on Python $(EXTRA_PYTHONS)"

env: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; assert (3, 11) <= sys.version_info[:2] <= (3, 13), "Python 3.11, 3.12 or 3.13 is required, found " + sys.version.split()[0]'
	@if [ -e $(BIN)/python ] && [ "$$($(BIN)/python -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" != "$(PY_VERSION)" ]; then \
	  echo "$(VENV) is not a Python $(PY_VERSION) environment: re-creating it"; rm -rf $(VENV); fi
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24,<27"
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev,docs]'
	$(BIN)/shardtrain warm-up  # compile the kernels once, into numba's cache
	@touch $(STAMP)

minio:
	@scripts/install-minio >/dev/null

gcs:
	@scripts/install-fake-gcs >/dev/null

# The TFJob CRD of the pinned training operator (from its Go module): rendered jobs are
# validated against its schema.
crd:
	@scripts/install-tfjob-crd >/dev/null

# The control plane of the TFJob, JobSet and TrainJob tests (scripts/k8s-up): etcd,
# kube-apiserver, kube-controller-manager, the training operator, JobSet, Kubeflow Trainer.
k8s:
	@scripts/install-k8s >/dev/null

# Debian's chromium and chromedriver: the HTML report's browser tests (installed once, apt-get).
.PHONY: chromium
chromium:
	@scripts/install-chromium >/dev/null

PY_DIRS := src tests benchmarks docs

lint: env
	$(BIN)/ruff check $(PY_DIRS)
	$(BIN)/ruff format --check $(PY_DIRS)
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/hadolint Dockerfile

# The suite on $(WORKERS) pytest-xdist workers: about half of a single run's wall time is spent
# waiting (servers, controllers, subprocesses starting), which the other worker uses.
# tests/conftest.py keeps a file's tests, and all the control plane's, on one worker.
WORKERS ?= 2
XDIST = -n $(WORKERS) --dist loadfile

test: env minio gcs crd k8s chromium lint
	$(BIN)/python -m pytest -v $(XDIST) --durations=15 --ignore=tests/cluster $(PYTEST_ARGS)

# The cluster tier (tests/cluster; root): a real node beside the control plane (scripts/node-up:
# kubelet, containerd + runc, CNI bridge, CoreDNS, kube-scheduler; built by scripts/install-node)
# running our image, built from the Dockerfile (scripts/build-image). One node per session: one
# process, no xdist.
node:
	@scripts/install-node >/dev/null

image:
	@scripts/build-image >/dev/null

test-cluster: env minio k8s node image
	$(BIN)/python -m pytest -v -p no:xdist --durations=10 tests/cluster $(PYTEST_ARGS)

# The unit tier's files have no fixture worth keeping together: test by test balances best.
test-fast: env
	$(BIN)/python -m pytest -q -n $(WORKERS) --dist load tests/unit $(PYTEST_ARGS)

# Each extra Python: its own environment (.venv-3.12, ...; cached like .venv), the fast tier,
# then `smoke`. Every version runs even when one fails; the target fails if any did.
test-pythons:
	@failed=""; for v in $(EXTRA_PYTHONS); do \
	  py="$$(scripts/find-python $$v)" || { failed="$$failed $$v"; continue; }; \
	  echo "== Python $$v: $$py"; start=$$(date +%s); \
	  $(MAKE) --no-print-directory PYTHON="$$py" VENV=.venv-$$v test-fast smoke || failed="$$failed $$v"; \
	  echo "== Python $$v: $$(( $$(date +%s) - start )) s"; \
	done; \
	if [ -n "$$failed" ]; then echo "test-pythons: FAILED on Python$$failed" >&2; exit 1; fi

# One end-to-end run on local storage in a scratch directory: generate a small tabular set,
# shard it, train 50 steps. For the extra Pythons (the full suite covers this on the main one).
SMOKE_DIR = $(VENV)/smoke
smoke: env
	rm -rf $(SMOKE_DIR) && mkdir -p $(SMOKE_DIR)
	$(BIN)/shardtrain gen-data quest --rows 20000 --output $(SMOKE_DIR)/quest.csv
	$(BIN)/shardtrain shard $(SMOKE_DIR)/quest.csv --output $(SMOKE_DIR)/quest --label cleared --key attempt_id
	$(BIN)/shardtrain train --data $(SMOKE_DIR)/quest --model-dir $(SMOKE_DIR)/model --train-steps 50
	rm -rf $(SMOKE_DIR)

demo: env
	$(BIN)/shardtrain demo

# The documentation site (mkdocs.yml, docs/) into site/ (gitignored); --strict makes every
# warning an error: a broken link or anchor, a page missing from the nav. CI runs it.
docs: env
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The compiled pipeline and components checked in at pipelines/ and components/ (a unit test
# fails when they differ from the package's definitions).
pipeline-yaml: env
	$(BIN)/shardtrain pipeline compile --all-to .

clean:
	rm -rf $(VENV) .venv-3.* .pytest_cache build src/*.egg-info

# Ready for a real cluster (CI runs both after `make test`):
#   test-install  `pip install .` resolves in a fresh venv from pyproject's ranges alone
#                 (no constraints.txt), as for a user adding shardtrain to their environment
#   test-image    the image built from the Dockerfile with buildah on a local Debian base
#                 (scripts/build-image: cached by its inputs), then shard, train, a pipeline
#                 step and pipeline compile in it as its uid 10001, with its ENV, site-packages
#                 read-only, no kernel compiled at start (scripts/image-smoke-test; as root)
.PHONY: test-install test-image
test-install:
	scripts/test-install $(PYTHON)

test-image:
	scripts/image-smoke-test
