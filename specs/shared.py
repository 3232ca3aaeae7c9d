"""The cross-thread statement: a forget on threads that share a store equals a full reset of every
thread, at Σ_u (T_u − τ_u + 1) transitions (`unsee.model.shared.schedule`).

A reference runtime of several threads over one key-value store, written apart from the
LangGraph integration: a thread's turn reads its input's parts in order; a part "r:<key>" reads
an item, "s" lists every item, "w:<key>" writes one (its value a digest of the thread's state,
what the turn read so far and the part), "d:<key>" deletes one; any other part is plain text. The
thread's next state is a digest of its state, its parts and what it read. Turns of the threads run
in one global order.

`observe_shared` runs a session three ways: as it ran (with the target), as its twin (a full
reset: every thread from the start, the target's parts left out), and forgotten (the store
restored to just before the target's turn, `schedule` over the spans from there, each replayed
thread forked from its checkpoint before its τ). `cross_thread_forget_is_a_full_reset` checks that
the forgotten store and every thread's state equal the twin's, and that each thread was replayed
T_u − τ_u + 1 times, τ_u being the first turn whose observation (its parts, what it read) the twin
sees otherwise (the oracle: the two runs compared turn by turn, never `schedule`'s own answer), and
not at all where there is none.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Callable, Sequence

from unsee.model.shared import Op, Span, schedule
from unsee.specs.protocol import SpecViolation


def _h(*xs) -> str:
    return hashlib.sha256(json.dumps(xs, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class SharedSession:
    """Threads' turns (each a tuple of (source, text) parts) and the global order they ran in."""

    turns: dict  # thread → tuple of turns, each a tuple of (source, text)
    order: tuple  # (thread, turn) pairs, 1-based turns, each thread's in increasing order
    target: str  # the source forgotten
    thread: str  # the thread it is forgotten from


def run_turn(store: dict, state: str, parts) -> tuple[str, list[Op], list]:
    """One turn of the reference runtime on `store` (changed in place): (next state, ops, what it read)."""
    ops, seen = [], []
    for _src, text in parts:
        if text.startswith("r:"):
            got = store.get(text[2:])
            ops.append(Op("read", ("get", text[2:]), got))
            seen.append(got)
        elif text == "s":
            got = tuple(sorted(store.items()))
            ops.append(Op("read", ("search",), got))
            seen.append(got)
        elif text.startswith("w:"):
            value = _h(state, seen, text)
            store[text[2:]] = value
            ops.append(Op("write", text[2:], value))
        elif text.startswith("d:"):
            store.pop(text[2:], None)
            ops.append(Op("write", text[2:], None))
    return _h(state, [t for _s, t in parts], seen), ops, seen


@dataclass
class Run:
    """A session run in its global order: every span, each thread's state after each turn, and each
    turn's observation (its texts and what it read)."""

    spans: list = field(default_factory=list)
    befores: list = field(default_factory=list)  # per span, per write: what was there before
    states: dict = field(default_factory=dict)  # thread → [state after 0, 1, .. turns]
    seen: dict = field(default_factory=dict)  # (thread, turn) → (texts, reads)
    store: dict = field(default_factory=dict)


def run_all(s: SharedSession, drop: str | None = None) -> Run:
    r = Run(states={u: ["root"] for u in s.turns})
    for u, k in s.order:
        parts = tuple(p for p in s.turns[u][k - 1] if p[0] != drop)
        before = dict(r.store)
        state, ops, seen = run_turn(r.store, r.states[u][-1], parts)
        r.states[u].append(state)
        r.spans.append(Span(u, k, tuple(ops)))
        r.befores.append([before.get(op.key) for op in ops if op.kind == "write"])
        r.seen[(u, k)] = ([t for _s, t in parts], seen)
    return r


class ReferenceRuntime:
    """`model.shared.Runtime` over the reference: replays turns on the sanitized parts."""

    def __init__(self, s: SharedSession, original: Run, store: dict) -> None:
        self.s, self.original, self.store = s, original, store
        self.state: dict = {}  # thread → its state while replayed
        self.count: dict = {}

    def read(self, key):
        return self.store.get(key[1]) if key[0] == "get" else tuple(sorted(self.store.items()))

    def write(self, key, value):
        before = self.store.get(key)
        if value is None:
            self.store.pop(key, None)
        else:
            self.store[key] = value
        return before

    def start(self, thread, turn, op) -> None:
        self.state[thread] = self.original.states[thread][turn - 1]  # fork at its checkpoint before τ_u

    def replay(self, thread, turn):
        drop = self.s.target if thread == self.s.thread else None
        parts = tuple(p for p in self.s.turns[thread][turn - 1] if p[0] != drop)
        self.state[thread], ops, _seen = run_turn(self.store, self.state[thread], parts)
        self.count[thread] = self.count.get(thread, 0) + 1
        return tuple(ops)


@dataclass
class SharedObserved:
    session: SharedSession
    original: Run
    twin: Run
    store: dict  # the store after the forget
    states: dict  # thread → its state after the forget
    transitions: dict  # thread → turns replayed


def observe_shared(s: SharedSession, scheduler: Callable = schedule) -> SharedObserved:
    original, twin = run_all(s), run_all(s, drop=s.target)
    tau = next(k for k, turn in enumerate(s.turns[s.thread], 1) if any(p[0] == s.target for p in turn))
    first = s.order.index((s.thread, tau))
    store = dict(original.store)
    for span, befores in zip(reversed(original.spans[first:]), reversed(original.befores[first:])):
        writes = [op for op in span.ops if op.kind == "write"]
        for op, before in zip(reversed(writes), reversed(befores)):  # undo, last write first
            if before is None:
                store.pop(op.key, None)
            else:
                store[op.key] = before
    rt = ReferenceRuntime(s, original, store)
    rt.start(s.thread, tau, None)
    scheduler(original.spans[first:], {s.thread: tau}, rt)
    states = {u: rt.state.get(u, original.states[u][-1]) for u in s.turns}
    return SharedObserved(s, original, twin, store, states, dict(rt.count))


def cross_thread_forget_is_a_full_reset(ob: SharedObserved) -> None:
    """The store and every thread equal the full reset's, each thread replayed T_u − τ_u + 1 times."""
    if ob.store != ob.twin.store:
        raise SpecViolation(f"the store after the forget is not the twin's: {ob.store} != {ob.twin.store}")
    for u in ob.session.turns:
        if ob.states[u] != ob.twin.states[u][-1]:
            raise SpecViolation(f"thread {u!r} after the forget is not its twin")
        turns = [k for (v, k) in ob.session.order if v == u]
        differs = [k for k in turns if ob.original.seen[(u, k)] != ob.twin.seen[(u, k)]]
        want = 0 if not differs else len(turns) - min(differs) + 1
        if ob.transitions.get(u, 0) != want:
            raise SpecViolation(f"thread {u!r} was replayed {ob.transitions.get(u, 0)} times; its first turn the twin "
                                f"sees otherwise is {min(differs) if differs else None}, so {want} (T_u − τ_u + 1)")


def check_shared(sessions: Sequence[SharedSession], scheduler: Callable = schedule) -> None:
    for s in sessions:
        cross_thread_forget_is_a_full_reset(observe_shared(s, scheduler))
