"""A runtime that keeps its state in its own SQLite database, with the kit's persistence hooks.

It is `ledger_runtime.py` (F, checkpoints, side effects, compensation) written through to one
SQLite file after every step and every forget: the log, the checkpointed states (which hold the
transcript's words, so the target's text too), the side-effect ledger, and a `meta` table whose
`root` seals every other row of every table. A forget rewrites the log from the first
observation the forget changes (a part of the target standing instead of another source may sit
before τ, even before the splice point) and the states after the splice point, with
`secure_delete` on, so the deleted rows' bytes are zeroed rather than left in free pages.

The hooks (section "What your runtime persists" of docs/verify-your-runtime.md):
`persisted_files()` (the file and anything beside it), `persisted_log()` (the log read back by a
new connection), `persisted_secrets(sources)` (a text as a state's word list stores it: the kit
looks for those bytes too), `persisted_database()` and `verify_persisted(path)` (recompute the seal of the
database at `path`, raise if it differs). The seal is computed over whatever tables and columns
the file has, so a column added later is covered without a change here.

Verify it (from docs/examples):
    PYTHONPATH=. python -m pytest --pyargs unsee.specs.conformance --unsee-runtime=sqlite_runtime:SqliteRuntime -p no:cacheprovider
"""

import hashlib
import json
import shutil
import sqlite3
import tempfile
import weakref
from pathlib import Path

from ledger_runtime import LedgerRuntime

from unsee.model import Observation, Part

SCHEMA = """
CREATE TABLE log (t INTEGER PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE states (boundary INTEGER PRIMARY KEY, state TEXT NOT NULL);
CREATE TABLE world (call_id TEXT PRIMARY KEY, tool TEXT NOT NULL, args TEXT NOT NULL, turn INTEGER NOT NULL);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


def encode(o):
    return json.dumps([o.kind, [[p.source, p.text, p.instead_of] for p in o.parts], o.reply, o.tool, o.compact])


def decode(body):
    kind, parts, reply, tool, compact = json.loads(body)
    return Observation(kind, tuple(Part(s, x, instead_of=i) for s, x, i in parts), reply=reply, tool=tool,
                       compact=compact)


def seal(db):
    """sha256 over every row of every table (the root itself apart), tables and columns as the file has them."""
    h = hashlib.sha256()
    for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"):
        h.update(f"#{table}".encode())
        for row in db.execute(f'SELECT * FROM "{table}" ORDER BY 1'):
            if table == "meta" and row[0] == "root":
                continue
            h.update(json.dumps(row).encode() + b"\n")
    return h.hexdigest()


class SqliteRuntime(LedgerRuntime):
    def __init__(self, config):
        self.folder = Path(tempfile.mkdtemp(prefix="sqlite-runtime-"))
        weakref.finalize(self, shutil.rmtree, str(self.folder), True)
        self.path = self.folder / "session.db"
        self.db = None
        super().__init__(config)

    def reset(self):
        super().reset()
        if self.db is not None:
            self.db.close()
        for f in self.folder.glob("*"):
            f.unlink()
        self.db = sqlite3.connect(self.path, isolation_level=None)
        self.db.execute("PRAGMA secure_delete = ON")
        self.db.executescript(SCHEMA)
        self._save(0, 0)

    def _save(self, k, c):
        """Rewrite the log from o_{k+1} and the states after boundary c; the world whole; seal."""
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        db.execute("DELETE FROM log WHERE t > ?", (k,))
        db.executemany("INSERT INTO log VALUES (?, ?)", [(t, encode(o)) for t, o in enumerate(self.log, 1) if t > k])
        db.execute("DELETE FROM states WHERE boundary > ?", (c,))
        db.executemany("INSERT OR REPLACE INTO states VALUES (?, ?)",
                       [(b, json.dumps(s, sort_keys=True)) for b, s in self.states.items() if b >= c])
        db.execute("DELETE FROM world")
        db.executemany("INSERT INTO world VALUES (?, ?, ?, ?)",
                       [(e["call_id"], e["tool"], json.dumps(e["args"], sort_keys=True), e["turn"]) for e in self.world])
        db.execute("INSERT OR REPLACE INTO meta VALUES ('root', ?)", (seal(db),))
        db.execute("COMMIT")

    def step(self, obs):
        super().step(obs)
        self._save(len(self.log) - 1, len(self.log) - 1)

    def forget(self, sources, method="B7", checkpoint=None):
        before = list(self.log)
        receipt = super().forget(sources, method, checkpoint)
        k = next((t for t, (a, b) in enumerate(zip(before, self.log)) if a != b), len(self.log))
        self._save(k, receipt["checkpoint"])
        return receipt

    # -- what it persists --------------------------------------------------------------------------
    def persisted_files(self):
        return {p.name: p.read_bytes() for p in sorted(self.folder.glob(self.path.name + "*")) if p.is_file()}

    def persisted_log(self):
        db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
        try:
            return [decode(b) for (b,) in db.execute("SELECT body FROM log ORDER BY t")]
        finally:
            db.close()

    def persisted_secrets(self, sources):
        """The sources' texts as this runtime stores them besides verbatim: in a state's word list."""
        z = set(sources)
        return [json.dumps(p.text.split())[1:-1].encode() for o in self.log for p in o.parts if p.source in z]

    def persisted_database(self):
        return str(self.path)

    def verify_persisted(self, path):
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            stored = db.execute("SELECT value FROM meta WHERE key = 'root'").fetchone()
            if stored is None or stored[0] != seal(db):
                raise ValueError(f"{path}: a row does not match the seal")
        finally:
            db.close()
