"""A seeded random DML workload on two tables (one with a composite key).

Inserts, updates of some columns, rows updated many times, deletes, multi-row and
multi-table transactions, primary key changes and rolled-back transactions.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from tests.sources.binlog.support import Steps

ORDERS = """CREATE TABLE orders (
  id INT AUTO_INCREMENT PRIMARY KEY, customer VARCHAR(40) NOT NULL,
  amount DECIMAL(10,2) NOT NULL, status ENUM('new','paid','shipped','cancelled') NOT NULL,
  note TEXT NULL, updated_at DATETIME(6) NOT NULL, qty INT NULL)"""
LINES = """CREATE TABLE order_lines (
  order_id INT NOT NULL, line_no SMALLINT NOT NULL, sku VARCHAR(20) NOT NULL,
  price DECIMAL(12,3) NOT NULL, qty INT NOT NULL, PRIMARY KEY (order_id, line_no))"""
NAMES = ("Ana", "Björk", "Chloé", "Dmitri", "Eşref", "Fatima", "Grégoire", "Hiroshi 広")
STATUSES = ("new", "paid", "shipped", "cancelled")


@contextlib.contextmanager
def workload_tapped(env: Any, seed: int) -> Iterator[tuple[Workload, Any]]:
    """The workload's tables with their jobs and the tap's checkpoint at the binlog's end, then
    `sluice tap` running: (the workload, the tap's process); taps left running are killed."""
    with env.server.root(env.database) as conn:
        Workload.create(conn)
        env.start_tapping()
        tap = env.start_tap()
        try:
            yield Workload(conn, seed=seed), tap
        finally:
            env.close()


class Workload(Steps):
    """Runs random transactions against ``orders`` and ``order_lines`` of one database."""

    def __init__(self, conn: Any, seed: int) -> None:
        super().__init__(conn, seed)
        self.transactions = 0

    @staticmethod
    def create(conn: Any) -> None:
        with conn.cursor() as cur:
            cur.execute(ORDERS)
            cur.execute(LINES)

    def _ids(self, cur: Any) -> list[int]:
        cur.execute("SELECT id FROM orders")
        return [r[0] for r in cur.fetchall()]

    def _stamp(self) -> str:
        return (f"2024-{self.rng.randint(1, 12):02d}-{self.rng.randint(1, 28):02d} "
                f"{self.rng.randint(0, 23):02d}:{self.rng.randint(0, 59):02d}:"
                f"{self.rng.randint(0, 59):02d}.{self.rng.randint(0, 999999):06d}")

    def _insert(self, cur: Any) -> None:
        for _ in range(self.rng.randint(1, 4)):
            cur.execute("INSERT INTO orders (customer, amount, status, note, updated_at, qty) "
                        "VALUES (%s, %s, 'new', %s, %s, %s)",
                        (self.rng.choice(NAMES), Decimal(self.rng.randint(100, 99999)) / 100,
                         self.rng.choice((None, "first order", "geschenk ✓")), self._stamp(),
                         self.rng.choice((None, 1, 2, 3))))
            order_id = cur.lastrowid
            for line in range(1, self.rng.randint(1, 4) + 1):
                cur.execute("INSERT INTO order_lines VALUES (%s, %s, %s, %s, %s)",
                            (order_id, line, f"SKU-{self.rng.randint(1, 500)}",
                             Decimal(self.rng.randint(1, 999999)) / 1000, self.rng.randint(1, 9)))

    def _update(self, cur: Any, order_id: int, times: int = 1) -> None:
        for _ in range(times):
            sets, params = [], []
            for column in self.rng.sample(("status", "amount", "note", "qty"),
                                          self.rng.randint(1, 3)):
                sets.append(f"{column} = %s")
                params.append({"status": lambda: self.rng.choice(STATUSES),
                               "amount": lambda: Decimal(self.rng.randint(100, 99999)) / 100,
                               "note": lambda: self.rng.choice((None, "rush", "ça va", "")),
                               "qty": lambda: self.rng.choice((None, 5, 7))}[column]())
            sets.append("updated_at = %s")
            params.append(self._stamp())
            cur.execute(f"UPDATE orders SET {', '.join(sets)} WHERE id = %s", (*params, order_id))

    def step(self) -> None:
        """One transaction (committed, or now and then rolled back)."""
        rng = self.rng
        with self.conn.cursor() as cur:
            ids = self._ids(cur)
            roll = rng.random()
            if not ids or roll < 0.3:
                self._insert(cur)
            elif roll < 0.55:
                self._update(cur, rng.choice(ids))
            elif roll < 0.65:  # a hot row, updated many times in one transaction
                self._update(cur, ids[0] if rng.random() < 0.5 else rng.choice(ids),
                             times=rng.randint(3, 8))
            elif roll < 0.75:
                victim = rng.choice(ids)
                cur.execute("DELETE FROM order_lines WHERE order_id = %s", (victim,))
                cur.execute("DELETE FROM orders WHERE id = %s", (victim,))
            elif roll < 0.85:  # multi-row update across the composite-key table
                cur.execute("UPDATE order_lines SET price = price * 1.1, qty = qty + 1 "
                            "WHERE order_id IN (%s, %s)", (rng.choice(ids), rng.choice(ids)))
            elif roll < 0.9:  # primary key change
                cur.execute("UPDATE order_lines SET line_no = line_no + 100 WHERE order_id = %s "
                            "AND line_no < 100 LIMIT 1", (rng.choice(ids),))
            elif roll < 0.92:  # a savepoint: part of the transaction rolled back
                self._update(cur, rng.choice(ids))
                cur.execute("SAVEPOINT before_insert")
                self._insert(cur)
                cur.execute("ROLLBACK TO SAVEPOINT before_insert")
                self._insert(cur)
            elif roll < 0.95:  # a multi-table transaction with several statements
                order_id = rng.choice(ids)
                self._update(cur, order_id)
                cur.execute("UPDATE order_lines SET qty = qty + 1 WHERE order_id = %s",
                            (order_id,))
                self._insert(cur)
            else:
                self._update(cur, rng.choice(ids))
                self.conn.rollback()
                return
        self.conn.commit()
        self.transactions += 1
