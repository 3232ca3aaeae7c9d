"""Where a recorded store keeps its journal, and the gate spans and forgets share (`shared`).

| store | journal | vacuum after a forget |
|---|---|---|
| `InMemoryStore` | a list on the `RecordedStore` | nothing to do |
| `SqliteStore` | table `unsee_store_journal` in the same file | `VACUUM`, the WAL truncated |
| `PostgresStore` | table `unsee_store_journal` in the same database | `VACUUM FULL` of the store's tables and the journal (autocommit) |

Each journal is a list of events in order (dicts), with a random salt that keys the digests of
what reads got. `rewrite` replaces its tail with the spans as a forget's twin ran them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
import time

from unsee.model.errors import UnseeError


# --- the gate ------------------------------------------------------------------------------------------

class Gate:
    """Spans hold it shared, a forget exclusively (a writer waiting blocks new spans)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._shared = 0
        self._exclusive = False

    def _enter(self, blocking: bool) -> bool:
        with self._cv:
            while self._exclusive:
                if not blocking:
                    return False
                self._cv.wait()
            self._shared += 1
            return True

    def _leave(self) -> None:
        with self._cv:
            self._shared -= 1
            self._cv.notify_all()

    @contextlib.contextmanager
    def shared(self):
        self._enter(True)
        try:
            yield
        finally:
            self._leave()

    @contextlib.asynccontextmanager
    async def ashared(self):
        while not self._enter(False):
            await asyncio.sleep(0.01)
        try:
            yield
        finally:
            self._leave()

    @contextlib.contextmanager
    def exclusive(self, wait: float):
        with self._cv:
            while self._exclusive:
                self._cv.wait()
            self._exclusive = True
            deadline = time.monotonic() + wait
            while self._shared:
                left = deadline - time.monotonic()
                if left <= 0:
                    self._exclusive = False
                    self._cv.notify_all()
                    raise UnseeError(f"{self._shared} invocation(s) of threads sharing the store are still running after "
                                     f"{wait:g} s: a forget replays the store's history and waits for them to end; "
                                     "try again when they have, or pass a longer wait=")
                self._cv.wait(left)
        try:
            yield
        finally:
            with self._cv:
                self._exclusive = False
                self._cv.notify_all()


# --- the journal ---------------------------------------------------------------------------------------

class Journal:
    """The store's history (see the module): events in order, each a dict."""

    def __init__(self) -> None:
        self._events: list[dict] = []
        self._salt = os.urandom(16)
        self.lock = threading.Lock()

    @property
    def salt(self) -> bytes:
        return self._salt

    def append(self, event: dict) -> None:
        with self.lock:
            self._events.append(event)

    def events(self) -> list[dict]:
        with self.lock:
            return [dict(e, seq=i) for i, e in enumerate(self._events)]

    def rewrite(self, seq: int, events: list[dict]) -> None:
        """Replace the events from `seq` on with `events`."""
        with self.lock:
            self._events[seq:] = [{k: v for k, v in e.items() if k != "seq"} for e in events]

    def vacuum(self) -> None:
        """Make the store's storage hold no byte of what left it (nothing to do in memory)."""


class SqliteJournal(Journal):
    """Table `unsee_store_journal` in a `SqliteStore`'s file."""

    def __init__(self, store) -> None:
        self.store = store
        self.lock = threading.RLock()
        store.setup()
        with store.lock:
            c = store.conn
            c.execute("CREATE TABLE IF NOT EXISTS unsee_store_journal (seq INTEGER PRIMARY KEY, event TEXT NOT NULL)")
            c.execute("CREATE TABLE IF NOT EXISTS unsee_store_meta (k TEXT PRIMARY KEY, v BLOB NOT NULL)")
            c.execute("INSERT OR IGNORE INTO unsee_store_meta (k, v) VALUES ('salt', ?)", (os.urandom(16),))
            self._salt = bytes(c.execute("SELECT v FROM unsee_store_meta WHERE k = 'salt'").fetchone()[0])
            c.commit()

    def append(self, event: dict) -> None:
        with self.store.lock:
            c = self.store.conn
            c.execute("INSERT INTO unsee_store_journal (seq, event) VALUES "
                      "((SELECT COALESCE(MAX(seq), -1) + 1 FROM unsee_store_journal), ?)", (json.dumps(event),))
            c.commit()

    def events(self) -> list[dict]:
        with self.store.lock:
            rows = self.store.conn.execute("SELECT seq, event FROM unsee_store_journal ORDER BY seq").fetchall()
        return [dict(json.loads(e), seq=s) for s, e in rows]

    def rewrite(self, seq: int, events: list[dict]) -> None:
        with self.store.lock:
            c = self.store.conn
            c.execute("PRAGMA secure_delete = ON")
            c.execute("DELETE FROM unsee_store_journal WHERE seq >= ?", (seq,))
            c.executemany("INSERT INTO unsee_store_journal (seq, event) VALUES (?, ?)",
                          [(seq + i, json.dumps({k: v for k, v in e.items() if k != "seq"})) for i, e in enumerate(events)])
            c.commit()

    def vacuum(self) -> None:
        with self.store.lock:
            c = self.store.conn
            c.commit()
            c.execute("VACUUM")
            c.execute("PRAGMA wal_checkpoint(TRUNCATE)")


class PostgresJournal(Journal):
    """Table `unsee_store_journal` in a `PostgresStore`'s database."""

    VACUUM = ("store", "store_vectors", "unsee_store_journal", "unsee_store_meta")

    def __init__(self, store) -> None:
        self.store = store
        self.lock = threading.RLock()
        with store._cursor() as cur:
            cur.execute("CREATE TABLE IF NOT EXISTS unsee_store_journal (seq BIGINT PRIMARY KEY, event TEXT NOT NULL)")
            cur.execute("CREATE TABLE IF NOT EXISTS unsee_store_meta (k TEXT PRIMARY KEY, v BYTEA NOT NULL)")
            cur.execute("INSERT INTO unsee_store_meta (k, v) VALUES ('salt', %s) ON CONFLICT DO NOTHING",
                        (os.urandom(16),))
            cur.execute("SELECT v FROM unsee_store_meta WHERE k = 'salt'")
            self._salt = bytes(_first(cur.fetchone()))

    def append(self, event: dict) -> None:
        with self.lock, self.store._cursor() as cur:
            cur.execute("INSERT INTO unsee_store_journal (seq, event) SELECT COALESCE(MAX(seq), -1) + 1, %s "
                        "FROM unsee_store_journal", (json.dumps(event),))

    def events(self) -> list[dict]:
        with self.store._cursor() as cur:
            cur.execute("SELECT seq, event FROM unsee_store_journal ORDER BY seq")
            rows = cur.fetchall()
        return [dict(json.loads(_at(r, 1, "event")), seq=_at(r, 0, "seq")) for r in rows]

    def rewrite(self, seq: int, events: list[dict]) -> None:
        with self.lock, self.store._cursor() as cur:
            cur.execute("DELETE FROM unsee_store_journal WHERE seq >= %s", (seq,))
            for i, e in enumerate(events):
                cur.execute("INSERT INTO unsee_store_journal (seq, event) VALUES (%s, %s)",
                            (seq + i, json.dumps({k: v for k, v in e.items() if k != "seq"})))

    def vacuum(self) -> None:
        from langgraph.checkpoint.postgres import _internal as pg

        with pg.get_connection(self.store.conn) as conn:
            if not conn.autocommit:
                raise UnseeError("the PostgresStore's connection is not in autocommit mode, so VACUUM FULL cannot run and "
                                 "the rewritten rows' old bytes would stay in the tables' files: open the store with "
                                 "PostgresStore.from_conn_string (autocommit) or a connection made with autocommit=True")
            for table in self.VACUUM:
                if _first(conn.execute("SELECT to_regclass(%s) AS t", (table,)).fetchone()) is not None:
                    conn.execute(f"VACUUM FULL {table}")


def _first(row):
    return next(iter(row.values())) if isinstance(row, dict) else row[0]


def _at(row, i, name):
    return row[name] if isinstance(row, dict) else row[i]
