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
        test lint imports pytest cluster-build cluster-up cluster-down bench clean-state

help:
	@echo "make run    - install everything, start PostgreSQL, Redis, the portal, Celery worker/beat"
	@echo "make test   - the same setup, then ruff, import contracts and every test tier"
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

imports: deps
	$(VENV)/bin/lint-imports

# The control plane is built before pytest starts: a cold build takes minutes, longer than any
# one test's timeout. A failed build fails the run (the cluster tier is never skipped silently).
pytest: setup native-sanitize cluster-build
	$(VENV)/bin/pytest $(PYTEST_ARGS)

test: lint imports pytest

cluster-build: deps
	@$(PY) -m deploy.devcluster build

cluster-up: deps
	@$(PY) -m deploy.devcluster up

cluster-down:
	@$(PY) -m deploy.devcluster down

bench: setup
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b; done
