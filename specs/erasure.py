"""What a runtime persists, judged byte by byte: the erasure statement (Definition 1 on the files a
runtime keeps, next to Theorem 1 in `unsee.specs.statements`, which runs it at every forget) and
the seal obligation (every column of every table of its database enters its seal). Both read the
runtime through the optional hooks of `unsee.specs.persistence`; a runtime without them passes
them vacuously, and the kit's coverage line says so (no "forgotten bytes persisted" target)."""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from pathlib import Path

from unsee.specs import oracle
from unsee.specs.protocol import SpecViolation, canonical


def _require(cond: bool, message: str) -> None:
    if not cond:
        raise SpecViolation(message)


# A byte run shorter than this is no evidence: it occurs by chance in binary data (a digest's hex, a
# float's bytes). Longer secrets are judged in chunks: SQLite splits a large value across pages.
MIN_NEEDLE, CHUNK, CHUNKS_PER_SECRET = 8, 64, 16


def erasure_needles(ob) -> list[tuple[str, bytes]]:
    """(what, bytes) of every byte run that encodes a forgotten part: each forgotten part's text in
    UTF-8 (the kit knows it), and the runtime's own secrets, a long one as up to CHUNKS_PER_SECRET
    chunks of CHUNK bytes spread over it."""
    out = [(f"the text of a part of {src!r}", text.encode()) for src, text in ob.forgotten]
    for i, secret in enumerate(ob.secrets or ()):
        if len(secret) <= CHUNK:
            out.append((f"persisted secret {i}", secret))
            continue
        starts = range(0, len(secret) - CHUNK + 1, CHUNK)
        step = max(1, len(starts) // CHUNKS_PER_SECRET)
        out += [(f"bytes {k}..{k + CHUNK} of persisted secret {i}", secret[k:k + CHUNK]) for k in starts[::step]]
    return [(w, n) for w, n in out if len(n) >= MIN_NEEDLE]


def erasure_nothing_forgotten_is_persisted(ob) -> None:
    """Definition 1 on what the runtime persists: "the target is no longer accessible (the
    counterfactual never contained z)", for every byte the runtime keeps, not only the state it
    exposes. (i) The log read back from what it persists is the stream before the forget and o^{-z}
    after it (the oracle's: a kept prefix holds no part of z either). (ii) After the forget no file
    it persists (store tables, pages, side files, ledger) holds a byte run that encodes a forgotten
    part: its text, or a secret the runtime named for it before the forget (its tokens as stored,
    the K/V rows of blocks in I(z)). A run counts when it was persisted before the forget (else its
    absence proves nothing), is at least MIN_NEEDLE bytes, is in none of the twin's files (a run the
    twin persists too is no trace of z) and is not in the arguments of a call that already fired
    (the world holds those: A3)."""
    if ob.persisted_log_after is not None:
        _require(tuple(ob.persisted_log_before) == tuple(ob.stream),
                f"erasure: before forgetting {list(ob.sources)} the log read back from what the runtime persists "
                f"is not the log it was given ({len(ob.persisted_log_before)} observations against {ob.T})")
        want = oracle.counterfactual(ob.stream, ob.sources)
        got = tuple(ob.persisted_log_after)
        k = next((t for t, (a, b) in enumerate(zip(got, want), 1) if a != b), None)
        _require(got == want, f"erasure: after forgetting {list(ob.sources)} the log read back from what the runtime "
                             f"persists is not o^-z: " + (f"it differs at t={k} ({got[k - 1]} where o^-z has "
                                                          f"{want[k - 1]})" if k else
                                                          f"{len(got)} observations against {len(want)}"))
    if ob.persisted_after is None:
        return
    before, twin = list((ob.persisted_before or {}).values()), list((ob.twin_persisted or {}).values())
    fired = "\n".join(f"{canonical(oracle.decoded(e.args))}\n{e.args}" for e in ob.world_before).encode()
    checked = 0
    for what, needle in erasure_needles(ob):
        if not any(needle in b for b in before) or any(needle in b for b in twin) or needle in fired:
            continue
        checked += 1
        held = sorted(name for name, b in ob.persisted_after.items() if needle in b)
        _require(not held, f"erasure: after forgetting {list(ob.sources)} (τ={ob.tau}, checkpoint "
                          f"{ob.receipt.checkpoint}) the file {held[0] if held else ''!r} the runtime persists still "
                          f"holds {what} ({needle[:40]!r}), which the twin's files lack")
    ob.erasure_checked = checked


def _edited(value):
    """A value of the same kind as `value` that differs from it (one column of one row, edited)."""
    if isinstance(value, bool) or isinstance(value, int):
        return int(value) + 1
    if isinstance(value, float):
        return value + 1.0
    if isinstance(value, bytes):
        b = bytearray(value or b"\0")
        b[len(b) // 2] ^= 0x10
        return bytes(b)
    if isinstance(value, str):
        if not value:
            return "x"
        i = len(value) // 2
        c = value[i]
        return value[:i] + ("1" if c == "0" else "0" if c.isdigit() else "b" if c == "a" else "a") + value[i + 1:]
    return 1  # NULL


def integrity_every_persisted_column_is_sealed(database: str, accepts, pick: int = 0) -> list[tuple[str, str]]:
    """Integrity of what a runtime persists (the obligation under "no byte is trusted until it is
    verified"): every column of every table of its SQLite database enters its seal, so a copy of the
    database with one column of one row edited is refused. `accepts(path)`: does the runtime accept
    the database at `path`? The unedited copy must be accepted (else a refusal proves nothing).
    `pick`: which row of each table to edit (the pick-th, modulo its rows). Returns the (table,
    column) pairs edited; a table with no row is skipped (its columns are not returned)."""
    with tempfile.TemporaryDirectory(prefix="unsee-seal-") as tmp:
        copy = Path(tmp) / "copy.db"
        shutil.copyfile(database, copy)
        _require(accepts(copy), f"seal: the runtime refuses an unedited copy of its database {database}, so a refused "
                               "edit proves nothing; verify_persisted(path) must accept a faithful copy")
        plan = []
        con = sqlite3.connect(copy)
        try:
            for table, cols in schema(copy).items():
                rows = [r for (r,) in con.execute(f'SELECT rowid FROM "{table}" ORDER BY rowid')]
                if rows:
                    plan += [(table, col, rows[pick % len(rows)]) for col in cols]
        finally:
            con.close()
        edited = []
        for table, col, rowid in plan:
            shutil.copyfile(database, copy)
            con = sqlite3.connect(copy)
            try:
                (old,) = con.execute(f'SELECT "{col}" FROM "{table}" WHERE rowid = ?', (rowid,)).fetchone()
                new = _edited(old)
                for attempt in range(4):  # a key column: step past a value another row holds
                    try:
                        con.execute(f'UPDATE "{table}" SET "{col}" = ? WHERE rowid = ?', (new, rowid))
                        break
                    except sqlite3.IntegrityError:
                        new = _edited(new) if not isinstance(new, int) else new + 10 ** (attempt + 3)
                con.commit()
            finally:
                con.close()
            _require(not accepts(copy), f"seal: the runtime accepts its database with {table}.{col} of one row "
                                       f"edited ({old!r:.40} → {new!r:.40}): that column is outside its seal")
            edited.append((table, col))
        return edited


def schema(database) -> dict[str, tuple[str, ...]]:
    """table → its columns, as SQLite reports them, for the database at `database` (its own tables)."""
    con = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        tables = [n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND "
                                            "name NOT LIKE 'sqlite_%' ORDER BY name")]
        return {t: tuple(r[1] for r in con.execute(f'PRAGMA table_info("{t}")')) for t in tables}
    finally:
        con.close()


def columns_with_rows(database) -> tuple[set, set]:
    """(every (table, column) of the SQLite file, those of tables that hold a row)."""
    every = {(t, c) for t, cols in schema(database).items() for c in cols}
    con = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        full = {t for t in {t for t, _ in every} if con.execute(f'SELECT 1 FROM "{t}" LIMIT 1').fetchone()}
    finally:
        con.close()
    return every, {(t, c) for t, c in every if t in full}
