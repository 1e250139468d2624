"""Configuration: one YAML file (``sluice.yml``) plus environment variables.

Precedence, highest first: environment variables, the config file, built-in defaults. The
defaults are the embedded set-up (local Spark, a Hadoop Iceberg catalog under ``.sluice/``,
the embedded Apache Kafka broker), so the same code runs on a cluster by changing config only.

Every value is validated here, before any data moves; a bad value raises ConfigError naming
the field.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from python_ingest.config.catalog import CatalogConfig, parse_catalog
from python_ingest.config.catalog import with_env as _catalog_with_env
from python_ingest.config.checks import NAME as _NAME
from python_ingest.config.checks import check_keys as _check_keys
from python_ingest.config.checks import choice as _choice
from python_ingest.config.checks import heap as _heap
from python_ingest.config.checks import mapping as _mapping
from python_ingest.config.checks import parse_size
from python_ingest.config.checks import positive_int as _positive_int
from python_ingest.config.dispersal import DispersalTarget, parse_dispersal
from python_ingest.config.files import (
    FILE_KEYS,
    FILES_MAX_BYTES,
    SOURCES,
    FileSourceConfig,
    check_no_file_keys,
    parse_files,
)
from python_ingest.config.kafka import ClusterOverride, KafkaServers, cluster_of, parse_servers
from python_ingest.config.kafka import connect_env as _connect_env
from python_ingest.config.kafka import parse_connect as _parse_connect
from python_ingest.config.kafka import parse_override as _parse_override
from python_ingest.config.kafka import with_env as _kafka_with_env
from python_ingest.config.registry import URL_ENV as _REGISTRY_URL_ENV
from python_ingest.config.registry import RegistryConfig, parse_registry
from python_ingest.config.runner import RunnerConfig, parse_priority, parse_runner
from python_ingest.config.secrets import masked_repr
from python_ingest.config.services import ServicesConfig, parse_services
from python_ingest.config.sources import SourceConfig, parse_source
from python_ingest.config.table_formats import DEFAULT_FORMAT, TABLE_FORMATS
from python_ingest.exceptions import ConfigError

CONFIG_ENV = "SLUICE_CONFIG"
DEFAULT_CONFIG_FILE = "sluice.yml"

READERS = ("kafka-python", "confluent-kafka")
VALUE_FORMATS = ("avro", "confluent-avro", "json")  # json: Debezium's JsonConverter only
DEBEZIUM = "debezium"  # source: debezium, Debezium change events (docs/debezium.md)
STARTING_OFFSETS = ("earliest", "latest")
DATA_LOSS_POLICIES = ("fail", "accept")
# How _row_key is made from the row key columns (docs/architecture.md, "Row keys"): json (a
# composite key with a text or bytes column is the JSON list of its column texts, bytes are
# hex) or joined (before issue #9.7: texts joined with '|', bytes as UTF-8 text).
ROW_KEY_ENCODINGS = ("json", "joined")
# Who may read the warehouse's tables, which all hold source rows (docs/reliability.md,
# #35.6): their owner alone (namespace folders 0700), or also the owner's group (0750)
TABLE_PERMISSIONS = ("owner", "group")

@dataclass(frozen=True, repr=False)
class SparkConfig:
    """Where Spark runs and any extra Spark conf (its repr masks the values of keys naming a
    secret, as Spark does, and passwords in URLs: config/secrets.py)."""

    master: str = "local[2]"
    app_name: str = "sluice"
    conf: Mapping[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        return masked_repr(self)


@dataclass(frozen=True, repr=False)
class BrokerConfig:
    """The Kafka cluster; ``embedded`` means sluice starts a local Apache Kafka broker itself.

    ``heap``, ``retention_ms`` and ``retention_bytes`` apply to the embedded broker only (its
    JVM heap and its default topic retention); an external cluster keeps its own settings.
    ``bootstrap_servers`` carries the cluster's ``security:`` (TLS, SASL: config/kafka.py).
    """

    bootstrap_servers: str = KafkaServers("127.0.0.1:19092")
    embedded: bool = True
    data_dir: str = ".sluice/broker"
    heap: str = "512m"
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1

    def __repr__(self) -> str:
        return masked_repr(self)


@dataclass(frozen=True)
class JobConfig:
    """One table's ingestion: which topic, how to decode it, and how much to take per run."""

    name: str
    topic: str
    schema: str | None
    row_key: tuple[str, ...]
    schema_registry: str | None = None
    ref_key: str = "_ref_key"
    value_format: str = "avro"
    schema_ids: Mapping[int, str] = field(default_factory=dict)
    starting_offsets: str = "earliest"
    max_records: int = 5_000_000
    max_bytes: int = 2 * 1024**3
    records_per_task: int = 250_000
    on_data_loss: str = "fail"
    reader: str = "kafka-python"
    read_timeout_s: float = 60.0
    priority: int = 0  # higher first in a continuous runner (config/runner.py)
    row_key_encoding: str = "json"  # ROW_KEY_ENCODINGS
    source: str = "kafka"  # config/files.py SOURCES; files: partitions of a landing dir
    files: FileSourceConfig | None = None  # source: files only (topic is then unused)
    dispersal: Mapping[str, DispersalTarget] = field(default_factory=dict)  # config/dispersal.py
    services: ServicesConfig = field(default_factory=ServicesConfig)  # config/services.py
    table_format: str | None = None  # this job's tables' format; None: the project's
    # write the converter's and the fork's output to staging.<model> and its __valid table
    # every batch (debugging; a plain `dbt run` always does); off: the runner's batch path
    # converts and forks in one pass on the way to the lake (steps/batch.py)
    keep_step_tables: bool = False
    # confluent-avro without a folder or schema_ids: writer schemas by id from this Schema
    # Registry over HTTP (config/registry.py; the job's own, else the project's)
    registry: RegistryConfig | None = None
    # source: debezium, MySQL/MariaDB: order by binlog position or by GTID (changelog/debezium.py)
    ordering: str = "position"
    # this job's Kafka cluster or user over the project's broker (config/kafka.py); every
    # client of the job takes it from Settings.kafka_for
    broker: ClusterOverride | None = None


@dataclass(frozen=True)
class Settings:
    """Everything a sluice process needs, resolved from file, environment and defaults."""

    root: Path
    spark: SparkConfig = field(default_factory=SparkConfig)
    catalog: CatalogConfig = field(default_factory=CatalogConfig)
    broker: BrokerConfig = field(default_factory=BrokerConfig)
    jobs: Mapping[str, JobConfig] = field(default_factory=dict)
    state_dir: str = ".sluice"
    sources: Mapping[str, SourceConfig] = field(default_factory=dict)
    table_format: str = DEFAULT_FORMAT  # of every table sluice and dbt write (docs/formats.md)
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    table_permissions: str = "owner"  # TABLE_PERMISSIONS: the warehouse's namespace folders
    schema_registry: RegistryConfig | None = None  # the project's (config/registry.py)
    kafka_connect: RegistryConfig | None = None  # Connect's REST API (runtime/connect_rest.py)
    # the pages a person opens, written as runs go: each fork's Great Expectations page and,
    # after `sluice run`, the dashboard (`sluice report` writes the dashboard on demand)
    reports: bool = True

    def path(self, relative: str) -> Path:
        """Resolve a path from config against the project root."""
        p = Path(relative).expanduser()
        return p if p.is_absolute() else self.root / p

    def job(self, name: str) -> JobConfig:
        if name not in self.jobs:
            known = ", ".join(sorted(self.jobs)) or "none"
            raise ConfigError("jobs", f"no job named '{name}'", f"known jobs: {known}")
        return self.jobs[name]

    def kafka_for(self, of: JobConfig | SourceConfig) -> str:
        """The bootstrap list (with its security settings) of a job's or a source's cluster:
        its own ``broker:`` over the project's (config/kafka.py ``cluster_of``)."""
        return cluster_of(self.broker.bootstrap_servers, of.broker)

    def format_of(self, job: JobConfig) -> str:
        """The format ``job``'s tables are written in: its own ``table_format``, else the
        project's (meta.runs is always in the project's)."""
        return job.table_format or self.table_format

    def source(self, name: str) -> SourceConfig:
        if name not in self.sources:
            known = ", ".join(sorted(self.sources)) or "none"
            raise ConfigError("sources", f"no source named '{name}'", f"known sources: {known}")
        return self.sources[name]


def parse_job(name: str, raw: Mapping[str, Any], root: Path,
              project_registry: RegistryConfig | None = None) -> JobConfig:
    """Validate one job's mapping from the config file into a JobConfig (``project_registry``:
    the project's Schema Registry, for confluent-avro jobs with no schemas of their own)."""
    where = f"jobs.{name}"
    if not _NAME.match(name):
        raise ConfigError(where, "job names are lowercase letters, digits and underscores",
                          "the name becomes the table name raw.<name>")
    _check_keys(raw, ({f.name for f in JobConfig.__dataclass_fields__.values()}
                      - {"name", "files", "registry"}) | FILE_KEYS, where)
    source = _choice(raw.get("source", "kafka"), SOURCES, f"{where}.source")
    files = parse_files(raw, where, root) if source == "files" else None
    if source == DEBEZIUM and raw.get("ref_key", "_ref_key") != "_ref_key":
        raise ConfigError(f"{where}.ref_key", "a Debezium job's ref key is the change's source "
                          "position (_ref_key); remove ref_key")
    if files is None:
        check_no_file_keys(raw, where)
    for required in ("row_key",) if files else ("topic", "row_key"):
        if not raw.get(required):
            raise ConfigError(f"{where}.{required}", "is required")
    job_registry = None
    if isinstance(raw.get("schema_registry"), Mapping):  # the job's own registry over HTTP
        job_registry = parse_registry(raw["schema_registry"], f"{where}.schema_registry", root)
        raw = {k: v for k, v in raw.items() if k != "schema_registry"}
    value_format = raw.get("value_format", "avro")
    if value_format == "json" and source != DEBEZIUM:
        raise ConfigError(f"{where}.value_format", "json is for source: debezium only",
                          "Debezium's JsonConverter, with or without its schema envelope")
    if (value_format == "confluent-avro" and not raw.get("schema_registry")
            and not raw.get("schema_ids")):
        job_registry = job_registry or project_registry
        if job_registry is None:
            raise ConfigError(f"{where}.schema_ids", "value_format confluent-avro needs the "
                              "writer schema of each id", "map ids to .avsc files, set "
                              "schema_registry to a folder of <id>.avsc files, or name a Schema "
                              "Registry: schema_registry: {url: ...} at the top of sluice.yml")
    if (not raw.get("schema") and not raw.get("schema_registry") and job_registry is None
            and not (source == DEBEZIUM and raw.get("schema_ids"))):
        raise ConfigError(f"{where}.schema", "is required (or schema_registry, a folder of "
                          "<id>.avsc files, with value_format confluent-avro)")
    row_key = raw["row_key"]
    row_key = (row_key,) if isinstance(row_key, str) else tuple(row_key)
    if not row_key or not all(isinstance(c, str) and c for c in row_key):
        raise ConfigError(f"{where}.row_key", "expected a column name or a list of them")
    schema = str(raw["schema"]) if raw.get("schema") else None
    if schema is not None:
        schema_path = Path(schema) if Path(schema).is_absolute() else root / schema
        if not schema_path.is_file():
            raise ConfigError(f"{where}.schema", f"schema file {schema_path} does not exist")
    registry = str(raw["schema_registry"]) if raw.get("schema_registry") else None
    if registry is not None:
        registry_path = Path(registry) if Path(registry).is_absolute() else root / registry
        if not registry_path.is_dir():
            raise ConfigError(f"{where}.schema_registry", f"folder {registry_path} does not exist")
        if raw.get("value_format", "avro") != "confluent-avro":
            raise ConfigError(f"{where}.value_format", "a schema_registry needs confluent-avro "
                              "(messages that carry their schema id)")
    ids = {}
    for key, path in _mapping(raw.get("schema_ids"), f"{where}.schema_ids").items():
        try:
            ids[int(key)] = str(path)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{where}.schema_ids", f"schema id {key!r} is not a number") from exc
    job = JobConfig(
        name=name,
        topic=str(raw.get("topic") or ""),
        schema=schema,
        row_key=row_key,
        schema_registry=registry,
        ref_key=str(raw.get("ref_key", "_ref_key")),
        value_format=_choice(raw.get("value_format", "avro"), VALUE_FORMATS,
                             f"{where}.value_format"),
        schema_ids=ids,
        starting_offsets=_choice(raw.get("starting_offsets", "earliest"), STARTING_OFFSETS,
                                 f"{where}.starting_offsets"),
        max_records=_positive_int(raw.get("max_records", JobConfig.max_records),
                                  f"{where}.max_records"),
        max_bytes=parse_size(raw.get("max_bytes", FILES_MAX_BYTES if files
                                     else JobConfig.max_bytes), f"{where}.max_bytes"),
        records_per_task=_positive_int(raw.get("records_per_task", JobConfig.records_per_task),
                                       f"{where}.records_per_task"),
        on_data_loss=_choice(raw.get("on_data_loss", "fail"), DATA_LOSS_POLICIES,
                             f"{where}.on_data_loss"),
        reader=_choice(raw.get("reader", "kafka-python"), READERS, f"{where}.reader"),
        read_timeout_s=float(raw.get("read_timeout_s", JobConfig.read_timeout_s)),
        priority=parse_priority(raw.get("priority", 0), where),
        row_key_encoding=_choice(raw.get("row_key_encoding", JobConfig.row_key_encoding),
                                 ROW_KEY_ENCODINGS, f"{where}.row_key_encoding"),
        source=source,
        files=files,
        dispersal=parse_dispersal(raw.get("dispersal"), f"{where}.dispersal", root),
        services=parse_services(raw.get("services"), f"{where}.services"),
        table_format=None if raw.get("table_format") is None else _choice(
            str(raw["table_format"]).strip().lower(), TABLE_FORMATS, f"{where}.table_format"),
        keep_step_tables=_flag(raw.get("keep_step_tables", False), f"{where}.keep_step_tables"),
        registry=job_registry,
        ordering=_choice(raw.get("ordering", "position"), ("position", "gtid"),
                         f"{where}.ordering"),
        broker=_parse_override(raw.get("broker"), f"{where}.broker", root),
    )
    return job


def _flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(where, f"expected true or false, got {value!r}")
    return value


def _env_flag(env: Mapping[str, str], var: str) -> bool:
    value = env[var].strip().lower()
    if value not in ("true", "false", "1", "0", "yes", "no"):
        raise ConfigError(var, f"expected true or false, got {value!r}")
    return value in ("true", "1", "yes")


def _env_overrides(data: dict[str, Any], env: Mapping[str, str]) -> None:
    """Apply SLUICE_* environment variables on top of the file's values."""
    simple = {
        "SLUICE_SPARK_MASTER": ("spark", "master"),
        "SLUICE_BOOTSTRAP_SERVERS": ("broker", "bootstrap_servers"),
        "SLUICE_BROKER_DATA_DIR": ("broker", "data_dir"),
    }
    for var, (section, key) in simple.items():
        if env.get(var):
            data.setdefault(section, {})[key] = env[var]
    data["broker"] = _kafka_with_env(_mapping(data.get("broker"), "broker"), env)
    data["catalog"] = _catalog_with_env(_mapping(data.get("catalog"), "catalog"), env)
    if env.get("SLUICE_STATE_DIR"):  # e.g. a second runner on this host: its own status file
        data["state_dir"] = env["SLUICE_STATE_DIR"]
    _connect_env(data, env)  # SLUICE_KAFKA_CONNECT_URL, _PASSWORD (config/kafka.py)
    if env.get(_REGISTRY_URL_ENV):  # the project's Schema Registry
        registry = data.get("schema_registry")
        data["schema_registry"] = {**(registry if isinstance(registry, dict) else {}),
                                   "url": env[_REGISTRY_URL_ENV]}
    if env.get("SLUICE_TABLE_FORMAT"):
        data["table_format"] = env["SLUICE_TABLE_FORMAT"].strip().lower()
    if env.get("SLUICE_BROKER_EMBEDDED"):
        data.setdefault("broker", {})["embedded"] = _env_flag(env, "SLUICE_BROKER_EMBEDDED")
    if env.get("SLUICE_REPORTS"):
        data["reports"] = _env_flag(env, "SLUICE_REPORTS")
    if env.get("SLUICE_SPARK_CONF"):
        conf = dict(data.setdefault("spark", {}).get("conf") or {})
        for item in env["SLUICE_SPARK_CONF"].split(";"):
            if not item.strip():
                continue
            if "=" not in item:
                raise ConfigError("SLUICE_SPARK_CONF", f"expected key=value;..., got {item!r}")
            k, v = item.split("=", 1)
            conf[k.strip()] = v.strip()
        data["spark"]["conf"] = conf


def load_settings(path: str | os.PathLike[str] | None = None,
                  env: Mapping[str, str] | None = None) -> Settings:
    """Load settings from ``path`` (or $SLUICE_CONFIG, or ./sluice.yml) and the environment."""
    env = os.environ if env is None else env
    chosen = path or env.get(CONFIG_ENV)
    if chosen:
        config_file = Path(chosen)
        if not config_file.is_file():
            raise ConfigError(CONFIG_ENV if not path else "--config",
                              f"config file {config_file} does not exist")
    else:
        config_file = Path.cwd() / DEFAULT_CONFIG_FILE
    root = config_file.resolve().parent if config_file.is_file() else Path.cwd()
    data: dict[str, Any] = {}
    if config_file.is_file():
        try:
            loaded = yaml.safe_load(config_file.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(str(config_file), f"not valid YAML: {exc}") from exc
        if not isinstance(loaded, dict):
            raise ConfigError(str(config_file), "the top level must be a mapping")
        data = json.loads(json.dumps(loaded))  # deep copy with plain types
    _env_overrides(data, env)
    _check_keys(data, {"spark", "catalog", "broker", "jobs", "state_dir", "sources",
                       "table_format", "runner", "table_permissions", "schema_registry",
                       "kafka_connect", "reports"},
                "config")

    spark_raw = _mapping(data.get("spark"), "spark")
    _check_keys(spark_raw, {"master", "app_name", "conf"}, "spark")
    spark = SparkConfig(
        master=str(spark_raw.get("master", SparkConfig.master)),
        app_name=str(spark_raw.get("app_name", SparkConfig.app_name)),
        conf={str(k): str(v) for k, v in _mapping(spark_raw.get("conf"), "spark.conf").items()},
    )
    catalog = parse_catalog(data.get("catalog"), root)
    broker_raw = _mapping(data.get("broker"), "broker")
    _check_keys(broker_raw, {"bootstrap_servers", "embedded", "data_dir", "heap", "retention_ms",
                             "retention_bytes", "security"}, "broker")
    embedded = broker_raw.get("embedded", BrokerConfig.embedded)
    if not isinstance(embedded, bool):
        raise ConfigError("broker.embedded", f"expected true or false, got {embedded!r}")
    broker = BrokerConfig(
        bootstrap_servers=parse_servers(broker_raw, "broker", root,
                                        BrokerConfig.bootstrap_servers) or "",
        embedded=embedded,
        data_dir=str(broker_raw.get("data_dir", BrokerConfig.data_dir)),
        heap=_heap(broker_raw.get("heap", BrokerConfig.heap)),
        retention_ms=_positive_int(broker_raw.get("retention_ms", BrokerConfig.retention_ms),
                                   "broker.retention_ms"),
        retention_bytes=-1 if (kept := broker_raw.get("retention_bytes", -1)) == -1
        else parse_size(kept, "broker.retention_bytes"),
    )
    registry = None
    if data.get("schema_registry") is not None:
        registry = parse_registry(data["schema_registry"], "schema_registry", root)
    jobs = {
        str(name): parse_job(str(name), _mapping(raw, f"jobs.{name}"), root, registry)
        for name, raw in _mapping(data.get("jobs"), "jobs").items()
    }
    sources = {
        str(name): parse_source(str(name), _mapping(raw, f"sources.{name}"), root)
        for name, raw in _mapping(data.get("sources"), "sources").items()
    }
    return Settings(root=root, spark=spark, catalog=catalog, broker=broker, jobs=jobs,
                    state_dir=str(data.get("state_dir", ".sluice")), sources=sources,
                    table_format=_choice(data.get("table_format", Settings.table_format),
                                         TABLE_FORMATS, "table_format"),
                    runner=parse_runner(_mapping(data.get("runner"), "runner")),
                    table_permissions=_choice(
                        data.get("table_permissions", Settings.table_permissions),
                        TABLE_PERMISSIONS, "table_permissions"),
                    schema_registry=registry,
                    kafka_connect=_parse_connect(data.get("kafka_connect"), root),
                    reports=_flag(data.get("reports", True), "reports"))
