"""Trace validation of a forget: the sequences of engine events the specification allows.

A real engine records what it does while it forgets (`unsee.impl.engine.kv`: the KVEngine's
forwards, crops, resets and page reads; `unsee.impl.engine.lm`: the LM adapter's rebuild
brackets, commits and transition ends). This module states which event logs Algorithm 1 allows and checks a
recorded log against them, as TLA+ trace validation checks the logs of a real system
against its spec. The state-based specs compare what a forget left; the trace check
compares how it got there: a replay that decodes on the contaminated cache and crops
afterwards can leave the right bits and still be wrong.

Positions in events are engine positions: `Begin.base` positions (the template's BOS)
come before context offset 0, so context offset = position − base.

The rules (each violation names one):

- `log`               the log opens with `Begin`; rebuild brackets open and close in pairs.
- `restore-first`     the restore comes before any forward of the replay and before any
                      transition ends.
- `one-restore`       exactly one restore; after it no crop cuts into the context a
                      transition started from, and no rebuild happens except a compaction.
- `restore-offset`    the restore leaves exactly the chosen checkpoint's context
                      (`Checkpoint.token_offset` tokens; 0 for a full reset).
- `checkpoint`        B7 restores the oracle's c* = max{c ≤ τ−1} over the checkpoints held and
                      those the session's policy promises, unless one was forced; B5 and
                      B5′ restore R_0.
- `transitions`       transitions c+1..T end in order, each once: T−c of them (T−τ+1 when
                      c = τ−1), as many as the receipt counts.
- `contiguous`        every forward and every appended page starts where the resident cache
                      ends; no crop past the end.
- `context`           when transition t ends the cache holds exactly R_t's context; a rebuild
                      leaves exactly the tokens it was given.
- `compaction`        a transition whose observation compacts rebuilds its cache once, after
                      it decoded (its summary); no other transition rebuilds.
- `no-fire`           no side effect fires during the forget.
- `commits-accounted` every consequential call the replay commits is recognised as committed
                      (de-duplicated) or reported for compensation by the receipt.
- `restore-accounted` the rows the restore kept or read from pages, and the rows it
                      recomputed, are the receipt's tokens_restored and tokens_rematerialized.
- `decode-accounted`  the tokens of the drafting forwards are the receipt's tokens_decoded.
"""

from __future__ import annotations

from dataclasses import dataclass

from unsee.model.receipt import Receipt
from unsee.model.replay import Session
from unsee.specs import oracle

METHODS = ("B7", "B5", "B5'")
RULES = ("log", "restore-first", "one-restore", "restore-offset", "checkpoint", "transitions", "contiguous",
         "context", "compaction", "no-fire", "commits-accounted", "restore-accounted", "decode-accounted")


# --- events ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Begin:
    """The log of one forget opens: `base` positions precede context offset 0, and the
    engine holds `length` positions."""

    base: int
    length: int


@dataclass(frozen=True)
class Forward:
    """One forward of the model over `n` tokens at positions [start, start + n).
    kind: "prefill" (a block as one forward) or "decode" (drafting: one token fed back, or a model
    turn's header alone, whose logits pick the draft's first token); logits: whether it computed
    the logits of its rows (a prompt block's are never read)."""

    kind: str
    start: int
    n: int
    logits: bool = True


@dataclass(frozen=True)
class Crop:
    """The cache cut to its first `length` positions (the dropped rows overwritten)."""

    length: int


@dataclass(frozen=True)
class Reset:
    """The cache dropped: nothing resident."""


@dataclass(frozen=True)
class Append:
    """Rows appended without compute at [start, start + n): "pages" (K/V pages read back)
    or "rows" (a prefix cache's rows)."""

    how: str
    start: int
    n: int


@dataclass(frozen=True)
class RebuildBegin:
    """A context is about to be rebuilt from recorded tokens (a restore or a compaction)."""


@dataclass(frozen=True)
class RebuildEnd:
    """The rebuild is done; it was given `length` context tokens."""

    length: int


@dataclass(frozen=True)
class Commit:
    """Transition `step` committed the consequential call `call_id` (to its ledger)."""

    step: int
    call_id: str
    tool: str


@dataclass(frozen=True)
class StepEnd:
    """Transition `step` produced R_step, whose context holds `length` tokens."""

    step: int
    length: int


@dataclass(frozen=True)
class Fire:
    """A side effect fired in the world (it entered the session's world)."""

    call_id: str
    tool: str


# --- what a forget must do -------------------------------------------------------------

@dataclass(frozen=True)
class Expectation:
    """What the log of one forget is checked against, from the session before it and its receipt."""

    method: str
    tau: int
    T: int
    checkpoint: int  # c: the boundary the forget restored (the receipt's)
    latest: int  # c* = argmax{c ∈ C : c < τ}
    forced: bool  # a checkpoint was named by the caller (an ablation)
    offset: int  # R_c's context tokens
    compacts: frozenset[int]  # transitions in c+1..T whose observation compacts
    accounted: frozenset[str]  # call ids the receipt de-duplicated or reported for compensation
    transitions: int
    tokens_restored: int
    tokens_rematerialized: int
    tokens_decoded: int


def expectation(before: Session, receipt: Receipt, forced: bool = False) -> Expectation:
    """The expectation for `receipt`, the receipt of a forget run on `before`: τ and the
    splice point c* from the oracle (`unsee.specs.oracle`) over the session's log and
    checkpoints, the counts the receipt claims (checked against the log's events)."""
    c = receipt.checkpoint
    offsets = {cp.boundary: cp.token_offset for cp in before.checkpoints}
    tau = oracle.first_entry(before.observations, receipt.sources)  # the oracle's, never the receipt's
    held = {cp.boundary for cp in before.checkpoints}
    if before.policy in ("every", "events", "start"):  # a checkpoint the policy promises counts even if it is missing
        held |= oracle.promised_checkpoints(before.policy, before.observations)
    latest = oracle.splice_point(held, tau)
    compacts = frozenset(t for t in range(c + 1, before.T + 1) if before.observations[t - 1].compact)
    accounted = frozenset(receipt.deduplicated) | frozenset(x["call_id"] for x in receipt.compensation)
    return Expectation(receipt.method, tau, before.T, c, latest, forced, offsets.get(c, -1), compacts,
                       accounted, receipt.transitions, receipt.work.tokens_restored, receipt.work.tokens_rematerialized,
                       receipt.work.tokens_decoded)


@dataclass(frozen=True)
class Violation:
    rule: str
    at: int  # index of the event in the log (len(log): found at its end)
    message: str

    def __str__(self) -> str:
        return f"[{self.rule}] event {self.at}: {self.message}"


@dataclass(frozen=True)
class ForgetTrace:
    """The recorded log of one forget and what it is checked against."""

    events: tuple
    want: Expectation

    def violations(self) -> list[Violation]:
        return check(self.events, self.want)

    @property
    def ok(self) -> bool:
        return not self.violations()


def check(events, want: Expectation) -> list[Violation]:
    """Every violation of the rules (module docstring) by the event log of one forget: the log is
    walked once (`_Walk`), and each rule judges the walk."""
    if want.method not in METHODS:
        raise ValueError(f"trace validation covers {METHODS}, not {want.method!r}")
    events = tuple(events)
    if not events or not isinstance(events[0], Begin):
        return [Violation("log", 0, "the log does not open with Begin (the engine's BOS and resident length)")]
    walk = _Walk(events, want)
    found = (_log(walk) + _restore_first(walk) + _one_restore(walk, want) + _restore_offset(walk, want)
             + _checkpoint(walk, want) + _transitions(walk, want) + _contiguous(walk) + _context(walk)
             + _compaction(walk, want) + _no_fire(walk) + _commits_accounted(walk, want)
             + _restore_accounted(walk, want) + _decode_accounted(walk, want))
    return sorted(found, key=_reported(len(events)))


# The order violations are reported in: by event, the rules at one event in the order of _AT_EVENT; then
# those found at the log's end, in the order of _AT_END (a rule found twice there in its own order); then
# the commits the receipt does not account for, in the log's order.
_AT_EVENT = ("log", "contiguous", "restore-first", "transitions", "context", "restore-offset", "one-restore",
             "compaction", "no-fire")
_AT_END = ("log", "one-restore", "transitions", "checkpoint", "restore-accounted", "decode-accounted")


def _reported(end: int):
    """The sort key that puts violations in the order they are reported in (above), for a log of `end` events."""
    def key(v: Violation) -> tuple[int, int, int]:
        if v.rule == "commits-accounted":
            return (2, v.at, 0)
        if v.at == end:
            return (1, end, _AT_END.index(v.rule))
        return (0, v.at, _AT_EVENT.index(v.rule))
    return key


# --- the walk: what the log shows ------------------------------------------------------------

_EVENTS = (Forward, Crop, Reset, Append, RebuildBegin, RebuildEnd, Commit, StepEnd, Fire)  # all but Begin


@dataclass
class _Frame:
    """One event of the log (after `Begin`) and the replay's state when it came: where the cache
    ended before it and after it, whether the restore had happened, whether a rebuild was open, the
    transition in progress and the context it started from (`floor`: no crop may go below it after
    the restore). role: what the event did to the context: "restore" (the restore: `offset` context
    tokens left, `how`), "compaction" (a compaction's rebuild), "again" (a restore after the restore)."""

    i: int
    event: object
    length: int
    restored: bool
    rebuilding: bool
    step: int
    floor: int
    after: int = 0
    role: str = ""
    offset: int = 0
    how: str = ""


class _Walk:
    """One pass over the log of a forget: the engine's positions as the events move them, one
    `_Frame` per event, and what the log shows against the receipt: `decoded` (the tokens of
    the drafting forwards) and `account` (the rows the restore kept or read from pages, and those
    it recomputed; B5′: its prefix cache). At the end, `step` is the transition due next and
    `rebuild` is not None if a rebuild never ended."""

    def __init__(self, events: tuple, want: Expectation):
        self.base, self.length = events[0].base, events[0].length
        self.compacts, self.prefix = want.compacts, want.method == "B5'"
        self.restored, self.busy = False, False  # busy: the transition in progress has run a forward
        self.step = want.checkpoint + 1  # the transition in progress
        self.floor = 0
        self.rebuild: list[int] | None = None  # [kept, paged, computed] inside a rebuild bracket
        self.compacted: set[int] = set()
        self.decoded = 0
        self.account = (0, 0)
        self.frames = [self._frame(i, e) for i, e in enumerate(events[1:], 1)]

    def at(self, pos: int) -> str:
        return f"context offset {pos - self.base}"

    def _frame(self, i: int, e) -> _Frame:
        f = _Frame(i, e, self.length, self.restored, self.rebuild is not None, self.step, self.floor)
        for kind, move in ((Forward, self._forward), (Crop, self._crop), (Reset, self._reset), (Append, self._append),
                           (RebuildBegin, self._rebuild_begin), (RebuildEnd, self._rebuild_end),
                           (StepEnd, self._step_end)):
            if isinstance(e, kind):
                move(f, e)
                break
        f.after = self.length
        return f

    def _restore(self, f: _Frame, offset: int, how: str) -> None:
        self.restored, self.floor = True, self.length
        f.role, f.offset, f.how = "restore", offset, how

    def _forward(self, f: _Frame, e: Forward) -> None:
        self.length = e.start + e.n
        if self.rebuild is not None:
            self.rebuild[2] += max(0, self.length - max(e.start, self.base))  # the BOS after a reset is no context row
        elif e.start >= self.base:
            self.busy = True
            if e.kind == "decode":
                self.decoded += e.n

    def _crop(self, f: _Frame, e: Crop) -> None:
        self.length = min(self.length, e.length)
        if self.rebuild is not None:
            self.rebuild[0] = max(0, self.length - self.base)
        elif not self.restored:
            self._restore(f, self.length - self.base, "a crop of the resident cache")
        elif self.length < self.floor:
            f.role = "again"

    def _reset(self, f: _Frame, e: Reset) -> None:
        self.length = 0
        if self.rebuild is not None:
            self.rebuild[0] = 0
        elif not self.restored:
            self._restore(f, 0, "an empty cache")
            self.floor = self.base
        else:
            f.role = "again"

    def _append(self, f: _Frame, e: Append) -> None:
        self.length = e.start + e.n
        if self.rebuild is not None:
            self.rebuild[1] += e.n
        elif self.restored:
            self.busy = True

    def _rebuild_begin(self, f: _Frame, e: RebuildBegin) -> None:
        self.rebuild = [max(0, self.length - self.base), 0, 0]

    def _rebuild_end(self, f: _Frame, e: RebuildEnd) -> None:
        if self.rebuild is None:
            return
        kept, paged, computed = self.rebuild
        self.rebuild = None
        if not self.restored and self.prefix:
            self.account = (kept + paged, computed)  # B5′'s prefix cache, read back before the reset
        elif not self.restored:
            self._restore(f, self.length - self.base,
                          f"a rebuild: {kept} rows kept, {paged} read from pages, {computed} recomputed")
            self.account = (kept + paged, computed)
        elif self.busy and self.step in self.compacts and self.step not in self.compacted:
            self.compacted.add(self.step)
            self.floor = self.length
            f.role = "compaction"
        else:
            f.role = "again"

    def _step_end(self, f: _Frame, e: StepEnd) -> None:
        self.step, self.busy, self.floor = e.step + 1, False, self.length


# --- the rules: what the walk may not show ---------------------------------------------------

def _log(walk: _Walk) -> list[Violation]:
    """`log`: rebuild brackets open and close in pairs; every event is one of the log's."""
    out = []
    for f in walk.frames:
        if isinstance(f.event, RebuildBegin) and f.rebuilding:
            out.append(Violation("log", f.i, "a rebuild began inside another"))
        elif isinstance(f.event, RebuildEnd) and not f.rebuilding:
            out.append(Violation("log", f.i, "a rebuild ended that never began"))
        elif not isinstance(f.event, _EVENTS):
            out.append(Violation("log", f.i, f"an event of unknown type {type(f.event).__name__}"))
    if walk.rebuild is not None:
        out.append(Violation("log", len(walk.frames) + 1, "a rebuild never ended"))
    return out


def _restore_first(walk: _Walk) -> list[Violation]:
    """`restore-first`: no forward of the replay, appended row or transition's end before the restore."""
    out = []
    for f in (f for f in walk.frames if not f.restored):
        e = f.event
        if isinstance(e, Forward) and not f.rebuilding and e.start >= walk.base:
            out.append(Violation("restore-first", f.i, f"a {e.kind} at {walk.at(e.start)} ran before the restore: "
                                                       "the replay's first forward must follow the restore"))
        elif isinstance(e, Append) and not f.rebuilding:
            out.append(Violation("restore-first", f.i, f"{e.n} {e.how} row(s) appended at {walk.at(e.start)} "
                                                       "before the restore"))
        elif isinstance(e, StepEnd):
            out.append(Violation("restore-first", f.i, f"transition {e.step} ended before any restore"))
    return out


def _one_restore(walk: _Walk, want: Expectation) -> list[Violation]:
    """`one-restore`: exactly one restore; after it no crop into the context a transition started
    from, no reset, and no rebuild but a compaction."""
    out, compacted = [], set()
    for f in walk.frames:
        e, step = f.event, f.step
        if f.role == "compaction":
            compacted.add(step)
        if f.role != "again":
            continue
        if isinstance(e, Crop):
            message = (f"a crop to {walk.at(f.after)} in transition {step} cut into the context it started from "
                       f"({f.floor - walk.base} tokens): only the restore and a compaction may")
        elif isinstance(e, Reset):
            message = f"the cache was emptied in transition {step}, after the restore"
        else:
            why = ("which already compacted" if step in compacted else "before it ran a forward"
                   if step in want.compacts else "whose observation does not compact")
            message = (f"a rebuild of {e.length} tokens in transition {step}, {why}: after the restore only a "
                       "compaction rebuilds")
        out.append(Violation("one-restore", f.i, message))
    if not any(f.role in ("restore", "again") for f in walk.frames):
        out.append(Violation("one-restore", len(walk.frames) + 1,
                             "no restore: the replay must start from the checkpoint's cache"))
    return out


def _restore_offset(walk: _Walk, want: Expectation) -> list[Violation]:
    """`restore-offset`: the restore leaves exactly the chosen checkpoint's context."""
    return [Violation("restore-offset", f.i, f"the restore ({f.how}) left {f.offset} context tokens, but "
                                             f"checkpoint R_{want.checkpoint} holds {want.offset}")
            for f in walk.frames if f.role == "restore" and f.offset != want.offset]


def _checkpoint(walk: _Walk, want: Expectation) -> list[Violation]:
    """`checkpoint`: B7 restores the oracle's c* (unless one was forced); B5 and B5′ restore R_0."""
    end, c = len(walk.frames) + 1, want.checkpoint
    if want.method != "B7" and c != 0:
        return [Violation("checkpoint", end, f"a full reset ({want.method}) starts from R_0, not R_{c}")]
    if want.method == "B7" and not want.forced and c != want.latest:
        return [Violation("checkpoint", end, f"restored R_{c}, but the latest checkpoint before τ={want.tau} is "
                                             f"R_{want.latest}")]
    return []


def _transitions(walk: _Walk, want: Expectation) -> list[Violation]:
    """`transitions`: c+1..T end in order, each once, as many as the receipt counts."""
    end, c = len(walk.frames) + 1, want.checkpoint
    out = [Violation("transitions", f.i, f"transition {f.event.step} ended where transition {f.step} was due: the "
                                         f"replay runs {c + 1}..{want.T} in order, each once")
           for f in walk.frames if isinstance(f.event, StepEnd) and f.event.step != f.step]
    if walk.step != want.T + 1:
        out.append(Violation("transitions", end, f"the replay stopped after transition {walk.step - 1}; it runs "
                                                 f"{c + 1}..{want.T} ({want.T - c} transitions)"))
    if want.transitions != want.T - c:
        out.append(Violation("transitions", end, f"the receipt counts {want.transitions} transitions; "
                                                 f"{c + 1}..{want.T} are {want.T - c}"))
    return out


def _contiguous(walk: _Walk) -> list[Violation]:
    """`contiguous`: every forward and appended page starts where the cache ends; no crop past the end."""
    out = []
    for f in walk.frames:
        e = f.event
        if isinstance(e, (Forward, Append)) and e.start != f.length:
            what = f"a {e.kind} of {e.n} token(s)" if isinstance(e, Forward) else f"{e.n} {e.how} row(s) appended"
            out.append(Violation("contiguous", f.i, f"{what} at {walk.at(e.start)}, but the cache ends at "
                                                    f"{walk.at(f.length)}"))
        elif isinstance(e, Crop) and e.length > f.length:
            out.append(Violation("contiguous", f.i, f"a crop to {e.length} positions of a cache of {f.length}"))
    return out


def _context(walk: _Walk) -> list[Violation]:
    """`context`: a transition's end finds R_t's context; a rebuild leaves the tokens it was given."""
    out = []
    for f in walk.frames:
        e = f.event
        if isinstance(e, RebuildEnd) and f.rebuilding and f.after != walk.base + e.length:
            out.append(Violation("context", f.i, f"a rebuild of {e.length} recorded tokens left "
                                                 f"{f.after - walk.base} context positions"))
        elif isinstance(e, StepEnd) and f.after != walk.base + e.length:
            out.append(Violation("context", f.i, f"R_{e.step} holds {e.length} context tokens, the cache "
                                                 f"{f.after - walk.base}"))
    return out


def _compaction(walk: _Walk, want: Expectation) -> list[Violation]:
    """`compaction`: a transition whose observation compacts has rebuilt its cache by its end."""
    out, compacted = [], set()
    for f in walk.frames:
        if f.role == "compaction":
            compacted.add(f.step)
        elif isinstance(f.event, StepEnd) and f.event.step in want.compacts and f.event.step not in compacted:
            out.append(Violation("compaction", f.i, f"transition {f.event.step} compacts, but it rebuilt no cache"))
    return out


def _no_fire(walk: _Walk) -> list[Violation]:
    """`no-fire`: no side effect fires during the forget."""
    return [Violation("no-fire", f.i, f"call {f.event.call_id} ({f.event.tool}) fired during the forget: a "
                                      "committed call is never fired again, and a counterfactual one is reported "
                                      "for compensation")
            for f in walk.frames if isinstance(f.event, Fire)]


def _commits_accounted(walk: _Walk, want: Expectation) -> list[Violation]:
    """`commits-accounted`: every call the replay commits is de-duplicated or reported for compensation."""
    return [Violation("commits-accounted", f.i, f"transition {f.event.step} committed {f.event.call_id} "
                                                f"({f.event.tool}), which the receipt neither de-duplicated nor "
                                                "reported for compensation")
            for f in walk.frames if isinstance(f.event, Commit) and f.event.call_id not in want.accounted]


def _restore_accounted(walk: _Walk, want: Expectation) -> list[Violation]:
    """`restore-accounted`: the rows the restore kept, read or recomputed are the receipt's."""
    kept, computed = walk.account
    if (kept, computed) == (want.tokens_restored, want.tokens_rematerialized):
        return []
    return [Violation("restore-accounted", len(walk.frames) + 1,
                      f"the log shows {kept} rows kept or read from pages and {computed} recomputed; the receipt "
                      f"says {want.tokens_restored} restored and {want.tokens_rematerialized} re-materialized")]


def _decode_accounted(walk: _Walk, want: Expectation) -> list[Violation]:
    """`decode-accounted`: the tokens of the drafting forwards are the receipt's tokens_decoded."""
    if walk.decoded == want.tokens_decoded:
        return []
    return [Violation("decode-accounted", len(walk.frames) + 1,
                      f"the log shows {walk.decoded} tokens decoded; the receipt says {want.tokens_decoded}")]
