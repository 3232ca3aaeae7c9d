"""How a session is laid out in the store: the schema, each R_t as a delta against R_{t-1},
and the states, artifacts and checkpoints of a loaded session, decoded only when read.

Format 1 stored every R_t whole (quadratic); 2 per-transition deltas and K/V pages; 3 is 2 with
digests (see `digests`). A store of an older format is refused when opened (see `Store`)."""

from __future__ import annotations

import bisect
import json
import operator
from collections.abc import Sequence

from unsee.impl.store.errors import StoreError
from unsee.model.plan import Checkpoint
from unsee.model.replay import Session
from unsee.model.state import (Artifact, Block, Config, LedgerEntry, State, ToolCall, artifact_delta,
                               inherited_sources, provenance)

FORMAT = 8  # 1: every R_t stored whole; 2: per-transition deltas and K/V pages; 3: 2 + digests; 4: JSON tool calls;
# 5: F runs on weights that start on 64-byte boundaries, however the model was loaded; 6: a model turn is one prefill;
# 7: a model turn's forward holds the prompt blocks before it; 8: a seal (keyed or a checksum) and a ledger
CHANGED = {  # what each format changed in F: why an older store's transitions are not this F's
    4: "tool calls carry JSON arguments",
    5: "F runs on weights that start on 64-byte boundaries (a model read from the weights cache did not, and some "
       "of its forwards gave other bits)",
    6: "a model turn's header and reply are one prefill (they were two: other bits, one forward fewer per turn)",
    7: "a model turn's forward also holds the prompt blocks its transition wrote before it (they were a forward "
       "of their own: other bits, one forward fewer per turn)",
    8: "a store is sealed (an HMAC under a key, or a checksum), its K/V page digests cover the turn each was born "
       "at, and a ledger outside the file anchors every commit and every forget's tombstones",
}
MAGIC = b"SQLite format 3\x00"


class Meta:
    """The keys of the meta table, one row each (`root` seals the others: see `digests.seal`)."""

    FORMAT = "format"  # the store format (FORMAT)
    SALT = "salt"  # the salt of the digests that name targets
    MODEL = "model"
    POLICY = "policy"  # the checkpoint policy
    CONFIG = "config"  # the scaffold's Config, as JSON
    DIGESTS = "digests"  # the layer digests of R_T
    FORGOTTEN = "forgotten"  # salted digests of the forgotten sources
    CHAIN_HEAD = "chain_head"  # the observation log's hash chain at o_T
    IDENTITY = "identity"  # what decides the bits besides the log (unsee.impl.store.digests.identity_of)
    GENERATION = "generation"  # saves so far
    KV_PAGES = "kv_pages"  # the K/V page layout, where pages are kept
    DTYPE = "dtype"
    STORE_ID = "store_id"  # a random id, made with the store: its ledger's records name it
    SEAL = "seal"  # the seal's id: `sha256` (a checksum), or `hmac-sha256:<key id>`
    PREV_ROOT = "prev_root"  # the root the last save started from ("" for the first)
    ROOT = "root"  # the digest over everything above and every turn

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


def json_rows(texts) -> list:
    """Parse many JSON texts in one call (one C-level parse instead of one per row)."""
    return json.loads("[" + ",".join(texts) + "]")


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
    "blocks": (lambda s: s.blocks, lambda b: [b.artifact, b.kind, b.start, b.end, b.prefill, b.joined], lambda b: Block(*b)),
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


def delta_json(prev: State | None, cur: State) -> str:
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


class Deltas:
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
            self.decoded += map(self._decode, json_rows(self.bodies[len(self.decoded):t + 1]))
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

    def __init__(self, deltas: Deltas, n: int, tail: tuple = ()) -> None:
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


def sources_json(a: Artifact, artifacts_of) -> str:
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


def stored_artifact(ord_: int, aid: str, type_: str, parents: tuple, stored_parents: tuple, added, dropped,
                     span, turn: int, committed: bool) -> StoredArtifact:
    a = object.__new__(StoredArtifact)
    a.__dict__.update(id=aid, type=type_, parents=parents, token_span=span, turn=turn, committed=committed,
                      known_delta=(stored_parents, added, dropped), ord=ord_)
    if not parents:  # an observation field: its set is what it adds
        a.__dict__["source_ids"] = frozenset(added)
    return a


def checkpoint_json(cp: Checkpoint, s: Session) -> str:
    """A checkpoint without its manifest and offset: both are R_boundary's (see _checkpoint),
    so storing them would grow the store with the square of the session."""
    r = s.states[cp.boundary]
    if cp.token_offset != len(r.tokens) or cp.manifest != tuple(b.artifact for b in r.blocks):
        raise StoreError(f"checkpoint {cp.boundary} does not describe R_{cp.boundary}")
    return json.dumps({"boundary": cp.boundary, "cache_handle": cp.cache_handle, "env_snapshot": cp.env_snapshot})


def checkpoint_from(d: dict, states) -> Checkpoint:
    return StoredCheckpoint(d["boundary"], d["cache_handle"], d["env_snapshot"], states)


_ARTIFACT = operator.attrgetter("artifact")

