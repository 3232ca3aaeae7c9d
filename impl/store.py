"""The session store: one SQLite file holding everything a forget needs after a restart.

Tables: meta (format version, model, policy, config, final digests), observations, states
(each R_t's layers except the cache, which is never persisted: a forget re-materializes it
from the recorded tokens), artifacts and edges (the provenance graph), checkpoints,
snapshots (environment), world (side effects that fired) and receipts.

Everything a save writes goes in one transaction, so a reader sees the old session or the
new one, never a mix.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path

from unsee.model.session import Checkpoint, Session, UnseeError
from unsee.model.state import Artifact, Block, Config, LedgerEntry, Observation, State, ToolCall

FORMAT = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS observations (t INTEGER PRIMARY KEY, body TEXT NOT NULL, chain TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS states (t INTEGER PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS artifacts (id TEXT PRIMARY KEY, type TEXT, source_ids TEXT, token_span TEXT,
                                      turn INTEGER, committed INTEGER, ord INTEGER);
CREATE TABLE IF NOT EXISTS edges (parent TEXT, child TEXT, ord INTEGER);
CREATE TABLE IF NOT EXISTS checkpoints (boundary INTEGER PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS snapshots (id TEXT PRIMARY KEY, env TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS world (call_id TEXT PRIMARY KEY, tool TEXT, args TEXT, turn INTEGER);
CREATE TABLE IF NOT EXISTS receipts (n INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT NOT NULL);
"""


class StoreError(UnseeError):
    pass


class Failpoint(RuntimeError):
    """Raised at a named write point when UNSEE_FAILPOINT (or Store.failpoint) names it."""


WRITE_POINTS = ("begin", "clear", "meta", "observations", "states", "artifacts", "edges", "checkpoints",
                "snapshots", "world", "receipt", "commit")


def chain(observations) -> list[str]:
    """The hash chain of the observation log: h_t = sha256(h_{t-1} ‖ o_t)."""
    h, out = "0" * 64, []
    for o in observations:
        h = hashlib.sha256((h + json.dumps(o.to_json(), sort_keys=True)).encode()).hexdigest()
        out.append(h)
    return out


def _state_json(s: State) -> str:
    return json.dumps({
        "turn": s.turn, "tokens": list(s.tokens),
        "blocks": [[b.artifact, b.kind, b.start, b.end, b.prefill] for b in s.blocks],
        "memory": [[m[0], list(m[1])] for m in s.memory],
        "summary": None if s.summary is None else list(s.summary),
        "plan": [[c.call_id, c.tool, list(c.args), c.plan] for c in s.plan],
        "env": [list(kv) for kv in s.env],
        "ledger": [[e.call_id, e.tool, list(e.args), e.turn] for e in s.ledger],
    })


def _state_from(d: dict, config: Config, artifacts: tuple[Artifact, ...]) -> State:
    return State(
        config=config, turn=d["turn"], tokens=tuple(d["tokens"]), kv=None,
        blocks=tuple(Block(*b) for b in d["blocks"]),
        memory=tuple((m[0], tuple(m[1])) for m in d["memory"]),
        summary=None if d["summary"] is None else tuple(d["summary"]),
        plan=tuple(ToolCall(c[0], c[1], tuple(c[2]), c[3]) for c in d["plan"]),
        env=tuple(tuple(kv) for kv in d["env"]),
        ledger=tuple(LedgerEntry(e[0], e[1], tuple(e[2]), e[3]) for e in d["ledger"]),
        artifacts=tuple(a for a in artifacts if a.turn <= d["turn"]),
    )


class Store:
    def __init__(self, path: str | Path, create: bool = False) -> None:
        self.path = Path(path)
        if not create and not self.path.exists():
            raise StoreError(f"no session store at {self.path}; create one with `unsee run EPISODE --db {self.path}`")
        self.failpoint = os.environ.get("UNSEE_FAILPOINT")
        self.recovered: str | None = None
        self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            self.db.execute("PRAGMA secure_delete = ON")  # freed pages are zeroed, not left behind
            self.db.executescript(SCHEMA)
            fmt = self.meta("format")
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path} is not a readable unsee store ({e}); restore it from a backup") from e
        if fmt is not None and int(fmt) > FORMAT:
            raise StoreError(f"{self.path} was written by a newer unsee (store format {fmt} > {FORMAT}); upgrade unsee")
        pending = self.meta("pending_forget")
        if pending is not None:  # SQLite already rolled back the partial write; say so, then clear the intent
            self.recovered = (f"an interrupted forget ({json.loads(pending)['method']}, started "
                              f"{json.loads(pending)['started']}) was rolled back: the store holds the state before it")
            self.db.execute("DELETE FROM meta WHERE key = 'pending_forget'")

    def _point(self, name: str) -> None:
        if self.failpoint == name:
            raise Failpoint(f"failpoint {name}")
        if self.failpoint == name + ":kill":  # a crash, not an exception: nothing gets to clean up
            os.kill(os.getpid(), 9)

    @contextmanager
    def exclusive(self, method: str):
        """Serialize forgets on one store (a second waits), and record the intent so that an
        interrupted one is reported on the next open."""
        with open(str(self.path) + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                self.db.execute("INSERT OR REPLACE INTO meta VALUES ('pending_forget', ?)",
                                (json.dumps({"method": method, "started": time.strftime("%Y-%m-%dT%H:%M:%S")}),))
                yield self
            except Exception:  # a clean failure, not a crash: nothing to report on the next open
                self.db.execute("DELETE FROM meta WHERE key = 'pending_forget'")
                raise
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def salt(self) -> str:
        s = self.meta("salt")
        if s is None:
            s = secrets.token_hex(16)
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('salt', ?)", (s,))
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

    def save(self, s: Session, model: str, digests: dict, receipt: dict | None = None) -> None:
        """Replace the stored session with `s`, in one transaction."""
        final = s.state
        db = self.db
        hashes = chain(s.observations)
        db.execute("BEGIN IMMEDIATE")
        try:
            self._point("begin")
            for table in ("observations", "states", "artifacts", "edges", "checkpoints", "snapshots", "world"):
                db.execute(f"DELETE FROM {table}")
            self._point("clear")
            meta = {"format": str(FORMAT), "model": model, "policy": s.policy,
                    "config": json.dumps(asdict(s.config)), "digests": json.dumps(digests),
                    "forgotten": json.dumps(sorted(set(json.loads(self.meta("forgotten", "[]")))
                                                   | {self.target_digest(x) for x in s.forgotten})),
                    "chain_head": hashes[-1] if hashes else "0" * 64}
            db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", meta.items())
            db.execute("DELETE FROM meta WHERE key = 'pending_forget'")
            self._point("meta")
            db.executemany("INSERT INTO observations VALUES (?, ?, ?)",
                           [(t, json.dumps(o.to_json()), h) for t, (o, h) in enumerate(zip(s.observations, hashes), 1)])
            self._point("observations")
            db.executemany("INSERT INTO states VALUES (?, ?)", [(t, _state_json(r)) for t, r in enumerate(s.states)])
            self._point("states")
            db.executemany("INSERT INTO artifacts VALUES (?, ?, ?, ?, ?, ?, ?)",
                           [(a.id, a.type, json.dumps(sorted(a.source_ids)), json.dumps(a.token_span), a.turn,
                             int(a.committed), i) for i, a in enumerate(final.artifacts)])
            self._point("artifacts")
            db.executemany("INSERT INTO edges VALUES (?, ?, ?)",
                           [(p, a.id, i) for a in final.artifacts for i, p in enumerate(a.parents)])
            self._point("edges")
            db.executemany("INSERT INTO checkpoints VALUES (?, ?)",
                           [(c.boundary, json.dumps(asdict(c))) for c in s.checkpoints])
            self._point("checkpoints")
            used = {c.env_snapshot for c in s.checkpoints}
            db.executemany("INSERT INTO snapshots VALUES (?, ?)",
                           [(k, json.dumps(v)) for k, v in s.snapshots if k in used])
            self._point("snapshots")
            db.executemany("INSERT INTO world VALUES (?, ?, ?, ?)",
                           [(e.call_id, e.tool, json.dumps(list(e.args)), e.turn) for e in s.world])
            self._point("world")
            if receipt is not None:
                db.execute("INSERT INTO receipts (body) VALUES (?)", (json.dumps({**receipt, "log_head": meta["chain_head"]}),))
            self._point("receipt")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self._point("commit")
        db.execute("VACUUM")  # rewrite the file: no page that held the target survives

    def load(self, model_lm) -> Session:
        if not self.has_session():
            raise StoreError(f"{self.path} holds no session yet")
        db = self.db
        config = Config(**{k: (tuple(tuple(x) for x in v) if k == "env" else v)
                           for k, v in json.loads(self.meta("config")).items()})
        parents: dict[str, list] = {}
        for p, c, _ in db.execute("SELECT parent, child, ord FROM edges ORDER BY child, ord"):
            parents.setdefault(c, []).append(p)
        arts = tuple(Artifact(i, ty, tuple(parents.get(i, ())), frozenset(json.loads(src)),
                              None if json.loads(span) is None else tuple(json.loads(span)), turn, bool(com))
                     for i, ty, src, span, turn, com, _ in
                     db.execute("SELECT * FROM artifacts ORDER BY ord"))
        rows = db.execute("SELECT t, body, chain FROM observations ORDER BY t").fetchall()
        obs = tuple(Observation.from_json(json.loads(b)) for _, b, _ in rows)
        for (t, _, h), want in zip(rows, chain(obs)):
            if h != want:
                raise StoreError(f"{self.path}: the observation log was altered at t={t} (hash chain broken)")
        if rows and rows[-1][2] != self.meta("chain_head"):
            raise StoreError(f"{self.path}: the observation log does not end where the store says (chain head)")
        states = tuple(_state_from(json.loads(b), config, arts) for (b,) in
                       db.execute("SELECT body FROM states ORDER BY t"))
        cps = tuple(Checkpoint(**{**d, "manifest": tuple(d["manifest"])}) for d in
                    (json.loads(b) for (b,) in db.execute("SELECT body FROM checkpoints ORDER BY boundary")))
        snaps = tuple((k, tuple(tuple(x) for x in json.loads(v))) for k, v in
                      db.execute("SELECT id, env FROM snapshots ORDER BY rowid"))
        world = tuple(LedgerEntry(c, t, tuple(json.loads(a)), turn) for c, t, a, turn in
                      db.execute("SELECT call_id, tool, args, turn FROM world ORDER BY turn, call_id"))
        if len(states) != len(obs) + 1:
            raise StoreError(f"{self.path} is corrupt: {len(obs)} observations but {len(states)} states")
        # forgotten sources are kept only as salted digests (see is_forgotten)
        return Session(config, self.meta("policy"), obs, states, cps, snaps, world, frozenset(), lm=model_lm)

    def is_forgotten(self, source: str) -> bool:
        return self.meta("salt") is not None and self.target_digest(source) in json.loads(self.meta("forgotten", "[]"))

    def receipts(self) -> list[dict]:
        return [json.loads(b) for (b,) in self.db.execute("SELECT body FROM receipts ORDER BY n")]


def with_live_cache(s: Session) -> Session:
    """After loading, no cache is resident: mark the live state's cache as absent."""
    return replace(s, states=s.states[:-1] + (replace(s.state, kv=None),))
