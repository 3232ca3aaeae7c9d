"""The Postgres adapters (`PostgresSaver`, `AsyncPostgresSaver`): the world ledger and erasure in the database.

The ledger is table `unsee_world` in the checkpointer's database. Erasure deletes every row of
`checkpoints` and `checkpoint_writes` of the thread but the head's lineage, and every
`checkpoint_blobs` row no kept checkpoint names (a blob is a channel's value at a version, shared
by the checkpoints that name it), in one transaction; then `VACUUM FULL` rewrites the four tables
(and their TOAST tables and indexes) into new files, so the deleted rows' bytes leave the
tables' files. What stays elsewhere (the WAL, freed disk blocks, backups) is the operator's:
docs/langgraph.md says what to do. VACUUM FULL cannot run inside a transaction, so the
connection must be in autocommit mode (as `PostgresSaver.from_conn_string` opens it); it takes
an exclusive lock on each table while it rewrites it.
"""

from __future__ import annotations

from unsee.impl.integrations.langgraph.savers import Adapter, Bridged, Row, kept_keys
from unsee.model.errors import UnseeError


PG_LEDGER = ("CREATE TABLE IF NOT EXISTS unsee_world (seq BIGSERIAL PRIMARY KEY, thread_id TEXT NOT NULL, "
             "checkpoint_id TEXT NOT NULL, call_id TEXT NOT NULL, tool TEXT NOT NULL, args TEXT NOT NULL, "
             "turn INTEGER NOT NULL, result TEXT NOT NULL)")
PG_EXISTS = "SELECT to_regclass('unsee_world')"
PG_ROWS = ("SELECT seq, checkpoint_id, call_id, tool, args, turn, result FROM unsee_world WHERE thread_id = %s "
           "ORDER BY seq")
PG_INSERT = ("INSERT INTO unsee_world (thread_id, checkpoint_id, call_id, tool, args, turn, result) "
             "VALUES (%s, %s, '', %s, %s, 0, %s)")
PG_UPDATE = "UPDATE unsee_world SET call_id = %s, args = %s, turn = %s, result = %s WHERE thread_id = %s AND seq = %s"
# every row of the thread but the kept checkpoints (`keep`: the head's lineage and its subgraphs'), and the blobs
# no kept checkpoint names
PG_KEY = "checkpoint_ns || chr(31) || checkpoint_id"  # a kept checkpoint's key: namespace, unit separator, id
PG_ERASE = (
    ("checkpoint_writes", f"DELETE FROM checkpoint_writes WHERE thread_id = %s AND NOT ({PG_KEY} = ANY(%s::text[]))"),
    ("checkpoints", f"DELETE FROM checkpoints WHERE thread_id = %s AND NOT ({PG_KEY} = ANY(%s::text[]))"),
    ("checkpoint_blobs", "DELETE FROM checkpoint_blobs b WHERE b.thread_id = %s AND NOT EXISTS (SELECT 1 FROM checkpoints c "
                         "WHERE c.thread_id = b.thread_id AND c.checkpoint_ns = b.checkpoint_ns "
                         "AND c.checkpoint_ns || chr(31) || c.checkpoint_id = ANY(%s::text[]) "
                         "AND c.checkpoint -> 'channel_versions' ->> b.channel = b.version)"),
)
PG_VACUUM = ("checkpoints", "checkpoint_blobs", "checkpoint_writes", "unsee_world")


class PostgresAdapter(Adapter):
    """`PostgresSaver` (psycopg, a connection or a pool): the same database (see the module)."""

    kind = "postgres"

    def _conn(self):
        from langgraph.checkpoint.postgres import _internal

        return _internal.get_connection(self.saver.conn)

    @staticmethod
    def _refuse(conn, pipe) -> None:
        if pipe is not None:
            raise UnseeError("a forget cannot erase through a PostgresSaver in pipeline mode: give it a plain "
                             "connection (PostgresSaver(conn)) or a pool")
        if not conn.autocommit:
            raise UnseeError("the PostgresSaver's connection is not in autocommit mode, and a forget's VACUUM FULL "
                             "cannot run in a transaction: connect with autocommit=True (as "
                             "PostgresSaver.from_conn_string does)")

    def _cur(self, conn):
        from psycopg.rows import tuple_row

        return conn.cursor(row_factory=tuple_row)

    def check(self) -> None:
        with self.saver.lock, self._conn() as conn:
            self._refuse(conn, self.saver.pipe)

    def record(self, thread_id, checkpoint_id, tool, args, result) -> None:
        with self.saver.lock, self._conn() as conn, self._cur(conn) as cur:
            cur.execute(PG_LEDGER)
            cur.execute(PG_INSERT, (thread_id, checkpoint_id, tool, args, result))

    def rows(self, thread_id) -> list[Row]:
        with self.saver.lock, self._conn() as conn, self._cur(conn) as cur:
            if cur.execute(PG_EXISTS).fetchone()[0] is None:
                return []  # no call fired yet: reading writes nothing
            return [Row(*r) for r in cur.execute(PG_ROWS, (thread_id,)).fetchall()]

    def update(self, thread_id, rows: list[Row]) -> None:
        with self.saver.lock, self._conn() as conn, conn.transaction(), self._cur(conn) as cur:
            for r in rows:
                cur.execute(PG_UPDATE, (r.call_id, r.args, r.turn, r.result, thread_id, r.seq))

    def drop(self, thread_id) -> None:
        with self.saver.lock, self._conn() as conn, self._cur(conn) as cur:
            cur.execute(PG_LEDGER)
            cur.execute("DELETE FROM unsee_world WHERE thread_id = %s", (thread_id,))

    def erase(self, thread_id, keep: set) -> dict:
        counts = {}
        with self.saver.lock, self._conn() as conn:
            self._refuse(conn, self.saver.pipe)
            with conn.transaction(), self._cur(conn) as cur:
                cur.execute(PG_LEDGER)
                for table, sql in PG_ERASE:
                    counts[table] = cur.execute(sql, (thread_id, kept_keys(keep))).rowcount
            with self._cur(conn) as cur:
                for table in PG_VACUUM:
                    cur.execute(f"VACUUM FULL {table}")
        return {"checkpoints_deleted": counts["checkpoints"], "writes_deleted": counts["checkpoint_writes"],
                "blobs_deleted": counts["checkpoint_blobs"]}


class AsyncPostgresAdapter(Bridged, PostgresAdapter):
    """`AsyncPostgresSaver` (psycopg async): the same statements, awaited."""

    is_async = True

    def _aconn(self):
        from langgraph.checkpoint.postgres import _ainternal

        return _ainternal.get_connection(self.saver.conn)

    async def acheck(self) -> None:
        async with self.saver.lock, self._aconn() as conn:
            self._refuse(conn, self.saver.pipe)

    async def arecord(self, thread_id, checkpoint_id, tool, args, result) -> None:
        async with self.saver.lock, self._aconn() as conn, self._cur(conn) as cur:
            await cur.execute(PG_LEDGER)
            await cur.execute(PG_INSERT, (thread_id, checkpoint_id, tool, args, result))

    async def arows(self, thread_id) -> list[Row]:
        async with self.saver.lock, self._aconn() as conn, self._cur(conn) as cur:
            await cur.execute(PG_EXISTS)
            if (await cur.fetchone())[0] is None:
                return []
            await cur.execute(PG_ROWS, (thread_id,))
            return [Row(*r) for r in await cur.fetchall()]

    async def aupdate(self, thread_id, rows: list[Row]) -> None:
        async with self.saver.lock, self._aconn() as conn, conn.transaction(), self._cur(conn) as cur:
            for r in rows:
                await cur.execute(PG_UPDATE, (r.call_id, r.args, r.turn, r.result, thread_id, r.seq))

    async def adrop(self, thread_id) -> None:
        async with self.saver.lock, self._aconn() as conn, self._cur(conn) as cur:
            await cur.execute(PG_LEDGER)
            await cur.execute("DELETE FROM unsee_world WHERE thread_id = %s", (thread_id,))

    async def aerase(self, thread_id, keep: set) -> dict:
        counts = {}
        async with self.saver.lock, self._aconn() as conn:
            self._refuse(conn, self.saver.pipe)
            async with conn.transaction(), self._cur(conn) as cur:
                await cur.execute(PG_LEDGER)
                for table, sql in PG_ERASE:
                    await cur.execute(sql, (thread_id, kept_keys(keep)))
                    counts[table] = cur.rowcount
            async with self._cur(conn) as cur:
                for table in PG_VACUUM:
                    await cur.execute(f"VACUUM FULL {table}")
        return {"checkpoints_deleted": counts["checkpoints"], "writes_deleted": counts["checkpoint_writes"],
                "blobs_deleted": counts["checkpoint_blobs"]}

    def check(self):
        return self._bridge(self.acheck(), "a forget")
