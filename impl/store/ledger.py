"""The ledger: an append-only record, outside the store file, of every state a store was committed
in, and of what each forget removed (tombstones: digests of the forgotten parts, never their text).

A store that is put back to an older state (a restored backup, a rolled-back file) is older than
its ledger's last record; one that holds a forgotten part matches a tombstone. Either is refused
on open, with the command that re-applies the recorded forgets (`unsee forget --db PATH
--reapply`). The ledger is a JSON-lines file (default: beside the store, `PATH.ledger`; `--ledger`
or `UNSEE_LEDGER` puts it on other storage), each record chained to the one before by a digest
under the store's seal (HMAC under its key, or SHA-256), and checked whole whenever it is read.

One record per commit, appended (and flushed to disk) after the store's transaction commits:
{seq, store, generation, kind, root, prev, tombstones, time, seal, mac}. The whole chain is checked
when it is read (`records`: on open and `check`); an append checks only the tail: that the file
still ends with the record this `Ledger` last read or wrote, at the size it had then (`tail`), so a
save costs the same at the 10th record and the 10,000th. A file changed by anyone else since is
read and checked whole again. A crash between the
commit and the append leaves the store one save ahead of its ledger; the next open sees that the
save started from the ledger's last root (the store keeps the root it started from) and appends
the missing record, its tombstones read back from the store's last receipt.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from unsee.impl.store.errors import LedgerError
from unsee.impl.store.keys import SealKey

KINDS = ("create", "step", "save", "forget", "reapply", "rekey", "adopt")


@dataclass(frozen=True)
class Record:
    seq: int
    store: str  # the store's id (meta store_id)
    generation: int  # the store's generation after this commit
    kind: str
    root: str  # the store's root after it
    prev: str  # the root it started from ("" for a new store)
    tombstones: tuple[tuple[str, str], ...] = ()  # (salted id digest, content digest) of each forgotten part
    time: str = ""
    seal: str = ""  # the seal's id: `sha256`, or the key's `hmac-sha256:<id>`
    # tombstones of parts this save brought into the session again (the same source and text, entered
    # after their forget): no longer a sign of a restored backup. Written only when there are some.
    readmitted: tuple[tuple[str, str], ...] = ()
    mac: str = field(default="", compare=False)

    def body(self) -> dict:
        body = {"seq": self.seq, "store": self.store, "generation": self.generation, "kind": self.kind,
                "root": self.root, "prev": self.prev, "tombstones": [list(t) for t in self.tombstones],
                "time": self.time, "seal": self.seal}
        if self.readmitted:
            body["readmitted"] = [list(t) for t in self.readmitted]
        return body


TAIL_READ = 2048  # bytes first read from the end to find the last record (doubled until it holds the whole line)


@dataclass(frozen=True)
class Tail:
    """The end of a checked chain: the next seq, the last mac, the file's size then, the store's id
    and the tombstones in force (`tombstoned`)."""

    seq: int
    mac: str
    size: int
    store: str
    stones: dict
    line: bytes = b""  # the last record's line as written (without its newline)


def ledger_path(store_path, given=None) -> Path:
    """Where a store's ledger is: `given`, else `UNSEE_LEDGER`, else beside the store."""
    chosen = given if given is not None else os.environ.get("UNSEE_LEDGER") or None
    return Path(chosen) if chosen is not None else Path(str(store_path) + ".ledger")


class Ledger:
    """The ledger file at `path`, read and checked under `key` (the store's seal)."""

    def __init__(self, path, key: SealKey) -> None:
        self.path = Path(path)
        self.key = key
        self._tail: Tail | None = None  # the chain's end as last checked whole, and kept up to date by append
        self.bytes_read = 0  # what this Ledger has read of its file (a count for tests, not a limit)

    def exists(self) -> bool:
        return self.path.exists()

    def _mac(self, prev_mac: str, body: dict) -> str:
        return self.key.digest(prev_mac.encode(), b"|", json.dumps(body, sort_keys=True).encode())

    def records(self) -> list[Record]:
        """Every record, each checked against the chain; LedgerError names the first that is not."""
        try:
            raw = self.path.read_bytes()
            text = raw.decode()
            self.bytes_read += len(raw)
        except FileNotFoundError:
            raise LedgerError(f"no ledger at {self.path}: the store's anchor is missing. If it was kept elsewhere, "
                              "give --ledger PATH (or UNSEE_LEDGER); see docs/trust.md") from None
        except OSError as e:
            raise LedgerError(f"cannot read the ledger {self.path} ({e.strerror})") from None
        out, prev = [], ""
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                mac = d.pop("mac")
                rec = Record(d["seq"], d["store"], d["generation"], d["kind"], d["root"], d["prev"],
                             tuple(tuple(t) for t in d["tombstones"]), d["time"], d["seal"],
                             tuple(tuple(t) for t in d.get("readmitted", ())), mac)
            except (ValueError, KeyError, TypeError):
                raise LedgerError(f"the ledger {self.path} is damaged at line {n} (not a ledger record); "
                                  "restore it from where it was copied") from None
            if rec.seq != len(out) or self._mac(prev, rec.body()) != mac:
                why = ("its key is not the one given" if rec.seal != self.key.id else "it was altered")
                raise LedgerError(f"the ledger {self.path} does not check at record {rec.seq} (line {n}): {why}; "
                                  "a ledger is only appended to")
            if out and rec.store != out[0].store:
                raise LedgerError(f"the ledger {self.path} mixes two stores (record {rec.seq})")
            out.append(rec)
            prev = mac
        if not out:
            raise LedgerError(f"the ledger {self.path} is empty: the store's anchor is missing; see docs/trust.md")
        self._tail = Tail(len(out), out[-1].mac, len(raw), out[0].store, tombstoned(out),
                          raw.rstrip(b"\n").rsplit(b"\n", 1)[-1])
        return out

    def tail(self) -> "Tail":
        """The chain's end: from the last whole check, kept by this Ledger's appends, if the file still
        ends with that record at that size (its last line read and compared byte for byte); else read
        and checked whole."""
        t = self._tail
        if t is not None:
            try:
                with open(self.path, "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    n = TAIL_READ
                    while size == t.size:  # read back from the end until the last line is whole
                        f.seek(max(0, size - n))
                        end = f.read()
                        self.bytes_read += len(end)
                        body = end.rstrip(b"\n")
                        if b"\n" in body or len(end) == size:
                            if body.rsplit(b"\n", 1)[-1] == t.line:  # the same record, byte for byte
                                return t
                            break
                        n *= 2
            except (OSError, ValueError):
                pass
        self.records()
        return self._tail

    def append(self, store: str, generation: int, kind: str, root: str, prev: str, tombstones=(),
               records: list[Record] | None = None, readmitted=()) -> Record:
        """Append one record (after `records`, the ledger as last read; else after its tail, `tail`) and
        flush it to disk."""
        if kind not in KINDS:
            raise ValueError(f"ledger record kind {kind!r} is not one of {KINDS}")
        if records is not None:
            seq, last = len(records), records[-1].mac if records else ""
        elif self.exists():
            t = self.tail()
            seq, last = t.seq, t.mac
        else:
            seq, last = 0, ""
        rec = Record(seq, store, generation, kind, root, prev, tuple(tuple(t) for t in tombstones),
                     time.strftime("%Y-%m-%dT%H:%M:%S%z"), self.key.id, tuple(tuple(t) for t in readmitted))
        mac = self._mac(last, rec.body())
        line = (json.dumps({**rec.body(), "mac": mac}, sort_keys=True) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
        done = Record(**{**rec.__dict__, "mac": mac})
        known = self._tail is not None and self._tail.seq == seq and self._tail.mac == last and self._tail.size == size
        if known or (seq == 0 and size == 0):
            stones = dict(self._tail.stones) if known else {}
            for t in done.readmitted:
                stones.pop(tuple(t), None)
            stones.update((tuple(t), generation) for t in done.tombstones)
            self._tail = Tail(seq + 1, mac, size + len(line), store if seq == 0 else self._tail.store, stones,
                              line.rstrip(b"\n"))
        else:
            self._tail = None  # appended after records the caller read: the next use reads the file whole
        return done

    def rewrite(self, records: list[Record], key: SealKey) -> None:
        """The same records chained under `key` (a key rotation), replacing the file atomically."""
        lines, prev = [], ""
        for r in records:
            body = {**r.body(), "seal": key.id}
            mac = key.digest(prev.encode(), b"|", json.dumps(body, sort_keys=True).encode())
            lines.append(json.dumps({**body, "mac": mac}, sort_keys=True) + "\n")
            prev = mac
        tmp = self.path.with_name(self.path.name + ".rekey")
        with open(tmp, "w") as f:
            f.writelines(lines)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self.key = key
        self._tail = None


def tombstoned(records: list[Record]) -> dict[tuple[str, str], int]:
    """(salted id digest, content digest) → the generation of the forget that removed it, for each part
    forgotten and not brought into the session again since (`Record.readmitted`)."""
    out: dict[tuple[str, str], int] = {}
    for r in records:
        for t in r.readmitted:
            out.pop(tuple(t), None)
        out.update((tuple(t), r.generation) for t in r.tombstones)
    return out
