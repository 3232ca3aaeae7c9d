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

from unsee.model.session import Receipt, Session
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
                       accounted, receipt.transitions, receipt.tokens_restored, receipt.tokens_rematerialized,
                       receipt.tokens_decoded)


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
    """Every violation of the rules (module docstring) by the event log of one forget."""
    if want.method not in METHODS:
        raise ValueError(f"trace validation covers {METHODS}, not {want.method!r}")
    events = tuple(events)
    out: list[Violation] = []

    def bad(rule: str, at: int, message: str) -> None:
        out.append(Violation(rule, at, message))

    if not events or not isinstance(events[0], Begin):
        return [Violation("log", 0, "the log does not open with Begin (the engine's BOS and resident length)")]
    base, length = events[0].base, events[0].length
    c, full = want.checkpoint, want.method != "B7"
    restored: int | None = None  # index of the restore
    restores = 0
    step = c + 1  # the transition in progress
    floor = 0  # no crop may go below this after the restore: the context the transition started from
    busy = False  # the transition in progress has run a forward
    rebuild: list[int] | None = None  # [kept, paged, computed] inside a rebuild bracket
    compacted: set[int] = set()
    decoded = 0
    account = (0, 0)  # (rows kept or read from pages, rows recomputed) by the restore (B5′: its prefix cache)
    commits: list[tuple[int, Commit]] = []

    def at(pos: int) -> str:
        return f"context offset {pos - base}"

    def restore(i: int, offset: int, how: str) -> None:
        nonlocal restored, restores, floor
        restores += 1
        restored = i
        floor = length
        if offset != want.offset:
            bad("restore-offset", i, f"the restore ({how}) left {offset} context tokens, but checkpoint R_{c} "
                                     f"holds {want.offset}")

    def extend(i: int, e, what: str) -> None:
        """Rows written at e.start..e.start+e.n: they must continue the cache."""
        nonlocal length
        if e.start != length:
            bad("contiguous", i, f"{what} at {at(e.start)}, but the cache ends at {at(length)}")
        length = e.start + e.n

    for i, e in enumerate(events[1:], 1):
        if isinstance(e, Forward):
            extend(i, e, f"a {e.kind} of {e.n} token(s)")
            if rebuild is not None:
                rebuild[2] += max(0, length - max(e.start, base))  # the BOS after a reset is no context row
            elif e.start >= base:
                if restored is None:
                    bad("restore-first", i, f"a {e.kind} at {at(e.start)} ran before the restore: the replay's "
                                            "first forward must follow the restore")
                busy = True
                if e.kind == "decode":
                    decoded += e.n
        elif isinstance(e, Crop):
            if e.length > length:
                bad("contiguous", i, f"a crop to {e.length} positions of a cache of {length}")
            length = min(length, e.length)
            if rebuild is not None:
                rebuild[0] = max(0, length - base)
            elif restored is None:
                restore(i, length - base, "a crop of the resident cache")
            elif length < floor:
                restores += 1
                bad("one-restore", i, f"a crop to {at(length)} in transition {step} cut into the context it "
                                      f"started from ({floor - base} tokens): only the restore and a compaction may")
        elif isinstance(e, Reset):
            length = 0
            if rebuild is not None:
                rebuild[0] = 0
            elif restored is None:
                restore(i, 0, "an empty cache")
                floor = base
            else:
                restores += 1
                bad("one-restore", i, f"the cache was emptied in transition {step}, after the restore")
        elif isinstance(e, Append):
            extend(i, e, f"{e.n} {e.how} row(s) appended")
            if rebuild is not None:
                rebuild[1] += e.n
            elif restored is None:
                bad("restore-first", i, f"{e.n} {e.how} row(s) appended at {at(e.start)} before the restore")
            else:
                busy = True
        elif isinstance(e, RebuildBegin):
            if rebuild is not None:
                bad("log", i, "a rebuild began inside another")
            rebuild = [max(0, length - base), 0, 0]
        elif isinstance(e, RebuildEnd):
            if rebuild is None:
                bad("log", i, "a rebuild ended that never began")
                continue
            kept, paged, computed = rebuild
            rebuild = None
            if length != base + e.length:
                bad("context", i, f"a rebuild of {e.length} recorded tokens left {length - base} context positions")
            if restored is None and want.method == "B5'":
                account = (kept + paged, computed)  # B5′'s prefix cache, read back before the reset
            elif restored is None:
                restore(i, length - base,
                        f"a rebuild: {kept} rows kept, {paged} read from pages, {computed} recomputed")
                account = (kept + paged, computed)
            elif busy and step in want.compacts and step not in compacted:
                compacted.add(step)
                floor = length
            else:
                restores += 1
                why = ("which already compacted" if step in compacted else "before it ran a forward"
                       if step in want.compacts else "whose observation does not compact")
                bad("one-restore", i, f"a rebuild of {e.length} tokens in transition {step}, {why}: after the "
                                      "restore only a compaction rebuilds")
        elif isinstance(e, Commit):
            commits.append((i, e))
        elif isinstance(e, StepEnd):
            if restored is None:
                bad("restore-first", i, f"transition {e.step} ended before any restore")
            if e.step != step:
                bad("transitions", i, f"transition {e.step} ended where transition {step} was due: the replay "
                                      f"runs {c + 1}..{want.T} in order, each once")
            if length != base + e.length:
                bad("context", i, f"R_{e.step} holds {e.length} context tokens, the cache {length - base}")
            if e.step in want.compacts and e.step not in compacted:
                bad("compaction", i, f"transition {e.step} compacts, but it rebuilt no cache")
            step, busy, floor = e.step + 1, False, length
        elif isinstance(e, Fire):
            bad("no-fire", i, f"call {e.call_id} ({e.tool}) fired during the forget: a committed call is never "
                              "fired again, and a counterfactual one is reported for compensation")
        else:
            bad("log", i, f"an event of unknown type {type(e).__name__}")
    end = len(events)
    if rebuild is not None:
        bad("log", end, "a rebuild never ended")
    if restores == 0:
        bad("one-restore", end, "no restore: the replay must start from the checkpoint's cache")
    if step != want.T + 1:
        bad("transitions", end, f"the replay stopped after transition {step - 1}; it runs {c + 1}..{want.T} "
                                f"({want.T - c} transitions)")
    if want.transitions != want.T - c:
        bad("transitions", end, f"the receipt counts {want.transitions} transitions; {c + 1}..{want.T} are "
                                f"{want.T - c}")
    if full and c != 0:
        bad("checkpoint", end, f"a full reset ({want.method}) starts from R_0, not R_{c}")
    elif not full and not want.forced and c != want.latest:
        bad("checkpoint", end, f"restored R_{c}, but the latest checkpoint before τ={want.tau} is R_{want.latest}")
    if account != (want.tokens_restored, want.tokens_rematerialized):
        bad("restore-accounted", end, f"the log shows {account[0]} rows kept or read from pages and {account[1]} "
                                      f"recomputed; the receipt says {want.tokens_restored} restored and "
                                      f"{want.tokens_rematerialized} re-materialized")
    if decoded != want.tokens_decoded:
        bad("decode-accounted", end,
            f"the log shows {decoded} tokens decoded; the receipt says {want.tokens_decoded}")
    for i, e in commits:
        if e.call_id not in want.accounted:
            bad("commits-accounted", i, f"transition {e.step} committed {e.call_id} ({e.tool}), which the receipt "
                                        "neither de-duplicated nor reported for compensation")
    return out
