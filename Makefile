# Tranche: the two commands most people need are `make run` and `make test` (see README.md).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV   := .venv
PY     := $(VENV)/bin/python
export PYTHONPATH := $(CURDIR)
# Local runs and tests are development: the portal refuses to start without this in production.
export TRANCHE_DEBUG ?= 1
PYTEST_ARGS ?=

.PHONY: help setup deps native native-sanitize services-up services-down run stop status \
        test test-fast lint typecheck imports pytest pytest-fast cluster-build cluster-up cluster-down bench clean-state \
        helm chart-lint images test-images test-install

help:
	@echo "make run    - install everything, start PostgreSQL, Redis, the portal, Celery worker/beat"
	@echo "make test   - the same setup, then ruff, mypy, import contracts and every test tier"
	@echo "make test-fast - lint, contracts, types, unit, native and integration (no cluster): ~10 min"
	@echo "make stop   - stop what make run started"

deps:
	@deploy/local/bootstrap.sh

native: deps
	@if [ -f nodeagent/native/Makefile ]; then $(MAKE) -s -C nodeagent/native; fi

native-sanitize: native
	@if [ -f nodeagent/native/Makefile ]; then $(MAKE) -s -C nodeagent/native sanitize; fi

services-up: deps
	@$(PY) -m deploy.local services-up

services-down:
	@$(PY) -m deploy.local services-down

setup: deps native services-up

# `deploy.local run` starts the services itself (and says where they are).
run: deps native
	@$(PY) -m deploy.local run

stop:
	@$(PY) -m deploy.local stop

status:
	@$(PY) -m deploy.local status

lint: deps
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The type check alone ([tool.mypy] in pyproject.toml says what it covers).
typecheck: deps
	$(VENV)/bin/mypy

imports: deps
	$(VENV)/bin/lint-imports

# The control plane and helm are built before pytest starts: a cold build takes minutes, longer
# than any one test's timeout. A failed build fails the run (the cluster tier is never skipped
# silently).
# --durations keeps the dearest tests in the output (CI's log included): what to make cheaper.
DURATIONS := --durations=25

pytest: setup native-sanitize cluster-build helm
	$(VENV)/bin/pytest $(DURATIONS) $(PYTEST_ARGS)

test: lint imports pytest

# The tiers that need no cluster, node, browser or images: the loop to run before every commit.
FAST_TIERS := tests/unit tests/native tests/integration

pytest-fast: setup native-sanitize
	$(VENV)/bin/pytest $(DURATIONS) $(FAST_TIERS) $(PYTEST_ARGS)

test-fast: lint imports pytest-fast

cluster-build: deps
	@$(PY) -m deploy.devcluster build

cluster-up: deps
	@$(PY) -m deploy.devcluster up

cluster-down:
	@$(PY) -m deploy.devcluster down

# helm, built from the Go module proxy into ~/.cache/tranche/helm-<version>/ (deploy/tools).
helm: deps
	@$(PY) -m deploy.tools helm

chart-lint: helm
	@$$($(PY) -m deploy.tools helm) lint --strict --namespace tranche-system deploy/chart/tranche
	@$$($(PY) -m deploy.tools helm) lint --strict --namespace tranche-system deploy/chart/tranche \
	    -f deploy/chart/tranche/values-production.yaml

# Both container images as an OCI layout under .state/images/ (needs root, no container daemon;
# ~4-6 min on 2 cores, most of it mmdebstrap). Not part of `make test`: `make test-images`.
images: deps
	@$(PY) -m deploy.images build

# The images tier: builds twice (reproducibility) and runs each image's entry points in a
# read-only chroot. Its own tier because it takes ~10 minutes.
test-images: deps
	$(VENV)/bin/pytest -m images --basetemp=.state/images/pytest tests/images $(PYTEST_ARGS)

# The install tier: `helm install` of the chart on the dev cluster's real node from the images
# `make images` built (imported into the node's containerd), PostgreSQL and Redis the
# project-owned ones. Its own tier: it needs the images (~4 min to build) and runs minutes.
test-install: setup cluster-build helm
	@if [ ! -f .state/images/oci/index.json ]; then $(MAKE) -s images; fi
	$(VENV)/bin/pytest -m install tests/install $(PYTEST_ARGS)

bench: setup
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b; done
