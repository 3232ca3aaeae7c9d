"""The session store: one SQLite file holding everything a forget needs after a restart.

Tables: meta (format version, model, policy, config, final digests, K/V page layout),
observations (with their hash chain), deltas (R_t as what it changed in R_{t-1}: the store
grows linearly with the session), artifacts and edges (the provenance graph), checkpoints
(boundary and environment snapshot; the manifest is R_boundary's blocks), snapshots
(environment), world (side effects that fired), receipts, and pages (every block's K/V rows,
written once, named by content: see unsee.impl.engine.pages).

A forget rewrites only what follows its splice point (`save(..., since=c)`).

Everything a save writes goes in one transaction, so a reader sees the old session or the
new one, never a mix.

Integrity: no byte is trusted until it is verified. The rows of each turn t (its observation,
delta, artifacts, edges and checkpoint) are hashed per table into `turns`, chained
D_t = H(D_{t-1} ‖ digests of turn t); `meta.root` hashes D_T with every other meta row (the
model's identity among them: weights, dtype, attention kernel, threads, device, page layout), the
snapshots, the world ledger and the receipts. `load` recomputes all of it and names the first row
that does not match. A K/V page is derived data: its digest binds the model's identity, its key
and its bytes, and is checked when the page is read; a page that fails is recomputed from the
verified tokens, and the receipt says so. A save starts only if the stored root is the one its
caller loaded (one writer).
"""

from __future__ import annotations

import bisect
import fcntl
import hashlib
import json
import operator
import os
import secrets
import sqlite3
import time
from contextlib import contextmanager
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from unsee.impl.engine.pages import ITEMSIZE, from_bytes, to_bytes
from unsee.model.session import Checkpoint, Session, UnseeError
from unsee.model.state import (Artifact, Block, Config, LedgerEntry, Observation, State, ToolCall, artifact_delta,
                               inherited_sources, provenance)

FORMAT = 4  # 1: every R_t stored whole; 2: per-transition deltas and K/V pages; 3: 2 + digests; 4: JSON tool calls
MAGIC = b"SQLite format 3\x00"

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS observations (t INTEGER PRIMARY KEY, body TEXT NOT NULL, chain TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS deltas (t INTEGER PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS artifacts (id TEXT PRIMARY KEY, type TEXT, source_ids TEXT, token_span TEXT,
                                      turn INTEGER, committed INTEGER, ord INTEGER);
CREATE TABLE IF NOT EXISTS edges (parent TEXT, child TEXT, ord INTEGER, turn INTEGER);
CREATE TABLE IF NOT EXISTS checkpoints (boundary INTEGER PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS snapshots (id TEXT PRIMARY KEY, env TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS world (call_id TEXT PRIMARY KEY, tool TEXT, args TEXT, turn INTEGER);
CREATE TABLE IF NOT EXISTS receipts (n INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS pages (key TEXT PRIMARY KEY, born INTEGER NOT NULL, data BLOB NOT NULL,
                                  digest TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS turns (t INTEGER PRIMARY KEY, rows TEXT NOT NULL, digest TEXT NOT NULL);
"""
INDEXES = """
CREATE INDEX IF NOT EXISTS artifacts_turn ON artifacts (turn);
CREATE INDEX IF NOT EXISTS edges_turn ON edges (turn);
CREATE INDEX IF NOT EXISTS pages_born ON pages (born);
"""

class StoreError(UnseeError):
    pass


class IntegrityError(StoreError):
    """A persisted row does not match its digest: the store was altered or damaged."""


class ConcurrentChange(StoreError):
    """Another writer changed the store since this process read it."""


class Failpoint(RuntimeError):
    """Raised at a named write point when UNSEE_FAILPOINT (or Store.failpoint) names it."""


WRITE_POINTS = ("begin", "clear", "meta", "observations", "states", "artifacts", "edges", "checkpoints",
                "snapshots", "world", "pages", "receipt", "seal", "commit")


def canonical(o: Observation) -> str:
    """The form the log is stored and hashed in."""
    return json.dumps(o.to_json(), sort_keys=True)


def link(prev: str, body: str) -> str:
    """One link of the log's hash chain: h_t = sha256(h_{t-1} ‖ o_t)."""
    return hashlib.sha256((prev + body).encode()).hexdigest()


def chain_of(bodies, head: str = "0" * 64) -> list[str]:
    """The hash chain of a log of canonical bodies, from h_0 = head (see `link`)."""
    h, out = head, []
    for b in bodies:
        h = link(h, b)
        out.append(h)
    return out


def chain(observations, head: str = "0" * 64) -> list[str]:
    """The hash chain of the observation log (see `chain_of`)."""
    return chain_of(map(canonical, observations), head)


def _json_rows(texts) -> list:
    """Parse many JSON texts in one call (one C-level parse instead of one per row)."""
    return json.loads("[" + ",".join(texts) + "]")


# -- integrity ---------------------------------------------------------------------------
# Per turn, the rows each table holds for it, in a fixed order (first column: the turn).
TURN_ROWS = {
    "observations": "SELECT t, body, chain FROM observations WHERE t >= ? ORDER BY t",
    "deltas": "SELECT t, body FROM deltas WHERE t >= ? ORDER BY t",
    "artifacts": "SELECT turn, id, type, source_ids, token_span, committed, ord FROM artifacts WHERE turn >= ? "
                 "ORDER BY turn, ord",
    "edges": "SELECT turn, parent, child, ord FROM edges WHERE turn >= ? ORDER BY turn, child, ord",
    "checkpoints": "SELECT boundary, body FROM checkpoints WHERE boundary >= ? ORDER BY boundary",
}
ZERO = "0" * 64


def identity_of(lm, model: str) -> dict:
    """What decides the bits of a stored state besides its log: the model's name and, for a real
    model, its weights, dtype, attention kernel, threads, device and K/V page layout."""
    ident = getattr(lm, "identity", None)
    return {"model": model, **(ident() if callable(ident) else {})}


def stored_settings(store) -> dict:
    """The execution settings a store was run with, as make_runtime's keywords."""
    stored = json.loads(store.meta("identity", "{}"))
    settings = {"dtype": stored.get("dtype", store.meta("dtype", "float32"))}
    if store.meta("model") != "reference":
        settings.update({k: stored[k] for k in ("attn", "threads", "device") if k in stored})
    return settings


def page_digest(identity: dict, key: str, data: bytes) -> str:
    """A K/V page's digest: the model's identity, its key (which names its tokens and context)
    and its bytes. A page whose digest does not match (damaged, or copied from a store of another
    model) is never read: the forget recomputes it from the verified tokens and says so."""
    h = hashlib.sha256(json.dumps(identity, sort_keys=True).encode())
    h.update(f"|{key}|".encode())
    h.update(data)
    return h.hexdigest()


def _turn_tables(db, start: int) -> dict[int, dict[str, str]]:
    """turn → {table: sha256 of its rows of that turn}, for every turn ≥ start that has rows."""
    hashes: dict[int, dict[str, object]] = {}
    for table, sql in TURN_ROWS.items():
        for row in db.execute(sql, (start,)):
            h = hashes.setdefault(row[0], {}).get(table)
            if h is None:
                h = hashes[row[0]][table] = hashlib.sha256()
            h.update(json.dumps(row[1:], separators=(",", ":")).encode())
            h.update(b"\n")
    return {t: {k: h.hexdigest() for k, h in sorted(d.items())} for t, d in hashes.items()}


def _turn_link(prev: str, rows: dict[str, str]) -> str:
    """D_t = sha256(D_{t-1} ‖ the per-table digests of turn t)."""
    return hashlib.sha256((prev + json.dumps(rows, sort_keys=True)).encode()).hexdigest()


def _root(db, head: str) -> str:
    """The store's root: D_T with every meta row (but the root and a forget's intent marker), the
    snapshots, the world ledger and the receipts."""
    h = hashlib.sha256(head.encode())
    for sql in ("SELECT key, value FROM meta WHERE key NOT IN ('root', 'pending_forget') ORDER BY key",
                "SELECT id, env FROM snapshots ORDER BY id",
                "SELECT call_id, tool, args, turn FROM world ORDER BY call_id",
                "SELECT n, body FROM receipts ORDER BY n"):
        h.update(b"#")
        for row in db.execute(sql):
            h.update(json.dumps(row, separators=(",", ":")).encode())
            h.update(b"\n")
    return h.hexdigest()


def _common(prev: tuple, cur: tuple) -> int:
    """Length of the common prefix (states append, except where a compaction rewrites)."""
    n = len(prev)
    if len(cur) >= n and cur[:n] == prev:
        return n
    k = 0
    for a, b in zip(prev, cur):
        if a != b:
            break
        k += 1
    return k


# Tuple layers stored as (kept prefix length, appended tail): a turn costs what it added.
_APPEND = {
    "tokens": (lambda s: s.tokens, lambda x: x, lambda x: x),
    "blocks": (lambda s: s.blocks, lambda b: [b.artifact, b.kind, b.start, b.end, b.prefill], lambda b: Block(*b)),
    "memory": (lambda s: s.memory, lambda m: [m[0], list(m[1])], lambda m: (m[0], tuple(m[1]))),
    "ledger": (lambda s: s.ledger, lambda e: [e.call_id, e.tool, e.args, e.turn],
               lambda e: LedgerEntry(*e)),
}
# Small layers stored whole, and only when they changed.
_WHOLE = {
    "summary": (lambda s: s.summary, lambda v: None if v is None else list(v),
                lambda v: None if v is None else tuple(v)),
    "plan": (lambda s: s.plan, lambda v: [[c.call_id, c.tool, c.args, c.plan] for c in v],
             lambda v: tuple(ToolCall(*c) for c in v)),
    "env": (lambda s: s.env, lambda v: [list(kv) for kv in v], lambda v: tuple(tuple(kv) for kv in v)),
    # the replies this transition decoded: a later forget hands them to the replay as drafts
    "outputs": (lambda s: s.outputs, lambda v: [list(o) for o in v], lambda v: tuple(tuple(o) for o in v)),
}


def _delta_json(prev: State | None, cur: State) -> str:
    """R_t as a delta against R_{t-1} (R_0 against nothing)."""
    d: dict = {"turn": cur.turn}
    for name, (get, enc, _) in _APPEND.items():
        old, new = (() if prev is None else get(prev)), get(cur)
        k = _common(old, new)
        d[name] = [k, [enc(x) for x in new[k:]]]
    for name, (get, enc, _) in _WHOLE.items():
        if prev is None or get(prev) != get(cur):
            d[name] = enc(get(cur))
    return json.dumps(d, separators=(",", ":"))


class _Deltas:
    """The stored deltas of R_0..R_T, decoded into states on demand.

    A forget reads R_c at its splice point and the states after it; building every R_t of a
    long session would cost the square of its length (each holds the whole transcript). The
    running layers are kept as lists, so reading R_0..R_T in order costs what the deltas hold."""

    def __init__(self, bodies: list[str], config: Config, artifacts: tuple[Artifact, ...]) -> None:
        self.bodies, self.config, self.artifacts = bodies, config, artifacts
        self.turns = [a.turn for a in artifacts]
        if self.turns != sorted(self.turns):
            raise StoreError("artifacts are not stored in turn order: the store is corrupt")
        self.cache: dict[int, State] = {}
        self.decoded: list[tuple] = []  # (turn, appended tails, whole layers) of R_0, R_1, …
        self.pos = -1  # the running layers describe R_pos
        self.run: dict = {}

    def __len__(self) -> int:
        return len(self.bodies)

    @staticmethod
    def _decode(d: dict) -> tuple:
        appends = tuple((name, d[name][0], tuple(map(dec, d[name][1]))) for name, (_, _, dec) in _APPEND.items())
        return d["turn"], appends, {name: dec(d[name]) for name, (_, _, dec) in _WHOLE.items() if name in d}

    def get(self, t: int) -> State:
        r = self.cache.get(t)
        if r is not None:
            return r
        if t < self.pos:
            self.pos, self.run = -1, {}
        if len(self.decoded) <= t:  # parse and decode once; walking again only replays the list edits
            self.decoded += map(self._decode, _json_rows(self.bodies[len(self.decoded):t + 1]))
            if len(self.decoded[0][2]) != len(_WHOLE):
                raise StoreError("R_0 is not stored whole: the store is corrupt")
        run = self.run
        for pos in range(self.pos + 1, t + 1):
            turn, appends, wholes = self.decoded[pos]
            run["turn"] = turn
            for name, k, tail in appends:
                lst = run.setdefault(name, [])
                del lst[k:]
                lst += tail
            run.update(wholes)
        self.pos = t
        run = self.run
        r = State(config=self.config, kv=None, turn=run["turn"],
                  **{name: tuple(run[name]) for name in _APPEND}, **{name: run[name] for name in _WHOLE},
                  artifacts=self.artifacts[:bisect.bisect_right(self.turns, run["turn"])])
        self.cache[t] = r
        return r


class StoredStates(Sequence):
    """R_0..R_n of a loaded session (then any states appended since), read from the store's
    deltas only when asked for; it behaves as the tuple it stands for."""

    def __init__(self, deltas: _Deltas, n: int, tail: tuple = ()) -> None:
        self.deltas, self.n, self.tail = deltas, n, tail

    def __len__(self) -> int:
        return self.n + len(self.tail)

    def __getitem__(self, i):
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if start == 0 and step == 1:
                return StoredStates(self.deltas, min(stop, self.n), self.tail[:max(stop - self.n, 0)])
            return tuple(self[j] for j in range(start, stop, step))
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self.deltas.get(i) if i < self.n else self.tail[i - self.n]

    def __add__(self, other):
        return StoredStates(self.deltas, self.n, self.tail + tuple(other))

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __eq__(self, other) -> bool:
        return isinstance(other, (tuple, StoredStates)) and len(self) == len(other) and tuple(self) == tuple(other)

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"StoredStates(R_0..R_{len(self) - 1})"


class StoredCheckpoint(Checkpoint):
    """A stored checkpoint: its offset and manifest are R_boundary's, read only when used."""

    def __init__(self, boundary: int, cache_handle: str, env_snapshot: str, states) -> None:
        for k, v in (("boundary", boundary), ("cache_handle", cache_handle), ("env_snapshot", env_snapshot),
                     ("_states", states)):
            object.__setattr__(self, k, v)

    @property
    def token_offset(self) -> int:
        return len(self._states[self.boundary].tokens)

    @property
    def manifest(self) -> tuple[str, ...]:
        return tuple(map(_ARTIFACT, self._states[self.boundary].blocks))

    def _key(self):
        return (self.boundary, self.token_offset, self.cache_handle, self.env_snapshot, self.manifest)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Checkpoint):
            return NotImplemented
        return self._key() == (other.boundary, other.token_offset, other.cache_handle, other.env_snapshot,
                               other.manifest)

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"Checkpoint(boundary={self.boundary}, cache_handle={self.cache_handle!r}, stored)"


def _sources_json(a: Artifact, artifacts_of) -> str:
    """source_ids relative to the parents' (oracle propagation makes them the parents' union,
    which grows with the session): what it adds and what it drops. `artifacts_of`: id → artifact."""
    added, dropped = artifact_delta(a, artifacts_of)
    return json.dumps({"+": added, "-": dropped})


class StoredArtifact(Artifact):
    """An artifact read back from the store, whose source ids are computed when first read.

    Under oracle propagation each set is its parents' union, so it grows with the session and
    building every set of a loaded session costs the square of its length; a forget reads a
    few (the parents of its first replayed turn). The set is the union of what the stored
    deltas of its ancestors add, down to ancestors whose set is known, where no ancestor on the
    way drops anything; otherwise each ancestor's set is built in order, as the definition says.
    Only the set asked for is kept: read in creation order (as every reader here reads them) a
    set costs what its artifact adds to its parents'; read out of order, each walks its
    ancestry. It equals, hashes and pickles as the `Artifact` it stands for."""

    def __getattr__(self, name):
        if name != "source_ids":
            raise AttributeError(name)
        d = self.__dict__
        out: set = set()
        stack, seen, cone = [self], {id(self)}, []
        while stack:
            x = stack.pop()
            known = x.__dict__.get("source_ids")
            if known is not None:
                out |= known
                continue
            cone.append(x)
            parents, added, dropped = x.known_delta
            out.update(added)
            for q in parents:
                if q is not None and id(q) not in seen:
                    seen.add(id(q))
                    stack.append(q)
        if any(x.known_delta[2] for x in cone):  # a drop: build the sets in order
            for x in sorted(cone, key=lambda x: x.__dict__["ord"]):
                parents, added, dropped = x.known_delta
                sets = {i: q.source_ids for i, q in enumerate(parents) if q is not None}
                x.__dict__["source_ids"] = (inherited_sources(sets, sets) | frozenset(added)) - frozenset(dropped)
            return d["source_ids"]
        d["source_ids"] = frozenset(out)
        return d["source_ids"]

    def __eq__(self, other):
        if not isinstance(other, Artifact):
            return NotImplemented
        return other is self or provenance(self) == provenance(other)

    def __hash__(self) -> int:
        return hash(provenance(self))


def _stored_artifact(ord_: int, aid: str, type_: str, parents: tuple, stored_parents: tuple, added, dropped,
                     span, turn: int, committed: bool) -> StoredArtifact:
    a = object.__new__(StoredArtifact)
    a.__dict__.update(id=aid, type=type_, parents=parents, token_span=span, turn=turn, committed=committed,
                      known_delta=(stored_parents, added, dropped), ord=ord_)
    if not parents:  # an observation field: its set is what it adds
        a.__dict__["source_ids"] = frozenset(added)
    return a


def _checkpoint_json(cp: Checkpoint, s: Session) -> str:
    """A checkpoint without its manifest and offset: both are R_boundary's (see _checkpoint),
    so storing them would grow the store with the square of the session."""
    r = s.states[cp.boundary]
    if cp.token_offset != len(r.tokens) or cp.manifest != tuple(b.artifact for b in r.blocks):
        raise StoreError(f"checkpoint {cp.boundary} does not describe R_{cp.boundary}")
    return json.dumps({"boundary": cp.boundary, "cache_handle": cp.cache_handle, "env_snapshot": cp.env_snapshot})


def _checkpoint_from(d: dict, states) -> Checkpoint:
    return StoredCheckpoint(d["boundary"], d["cache_handle"], d["env_snapshot"], states)


_ARTIFACT = operator.attrgetter("artifact")


class Store:
    """One session store. `Store(path)` opens an existing unsee store and refuses any other file
    before writing a byte to it; `Store(path, create=True)` claims a new path atomically (a second
    creator of the same path gets an error, never the first one's file)."""

    def __init__(self, path: str | Path, create: bool = False) -> None:
        self.path = Path(path)
        self.failpoint = os.environ.get("UNSEE_FAILPOINT")
        self.recovered: str | None = None
        self.damaged_pages: list[tuple[str, int]] = []  # (key, born) of pages that failed their digest
        self.integrity_seconds = 0.0  # spent verifying and sealing digests (the cost of trusting nothing)
        if create:
            try:
                os.close(os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            except FileExistsError:
                raise StoreError(f"{self.path} already exists; pick a new path (a session store is never "
                                 "overwritten)") from None
            except OSError as e:
                raise StoreError(f"cannot create {self.path}: {e.strerror}") from e
        elif not self.path.exists():
            raise StoreError(f"no session store at {self.path}; create one with `unsee run EPISODE --db {self.path}`")
        elif not self.path.is_file():
            raise StoreError(f"{self.path} is not a file; give the path of a session store")
        else:
            self._refuse_foreign()
        self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            # deleted content and freed pages are zeroed: a forget's erasure rests on this
            if self.db.execute("PRAGMA secure_delete = ON").fetchone() != (1,):
                raise StoreError(f"this SQLite ({sqlite3.sqlite_version}) cannot zero deleted content "
                                 "(secure_delete); a forget could not erase what it deletes")
            if create:
                # a new file hands freed pages back after a save (see save); only a file without
                # tables takes the setting
                self.db.execute("PRAGMA auto_vacuum = INCREMENTAL")
                self.db.executescript(SCHEMA + INDEXES)
                self.db.executemany("INSERT INTO meta VALUES (?, ?)",
                                    [("format", str(FORMAT)), ("salt", secrets.token_hex(16))])
            fmt = self.meta("format")
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path} is not a readable unsee store ({e}); restore it from a backup") from e
        if int(fmt) > FORMAT:
            raise StoreError(f"{self.path} was written by a newer unsee (store format {fmt} > {FORMAT}); upgrade unsee")
        if int(fmt) < FORMAT:
            raise StoreError(
                f"{self.path} is a store of format {fmt}, written before tool calls carried JSON arguments "
                f"(format {FORMAT}); its recorded transitions are not the ones this unsee's F makes, so it "
                "cannot be migrated. Re-run its episode into a new store: unsee run EPISODE --db NEW.db")
        if self.meta("pending_forget") is not None:
            self._recover()

    def _refuse_foreign(self) -> None:
        """An existing file that is not an unsee store is refused before anything writes to it."""
        with open(self.path, "rb") as f:
            head = f.read(len(MAGIC))
        if not head:
            raise StoreError(f"{self.path} is an empty file, not an unsee store; nothing was written to it")
        if head != MAGIC:
            raise StoreError(f"{self.path} is not an unsee store (not an SQLite database); nothing was written to it")
        con = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            tables = {n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            fmt = (con.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
                   if "meta" in tables and "observations" in tables else None)
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path} is not a readable unsee store ({e}); restore it from a backup") from e
        finally:
            con.close()
        if fmt is None:
            raise StoreError(f"{self.path} is an SQLite database of another program (tables: "
                             f"{', '.join(sorted(tables)) or 'none'}), not an unsee store; nothing was written to it")

    def _recover(self) -> None:
        """A forget's intent marker: SQLite rolled back the partial write when this connection first
        read; say so and clear it, but only when no forget holds the lock (one that is running
        keeps its marker)."""
        with open(self._lock_path(), "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return
            try:
                pending = self.meta("pending_forget")
                if pending is None:
                    return
                self.recovered = (f"an interrupted forget ({json.loads(pending)['method']}, started "
                                  f"{json.loads(pending)['started']}) was rolled back: the store holds the state "
                                  "before it")
                self.db.execute("DELETE FROM meta WHERE key = 'pending_forget'")
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _lock_path(self) -> str:
        return str(self.path) + ".lock"

    def _point(self, name: str) -> None:
        if self.failpoint == name:
            raise Failpoint(f"failpoint {name}")
        if self.failpoint == name + ":full":  # what SQLite raises when the disk fills up
            raise sqlite3.OperationalError("database or disk is full")
        if self.failpoint == name + ":kill":  # a crash, not an exception: nothing gets to clean up
            os.kill(os.getpid(), 9)
        if self.failpoint == name + ":sleep":  # a slow writer, for the race tests
            time.sleep(float(os.environ.get("UNSEE_FAILPOINT_SLEEP", "1")))

    @contextmanager
    def writer(self):
        """One writer at a time on this store, across processes and threads: a second waits."""
        with open(self._lock_path(), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield self
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    @contextmanager
    def exclusive(self, method: str):
        """Serialize writers on one store (a second waits), and record a forget's intent so that
        an interrupted one is reported on the next open."""
        with self.writer():
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('pending_forget', ?)",
                            (json.dumps({"method": method, "started": time.strftime("%Y-%m-%dT%H:%M:%S")}),))
            try:
                yield self
            except BaseException:  # a clean failure, not a crash: nothing to report on the next open
                self.db.execute("DELETE FROM meta WHERE key = 'pending_forget'")
                raise

    def root(self) -> str | None:
        return self.meta("root")

    @contextmanager
    def snapshot(self):
        """Every read inside sees one committed state of the store (a read transaction)."""
        if self.db.in_transaction:
            yield self
            return
        self.db.execute("BEGIN")
        try:
            yield self
        finally:
            self.db.execute("COMMIT")

    def verify(self, pages: bool = False) -> str:
        """Recompute every digest from the stored rows and compare; the root, or IntegrityError
        naming the first row that does not match. `pages`: also read every K/V page's bytes (a
        forget reads only the pages it restores, and checks each as it reads it)."""
        t0 = time.perf_counter()
        try:
            with self.snapshot():
                return self._verify(pages)
        finally:
            self.integrity_seconds += time.perf_counter() - t0

    def _verify(self, pages: bool) -> str:
        db = self.db
        stored = {t: (json.loads(r), d) for t, r, d in db.execute("SELECT t, rows, digest FROM turns ORDER BY t")}
        computed = _turn_tables(db, 0)
        T = max(stored, default=-1)
        for t in sorted(set(computed) - set(stored)):
            raise IntegrityError(f"{self.path}: rows of turn {t} ({', '.join(computed[t])}) are not covered by the "
                                 "store's digests: the store was altered; restore it from a backup")
        prev = ZERO
        for t in range(T + 1):
            if t not in stored:
                raise IntegrityError(f"{self.path}: the digest of turn {t} is missing; restore the store from a backup")
            rows, digest = stored[t]
            got = computed.get(t, {})
            for table in sorted(set(rows) | set(got)):
                if rows.get(table) != got.get(table):
                    raise IntegrityError(f"{self.path}: the {table} row(s) of turn {t} do not match their digest "
                                         "(altered or damaged); restore the store from a backup")
            prev = _turn_link(prev, rows)
            if prev != digest:
                raise IntegrityError(f"{self.path}: the digest chain breaks at turn {t}; restore the store from a backup")
        root = _root(db, prev)
        if root != self.meta("root"):
            raise IntegrityError(f"{self.path}: the session's settings, snapshots, side-effect ledger or receipts "
                                 "do not match the store's root digest (altered or damaged); restore it from a backup")
        if pages:
            ident = json.loads(self.meta("identity", "{}"))
            self.damaged_pages = [(key, born) for key, born, data, digest in
                                  db.execute("SELECT key, born, data, digest FROM pages ORDER BY born, key")
                                  if page_digest(ident, key, data) != digest]
        return root

    def salt(self) -> str:
        """The store's salt for naming targets, made when the store was (and covered by its root)."""
        s = self.meta("salt")
        if s is None:
            raise IntegrityError(f"{self.path} has no salt: the store was altered; restore it from a backup")
        return s

    def target_digest(self, text: str) -> str:
        """How receipts name a target: a salted digest, never its text."""
        return hashlib.sha256((self.salt() + text).encode()).hexdigest()[:24]

    def close(self) -> None:
        self.db.close()

    def meta(self, key: str, default=None):
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return default if row is None else row[0]

    def has_session(self) -> bool:
        return self.meta("model") is not None

    def save(self, s: Session, model: str, digests: dict, receipt: dict | None = None,
             since: int | None = None, expect: str | None = None) -> str:
        """Write `s`, in one transaction; returns the new root.

        since=None replaces the stored session whole. since=c writes only what follows R_c:
        the caller guarantees that the stored R_0..R_c, o_1..o_c and their artifacts are `s`'s
        (a forget spliced at c, or c = T−1 after one more step). Rows of the old suffix are
        deleted, K/V pages born after c included, with secure_delete on. `expect`: the root the
        caller read `s` from (required with since): if another writer changed the store since,
        nothing is written (ConcurrentChange). A failed write leaves the store as it was."""
        try:
            return self._save(s, model, digests, receipt, since, expect)
        except sqlite3.Error as e:
            raise StoreError(f"could not write {self.path} ({e}); nothing was changed: the store holds the "
                             "session as it was before") from e

    def _save(self, s: Session, model: str, digests: dict, receipt, since, expect) -> str:
        db = self.db
        c = -1 if since is None else since
        if not -1 <= c <= s.T:
            raise StoreError(f"cannot save from R_{c}: the session has T={s.T}")
        # the log is rewritten from o_{k+1} on: k = c, or earlier where a forget changed an
        # observation before the splice point (a part of the target F never read, one standing
        # instead of another source, leaves the twin's log as well)
        k = c
        if receipt is not None and c >= 1:
            for t, body in db.execute("SELECT t, body FROM observations WHERE t <= ? ORDER BY t", (c,)):
                if body != canonical(s.observations[t - 1]):
                    k = t - 1
                    break
        if k >= 0:
            row = db.execute("SELECT chain FROM observations WHERE t = ?", (k,)).fetchone()
            head = "0" * 64 if k == 0 else (row[0] if row else None)
            if head is None:
                raise StoreError(f"{self.path} holds no o_{k} to save after; save the whole session")
        else:
            head = "0" * 64
        bodies = [canonical(o) for o in s.observations[max(k, 0):]]
        hashes = chain_of(bodies, head)
        if c >= 0 and expect is None:
            raise StoreError("a partial save needs the root its session was read from (expect=)")
        identity = identity_of(s.lm, model)
        pages = self._pages_to_write(s, c, identity)
        db.execute("BEGIN IMMEDIATE")
        try:
            self._point("begin")
            if c >= 0:  # inside the write transaction: the store is the one the caller read, unaltered
                if self.root() != expect:
                    raise ConcurrentChange(f"{self.path} was changed by another writer since this session was read "
                                           "from it; nothing was written: open it again and repeat")
                t0 = time.perf_counter()
                self._check_tail()
                self.integrity_seconds += time.perf_counter() - t0
            if c < 0:
                for table in ("observations", "deltas", "artifacts", "edges", "checkpoints", "snapshots", "world",
                              "turns", "pages"):
                    db.execute(f"DELETE FROM {table}")
            else:
                db.execute("DELETE FROM observations WHERE t > ?", (k,))
                for table, col in (("deltas", "t"), ("artifacts", "turn"), ("edges", "turn"),
                                   ("checkpoints", "boundary"), ("pages", "born")):
                    db.execute(f"DELETE FROM {table} WHERE {col} > ?", (c,))
                db.execute("DELETE FROM world")
            self._point("clear")
            meta = {"format": str(FORMAT), "model": model, "policy": s.policy,
                    "config": json.dumps(s.config.to_json()), "digests": json.dumps(digests),
                    "forgotten": json.dumps(sorted(set(json.loads(self.meta("forgotten", "[]")))
                                                   | {self.target_digest(x) for x in s.forgotten})),
                    "chain_head": hashes[-1] if hashes else head, "identity": json.dumps(identity, sort_keys=True),
                    "generation": str(int(self.meta("generation", "0")) + 1)}
            if pages is not None:
                meta["kv_pages"] = json.dumps(pages[0])
            dtype = getattr(getattr(s.lm, "bundle", None), "dtype", None)
            if dtype is not None:  # a forget must run on the same θ: same weights, same dtype
                meta["dtype"] = str(dtype).removeprefix("torch.")
            db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", meta.items())
            db.execute("DELETE FROM meta WHERE key = 'pending_forget'")
            self._point("meta")
            first = max(k, 0) + 1
            db.executemany("INSERT INTO observations VALUES (?, ?, ?)",
                           [(t, b, h) for t, (b, h) in enumerate(zip(bodies, hashes), first)])
            self._point("observations")
            db.executemany("INSERT INTO deltas VALUES (?, ?)",
                           [(t, _delta_json(s.states[t - 1] if t else None, s.states[t]))
                            for t in range(c + 1, s.T + 1)])
            self._point("states")
            final = s.state
            artifacts_of = {a.id: a for a in final.artifacts}
            fresh = [(i, a) for i, a in enumerate(final.artifacts) if a.turn > c]
            db.executemany("INSERT INTO artifacts VALUES (?, ?, ?, ?, ?, ?, ?)",
                           [(a.id, a.type, _sources_json(a, artifacts_of), json.dumps(a.token_span), a.turn,
                             int(a.committed), i) for i, a in fresh])
            self._point("artifacts")
            db.executemany("INSERT INTO edges VALUES (?, ?, ?, ?)",
                           [(p, a.id, k, a.turn) for _, a in fresh for k, p in enumerate(a.parents)])
            self._point("edges")
            db.executemany("INSERT OR REPLACE INTO checkpoints VALUES (?, ?)",
                           [(cp.boundary, _checkpoint_json(cp, s)) for cp in s.checkpoints if cp.boundary >= c])
            self._point("checkpoints")
            used = {cp.env_snapshot for cp in s.checkpoints}
            stored = {k for (k,) in db.execute("SELECT id FROM snapshots")}
            db.executemany("DELETE FROM snapshots WHERE id = ?", [(k,) for k in stored - used])
            db.executemany("INSERT INTO snapshots VALUES (?, ?)",
                           [(k, json.dumps(v)) for k, v in dict(s.snapshots).items() if k in used - stored])
            self._point("snapshots")
            db.executemany("INSERT INTO world VALUES (?, ?, ?, ?)",
                           [(e.call_id, e.tool, e.args, e.turn) for e in s.world])
            self._point("world")
            if pages is not None:
                db.executemany("INSERT OR IGNORE INTO pages VALUES (?, ?, ?, ?)", pages[1])
            self._point("pages")
            if receipt is not None:
                db.execute("INSERT INTO receipts (body) VALUES (?)", (json.dumps({**receipt, "log_head": meta["chain_head"]}),))
            self._point("receipt")
            t0 = time.perf_counter()
            root = self._seal(min(max(c, 0), max(k, 0) + 1))
            self.integrity_seconds += time.perf_counter() - t0
            self._point("seal")
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:  # SQLite may have rolled back already (a full disk does)
                db.execute("ROLLBACK")
            raise
        self._point("commit")
        # secure_delete has zeroed every row the transaction deleted and every page it freed, so
        # no byte of the database file still holds the target (the rollback journal that held
        # the old pages during the transaction is deleted at commit). Give the freed pages back:
        # a cost of what was deleted, where a VACUUM would rewrite the whole file, K/V pages and
        # all. (executescript runs the pragma to the end; execute would free one page.)
        db.executescript("PRAGMA incremental_vacuum;")
        return root

    def _check_tail(self) -> None:
        """Before a partial save: the rows a save keeps but does not re-read (meta, snapshots,
        ledger, receipts, the last turn digest) still hash to the stored root, so a save never
        seals an altered row under a new root. Turn rows altered since the last load stay
        detectable: the rows a save keeps keep their turn digests."""
        last = self.db.execute("SELECT digest FROM turns ORDER BY t DESC LIMIT 1").fetchone()
        if _root(self.db, last[0] if last else ZERO) != self.root():
            raise IntegrityError(f"{self.path}: the session's settings, snapshots, side-effect ledger or receipts "
                                 "do not match the store's root digest (altered or damaged); nothing was written: "
                                 "restore it from a backup")

    def _seal(self, start: int) -> str:
        """Recompute the turn digests from `start` on and the root, inside the save's transaction."""
        db = self.db
        db.execute("DELETE FROM turns WHERE t >= ?", (start,))
        row = db.execute("SELECT digest FROM turns WHERE t = ?", (start - 1,)).fetchone()
        prev = ZERO if start == 0 else row[0]
        tables = _turn_tables(db, start)
        T = db.execute("SELECT MAX(t) FROM deltas").fetchone()[0]
        out = []
        for t in range(start, T + 1):
            rows = tables.get(t, {})
            prev = _turn_link(prev, rows)
            out.append((t, json.dumps(rows, sort_keys=True), prev))
        db.executemany("INSERT INTO turns VALUES (?, ?, ?)", out)
        root = _root(db, prev)
        db.execute("INSERT OR REPLACE INTO meta VALUES ('root', ?)", (root,))
        return root

    def _pages_to_write(self, s: Session, c: int, identity: dict):
        """(layout, rows) of the K/V pages first used by R_{c+1}..R_T and not stored yet, or
        None when the session's engine keeps no pages."""
        lm = s.lm
        if not getattr(lm, "kv_pages", False):
            return None
        layout, rows, seen = lm.page_layout(), [], set()
        for t in range(c + 1, s.T + 1):
            r = s.states[t]
            for key in lm.keys.keys(r.tokens, r.blocks):
                if key not in seen:
                    seen.add(key)
                    rows.append((key, t))
        kept = set()
        if c >= 0:
            ks = [k for k, _ in rows]
            for i in range(0, len(ks), 500):  # those born ≤ c stay stored as they are
                chunk = ks[i:i + 500]
                kept |= {k for (k,) in self.db.execute(
                    f"SELECT key FROM pages WHERE born <= ? AND key IN ({','.join('?' * len(chunk))})", (c, *chunk))}
        out = []
        for key, t in rows:
            if key in kept:
                continue
            page = lm.page(key)
            if page is None:
                raise StoreError(f"the K/V page of a block of R_{t} was never captured; run with kv_pages on "
                                 "from the start, or save with --kv-pages none")
            data = to_bytes(page)
            t0 = time.perf_counter()
            out.append((key, t, data, page_digest(identity, key, data)))
            self.integrity_seconds += time.perf_counter() - t0
        return layout, out

    def page_reader(self, device):
        """key → the stored K/V page as a tensor on `device`, or None."""
        raw = self.meta("kv_pages")
        if raw is None:
            return None
        layout = json.loads(raw)
        ident = json.loads(self.meta("identity", "{}"))
        self.damaged_pages = []

        def read(key: str):
            """The page, or None (then the engine recomputes it) when it is missing or fails its digest."""
            row = self.db.execute("SELECT data, digest, born FROM pages WHERE key = ?", (key,)).fetchone()
            if row is None:
                return None
            t0 = time.perf_counter()
            ok = page_digest(ident, key, row[0]) == row[1]
            self.integrity_seconds += time.perf_counter() - t0
            if not ok:
                self.damaged_pages.append((key, row[2]))
                return None
            return from_bytes(row[0], layout, device)
        return read

    def page_bytes(self) -> tuple[int, int, int]:
        """(pages, bytes, tokens) of the K/V pages stored."""
        n, b = self.db.execute("SELECT COUNT(*), COALESCE(SUM(LENGTH(data)), 0) FROM pages").fetchone()
        raw = self.meta("kv_pages")
        if not n or raw is None:
            return n, b, 0
        lay = json.loads(raw)
        per_token = lay["layers"] * 2 * lay["kv_heads"] * lay["head_dim"] * ITEMSIZE[lay["dtype"]]
        return n, b, b // per_token

    def length(self) -> int:
        """T: the stored observations."""
        return self.db.execute("SELECT COUNT(*) FROM observations").fetchone()[0]

    def sources(self) -> set[str]:
        """Every source id in the stored observation log: the first element of every visible part
        (a part that stands instead of a target has a third element), read by SQLite's JSON
        functions instead of parsing every observation in Python."""
        try:
            return {x for (x,) in self.db.execute(
                "SELECT DISTINCT json_extract(p.value, '$[0]') FROM observations, json_each(observations.body, '$.parts') p"
                " WHERE json_array_length(p.value) < 3 OR json_extract(p.value, '$[2]') IS NULL")}
        except sqlite3.OperationalError:  # an SQLite built without its JSON functions
            return {x for (b,) in self.db.execute("SELECT body FROM observations")
                    for x in Observation.from_json(json.loads(b)).sources}

    def load(self, model_lm, verify: bool = True) -> Session:
        """The stored session, every row verified against the store's digests (one read
        transaction, so a concurrent writer's commit is seen whole or not at all)."""
        if not self.has_session():
            raise StoreError(f"{self.path} holds no session yet")
        if not verify:
            return self._load(model_lm)
        with self.snapshot():
            self.loaded_root = self.verify()
            return self._load(model_lm)

    def _load(self, model_lm) -> Session:
        db = self.db
        config = Config.from_json(json.loads(self.meta("config")))
        parents: dict[str, list] = {}
        for p, c in db.execute("SELECT parent, child FROM edges ORDER BY child, ord"):
            parents.setdefault(c, []).append(p)
        arts, by_id = [], {}
        parsed: dict[str, tuple] = {}  # most artifacts store the same "adds and drops nothing"
        rows = db.execute("SELECT id, type, source_ids, token_span, turn, committed FROM artifacts ORDER BY ord").fetchall()
        spans = _json_rows(r[3] for r in rows)
        for k, ((i, ty, src, _, turn, com), span) in enumerate(zip(rows, spans)):
            ps = tuple(parents.get(i, ()))
            d = parsed.get(src)
            if d is None:
                j = json.loads(src)
                d = parsed[src] = (j, None) if isinstance(j, list) else (None, (tuple(j["+"]), tuple(j["-"])))
            whole, delta = d
            span = None if span is None else tuple(span)
            if whole is not None:  # format 1: stored whole
                a = Artifact(i, ty, ps, frozenset(whole), span, turn, bool(com))
            else:
                a = _stored_artifact(k, i, ty, ps, tuple(by_id.get(p) for p in ps), *delta, span, turn, bool(com))
            arts.append(a)
            by_id[i] = a
        arts = tuple(arts)
        rows = db.execute("SELECT t, body, chain FROM observations ORDER BY t").fetchall()
        obs = tuple(map(Observation.from_json, _json_rows(b for _, b, _ in rows)))
        prev = "0" * 64
        for (t, body, h), o in zip(rows, obs):
            # a row stored canonical hashes as it is; one stored by an earlier unsee, as re-encoded
            if h != link(prev, body) and h != link(prev, canonical(o)):
                raise StoreError(f"{self.path}: the observation log was altered at t={t} (hash chain broken)")
            prev = h
        if rows and rows[-1][2] != self.meta("chain_head"):
            raise StoreError(f"{self.path}: the observation log does not end where the store says (chain head)")
        bodies = [b for (b,) in db.execute("SELECT body FROM deltas ORDER BY t")]
        if len(bodies) != len(obs) + 1:
            raise StoreError(f"{self.path} is corrupt: {len(obs)} observations but {len(bodies)} states")
        deltas = _Deltas(bodies, config, arts)
        states = StoredStates(deltas, len(bodies))
        cps = tuple(_checkpoint_from(d, states) for d in
                    _json_rows(b for (b,) in db.execute("SELECT body FROM checkpoints ORDER BY boundary")))
        snaps = tuple((k, tuple(tuple(x) for x in json.loads(v))) for k, v in
                      db.execute("SELECT id, env FROM snapshots ORDER BY rowid"))
        known = {k for k, _ in snaps}
        for cp in cps:
            if cp.env_snapshot not in known:
                raise StoreError(f"{self.path}: checkpoint {cp.boundary} names environment snapshot "
                                 f"{cp.env_snapshot!r}, which the store does not hold; restore it from a backup")
        world = tuple(LedgerEntry(c, t, a, turn) for c, t, a, turn in
                      db.execute("SELECT call_id, tool, args, turn FROM world ORDER BY turn, call_id"))
        # forgotten sources are kept only as salted digests (see is_forgotten)
        return Session(config, self.meta("policy"), obs, states, cps, snaps, world, frozenset(), lm=model_lm)

    def is_forgotten(self, source: str) -> bool:
        return self.meta("salt") is not None and self.target_digest(source) in json.loads(self.meta("forgotten", "[]"))

    def receipts(self) -> list[dict]:
        return [json.loads(b) for (b,) in self.db.execute("SELECT body FROM receipts ORDER BY n")]


def with_live_cache(s: Session) -> Session:
    """After loading, no cache is resident: mark the live state's cache as absent. Every state
    read from the store already says so, and decoding R_T here would walk the whole session."""
    if isinstance(s.states, StoredStates) and not s.states.tail:  # _Deltas.get builds every state with kv=None
        return s
    return replace(s, states=s.states[:-1] + (replace(s.state, kv=None),))
