"""Where a thread lives: one small adapter per checkpointer, for the world ledger and erasure.

A forget reads a thread through the checkpointer's own API (`list`/`alist`), so reading needs
nothing here. Two things do: the world ledger (the consequential calls that fired) lives beside
the checkpoints, and erasure must reach the checkpointer's storage. `checkpointers.adapter(saver)`
gives one of (the Postgres ones are in `postgres`):

| checkpointer | ledger | erasure |
|---|---|---|
| `SqliteSaver`, `AsyncSqliteSaver` | table `unsee_world` in the same file | rows off the head's lineage deleted with `secure_delete`, then `VACUUM` and the WAL truncated |
| `PostgresSaver`, `AsyncPostgresSaver` | table `unsee_world` in the same database | rows of `checkpoints`, `checkpoint_writes` and the `checkpoint_blobs` no kept checkpoint names deleted, then `VACUUM FULL` of the four tables (new table files) |
| `InMemorySaver` | a list on the saver | the entries dropped from its dicts |

Only these classes, exactly: a subclass or another `BaseCheckpointSaver` may keep checkpoints
anywhere, and a forget could not say it erased them, so it is refused before anything is written.

A ledger row is written when a consequential call fires, with the checkpoint the tool's step ran
from (`checkpoint_map[""]`); its turn and call id are resolved by a forget from the thread's
lineage (`tools.resolve`), once every checkpoint of the turn is saved whatever the graph's
durability. Until then the row's turn is 0.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass

from unsee.model.errors import UnseeError


@dataclass(frozen=True)
class Row:
    """One ledger row: a consequential call that fired (turn 0: not resolved yet)."""

    seq: int
    checkpoint_id: str
    call_id: str
    tool: str
    args: str
    turn: int
    result: str


def kept_pairs(keep) -> set[tuple[str, str]]:
    """The checkpoints an erase keeps, as (namespace, checkpoint id): an id alone is the parent
    graph's (namespace '')."""
    return {k if isinstance(k, tuple) else ("", k) for k in keep}


def kept_keys(keep) -> list[str]:
    """`kept_pairs` as the SQL of the Postgres adapter compares them: namespace, chr(31), id."""
    return sorted(f"{ns}\x1f{cid}" for ns, cid in kept_pairs(keep))


def _chunks(xs, n=500):
    xs = list(xs)
    for i in range(0, len(xs), n):
        yield xs[i:i + n]


class Adapter:
    """The ledger and erasure of one checkpointer (see the module). Sync methods for a sync
    checkpointer, `a`-prefixed twins for an async one."""

    kind = ""
    is_async = False  # the checkpointer's own I/O is async (its sync methods only bridge to its loop)

    def __init__(self, saver) -> None:
        self.saver = saver

    def check(self) -> None:
        """Refuse, before anything is written, a checkpointer this adapter cannot erase."""

    async def acheck(self) -> None:
        self.check()

    # the sync surface of an async checkpointer: its loop, from another thread (as LangGraph's own sync methods)
    def _bridge(self, coro, what: str):
        loop = self.saver.loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            coro.close()
            raise UnseeError(f"{what} on a {type(self.saver).__name__} from its own event loop: use the async API "
                             "(aforget, acompare_threads, await World(saver).aentries(...))")
        if loop.is_closed():
            coro.close()
            raise UnseeError(f"the {type(self.saver).__name__}'s event loop is closed: open the saver again")
        return asyncio.run_coroutine_threadsafe(coro, loop).result()


class SqliteAdapter(Adapter):
    """`SqliteSaver`: one SQLite file (see the module)."""

    kind = "sqlite"
    CREATE = ("CREATE TABLE IF NOT EXISTS unsee_world (thread_id TEXT NOT NULL, call_id TEXT NOT NULL, "
              "tool TEXT NOT NULL, args TEXT NOT NULL, turn INTEGER NOT NULL, result TEXT NOT NULL, "
              "seq INTEGER NOT NULL)")

    def _ledger(self, conn) -> None:
        conn.execute(self.CREATE)
        cols = {r[1] for r in conn.execute("PRAGMA table_info(unsee_world)")}
        if "checkpoint_id" not in cols:  # files written before the ledger kept the step's checkpoint
            conn.execute("ALTER TABLE unsee_world ADD COLUMN checkpoint_id TEXT NOT NULL DEFAULT ''")

    def record(self, thread_id, checkpoint_id, tool, args, result) -> None:
        with self.saver.cursor() as cur:
            self._ledger(cur)
            seq = cur.execute("SELECT COALESCE(MAX(seq), -1) + 1 FROM unsee_world").fetchone()[0]
            cur.execute("INSERT INTO unsee_world (thread_id, call_id, tool, args, turn, result, seq, checkpoint_id) "
                        "VALUES (?, '', ?, ?, 0, ?, ?, ?)", (thread_id, tool, args, result, seq, checkpoint_id))

    def rows(self, thread_id) -> list[Row]:
        with self.saver.cursor(transaction=False) as cur:
            if not cur.execute("SELECT 1 FROM sqlite_master WHERE name = 'unsee_world'").fetchall():
                return []  # no call fired yet: reading writes nothing (a refused forget leaves the file as it was)
            got = cur.execute("SELECT seq, checkpoint_id, call_id, tool, args, turn, result FROM unsee_world "
                              "WHERE thread_id = ? ORDER BY seq", (thread_id,)).fetchall()
        return [Row(*r) for r in got]

    def update(self, thread_id, rows: list[Row]) -> None:
        if not rows:
            return
        with self.saver.cursor() as cur:
            cur.execute("PRAGMA secure_delete = ON")
            for r in rows:
                cur.execute("UPDATE unsee_world SET call_id = ?, args = ?, turn = ?, result = ? "
                            "WHERE thread_id = ? AND seq = ?", (r.call_id, r.args, r.turn, r.result, thread_id, r.seq))

    def drop(self, thread_id) -> None:
        with self.saver.cursor() as cur:
            self._ledger(cur)
            cur.execute("DELETE FROM unsee_world WHERE thread_id = ?", (thread_id,))

    def _drops(self, rows, keep) -> list:
        keep = kept_pairs(keep)
        return sorted({(ns, cid) for ns, cid in rows if (ns, cid) not in keep})

    DELETE = "DELETE FROM {t} WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id IN ({q})"

    def erase(self, thread_id, keep: set[str]) -> dict:
        """Delete every checkpoint and write of the thread but those kept (`keep`: the head's lineage
        and its subgraphs' checkpoints), with secure_delete on; then VACUUM and truncate the WAL."""
        with self.saver.lock:
            conn = self.saver.conn
            conn.commit()
            conn.execute("PRAGMA secure_delete = ON")
            counts = {}
            for table in ("checkpoints", "writes"):
                drop = self._drops(conn.execute(f"SELECT DISTINCT checkpoint_ns, checkpoint_id FROM {table} "
                                                "WHERE thread_id = ?", (thread_id,)), keep)
                n = 0
                for ns in sorted({d[0] for d in drop}):
                    for chunk in _chunks([c for s, c in drop if s == ns]):
                        n += conn.execute(self.DELETE.format(t=table, q=",".join("?" * len(chunk))),
                                          (thread_id, ns, *chunk)).rowcount
                counts[table] = n
            conn.commit()
            conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return {"checkpoints_deleted": counts["checkpoints"], "writes_deleted": counts["writes"], "blobs_deleted": 0}


class Bridged:
    """The sync calls of an async saver's adapter: each runs its async twin on the saver's own loop
    (`Adapter._bridge`), so the world ledger of an async saver is usable from sync code too."""

    def record(self, *a):
        return self._bridge(self.arecord(*a), "a consequential call")

    def rows(self, thread_id):
        return self._bridge(self.arows(thread_id), "reading the world ledger")

    def update(self, thread_id, rows):
        return self._bridge(self.aupdate(thread_id, rows), "a forget")

    def drop(self, thread_id):
        return self._bridge(self.adrop(thread_id), "dropping the world ledger")

    def erase(self, thread_id, keep):
        return self._bridge(self.aerase(thread_id, keep), "a forget")


class AsyncSqliteAdapter(Bridged, SqliteAdapter):
    """`AsyncSqliteSaver` (aiosqlite): the same file and statements, awaited."""

    is_async = True

    async def _ready(self):
        await self.saver.setup()
        return self.saver.conn

    async def _aledger(self, conn) -> None:
        await conn.execute(self.CREATE)
        async with conn.execute("PRAGMA table_info(unsee_world)") as cur:
            cols = {r[1] for r in await cur.fetchall()}
        if "checkpoint_id" not in cols:
            await conn.execute("ALTER TABLE unsee_world ADD COLUMN checkpoint_id TEXT NOT NULL DEFAULT ''")

    async def arecord(self, thread_id, checkpoint_id, tool, args, result) -> None:
        conn = await self._ready()
        async with self.saver.lock:
            await self._aledger(conn)
            async with conn.execute("SELECT COALESCE(MAX(seq), -1) + 1 FROM unsee_world") as cur:
                seq = (await cur.fetchone())[0]
            await conn.execute("INSERT INTO unsee_world (thread_id, call_id, tool, args, turn, result, seq, "
                               "checkpoint_id) VALUES (?, '', ?, ?, 0, ?, ?, ?)",
                               (thread_id, tool, args, result, seq, checkpoint_id))
            await conn.commit()

    async def arows(self, thread_id) -> list[Row]:
        conn = await self._ready()
        async with self.saver.lock:
            async with conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'unsee_world'") as cur:
                if not await cur.fetchall():
                    return []
            async with conn.execute("SELECT seq, checkpoint_id, call_id, tool, args, turn, result FROM unsee_world "
                                    "WHERE thread_id = ? ORDER BY seq", (thread_id,)) as cur:
                return [Row(*r) for r in await cur.fetchall()]

    async def aupdate(self, thread_id, rows: list[Row]) -> None:
        if not rows:
            return
        conn = await self._ready()
        async with self.saver.lock:
            await conn.execute("PRAGMA secure_delete = ON")
            for r in rows:
                await conn.execute("UPDATE unsee_world SET call_id = ?, args = ?, turn = ?, result = ? "
                                   "WHERE thread_id = ? AND seq = ?",
                                   (r.call_id, r.args, r.turn, r.result, thread_id, r.seq))
            await conn.commit()

    async def adrop(self, thread_id) -> None:
        conn = await self._ready()
        async with self.saver.lock:
            await self._aledger(conn)
            await conn.execute("DELETE FROM unsee_world WHERE thread_id = ?", (thread_id,))
            await conn.commit()

    async def aerase(self, thread_id, keep: set[str]) -> dict:
        conn = await self._ready()
        async with self.saver.lock:
            await conn.commit()
            await conn.execute("PRAGMA secure_delete = ON")
            counts = {}
            for table in ("checkpoints", "writes"):
                async with conn.execute(f"SELECT DISTINCT checkpoint_ns, checkpoint_id FROM {table} "
                                        "WHERE thread_id = ?", (thread_id,)) as cur:
                    drop = self._drops(await cur.fetchall(), keep)
                n = 0
                for ns in sorted({d[0] for d in drop}):
                    for chunk in _chunks([c for s, c in drop if s == ns]):
                        cur = await conn.execute(self.DELETE.format(t=table, q=",".join("?" * len(chunk))),
                                                 (thread_id, ns, *chunk))
                        n += cur.rowcount
                counts[table] = n
            await conn.commit()
            await conn.execute("VACUUM")
            await conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return {"checkpoints_deleted": counts["checkpoints"], "writes_deleted": counts["writes"], "blobs_deleted": 0}


class MemoryAdapter(Adapter):
    """`InMemorySaver`: the process's memory. The ledger is a list on the saver; erasure drops the
    entries from the saver's dicts (the bytes they held are freed, not overwritten: Python's
    allocator reuses the memory, nothing zeroes it)."""

    kind = "memory"
    _lock = threading.Lock()

    def _ledger(self) -> list:
        with self._lock:
            if not hasattr(self.saver, "unsee_world"):
                self.saver.unsee_world = []
            return self.saver.unsee_world

    def record(self, thread_id, checkpoint_id, tool, args, result) -> None:
        led = self._ledger()
        with self._lock:
            seq = 1 + max((r.seq for _, r in led), default=-1)
            led.append((thread_id, Row(seq, checkpoint_id, "", tool, args, 0, result)))

    def rows(self, thread_id) -> list[Row]:
        return [r for t, r in self._ledger() if t == thread_id]

    def update(self, thread_id, rows: list[Row]) -> None:
        new = {r.seq: r for r in rows}
        led = self._ledger()
        with self._lock:
            led[:] = [(t, new.get(r.seq, r) if t == thread_id else r) for t, r in led]

    def drop(self, thread_id) -> None:
        led = self._ledger()
        with self._lock:
            led[:] = [(t, r) for t, r in led if t != thread_id]

    def erase(self, thread_id, keep: set[str]) -> dict:
        s = self.saver
        keep = kept_pairs(keep)
        counts = {"checkpoints": 0, "writes": 0, "blobs": 0}
        versions = set()
        for ns, by_id in list(s.storage.get(thread_id, {}).items()):
            for cid in list(by_id):
                if (ns, cid) in keep:
                    cp = s.serde.loads_typed(by_id[cid][0])
                    versions |= {(ns, ch, v) for ch, v in cp.get("channel_versions", {}).items()}
                else:
                    del by_id[cid]
                    counts["checkpoints"] += 1
        for key in [k for k in s.writes if k[0] == thread_id and (k[1], k[2]) not in keep]:
            counts["writes"] += len(s.writes.pop(key))
        for key in [k for k in s.blobs if k[0] == thread_id and (k[1], k[2], k[3]) not in versions]:
            del s.blobs[key]
            counts["blobs"] += 1
        return {"checkpoints_deleted": counts["checkpoints"], "writes_deleted": counts["writes"],
                "blobs_deleted": counts["blobs"]}

    async def arecord(self, *a):
        return self.record(*a)

    async def arows(self, thread_id):
        return self.rows(thread_id)

    async def aupdate(self, thread_id, rows):
        return self.update(thread_id, rows)

    async def adrop(self, thread_id):
        return self.drop(thread_id)

    async def aerase(self, thread_id, keep):
        return self.erase(thread_id, keep)
