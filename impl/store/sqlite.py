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

The parts: `encoding` (schema, deltas, lazily decoded states), `digests` (hash chain, turn
digests, root), `locking` (one writer, write points), `errors`. A store of an older format is refused.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import secrets
import shutil
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from unsee.impl.engine.pages import ITEMSIZE, from_bytes, to_bytes
from unsee.impl.store import anchor, locking
from unsee.impl.store.digests import (canonical, chain_of, check_tail, identity_of, link, page_digest, seal,
                                      verify_rows)
from unsee.impl.store.encoding import (CHANGED, FORMAT, INDEXES, MAGIC, SCHEMA, Meta, Deltas, StoredStates, checkpoint_from,
                                       checkpoint_json, delta_json, json_rows, sources_json, stored_artifact)
from unsee.impl.store.errors import ConcurrentChange, IntegrityError, SealKeyError, SideFileError, StoreError
from unsee.impl.store.keys import CHECKSUM, NO_KEY, key_of
from unsee.impl.store.ledger import Ledger, ledger_path
from unsee.model.replay import Session
from unsee.model.errors import UnseeError
from unsee.model.state import Config, LedgerEntry, Observation


INTENT = ".unsee-intent"  # beside a store while a forget runs: what it was (a crash leaves it)
PARTIAL = ".partial"  # beside the path a new store is claimed for, until its first save is complete
SIDE = {"-wal": "a write-ahead log", "-shm": "a write-ahead log's index"}  # unsee never writes these


class Store:
    """One session store. `Store(path)` opens an existing unsee store and refuses any other file
    before writing a byte to it, and any store that does not match its ledger (a restored
    backup, a rolled-back or foreign file: see `unsee.impl.store.ledger`). `Store(path,
    create=True)` claims a new path: it is built at PATH.partial and appears at `path` only once
    its first save is complete (`publish`), so a crash leaves nothing at `path`, and a second
    creator of the same path gets an error, never the first one's file.

    `key`: the seal (a key file's path or a `SealKey`; default `UNSEE_KEY_FILE`, else a checksum).
    `ledger`: the ledger's path (default `UNSEE_LEDGER`, else PATH.ledger). `anchored=False`
    opens a store that does not match its ledger, only to re-apply the recorded forgets."""

    def __init__(self, path: str | Path, create: bool = False, key=None, ledger=None,
                 anchored: bool = True) -> None:
        self.final = Path(os.path.realpath(path))  # a symlink's store: its side files and ledger are the file's
        self.path = self.final
        self.key = key_of(key)
        self.ledger = Ledger(ledger_path(self.final, ledger), self.key)
        self.failpoint = os.environ.get("UNSEE_FAILPOINT")
        self._claim_fd: int | None = None  # the lock a new store's creator holds until it is published
        self.recovered: str | None = None
        self.damaged_pages: list[tuple[str, int]] = []  # (key, born) of pages that failed their digest
        self.integrity_seconds = 0.0  # spent verifying and sealing digests (the cost of trusting nothing)
        if create:
            self.path = self._claim()
        elif not self.final.exists():
            raise StoreError(f"no session store at {self.final}; create one with `unsee run EPISODE --db {self.final}`")
        elif not self.final.is_file():
            raise StoreError(f"{self.final} is not a file; give the path of a session store")
        else:
            self._refuse_side_files()
            self._refuse_foreign()
        try:
            self._connect()
            if create:
                # a new file hands freed pages back after a save (see save); only a file without
                # tables takes the setting
                self.db.execute("PRAGMA auto_vacuum = INCREMENTAL")
                self.db.executescript(SCHEMA + INDEXES)
                self.db.executemany("INSERT INTO meta VALUES (?, ?)",
                                    [(Meta.FORMAT, str(FORMAT)), (Meta.SALT, secrets.token_hex(16)),
                                     (Meta.STORE_ID, secrets.token_hex(8)), (Meta.SEAL, self.key.id)])
            fmt = self.meta(Meta.FORMAT)
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path} is not a readable unsee store ({e}); restore it from a backup") from e
        if int(fmt) > FORMAT:
            raise StoreError(f"{self.path} was written by a newer unsee (store format {fmt} > {FORMAT}); upgrade unsee")
        if int(fmt) < FORMAT:
            raise StoreError(
                f"{self.path} is a store of format {fmt}; this unsee writes format {FORMAT}, and since then "
                + "; ".join(CHANGED[k] for k in range(int(fmt) + 1, FORMAT + 1) if k in CHANGED)
                + ". It cannot be read as this format: re-run its episode into a new store: "
                "unsee run EPISODE --db NEW.db")
        self._check_seal()
        self.anchored = anchored and not create
        if not create:
            self._recover()

    def _connect(self) -> None:
        self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        # deleted content and freed pages are zeroed: a forget's erasure rests on this
        if self.db.execute("PRAGMA secure_delete = ON").fetchone() != (1,):
            raise StoreError(f"this SQLite ({sqlite3.sqlite_version}) cannot zero deleted content "
                             "(secure_delete); a forget could not erase what it deletes")

    # -- claiming, side files, the seal ------------------------------------------------------
    def _claim(self) -> Path:
        """Claim `final` for a new store: refuse an existing path; build at PATH.partial, taken with
        O_EXCL (a partial left by a run that died is removed first, with its ledger if it made one)."""
        if self.final.exists() or self.final.is_symlink():
            raise StoreError(f"{self.final} already exists; pick a new path (a session store is never overwritten)")
        partial = Path(str(self.final) + PARTIAL)
        if partial.exists():
            anchor.remove_stale(partial, self.ledger)
        try:
            fd = os.open(partial, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
        except FileExistsError:
            raise StoreError(f"another run is creating {self.final} (at {partial}); wait for it, or pick a new "
                             "path") from None
        except OSError as e:
            raise StoreError(f"cannot create {self.final}: {e.strerror}") from e
        fcntl.flock(fd, fcntl.LOCK_EX)  # held until it is published: a second creator sees a live claim
        self._claim_fd = fd
        if self.ledger.exists():
            self._release_claim()
            os.unlink(partial)
            raise StoreError(f"{self.ledger.path} is the ledger of another store, but there is no store at "
                             f"{self.final}: remove the ledger (or give --ledger) to start a new store there")
        return partial

    def _release_claim(self) -> None:
        if self._claim_fd is not None:
            os.close(self._claim_fd)  # closing it releases the lock
            self._claim_fd = None

    def publish(self) -> None:
        """Put a new store, its first save complete, at its path (atomically: a link that fails if the
        path was taken meanwhile), and drop the partial name."""
        if self.path == self.final:
            return
        self.db.close()  # SQLite refuses to write through a name that was unlinked: reopen under the new one
        try:
            os.link(self.path, self.final)
        except FileExistsError:
            raise StoreError(f"{self.final} was created by another process meanwhile; this store is at "
                             f"{self.path}") from None
        os.unlink(self.path)
        self.path = self.final
        self._release_claim()
        self._connect()

    def discard(self) -> None:
        """Give back a path claimed by `Store(create=True)` that was never published (its ledger too)."""
        store_id = self.meta_id
        self.close()
        if self.path != self.final:
            self.path.unlink(missing_ok=True)
            Path(str(self.path) + "-journal").unlink(missing_ok=True)
            if self.ledger.exists() and anchor.only_creates(self.ledger, store_id):
                self.ledger.path.unlink()

    def _refuse_side_files(self) -> None:
        """A -wal or -shm beside the store is never unsee's (its stores use a rollback journal): SQLite
        would replay it into the file. A hot -journal (one SQLite would replay) is replayed only once a
        copy shows it brings the store back to a state its ledger recorded (`anchor.own_journal`); one
        whose header was never completed never reached the file, and SQLite leaves it be."""
        for suffix, what in SIDE.items():
            side = Path(str(self.final) + suffix)
            if side.exists():
                raise SideFileError(f"{side} is {what}, which unsee stores never write: it belongs to another "
                                    f"database and SQLite would replay it into {self.final}. Remove it; nothing was "
                                    "written to the store")
        journal = Path(str(self.final) + "-journal")
        if not anchor.hot(journal):
            return
        with locking.held(self.final, wait=False) as alone:
            # a writer holding the lock is mid-transaction: its journal is its own, SQLite replays
            # nothing while it runs, and the journal may be gone the next moment
            if alone and not anchor.own_journal(self.final, journal, self.ledger, Store):
                raise SideFileError(f"{journal} is a rollback journal that does not belong to {self.final} (replaying "
                                    "it would not bring the store back to a state its ledger recorded). Remove it; "
                                    "nothing was written to the store")

    def _check_seal(self) -> None:
        """The store is sealed under the key given (or, without one, with a checksum), or refused."""
        sealed = self.meta(Meta.SEAL)
        if sealed == self.key.id:
            return
        if sealed is None:
            raise IntegrityError(f"{self.path} records no seal: the store was altered; restore it from a backup")
        if not self.key.keyed:
            raise SealKeyError(f"{self.path} is sealed under a key ({sealed}); give it with --key-file PATH "
                               "(or UNSEE_KEY_FILE)")
        if sealed == CHECKSUM:
            raise SealKeyError(f"{self.path} is sealed without a key (a checksum), but a key ({self.key.id}) was "
                               "given: open it without one, or seal it under the key with `unsee rekey`")
        raise SealKeyError(f"{self.path} is sealed under key {sealed}, not the key given ({self.key.id})")

    @property
    def meta_id(self) -> str | None:
        return self.meta(Meta.STORE_ID)

    @property
    def generation(self) -> int:
        """Saves so far."""
        return int(self.meta(Meta.GENERATION, "0"))

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
            fmt = (con.execute("SELECT value FROM meta WHERE key = ?", (Meta.FORMAT,)).fetchone()
                   if "meta" in tables and "observations" in tables else None)
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path} is not a readable unsee store ({e}); restore it from a backup") from e
        finally:
            con.close()
        if fmt is None:
            raise StoreError(f"{self.path} is an SQLite database of another program (tables: "
                             f"{', '.join(sorted(tables)) or 'none'}), not an unsee store; nothing was written to it")

    def _recover(self) -> None:
        """A forget's intent (PATH.unsee-intent) left by a crash: SQLite rolled back the partial write
        when this connection first read; say so and remove the marker, but only when no forget holds
        the lock (one that is running keeps its marker). The store file is not written."""
        marker = Path(str(self.final) + INTENT)
        if not marker.exists():
            return
        with locking.held(self.path, wait=False) as got:
            if not got or not marker.exists():
                return
            try:
                pending = json.loads(marker.read_text())
                what, root = f"{pending['method']}, started {pending['started']}", pending.get("root")
            except (ValueError, KeyError, OSError):
                what, root = "of unknown kind", self.root()
            self.recovered = (f"an interrupted forget ({what}) was rolled back: the store holds the state before it"
                              if root == self.root() else f"an interrupted forget ({what}) had committed before its "
                              "process died: the store holds its result")
            marker.unlink(missing_ok=True)

    def _point(self, name: str) -> None:
        locking.reach(self.failpoint, name)

    @contextmanager
    def writer(self):
        """One writer at a time on this store, across processes and threads: a second waits. (A new
        store's creator holds the lock already, until the store is published.)"""
        if self._claim_fd is not None:
            yield self
            return
        with locking.held(self.path):
            yield self

    @contextmanager
    def exclusive(self, method: str):
        """Serialize writers on one store (a second waits), and record a forget's intent beside the
        store (never in it: a forget that fails leaves the file byte-identical) so that an interrupted
        one is reported on the next open."""
        with self.writer():
            marker = Path(str(self.final) + INTENT)
            marker.write_text(json.dumps({"method": method, "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
                                          "root": self.root()}))
            try:
                yield self
            finally:  # done or failed cleanly: nothing to report on the next open (a crash leaves it)
                marker.unlink(missing_ok=True)

    def root(self) -> str | None:
        return self.meta(Meta.ROOT)

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
        naming the first row that does not match; then the store against its ledger (`anchor.check`:
        RolledBack for an older state, LedgerError for one it never recorded). `pages`: also read every
        K/V page's bytes (a forget reads only the pages it restores, and checks each as it reads it)."""
        t0 = time.perf_counter()
        try:
            with self.snapshot():
                return self._verify(pages)
        finally:
            self.integrity_seconds += time.perf_counter() - t0


    def _verify(self, pages: bool) -> str:
        root = verify_rows(self.db, self.path, self.meta(Meta.ROOT), self.key)
        if self.anchored:  # the rows are the store's own: now, is it the state its ledger last recorded?
            anchor.check(self)
        if pages:
            ident = json.loads(self.meta(Meta.IDENTITY, "{}"))
            self.damaged_pages = [(key, born) for key, born, data, digest in
                                  self.db.execute("SELECT key, born, data, digest FROM pages ORDER BY born, key")
                                  if page_digest(self.key, ident, key, born, data) != digest]
        return root


    def salt(self) -> str:
        """The store's salt for naming targets, made when the store was (and covered by its root)."""
        s = self.meta(Meta.SALT)
        if s is None:
            raise IntegrityError(f"{self.path} has no salt: the store was altered; restore it from a backup")
        return s

    def target_digest(self, text: str) -> str:
        """How receipts name a target: a salted digest, never its text."""
        return hashlib.sha256((self.salt() + text).encode()).hexdigest()[:24]

    def tombstone(self, source: str, text: str) -> tuple[str, str]:
        """What the ledger keeps of a forgotten part: its source id's salted digest and a digest of its
        text under the store's key (or, without one, its salt), never the text."""
        secret = self.key.secret or self.salt().encode()
        return self.target_digest(source), hmac.new(secret, text.encode(), hashlib.sha256).hexdigest()[:32]

    def close(self) -> None:
        self.db.close()
        self._release_claim()

    def meta(self, key: str, default=None):
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return default if row is None else row[0]

    @property
    def model(self) -> str | None:
        """The model the stored session runs on."""
        return self.meta(Meta.MODEL)

    @property
    def policy(self) -> str | None:
        return self.meta(Meta.POLICY)

    @property
    def identity(self) -> dict:
        """What decides the stored states' bits besides the log (`digests.identity_of`)."""
        return json.loads(self.meta(Meta.IDENTITY, "{}"))

    @property
    def digests(self) -> dict:
        """The layer digests of the stored R_T."""
        return json.loads(self.meta(Meta.DIGESTS, "{}"))

    @property
    def page_layout(self) -> dict | None:
        """The K/V page layout, or None when the store keeps no pages."""
        raw = self.meta(Meta.KV_PAGES)
        return None if raw is None else json.loads(raw)

    def page_count(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM pages").fetchone()[0]

    def chain_at(self, t: int) -> str:
        """The observation log's hash chain at o_t (at t = 0: the empty chain)."""
        row = self.db.execute("SELECT chain FROM observations WHERE t = ?", (t,)).fetchone()
        return row[0] if row else "0" * 64

    def has_session(self) -> bool:
        return self.meta(Meta.MODEL) is not None

    def save(self, s: Session, model: str, engine, digests: dict, receipt: dict | None = None,
             since: int | None = None, expect: str | None = None, tombstones=(), kind: str | None = None) -> str:
        """Write `s`, run on `engine` (the engine LM of the runtime that holds it: its identity and
        its K/V pages are stored with it), in one transaction; returns the new root.

        since=None replaces the stored session whole. since=c writes only what follows R_c:
        the caller guarantees that the stored R_0..R_c, o_1..o_c and their artifacts are `s`'s
        (a forget spliced at c, or c = T−1 after one more step). Rows of the old suffix are
        deleted, K/V pages born after c included, with secure_delete on. `expect`: the root the
        caller read `s` from (required with since): if another writer changed the store since,
        nothing is written (ConcurrentChange). A failed write leaves the store as it was.

        Once the transaction commits, the new root is appended to the ledger (with `tombstones`, the
        (id digest, content digest) of each part a forget removed: `tombstone`; and those of forgotten
        parts the written observations bring in again: `anchor.readmitted`)."""
        prev = self.root() or ""
        try:
            root = self._save(s, model, engine, digests, receipt, since, expect)
        except sqlite3.Error as e:
            raise StoreError(f"could not write {self.path} ({e}); nothing was changed: the store holds the "
                             "session as it was before") from e
        kind = kind or ("forget" if receipt is not None else "create" if not prev else "step" if since == s.T - 1
                        else "save")
        stones = self.ledger.tail().stones if prev else {}  # O(1): the chain's end, its last line checked
        written = s.observations[max(since or 0, 0):]
        readmitted = anchor.readmitted(self, stones, ((p.source, p.text) for o in written for p in o.parts)) \
            if stones else ()
        self.ledger.append(self.meta_id, int(self.meta(Meta.GENERATION)), kind, root, prev, tombstones,
                           readmitted=readmitted)
        self._point("ledger")
        self.publish()  # a new store appears at its path once its first save is complete
        return root

    def _save(self, s: Session, model: str, engine, digests: dict, receipt, since, expect) -> str:
        db = self.db
        c = -1 if since is None else since
        if not -1 <= c <= s.T:
            raise StoreError(f"cannot save from R_{c}: the session has T={s.T}")
        if c >= 0 and expect is None:
            raise StoreError("a partial save needs the root its session was read from (expect=)")
        k, head = self._log_from(s, c, receipt)
        bodies = [canonical(o) for o in s.observations[max(k, 0):]]
        hashes = chain_of(bodies, head)
        identity = identity_of(engine, model)
        pages = self._pages_to_write(s, engine, c, identity)
        meta = self._meta_rows(s, model, digests, identity, pages, hashes[-1] if hashes else head)
        db.execute("BEGIN IMMEDIATE")
        try:
            self._point("begin")
            if c >= 0:  # inside the write transaction: the store is the one the caller read, unaltered
                if self.root() != expect:
                    raise ConcurrentChange(f"{self.path} was changed by another writer since this session was read "
                                           "from it; nothing was written: open it again and repeat")
                t0 = time.perf_counter()
                check_tail(self.db, self.path, self.root(), self.key)
                self.integrity_seconds += time.perf_counter() - t0
            self._clear(c, k)
            self._point("clear")
            db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", meta.items())
            self._point("meta")
            self._write_suffix(s, c, k, bodies, hashes)
            if pages is not None:
                db.executemany("INSERT OR IGNORE INTO pages VALUES (?, ?, ?, ?)", pages[1])
            self._point("pages")
            if receipt is not None:
                db.execute("INSERT INTO receipts (body) VALUES (?)",
                           (json.dumps({**receipt, "log_head": meta[Meta.CHAIN_HEAD]}),))
            self._point("receipt")
            t0 = time.perf_counter()
            root = seal(self.db, min(max(c, 0), max(k, 0) + 1), self.key)
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

    def _log_from(self, s: Session, c: int, receipt) -> tuple[int, str]:
        """(k, the chain at o_k): the log is rewritten from o_{k+1} on. k = c, or earlier where a forget
        changed an observation before the splice point (a part of the target F never read, one
        standing instead of another source, leaves the twin's log as well)."""
        k = c
        if receipt is not None and c >= 1:
            for t, body in self.db.execute("SELECT t, body FROM observations WHERE t <= ? ORDER BY t", (c,)):
                if body != canonical(s.observations[t - 1]):
                    k = t - 1
                    break
        if k <= 0:
            return k, "0" * 64
        row = self.db.execute("SELECT chain FROM observations WHERE t = ?", (k,)).fetchone()
        if row is None:
            raise StoreError(f"{self.path} holds no o_{k} to save after; save the whole session")
        return k, row[0]

    def _clear(self, c: int, k: int) -> None:
        """Delete what a save from R_c rewrites (the log from o_{k+1}), or everything (c = −1)."""
        db = self.db
        if c < 0:
            for table in ("observations", "deltas", "artifacts", "edges", "checkpoints", "snapshots", "world",
                          "turns", "pages"):
                db.execute(f"DELETE FROM {table}")
            return
        db.execute("DELETE FROM observations WHERE t > ?", (k,))
        for table, col in (("deltas", "t"), ("artifacts", "turn"), ("edges", "turn"),
                           ("checkpoints", "boundary"), ("pages", "born")):
            db.execute(f"DELETE FROM {table} WHERE {col} > ?", (c,))
        db.execute("DELETE FROM world")

    def _meta_rows(self, s: Session, model: str, digests: dict, identity: dict, pages, chain_head: str) -> dict:
        """The meta rows a save writes (the root apart: it seals them)."""
        forgotten = set(json.loads(self.meta(Meta.FORGOTTEN, "[]"))) | {self.target_digest(x) for x in s.forgotten}
        meta = {Meta.FORMAT: str(FORMAT), Meta.MODEL: model, Meta.POLICY: s.policy,
                Meta.CONFIG: json.dumps(s.config.to_json()), Meta.DIGESTS: json.dumps(digests),
                Meta.FORGOTTEN: json.dumps(sorted(forgotten)), Meta.CHAIN_HEAD: chain_head,
                Meta.IDENTITY: json.dumps(identity, sort_keys=True),
                Meta.GENERATION: str(int(self.meta(Meta.GENERATION, "0")) + 1), Meta.PREV_ROOT: self.root() or ""}
        if pages is not None:
            meta[Meta.KV_PAGES] = json.dumps(pages[0])
        if "dtype" in identity:  # a forget must run on the same LM: same weights, same dtype
            meta[Meta.DTYPE] = identity["dtype"]
        return meta

    def _write_suffix(self, s: Session, c: int, k: int, bodies, hashes) -> None:
        """The rows of o_{k+1}..o_T and R_{c+1}..R_T: log, state deltas, artifacts, edges,
        checkpoints; the snapshots they use; the world ledger whole."""
        db = self.db
        db.executemany("INSERT INTO observations VALUES (?, ?, ?)",
                       [(t, b, h) for t, (b, h) in enumerate(zip(bodies, hashes), max(k, 0) + 1)])
        self._point("observations")
        db.executemany("INSERT INTO deltas VALUES (?, ?)",
                       [(t, delta_json(s.states[t - 1] if t else None, s.states[t])) for t in range(c + 1, s.T + 1)])
        self._point("states")
        final = s.state
        artifacts_of = {a.id: a for a in final.artifacts}
        fresh = [(i, a) for i, a in enumerate(final.artifacts) if a.turn > c]
        db.executemany("INSERT INTO artifacts VALUES (?, ?, ?, ?, ?, ?, ?)",
                       [(a.id, a.type, sources_json(a, artifacts_of), json.dumps(a.token_span), a.turn,
                         int(a.committed), i) for i, a in fresh])
        self._point("artifacts")
        db.executemany("INSERT INTO edges VALUES (?, ?, ?, ?)",
                       [(p, a.id, j, a.turn) for _, a in fresh for j, p in enumerate(a.parents)])
        self._point("edges")
        db.executemany("INSERT OR REPLACE INTO checkpoints VALUES (?, ?)",
                       [(cp.boundary, checkpoint_json(cp, s)) for cp in s.checkpoints if cp.boundary >= c])
        self._point("checkpoints")
        used = {cp.env_snapshot for cp in s.checkpoints}
        stored = {x for (x,) in db.execute("SELECT id FROM snapshots")}
        db.executemany("DELETE FROM snapshots WHERE id = ?", [(x,) for x in stored - used])
        db.executemany("INSERT INTO snapshots VALUES (?, ?)",
                       [(x, json.dumps(v)) for x, v in dict(s.snapshots).items() if x in used - stored])
        self._point("snapshots")
        db.executemany("INSERT INTO world VALUES (?, ?, ?, ?)", [(e.call_id, e.tool, e.args, e.turn) for e in s.world])
        self._point("world")

    def _pages_to_write(self, s: Session, lm, c: int, identity: dict):
        """(layout, rows) of the K/V pages first used by R_{c+1}..R_T and not stored yet, or
        None when the engine `lm` keeps no pages."""
        if not lm.kv_pages:
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
                raise StoreError(f"the K/V page of a block of R_{t} was never captured (or its stored copy no "
                                 "longer passes its digest); run with kv_pages on from the start, or save with "
                                 "--kv-pages none")
            data = to_bytes(page)
            t0 = time.perf_counter()
            out.append((key, t, data, page_digest(self.key, identity, key, t, data)))
            self.integrity_seconds += time.perf_counter() - t0
        return layout, out

    def page_reader(self, device):
        """key → the stored K/V page as a tensor on `device`, or None."""
        raw = self.meta(Meta.KV_PAGES)
        if raw is None:
            return None
        layout = json.loads(raw)
        ident = json.loads(self.meta(Meta.IDENTITY, "{}"))
        self.damaged_pages = []

        def read(key: str):
            """The page, or None (then the engine recomputes it) when it is missing or fails its digest."""
            row = self.db.execute("SELECT data, digest, born FROM pages WHERE key = ?", (key,)).fetchone()
            if row is None:
                return None
            t0 = time.perf_counter()
            ok = page_digest(self.key, ident, key, row[2], row[0]) == row[1]
            self.integrity_seconds += time.perf_counter() - t0
            if not ok:
                self.damaged_pages.append((key, row[2]))
                return None
            return from_bytes(row[0], layout, device)
        return read

    def page_bytes(self) -> tuple[int, int, int]:
        """(pages, bytes, tokens) of the K/V pages stored."""
        n, b = self.db.execute("SELECT COUNT(*), COALESCE(SUM(LENGTH(data)), 0) FROM pages").fetchone()
        raw = self.meta(Meta.KV_PAGES)
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

    def load(self, lm, verify: bool = True) -> Session:
        """The stored session, every row verified against the store's digests (one read
        transaction, so a concurrent writer's commit is seen whole or not at all)."""
        if not self.has_session():
            raise StoreError(f"{self.path} holds no session yet")
        if not verify:
            return self._load(lm)
        with self.snapshot():
            self.loaded_root = self.verify()
            return self._load(lm)

    def _load(self, lm) -> Session:
        db = self.db
        config = Config.from_json(json.loads(self.meta(Meta.CONFIG)))
        parents: dict[str, list] = {}
        for p, c in db.execute("SELECT parent, child FROM edges ORDER BY child, ord"):
            parents.setdefault(c, []).append(p)
        arts, by_id = [], {}
        parsed: dict[str, tuple] = {}  # most artifacts store the same "adds and drops nothing"
        rows = db.execute("SELECT id, type, source_ids, token_span, turn, committed FROM artifacts ORDER BY ord").fetchall()
        spans = json_rows(r[3] for r in rows)
        for k, ((i, ty, src, _, turn, com), span) in enumerate(zip(rows, spans)):
            ps = tuple(parents.get(i, ()))
            delta = parsed.get(src)
            if delta is None:
                j = json.loads(src)
                delta = parsed[src] = (tuple(j["+"]), tuple(j["-"]))
            span = None if span is None else tuple(span)
            a = stored_artifact(k, i, ty, ps, tuple(by_id.get(p) for p in ps), *delta, span, turn, bool(com))
            arts.append(a)
            by_id[i] = a
        arts = tuple(arts)
        rows = db.execute("SELECT t, body, chain FROM observations ORDER BY t").fetchall()
        obs = tuple(map(Observation.from_json, json_rows(b for _, b, _ in rows)))
        prev = "0" * 64
        for t, body, h in rows:
            if h != link(prev, body):
                raise StoreError(f"{self.path}: the observation log was altered at t={t} (hash chain broken)")
            prev = h
        if rows and rows[-1][2] != self.meta(Meta.CHAIN_HEAD):
            raise StoreError(f"{self.path}: the observation log does not end where the store says (chain head)")
        bodies = [b for (b,) in db.execute("SELECT body FROM deltas ORDER BY t")]
        if len(bodies) != len(obs) + 1:
            raise StoreError(f"{self.path} is corrupt: {len(obs)} observations but {len(bodies)} states")
        deltas = Deltas(bodies, config, arts)
        states = StoredStates(deltas, len(bodies))
        cps = tuple(checkpoint_from(d, states) for d in
                    json_rows(b for (b,) in db.execute("SELECT body FROM checkpoints ORDER BY boundary")))
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
        return Session(config, self.meta(Meta.POLICY), obs, states, cps, snaps, world, frozenset(), lm=lm)

    def require_forgettable(self, sources) -> None:
        """Raise UnseeError, naming the source, unless every one of `sources` is in the stored session
        (what a forget, or `unsee show`'s plan of one, needs): one forgotten before and entered again
        since is forgettable again."""
        known = sorted(self.sources())
        for src in sources:
            if src in known:
                continue
            if self.is_forgotten(src):
                raise UnseeError(f"source {src!r} was already forgotten from {self.path}: a forget would touch nothing")
            raise UnseeError(f"source {src!r} never entered this session; known sources: {known}")

    def is_forgotten(self, source: str) -> bool:
        return self.meta(Meta.SALT) is not None and self.target_digest(source) in json.loads(self.meta(Meta.FORGOTTEN, "[]"))

    def receipts(self) -> list[dict]:
        return [json.loads(b) for (b,) in self.db.execute("SELECT body FROM receipts ORDER BY n")]


def with_live_cache(s: Session) -> Session:
    """After loading, no cache is resident: mark the live state's cache as absent. Every state
    read from the store already says so, and decoding R_T here would walk the whole session."""
    if isinstance(s.states, StoredStates) and not s.states.tail:  # Deltas.get builds every state with kv=None
        return s
    return replace(s, states=s.states[:-1] + (replace(s.state, kv=None),))


def copy_store(src, dst) -> None:
    """Copy a store and its ledger (beside it) to a new path, as one more copy of the same session
    (the benchmarks' and the soak's working copies). A backup restored over a store needs no such
    help: its older state is what the ledger refuses (docs/trust.md)."""
    shutil.copyfile(src, dst)
    ledger = Path(str(src) + ".ledger")
    if ledger.exists():
        shutil.copyfile(ledger, str(dst) + ".ledger")


def rekey(path, old=None, new=None, ledger=None) -> dict:
    """Seal the store at `path` (and its ledger) under `new` instead of `old` (keys or key files; None:
    a checksum). Everything is verified under `old` first; the store's seal and page digests are
    rewritten in one transaction, then the ledger is rewritten under `new` (atomically) with a
    `rekey` record. A rekey that was interrupted between the two is finished by running it again."""
    from unsee.impl.store.keys import key_of

    old, new = key_of(old) if old is not None else NO_KEY, key_of(new) if new is not None else NO_KEY
    try:  # a rekey interrupted after the store's transaction: the store under `new`, the ledger under `old`
        half = Store(path, key=new, ledger=ledger, anchored=False)
    except SealKeyError:
        half = None
    if half is not None:
        try:
            records = Ledger(half.ledger.path, old).records()
        except StoreError:
            records = None
        if old.id != new.id and records is not None and records[-1].root == half.meta(Meta.PREV_ROOT):
            return _rekey_ledger(half, records, new)
        half.close()
    store = Store(path, key=old, ledger=ledger)
    store.verify(pages=True)
    records = store.ledger.records()
    ident = store.identity
    with store.writer():
        db = store.db
        db.execute("BEGIN IMMEDIATE")
        try:
            prev = store.root()
            db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                           [(Meta.SEAL, new.id), (Meta.PREV_ROOT, prev), (Meta.GENERATION, str(store.generation + 1))])
            db.executemany("UPDATE pages SET digest = ? WHERE key = ?",
                           [(page_digest(new, ident, k, born, data), k)
                            for k, born, data in db.execute("SELECT key, born, data FROM pages").fetchall()])
            seal(db, 0, new)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        store.key = new
        return _rekey_ledger(store, records, new)


def _rekey_ledger(store, records, new) -> dict:
    store.ledger.rewrite(records, new)
    store.ledger.append(store.meta_id, store.generation, "rekey", store.root(), records[-1].root)
    store.key, store.anchored = new, True
    store.verify()
    out = {"store": str(store.final), "seal": new.id, "ledger": str(store.ledger.path), "records": len(records) + 1}
    store.close()
    return out
