"""A random workload on PostgreSQL: transactions of one to five changes over two tables
(inserts, updates of some columns, key changes, deletes, now and then a TOASTed text left
unchanged by an update), some spanning both tables."""

from __future__ import annotations

from typing import Any

from tests.sources.binlog.support import Steps

TABLES = """
CREATE TABLE orders (
  id int PRIMARY KEY, customer text NOT NULL, amount numeric(12,2), status varchar(20),
  updated_at timestamptz);
CREATE TABLE notes (
  note_id bigint PRIMARY KEY, title varchar(60), body text, due date, tags text[],
  attrs jsonb, payload bytea, score double precision);
"""
TITLES = ("naïve café", "Ærøskøbing", "日本語", "emoji 🚀", "", None, "plain")


class PgWorkload(Steps):
    """Random transactions on ``orders`` and ``notes``."""

    def __init__(self, connect: Any, seed: int, first_id: int = 1) -> None:
        super().__init__(connect(), seed, first_id)

    @staticmethod
    def create(conn: Any) -> None:
        with conn.cursor() as cur:
            cur.execute(TABLES)

    def _note_value(self, column: str) -> Any:
        rng = self.rng
        return self.maybe({
            "title": lambda: rng.choice(TITLES),
            "body": lambda: rng.choice(("ça va ✓", "x" * rng.randint(0, 300),
                                        "".join(rng.choice("abcdefghij0123456789")
                                                for _ in range(rng.randint(3000, 6000))))),
            "due": lambda: f"{rng.randint(1990, 2030)}-{rng.randint(1, 12):02}-"
                           f"{rng.randint(1, 28):02}",
            "tags": lambda: [rng.choice("abc") for _ in range(rng.randint(0, 3))],
            "attrs": lambda: f'{{"k": {rng.randint(0, 9)}, "tags": ["é", "ß"], "n": null}}',
            "payload": lambda: bytes(rng.randrange(256) for _ in range(rng.randint(0, 40))),
            "score": lambda: rng.choice((rng.uniform(-1e6, 1e6), float("nan"), float("inf"))),
        }[column])

    def _change(self, cur: Any) -> None:
        rng = self.rng
        table = rng.choice(("orders", "notes"))
        key = "id" if table == "orders" else "note_id"
        cur.execute(f"SELECT {key} FROM {table} ORDER BY {key}")
        ids = [r[0] for r in cur.fetchall()]
        roll = rng.random()
        if not ids or roll < 0.4:
            self.next_id += 1
            if table == "orders":
                cur.execute("INSERT INTO orders VALUES (%s, %s, %s, 'new', now())",
                            (self.next_id, rng.choice(TITLES) or "x",
                             round(rng.uniform(0, 1000), 2)))
            else:
                columns = ("title", "body", "due", "tags", "attrs", "payload", "score")
                cur.execute(f"INSERT INTO notes (note_id, {', '.join(columns)}) VALUES "
                            f"(%s{', %s' * len(columns)})",
                            (self.next_id, *(self._note_value(c) for c in columns)))
        elif roll < 0.8:
            target = ids[0] if rng.random() < 0.2 else rng.choice(ids)
            if table == "orders":
                cur.execute("UPDATE orders SET status = %s, amount = amount + 1, "
                            "updated_at = now() WHERE id = %s",
                            (rng.choice(("paid", "sent", None)), target))
            else:
                chosen = rng.sample(("title", "due", "tags", "attrs", "payload", "score"),
                                    rng.randint(1, 3))  # body (TOASTed) mostly left alone
                cur.execute(f"UPDATE notes SET {', '.join(f'{c} = %s' for c in chosen)} "
                            "WHERE note_id = %s",
                            (*(self._note_value(c) for c in chosen), target))
        elif roll < 0.85:
            self.next_id += 1
            cur.execute(f"UPDATE {table} SET {key} = %s WHERE {key} = %s",
                        (self.next_id, rng.choice(ids)))
        else:
            cur.execute(f"DELETE FROM {table} WHERE {key} = %s", (rng.choice(ids),))

    def step(self) -> None:
        with self.conn.cursor() as cur:
            for _ in range(self.rng.choice((1, 1, 2, 5))):
                self._change(cur)
        self.conn.commit()

    def close(self) -> None:
        self.conn.close()
