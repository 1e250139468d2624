# sluice: the front door. `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
JARS_STAMP := .sluice/jars/.built
PYTEST_ARGS ?=

.DEFAULT_GOAL := help

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-12s %s\n", $$1, $$2}'

system-deps: ## install the system packages sluice needs (Java 17, jarjar, MariaDB server) if missing
	@if ! command -v java >/dev/null || [ ! -f /usr/share/java/jarjar.jar ]; then \
		echo "installing Java and jarjar from Debian's packages"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			openjdk-17-jre-headless libjarjar-java >/dev/null; \
	fi
	@# the binlog tap's tests, demo and bench start their own private mariadbd
	@if [ ! -x /usr/sbin/mariadbd ] || ! command -v mariadb-install-db >/dev/null; then \
		echo "installing the MariaDB server (for the binlog tap) from Debian's packages"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			mariadb-server >/dev/null; \
	fi

$(STAMP): requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.lock
	$(BIN)/pip install -q --no-deps -e .
	touch $(STAMP)

$(JARS_STAMP): $(STAMP)
	$(BIN)/python -m python_ingest.jars .sluice
	touch $(JARS_STAMP)

setup: system-deps $(STAMP) $(JARS_STAMP) ## everything a fresh machine needs (idempotent)

run: setup ## run the main job on the embedded default (local Spark, Iceberg, broker, demo data)
	$(BIN)/sluice demo

test: setup ## run all tests (unit and end-to-end, against real broker, Spark and Iceberg)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-quick: setup ## only the quick unit tests
	$(BIN)/python -m pytest -m "not e2e" $(PYTEST_ARGS)

lint: setup ## ruff and mypy
	$(BIN)/ruff check python_ingest tests bench
	$(BIN)/mypy python_ingest

bench: setup ## the ingestion benchmark (1M records; prints records/s and the ratio to baseline)
	$(BIN)/python bench/ingest_bench.py

bench-tap: setup ## the binlog tap benchmark (1M-row bootstrap, tap rate vs bare mysql-replication)
	$(BIN)/python bench/tap_bench.py

broker-stop: ## stop the embedded broker (its data stays in .sluice/broker)
	-$(BIN)/sluice broker stop

clean: broker-stop ## remove the local warehouse, broker data and build output (keeps .venv)
	rm -rf .sluice/warehouse .sluice/broker .sluice/spark-warehouse target logs

.PHONY: help system-deps setup run test test-quick lint bench bench-tap broker-stop clean
