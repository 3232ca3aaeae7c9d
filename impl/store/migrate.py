"""Older store formats brought to the current one in place, each in one transaction: format 1
(every R_t whole) to 2 (per-transition deltas), 2 to 3 (digests over the rows as found)."""

from __future__ import annotations

import json
import secrets

from unsee.impl.store.digests import seal
from unsee.impl.store.encoding import FORMAT, delta_json, sources_json
from unsee.impl.store.errors import StoreError
from unsee.model.state import Artifact, Block, Config, LedgerEntry, State, ToolCall, graph_digest


def state_from_v1(d: dict, config: Config) -> State:
    """A state stored whole by format 1 (read only to migrate)."""
    return State(
        config=config, turn=d["turn"], tokens=tuple(d["tokens"]), kv=None,
        blocks=tuple(Block(*b) for b in d["blocks"]),
        memory=tuple((m[0], tuple(m[1])) for m in d["memory"]),
        summary=None if d["summary"] is None else tuple(d["summary"]),
        plan=tuple(ToolCall(c[0], c[1], tuple(c[2]), c[3]) for c in d["plan"]),
        env=tuple(tuple(kv) for kv in d["env"]),
        ledger=tuple(LedgerEntry(e[0], e[1], tuple(e[2]), e[3]) for e in d["ledger"]),
    )


def migrate_v1(store) -> None:
    """Format 1 → 2 in place, in one transaction: every R_t stored whole becomes a delta."""
    db = store.db
    config = Config(**{k: (tuple(tuple(x) for x in v) if k == "env" else v)
                       for k, v in json.loads(store.meta("config")).items()})
    states = [state_from_v1(json.loads(b), config) for (b,) in db.execute("SELECT body FROM states ORDER BY t")]
    turns = dict(db.execute("SELECT id, turn FROM artifacts"))
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute("ALTER TABLE edges ADD COLUMN turn INTEGER")
        db.executemany("UPDATE edges SET turn = ? WHERE child = ?", [(t, a) for a, t in turns.items()])
        arts = {}
        rel = []
        for aid, src in db.execute("SELECT id, source_ids FROM artifacts ORDER BY ord").fetchall():
            ps = [p for (p,) in db.execute("SELECT parent FROM edges WHERE child = ? ORDER BY ord", (aid,))]
            a = Artifact(aid, "", tuple(ps), frozenset(json.loads(src)), None, 0)
            arts[aid] = a
            rel.append((sources_json(a, arts), aid))
        db.executemany("UPDATE artifacts SET source_ids = ? WHERE id = ?", rel)
        db.execute("DELETE FROM deltas")
        db.executemany("INSERT INTO deltas VALUES (?, ?)",
                       [(t, delta_json(states[t - 1] if t else None, r)) for t, r in enumerate(states)])
        bodies = [(b, json.loads(body)) for b, body in db.execute("SELECT boundary, body FROM checkpoints")]
        for b, d in bodies:
            r = states[b]
            if tuple(d["manifest"]) != tuple(x.artifact for x in r.blocks) or d["token_offset"] != len(r.tokens):
                raise StoreError(f"{store.path}: checkpoint {b} does not describe R_{b}; the store is corrupt")
        db.executemany("UPDATE checkpoints SET body = ? WHERE boundary = ?",
                       [(json.dumps({k: d[k] for k in ("boundary", "cache_handle", "env_snapshot")}), b)
                        for b, d in bodies])
        db.execute("DROP TABLE states")
        db.execute("INSERT OR REPLACE INTO meta VALUES ('format', ?)", (str(FORMAT),))
        # the graph digest became linear in format 2 (source ids relative to the parents'):
        # re-state it for the stored state and its last receipt, saying so in the receipt
        graph = graph_digest(store.load(None, verify=False).state.artifacts)
        digests = {**json.loads(store.meta("digests")), "graph": graph}
        db.execute("INSERT OR REPLACE INTO meta VALUES ('digests', ?)", (json.dumps(digests),))
        last = db.execute("SELECT n, body FROM receipts ORDER BY n DESC LIMIT 1").fetchone()
        if last is not None:
            body = json.loads(last[1])
            body["digests"] = {**body.get("digests", {}), "graph": graph}
            body["migrated"] = "format 1 → 2: graph digest re-stated"
            db.execute("UPDATE receipts SET body = ? WHERE n = ?", (json.dumps(body), last[0]))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("VACUUM")


def migrate_v2(store) -> None:
    """Format 2 → 3 in place, in one transaction: page digests, turn digests, a salt and the
    root, computed over the rows as they are (format 2 kept no digest to check them against)."""
    db = store.db
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute("CREATE TABLE IF NOT EXISTS turns (t INTEGER PRIMARY KEY, rows TEXT NOT NULL, "
                   "digest TEXT NOT NULL)")
        # K/V pages carried no digest, and the model's identity was not recorded: they are dropped
        # (a forget re-materializes the prefix it needs from the log instead)
        db.execute("DROP TABLE IF EXISTS pages")
        db.execute("CREATE TABLE pages (key TEXT PRIMARY KEY, born INTEGER NOT NULL, data BLOB NOT NULL, "
                   "digest TEXT NOT NULL)")
        if store.meta("salt") is None:
            db.execute("INSERT INTO meta VALUES ('salt', ?)", (secrets.token_hex(16),))
        db.execute("INSERT OR REPLACE INTO meta VALUES ('format', ?)", (str(FORMAT),))
        if store.has_session():
            seal(store.db, 0)
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
