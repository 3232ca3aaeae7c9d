"""The session store: one SQLite file holding everything a forget needs after a restart.

Tables: meta (format version, model, policy, config, final digests), observations, states
(each R_t's layers except the cache, which is never persisted: a forget re-materializes it
from the recorded tokens), artifacts and edges (the provenance graph), checkpoints,
snapshots (environment), world (side effects that fired) and receipts.

Everything a save writes goes in one transaction, so a reader sees the old session or the
new one, never a mix.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, replace
from pathlib import Path

from unsee.model.session import Checkpoint, Session, UnseeError
from unsee.model.state import Artifact, Block, Config, LedgerEntry, Observation, State, ToolCall

FORMAT = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS observations (t INTEGER PRIMARY KEY, body TEXT NOT NULL);
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
        self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            self.db.executescript(SCHEMA)
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path} is not a readable unsee store ({e})") from e
        fmt = self.meta("format")
        if fmt is not None and int(fmt) > FORMAT:
            raise StoreError(f"{self.path} was written by a newer unsee (store format {fmt} > {FORMAT}); upgrade unsee")

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
        db.execute("BEGIN IMMEDIATE")
        try:
            for table in ("observations", "states", "artifacts", "edges", "checkpoints", "snapshots", "world"):
                db.execute(f"DELETE FROM {table}")
            meta = {"format": str(FORMAT), "model": model, "policy": s.policy,
                    "config": json.dumps(asdict(s.config)), "digests": json.dumps(digests),
                    "forgotten": json.dumps(sorted(s.forgotten))}
            db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", meta.items())
            db.executemany("INSERT INTO observations VALUES (?, ?)",
                           [(t, json.dumps(o.to_json())) for t, o in enumerate(s.observations, 1)])
            db.executemany("INSERT INTO states VALUES (?, ?)", [(t, _state_json(r)) for t, r in enumerate(s.states)])
            db.executemany("INSERT INTO artifacts VALUES (?, ?, ?, ?, ?, ?, ?)",
                           [(a.id, a.type, json.dumps(sorted(a.source_ids)), json.dumps(a.token_span), a.turn,
                             int(a.committed), i) for i, a in enumerate(final.artifacts)])
            db.executemany("INSERT INTO edges VALUES (?, ?, ?)",
                           [(p, a.id, i) for a in final.artifacts for i, p in enumerate(a.parents)])
            db.executemany("INSERT INTO checkpoints VALUES (?, ?)",
                           [(c.boundary, json.dumps(asdict(c))) for c in s.checkpoints])
            db.executemany("INSERT INTO snapshots VALUES (?, ?)", [(k, json.dumps(v)) for k, v in s.snapshots])
            db.executemany("INSERT INTO world VALUES (?, ?, ?, ?)",
                           [(e.call_id, e.tool, json.dumps(list(e.args)), e.turn) for e in s.world])
            if receipt is not None:
                db.execute("INSERT INTO receipts (body) VALUES (?)", (json.dumps(receipt),))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

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
        obs = tuple(Observation.from_json(json.loads(b)) for (b,) in
                    db.execute("SELECT body FROM observations ORDER BY t"))
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
        return Session(config, self.meta("policy"), obs, states, cps, snaps, world,
                       frozenset(json.loads(self.meta("forgotten", "[]"))), lm=model_lm)

    def receipts(self) -> list[dict]:
        return [json.loads(b) for (b,) in self.db.execute("SELECT body FROM receipts ORDER BY n")]


def with_live_cache(s: Session) -> Session:
    """After loading, no cache is resident: mark the live state's cache as absent."""
    return replace(s, states=s.states[:-1] + (replace(s.state, kv=None),))
