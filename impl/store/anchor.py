"""A store against its ledger (`unsee.impl.store.ledger`): the checks every open makes, and the
clean-up of what a run that died left.

`check(store)`: the store's root is the ledger's last (or the last save committed and its record
was lost to a crash: the record is appended now), and no stored part matches a tombstone;
otherwise the store is refused: `RolledBack` (an older state: a restored backup, a rolled-back
file), `LedgerError` (not a state the ledger recorded, or another store's ledger).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import tempfile
from pathlib import Path

from unsee.impl.store import locking
from unsee.impl.store.encoding import Meta
from unsee.impl.store.errors import LedgerError, RolledBack, StoreError
from unsee.impl.store.ledger import Ledger, Record, tombstoned
from unsee.model.state import Observation


def check(store) -> None:
    """Refuse `store` unless it is the state its ledger last recorded (see the module)."""
    records = store.ledger.records()
    sid = store.meta_id
    if records[0].store != sid:
        raise LedgerError(f"{store.ledger.path} is the ledger of another store (id {records[0].store}; "
                          f"{store.final} is {sid}): give this store's ledger with --ledger")
    last, root = records[-1], store.root()
    if root != last.root:
        prev, gen = store.meta(Meta.PREV_ROOT), int(store.meta(Meta.GENERATION, "0"))
        if prev == last.root and gen == last.generation + 1:  # committed; its record lost to a crash
            # parts matching a tombstone in force came in with that save (the state before it was checked)
            again = readmitted(store, tombstoned(records), stored_parts(store))
            records.append(store.ledger.append(sid, gen, "save", root, prev, recovered_tombstones(store), records,
                                               again))
            store.recovered = (f"the last save of {store.final} committed but its ledger record was lost (a crash "
                               "between the two): the record was appended now")
        else:
            raise _not_last(store, records, root)
    held = held_tombstones(store, records)
    if held:
        (source, gen), *_ = held
        raise RolledBack(f"{store.final} holds {len(held)} part(s) forgotten at generation {gen} (a digest of "
                         f"source {source!r} is a tombstone in its ledger): its forgotten data came back. Run "
                         f"`unsee forget --db {store.final} --reapply` to forget them again")


def _not_last(store, records: list[Record], root: str) -> StoreError:
    last = records[-1]
    earlier = next((r for r in records if r.root == root), None)
    if earlier is None:
        return LedgerError(f"{store.final} is not a state its ledger ({store.ledger.path}) recorded: its root is "
                           "none of the ledger's. An altered store, or a ledger of another copy; restore the store "
                           "and its ledger together")
    later = records[earlier.seq + 1:]
    forgets = [r for r in later if r.tombstones]
    steps = sum(r.kind == "step" for r in later)
    return RolledBack(
        f"{store.final} is an older state of this store: generation {earlier.generation} (recorded "
        f"{earlier.time}), where its ledger's last is generation {last.generation} ({last.time}). A restored "
        f"backup or a rolled-back file: {len(forgets)} forget(s) recorded since are not in it. Run `unsee forget "
        f"--db {store.final} --reapply` to re-apply them" + (f"; the {steps} step(s) taken since are lost with the "
                                                             "backup" if steps else ""))


def stored_parts(store):
    """(source, text) of every part of the stored log, in order (read straight from its rows)."""
    for (body,) in store.db.execute("SELECT body FROM observations ORDER BY t"):
        for p in Observation.from_json(json.loads(body)).parts:
            yield p.source, p.text


def held_tombstones(store, records: list[Record]) -> list[tuple[str, int]]:
    """(source, generation of its forget) of every stored part that matches a tombstone."""
    stones = tombstoned(records)
    if not stones:
        return []
    return [(src, stones[t]) for src, text in stored_parts(store) if (t := store.tombstone(src, text)) in stones]


def readmitted(store, stones: dict, parts) -> list[tuple[str, str]]:
    """The tombstones still in force (`stones`: `tombstoned(records)`, or a ledger's `tail().stones`)
    that `parts` ((source, text) pairs) match: forgotten parts that entered the session again (the
    same source, the same text), recorded so that the next open does not take them for a restored backup."""
    if not stones:  # nothing forgotten yet: no part's digest to compute on a save
        return []
    return sorted({t for src, text in parts if (t := store.tombstone(src, text)) in stones})


def recovered_tombstones(store) -> list[tuple[str, str]]:
    """The tombstones of the last save, read back from the store, when it was a forget whose ledger
    record a crash lost (its receipt keeps the forgotten parts' digests)."""
    row = store.db.execute("SELECT body FROM receipts ORDER BY n DESC LIMIT 1").fetchone()
    last = json.loads(row[0]) if row else {}
    return [tuple(t) for t in last.get("tombstones", ())] if last.get("generation") == int(
        store.meta(Meta.GENERATION, "0")) else []


# The first bytes of a rollback journal SQLite would replay. SQLite writes a journal's header with
# these zeroed and fills them in only once the journal is synced, before the database file is
# written: a journal without them never had its pages reach the file, and SQLite ignores it.
JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")


def hot(journal: Path) -> bool:
    """Would SQLite replay this rollback journal into its database (its header is complete)?"""
    try:
        with open(journal, "rb") as f:
            return f.read(len(JOURNAL_MAGIC)) == JOURNAL_MAGIC
    except FileNotFoundError:
        return False


def own_journal(final: Path, journal: Path, ledger: Ledger, opener) -> bool:
    """Would replaying this hot journal bring the store back to a state its ledger recorded? Tried on
    a copy (store and journal in a temporary folder): the copy, replayed, must verify row by row under
    the store's seal and be the ledger's last state (or the save after it whose record a crash lost),
    so the store's bytes stay as they are whatever the journal holds. `opener`: the Store class."""
    try:
        records = ledger.records()
    except StoreError:
        return False
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "store"
        shutil.copyfile(final, copy)
        shutil.copyfile(journal, Path(tmp) / "store-journal")
        try:
            con = sqlite3.connect(copy, isolation_level=None)
            try:
                con.execute("SELECT COUNT(*) FROM meta").fetchone()  # the first read replays a hot journal
            finally:
                con.close()
            if hot(Path(tmp) / "store-journal"):  # SQLite would not replay it: not a journal of this file
                return False
            replayed = opener(copy, key=ledger.key, ledger=ledger.path, anchored=False)
        except (sqlite3.DatabaseError, StoreError):
            return False
        try:
            replayed.verify()
            root, prev, gen, sid = (replayed.root(), replayed.meta(Meta.PREV_ROOT), replayed.generation,
                                    replayed.meta_id)
        except StoreError:
            return False
        finally:
            replayed.close()
    last = records[-1]
    return sid == last.store and (root == last.root or (prev == last.root and gen == last.generation + 1))


def only_creates(ledger: Ledger, store_id: str | None) -> bool:
    """Is `ledger` that of a store `store_id` that was created and never went on (a run that died
    before putting it at its path)?"""
    try:
        records = ledger.records()
    except StoreError:
        return False
    return all(r.store == store_id and r.kind == "create" for r in records)


def remove_stale(partial: Path, ledger: Ledger) -> None:
    """A partial store left by a run that died: remove it, and its ledger if it made one. A partial
    whose run is alive (it holds the store's lock) is refused."""
    with locking.held(partial, wait=False) as got:
        if not got:
            raise StoreError(f"another run is creating this store (at {partial}); wait for it, or pick a new path")
        try:
            con = sqlite3.connect(f"file:{partial}?mode=ro", uri=True, isolation_level=None)
            try:
                row = con.execute("SELECT value FROM meta WHERE key = ?", (Meta.STORE_ID,)).fetchone()
            finally:
                con.close()
        except sqlite3.DatabaseError:
            row = None
        if ledger.exists() and row is not None and only_creates(ledger, row[0]):
            ledger.path.unlink()
        partial.unlink()
        Path(str(partial) + "-journal").unlink(missing_ok=True)
