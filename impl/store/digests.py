"""The store's digests: the observation log's hash chain, per-turn row digests chained into
D_t = H(D_{t-1} ‖ digests of turn t), the root over D_T and every other row, K/V page digests
bound to the model's identity; recomputing them (`verify_rows`) and writing them (`seal`).

`COVERAGE` lists every column of every table the store writes and which digest covers it; the
queries below are made from it, and a test compares it with the schema, so a column added to a
table and left out of the seal fails. The root and the page digests are the seal: an HMAC under
the store's key, or SHA-256 without one (`unsee.impl.store.keys`)."""

from __future__ import annotations

import hashlib
import json

from unsee.impl.store.encoding import Meta
from unsee.impl.store.errors import IntegrityError
from unsee.impl.store.keys import SealKey
from unsee.model.state import Observation


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


# -- integrity ---------------------------------------------------------------------------
# Every column of every table the store writes: (which digest covers it, its columns, the column
# that names the turn or the order). "turn": a per-turn digest chained into D_t; "root": the root
# over D_T; "page": the page's own digest (a page is derived data, checked when read); "chain": the
# digests themselves (the `turns` table is D_0..D_T and the per-table digests of each turn).
COVERAGE = {
    "observations": ("turn", ("t", "body", "chain"), "t"),
    "deltas": ("turn", ("t", "body"), "t"),
    "artifacts": ("turn", ("turn", "id", "type", "source_ids", "token_span", "committed", "ord"), "turn, ord"),
    "edges": ("turn", ("turn", "parent", "child", "ord"), "turn, child, ord"),
    "checkpoints": ("turn", ("boundary", "body"), "boundary"),
    "meta": ("root", ("key", "value"), "key"),
    "snapshots": ("root", ("id", "env"), "id"),
    "world": ("root", ("call_id", "tool", "args", "turn"), "call_id"),
    "receipts": ("root", ("n", "body"), "n"),
    "pages": ("page", ("key", "born", "data", "digest"), "born, key"),
    "turns": ("chain", ("t", "rows", "digest"), "t"),
}


def _rows_sql(table: str, where: str = "") -> str:
    _, columns, order = COVERAGE[table]
    return f"SELECT {', '.join(columns)} FROM {table}{where} ORDER BY {order}"


# Per turn, the rows each table holds for it, in a fixed order (first column: the turn).
TURN_ROWS = {t: _rows_sql(t, f" WHERE {COVERAGE[t][1][0]} >= ?") for t, (how, _, _) in COVERAGE.items() if how == "turn"}
# The rows the root covers besides D_T (the root itself and nothing else left out).
ROOT_ROWS = tuple(_rows_sql(t, f" WHERE key != '{Meta.ROOT}'" if t == "meta" else "")
                  for t, (how, _, _) in COVERAGE.items() if how == "root")
ZERO = "0" * 64


def identity_of(lm, model: str) -> dict:
    """What decides the bits of a stored state besides its log: the model's name and what the
    engine LM `lm` says of itself (a real model: its weights, dtype, attention kernel, threads,
    device and K/V page layout; the reference: nothing more)."""
    return {"model": model, **lm.identity()}


def stored_settings(store) -> dict:
    """The execution settings a store was run with, as make_runtime's keywords."""
    stored = store.identity
    settings = {"dtype": stored.get("dtype", store.meta(Meta.DTYPE, "float32"))}
    if store.model != "reference":
        settings.update({k: stored[k] for k in ("attn", "threads", "device") if k in stored})
    return settings


def page_digest(key: SealKey, identity: dict, page: str, born: int, data: bytes) -> str:
    """A K/V page's digest under the store's seal: the model's identity, its key (which names its
    tokens and context), the turn it was born at (a forget deletes the pages born after its splice
    point) and its bytes. A page whose digest does not match (damaged, or copied from a store of
    another model) is never read: the forget recomputes it from the verified tokens and says so."""
    return key.digest(json.dumps(identity, sort_keys=True).encode(), f"|{page}|{born}|".encode(), data)


def turn_tables(db, start: int) -> dict[int, dict[str, str]]:
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


def turn_link(prev: str, rows: dict[str, str]) -> str:
    """D_t = sha256(D_{t-1} ‖ the per-table digests of turn t)."""
    return hashlib.sha256((prev + json.dumps(rows, sort_keys=True)).encode()).hexdigest()


def root_digest(db, head: str, key: SealKey) -> str:
    """The store's root, under its seal: D_T with every meta row (but the root), the snapshots, the
    world ledger and the receipts."""
    h = key.hasher()
    h.update(head.encode())
    for sql in ROOT_ROWS:
        h.update(b"#")
        for row in db.execute(sql):
            h.update(json.dumps(row, separators=(",", ":")).encode())
            h.update(b"\n")
    return h.hexdigest()


def verify_rows(db, path, root: str | None, key: SealKey) -> str:
    """Recompute every turn digest and the root from the stored rows and compare them with the
    stored ones and `root` (the stored root); the root, or IntegrityError naming the first row
    that does not match."""
    stored = {t: (json.loads(r), d) for t, r, d in db.execute("SELECT t, rows, digest FROM turns ORDER BY t")}
    computed = turn_tables(db, 0)
    T = max(stored, default=-1)
    for t in sorted(set(computed) - set(stored)):
        raise IntegrityError(f"{path}: rows of turn {t} ({', '.join(computed[t])}) are not covered by the "
                             "store's digests: the store was altered; restore it from a backup")
    prev = ZERO
    for t in range(T + 1):
        if t not in stored:
            raise IntegrityError(f"{path}: the digest of turn {t} is missing; restore the store from a backup")
        rows, digest = stored[t]
        got = computed.get(t, {})
        for table in sorted(set(rows) | set(got)):
            if rows.get(table) != got.get(table):
                raise IntegrityError(f"{path}: the {table} row(s) of turn {t} do not match their digest "
                                     "(altered or damaged); restore the store from a backup")
        prev = turn_link(prev, rows)
        if prev != digest:
            raise IntegrityError(f"{path}: the digest chain breaks at turn {t}; restore the store from a backup")
    digest_root = root_digest(db, prev, key)
    if digest_root != root:
        raise IntegrityError(f"{path}: the session's settings, snapshots, side-effect ledger or receipts "
                             "do not match the store's root digest (altered or damaged); restore it from a backup")
    return digest_root


def check_tail(db, path, root: str | None, key: SealKey) -> None:
    """Before a partial save: the rows a save keeps but does not re-read (meta, snapshots,
    ledger, receipts, the last turn digest) still hash to the stored root, so a save never
    seals an altered row under a new root. Turn rows altered since the last load stay
    detectable: the rows a save keeps keep their turn digests."""
    last = db.execute("SELECT digest FROM turns ORDER BY t DESC LIMIT 1").fetchone()
    if root_digest(db, last[0] if last else ZERO, key) != root:
        raise IntegrityError(f"{path}: the session's settings, snapshots, side-effect ledger or receipts "
                             "do not match the store's root digest (altered or damaged); nothing was written: "
                             "restore it from a backup")


def seal(db, start: int, key: SealKey) -> str:
    """Recompute the turn digests from `start` on and the root, inside the save's transaction."""
    db.execute("DELETE FROM turns WHERE t >= ?", (start,))
    row = db.execute("SELECT digest FROM turns WHERE t = ?", (start - 1,)).fetchone()
    prev = ZERO if start == 0 else row[0]
    tables = turn_tables(db, start)
    T = db.execute("SELECT MAX(t) FROM deltas").fetchone()[0]
    out = []
    for t in range(start, T + 1):
        rows = tables.get(t, {})
        prev = turn_link(prev, rows)
        out.append((t, json.dumps(rows, sort_keys=True), prev))
    db.executemany("INSERT INTO turns VALUES (?, ?, ?)", out)
    root = root_digest(db, prev, key)
    db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (Meta.ROOT, root))
    return root
