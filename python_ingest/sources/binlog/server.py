"""Talking to the source server, and a private MariaDB server for tests, the demo and the bench.

The tap needs (docs/binlog-tap.md): ``log_bin`` on, ``binlog_format=ROW``,
``binlog_row_image=FULL``, ``binlog_row_metadata=FULL``, and a user with REPLICATION SLAVE,
REPLICATION CLIENT and SELECT.
"""

from __future__ import annotations

import fnmatch
import shutil
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from python_ingest.config import SourceConfig
from python_ingest.exceptions import SetupError, SluiceError
from python_ingest.runtime.files import write_private
from python_ingest.runtime.processes import free_port, stop_server
from python_ingest.sources.binlog import tls
from python_ingest.sources.binlog.columns import from_information_schema
from python_ingest.sources.binlog.position import BinlogPosition
from python_ingest.sources.tap import keys
from python_ingest.sources.tap.kinds import Catalog
from python_ingest.sources.tap.registry import TableShape

if TYPE_CHECKING:
    from pymysql.connections import Connection

SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")
REQUIRED_SETTINGS = {"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL",
                     "binlog_row_metadata": "FULL"}
# settings (absent on the other server kind) that write events the tap cannot read: (the value
# found that does, the value to set); the tap also stops on the first such event (event_types)
UNREADABLE_SETTINGS = {"log_bin_compress": ("ON", "OFF"),  # MariaDB
                       "binlog_row_value_options": ("PARTIAL_JSON", "''"),  # MySQL
                       "binlog_transaction_compression": ("ON", "OFF")}  # MySQL 8.0.20+


def connection_settings(source: SourceConfig) -> dict[str, Any]:
    """pymysql.connect's arguments for ``source``, TLS included (tls.py): the replication
    stream's connection too."""
    return {"host": source.host, "port": source.port, "user": source.user,
            "passwd": source.secret(), "charset": "utf8mb4", **tls.options(source)}


def connect(source: SourceConfig, **extra: Any) -> Connection[Any]:
    """A pymysql connection to the source (UTC session, utf8mb4)."""
    import pymysql

    options: dict[str, Any] = {"autocommit": True, "connect_timeout": 10,
                               **tls.options(source), **extra}
    try:
        conn = pymysql.connect(host=source.host, port=source.port, user=source.user,
                               password=source.secret(), charset="utf8mb4", **options)
    except pymysql.err.OperationalError as exc:
        raise SluiceError(f"cannot connect to source '{source.name}' at {source.host}:"
                          f"{source.port} as {source.user}: "
                          f"{tls.explain(source, str(exc.args[-1]))}") from exc
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
    return conn


def check_server(conn: Any, source: SourceConfig) -> None:
    """Raise SetupError naming every server setting the tap needs but does not find, and
    every one that writes events the tap cannot read (event_types.py)."""
    names = (*REQUIRED_SETTINGS, *UNREADABLE_SETTINGS)
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN "
                    f"({', '.join(repr(n) for n in names)})")
        found = {str(k).lower(): str(v).upper() for k, v in cur.fetchall()}
    wrong = [f"{k}={found.get(k, 'missing')} (needs {v})" for k, v in REQUIRED_SETTINGS.items()
             if found.get(k) != v]
    wrong += [f"{k}={found[k]} (needs {v}: the tap cannot read the events it writes)"
              for k, (bad, v) in UNREADABLE_SETTINGS.items() if bad in found.get(k, "")]
    if wrong:
        raise SetupError(f"source '{source.name}': the server's binlog settings do not suit the "
                         f"tap: {', '.join(wrong)}. Set them in the server config and restart it "
                         "(docs/binlog-tap.md)")


def master_position(conn: Any) -> BinlogPosition:
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
    if not row:
        raise SetupError("the server's binlog is off (SHOW MASTER STATUS is empty): start it "
                         "with log_bin")
    return BinlogPosition(str(row[0]), int(row[1]))


def first_position(conn: Any) -> BinlogPosition:
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        row = cur.fetchone()
    return BinlogPosition(str(row[0]), 4)


def included(source: SourceConfig, db: str, table: str) -> bool:
    """Whether ``db.table`` is tapped: matches an include pattern and no exclude pattern."""
    if db in SYSTEM_SCHEMAS:
        return False
    name = f"{db}.{table}"
    return any(fnmatch.fnmatchcase(name, p) for p in source.include) and not any(
        fnmatch.fnmatchcase(name, p) for p in source.exclude)


def tables(conn: Any, source: SourceConfig) -> list[tuple[str, str]]:
    """The base tables the source's patterns include, sorted."""
    with conn.cursor() as cur:
        cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
                    "WHERE TABLE_TYPE = 'BASE TABLE' ORDER BY 1, 2")
        return [(db, t) for db, t in cur.fetchall() if included(source, db, t)]


def primary_key(conn: Any, db: str, table: str) -> tuple[str, ...]:
    with conn.cursor() as cur:
        cur.execute("SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA=%s "
                    "AND TABLE_NAME=%s AND INDEX_NAME='PRIMARY' ORDER BY SEQ_IN_INDEX",
                    (db, table))
        return tuple(r[0] for r in cur.fetchall())


def unique_keys(conn: Any, db: str, table: str) -> list[tuple[str, tuple[str, ...]]]:
    """The table's UNIQUE indexes (other than the primary key) whose columns are all NOT NULL
    and whole (no prefix), in the server's index order: (index name, columns in index order).
    Without a primary key the server treats the first of them as the primary key (InnoDB's
    clustered index; the binlog marks its columns as the key)."""
    import pymysql

    with conn.cursor() as cur:
        try:
            cur.execute(f"SHOW INDEX FROM {quote(db)}.{quote(table)}")
        except pymysql.err.ProgrammingError as exc:
            if exc.args[0] == 1146:  # dropped or renamed since this change (later in the binlog)
                return []
            raise
        names = [d[0].lower() for d in cur.description]
        rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    indexes: dict[str, list[str]] = {}
    unfit: set[str] = set()
    for row in rows:
        index = str(row["key_name"])
        if index == "PRIMARY":
            continue
        indexes.setdefault(index, []).append(str(row["column_name"]))
        if int(row["non_unique"]) or row["sub_part"] is not None or \
                str(row["null"] or "").upper() == "YES":
            unfit.add(index)
    return [(i, tuple(c)) for i, c in indexes.items() if i not in unfit]


def data_types(conn: Any, db: str, table: str) -> dict[str, str]:
    """DATA_TYPE of each column (MariaDB's UUID/INET4/INET6 look like BINARY in the binlog)."""
    with conn.cursor() as cur:
        cur.execute("SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS WHERE "
                    "TABLE_SCHEMA=%s AND TABLE_NAME=%s", (db, table))
        return {str(n): str(t).lower() for n, t in cur.fetchall()}


COLUMN_FIELDS = ("COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, NUMERIC_PRECISION, NUMERIC_SCALE, "
                 "DATETIME_PRECISION, CHARACTER_SET_NAME, CHARACTER_OCTET_LENGTH, IS_NULLABLE")


def table_shape(conn: Any, db: str, table: str, source: SourceConfig | None = None,
                registered: dict[str, Any] | None = None) -> TableShape:
    """The table's current shape and key from information_schema (bootstrap, jobs); the key
    follows the source's ``key_columns`` when given, and ``registered``, the table's latest
    registered schema (keys.decide)."""
    import pymysql

    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"SELECT {COLUMN_FIELDS} FROM information_schema.COLUMNS WHERE "
                    "TABLE_SCHEMA=%s AND TABLE_NAME=%s ORDER BY ORDINAL_POSITION", (db, table))
        rows = cur.fetchall()
    if not rows:
        raise SluiceError(f"table {db}.{table} does not exist on the source")
    specs = tuple(from_information_schema(r) for r in rows)
    key = keys.decide(source, f"{db}.{table}", specs, primary_key(conn, db, table),
                      unique_keys(conn, db, table), registered)
    return TableShape(db, table, specs, key)


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


# ---- a private MariaDB server (tests, demo, bench) ----------------------------------------

SERVER_FLAGS = ("--binlog-format=ROW", "--binlog-row-image=FULL", "--binlog-row-metadata=FULL",
                "--server-id=1", "--character-set-server=utf8mb4",
                "--collation-server=utf8mb4_unicode_ci", "--skip-name-resolve",
                "--innodb-buffer-pool-size=128M", "--innodb-flush-log-at-trx-commit=2",
                "--sync-binlog=0", "--max-connections=200")



def find_mariadbd() -> str | None:
    for candidate in ("/usr/sbin/mariadbd", shutil.which("mariadbd"), "/usr/sbin/mysqld"):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


@dataclass
class LocalServer:
    """A private mariadbd in ``folder`` on a free loopback port, with a tap user.

    Started with ``--no-defaults`` so nothing from the machine's own server config leaks in.
    """

    folder: Path
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    tap_user: str = "sluice_tap"
    tap_password: str = "tap-secret"

    @property
    def socket(self) -> Path:
        return self.folder / "mysqld.sock"

    def start(self, extra: Iterable[str] = (), timeout_s: float = 60) -> LocalServer:
        binary = find_mariadbd()
        install = shutil.which("mariadb-install-db") or shutil.which("mysql_install_db")
        if not binary or not install:
            raise SetupError("no MariaDB server binary found: install it with "
                             "'apt-get install mariadb-server' (or 'make system-deps')")
        data = self.folder / "data"
        if not data.exists():
            self.folder.mkdir(parents=True, exist_ok=True)
            subprocess.run([install, "--no-defaults", f"--datadir={data}", "--user=root",
                            "--auth-root-authentication-method=normal", "--skip-test-db"],
                           check=True, capture_output=True, timeout=120)
        self.port = self.port or free_port()
        self.process = subprocess.Popen(
            [binary, "--no-defaults", f"--datadir={data}", f"--socket={self.socket}",
             f"--port={self.port}", "--bind-address=127.0.0.1", "--user=root",
             f"--log-bin={data / 'binlog'}", f"--pid-file={self.folder / 'mysqld.pid'}",
             f"--log-error={self.folder / 'error.log'}", *SERVER_FLAGS, *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                conn = self.root()
                break
            except Exception:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    log = (self.folder / "error.log")
                    raise SetupError(f"private mariadbd did not start: "
                                     f"{log.read_text()[-2000:] if log.exists() else ''}") from None
                time.sleep(0.2)
        with conn.cursor() as cur:
            cur.execute(f"CREATE USER IF NOT EXISTS '{self.tap_user}'@'127.0.0.1' "
                        f"IDENTIFIED BY '{self.tap_password}'")
            cur.execute("GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO "
                        f"'{self.tap_user}'@'127.0.0.1'")
        conn.close()
        return self

    def root(self, database: str | None = None) -> Connection[Any]:
        """A root connection over the socket (autocommit on, UTC session)."""
        import pymysql

        conn = pymysql.connect(unix_socket=str(self.socket), user="root", charset="utf8mb4",
                               autocommit=True, database=database)
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
        return conn

    def source_config(self, **overrides: Any) -> dict[str, Any]:
        """A ``sources:`` entry for sluice.yml pointing at this server; the tap user's password
        is in an owner-only ``password_file`` in the server's folder (the documented way)."""
        secret = self.folder / "tap.password"
        if not secret.is_file():
            write_private(secret, self.tap_password + "\n")
        return {"kind": "mariadb", "host": "127.0.0.1", "port": self.port,
                "user": self.tap_user, "password_file": str(secret), **overrides}

    def stop(self, timeout_s: float = 30) -> None:
        if self.process is None:
            return
        stop_server(self.process, timeout_s)
        self.process = None


def catalog() -> Catalog:
    """The source's tables and their shapes (tap/kinds.py)."""
    return Catalog(connect, tables,
                   lambda conn, src, db, t, reg: table_shape(conn, db, t, src, reg))
