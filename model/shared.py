"""Forgetting across threads that share a store: Algorithm 1 applied per thread, in the order turns ran.

Threads of one agent may share a key-value store (LangGraph's `Store`: long-term memory). Each
invocation of a thread is a *span*: the thread, its turn, and the store operations the turn made, in
order (a read: what it asked and what it got; a write: a key and its new value, None deleting it).
Spans are ordered by when they began (a journal); a span's reads see the store as every earlier
write left it. The runtime of all threads together is still a deterministic transition system: the
state of every thread and the store, one span at a time.

The twin of a forget of z from thread t is the world where t never observed z: t's turns from τ_t
on run on sanitized inputs, and every later span runs on the store the twin's earlier spans left.
A store read is a part of its turn's observation whose source is the store; so for a thread u ≠ t:

- a span of u whose every read returns, on the twin's store, what it returned before, sees the same
  observation (the same input, the same reads) from the same state (u's earlier spans were kept):
  F makes the same writes and the same next state, and the span is kept as it ran (its writes
  re-applied as recorded, nothing recomputed);
- the first span of u one of whose reads returns something else is u's τ_u: the twin's o_{τ_u}
  differs there (the read is its source) and nowhere before, so u is planned as any thread is
  (`plan.plan_forget` on u's session with that read as the source: c*_u, T_u − c*_u transitions)
  and replayed from there, its later spans too.

`schedule` is that walk over the spans after the first one the forget replays, the store restored
to just before it. It is the one algorithm the LangGraph integration runs (`impl.integrations.
langgraph.shared`, its store and graphs behind `Runtime`) and the specs check against a full reset
of every thread (`specs.shared`). Its cost is Σ_u (T_u − τ_u + 1) transitions over the threads it
replays, each τ_u the first turn whose observation the twin sees otherwise: no fewer can be exact
(Corollary 1, per thread), and a thread whose reads are all unchanged is not replayed at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence


@dataclass(frozen=True)
class Op:
    """One store operation of a span. A read: `key` is what it asked, `value` what it got. A write:
    `key` the item's key, `value` its new value (None: deleted)."""

    kind: str  # "read" or "write"
    key: Any
    value: Any


@dataclass(frozen=True)
class Span:
    """One invocation of a thread (its `turn`, 1..T_u), and the store operations it made in order.
    `thread` None: operations made outside any thread (kept, their writes re-applied as recorded)."""

    thread: str | None
    turn: int
    ops: tuple[Op, ...] = ()


class Runtime(Protocol):
    """What `schedule` drives: the store as it stands, and the threads' replays."""

    def read(self, key) -> Any:
        """What the read `key` returns on the store now (compared with the recorded value)."""

    def write(self, key, value) -> Any:
        """Write `value` (None: delete) under `key`; return what was there (None: nothing)."""

    def start(self, thread: str, turn: int, op: Op) -> None:
        """Thread `thread` is replayed from `turn` on: its read `op` returns something else on the
        twin's store. Plan it (and refuse, raising, where its plan cannot start at `turn`)."""

    def replay(self, thread: str, turn: int) -> tuple[Op, ...] | None:
        """Run the thread's `turn` again on its sanitized input and the store as it stands; the ops
        it made, or None where the thread's replay stopped before this turn (nothing ran)."""


@dataclass
class Outcome:
    """What `schedule` did: the spans as the twin ran them, and per thread the first turn replayed."""

    spans: list[Span] = field(default_factory=list)
    replayed: dict = field(default_factory=dict)  # thread → the first turn replayed
    transitions: dict = field(default_factory=dict)  # thread → turns replayed
    kept: int = 0  # spans kept as they ran


def schedule(spans: Sequence[Span], start: dict, rt: Runtime) -> Outcome:
    """Replay, in the order they ran, the spans from the forget's first replayed one on, on a store
    restored to just before it. `start`: thread → the first turn its own plan replays (the target's
    c* + 1). Every span of a replayed thread is replayed; any other is kept when its reads return
    what they returned before (its writes re-applied in order, each read checked where it stood
    among them), else undone and its thread planned and replayed from it."""
    out = Outcome(replayed=dict(start))
    stopped: set = set()
    for s in spans:
        if s.thread is not None and s.thread in out.replayed and s.turn >= out.replayed[s.thread]:
            if s.thread in stopped:
                continue
            _replay(rt, s, out, stopped)
            continue
        done, changed = [], None
        for op in s.ops:
            if op.kind == "read":
                if s.thread is not None and rt.read(op.key) != op.value:
                    changed = op
                    break
            else:
                done.append((op.key, rt.write(op.key, op.value)))
        if changed is None:
            out.spans.append(s)
            out.kept += 1
            continue
        # the span's writes so far come back out: its replay makes them again (the same state, the
        # same reads up to here), and records the store as it stood before them
        for key, before in reversed(done):
            rt.write(key, before)
        out.replayed[s.thread] = s.turn
        rt.start(s.thread, s.turn, changed)
        _replay(rt, s, out, stopped)
    return out


def _replay(rt: Runtime, s: Span, out: Outcome, stopped: set) -> None:
    ops = rt.replay(s.thread, s.turn)
    if ops is None:  # the thread's replay ended (a question nobody answered in the twin): no later turn runs
        stopped.add(s.thread)
        return
    out.spans.append(Span(s.thread, s.turn, tuple(ops)))
    out.transitions[s.thread] = out.transitions.get(s.thread, 0) + 1


def overlapping(intervals: Sequence[tuple[str | None, int, int, int]]) -> tuple | None:
    """Two spans of different threads that ran at the same time, from (thread, turn, first seq,
    last seq) in the order they began; None if none did. `schedule` replays spans one at a time, so
    it cannot reproduce reads and writes two threads interleaved."""
    end, last = -1, None
    for iv in intervals:
        if last is not None and iv[2] < end and iv[0] != last[0]:
            return last, iv
        if iv[3] > end:
            end, last = iv[3], iv
    return None
