"""The cross-thread statement on random sessions, and schedules with one mistake each that it catches."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from unsee.model import shared as S
from unsee.model.shared import Outcome, Span
from unsee.specs.protocol import SpecViolation
from unsee.specs.shared import SharedSession, check_shared, cross_thread_forget_is_a_full_reset, observe_shared

KEYS = ("a", "b", "c")
TEXTS = st.sampled_from([f"{op}:{k}" for op in "rwd" for k in KEYS] + ["s", "hi", "ok"])


@st.composite
def sessions(draw):
    """2–4 threads of 1–4 turns, interleaved at random; the target one part of one turn."""
    n = draw(st.integers(2, 4))
    threads = [f"t{i}" for i in range(1, n + 1)]
    turns = {}
    for u in threads:
        turns[u] = tuple(tuple((f"{u}.{k}.{j}", draw(TEXTS)) for j in range(draw(st.integers(0, 3))))
                         for k in range(1, draw(st.integers(1, 4)) + 1))
    queue = {u: list(range(1, len(turns[u]) + 1)) for u in threads}
    order = []
    while any(queue.values()):
        u = draw(st.sampled_from([v for v in threads if queue[v]]))
        order.append((u, queue[u].pop(0)))
    target_thread = draw(st.sampled_from(threads))
    k = draw(st.integers(1, len(turns[target_thread])))
    texts = list(turns[target_thread][k - 1])
    texts.insert(draw(st.integers(0, len(texts))), ("z", draw(TEXTS)))
    turns[target_thread] = turns[target_thread][:k - 1] + (tuple(texts),) + turns[target_thread][k:]
    return SharedSession(turns, tuple(order), "z", target_thread)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions())
def test_a_cross_thread_forget_is_a_full_reset_at_its_optimal_cost(s):
    cross_thread_forget_is_a_full_reset(observe_shared(s))


# --- schedules with one mistake each: the statement must catch every one -----------------------------

def keeps_every_span(spans, start, rt):
    """Never checks another thread's reads: keeps its span as it ran."""
    out = Outcome(replayed=dict(start))
    for s in spans:
        if s.thread in out.replayed and s.turn >= out.replayed[s.thread]:
            S._replay(rt, s, out, set())
        else:
            for op in s.ops:
                if op.kind == "write":
                    rt.write(op.key, op.value)
    return out


def replays_every_thread(spans, start, rt):
    """Replays every thread from the first span on (B5 on the suffix): exact, not optimal."""
    for s in spans:
        if s.thread not in start:
            start = dict(start, **{s.thread: s.turn})
            rt.start(s.thread, s.turn, None)
    return S.schedule(spans, start, rt)


def reads_before_writes(spans, start, rt):
    """Checks a span's reads before applying any of its writes (a read that follows a write of the
    same span is checked against the store without it)."""
    def reorder(s):
        return Span(s.thread, s.turn, tuple(o for o in s.ops if o.kind == "read") +
                    tuple(o for o in s.ops if o.kind == "write"))
    return S.schedule([reorder(s) for s in spans], start, rt)


def replays_from_the_next_turn(spans, start, rt):
    """Keeps the span whose read changed (its writes as recorded) and replays its thread from the
    next turn only."""
    out = Outcome(replayed=dict(start))
    for s in spans:
        if s.thread in out.replayed and s.turn >= out.replayed[s.thread]:
            S._replay(rt, s, out, set())
            continue
        changed = False
        for op in s.ops:
            if op.kind == "read":
                changed = changed or rt.read(op.key) != op.value
            else:
                rt.write(op.key, op.value)
        if changed:
            out.replayed[s.thread] = s.turn + 1
            rt.start(s.thread, s.turn + 1, None)
    return out


# (A schedule that leaves a changed span's earlier writes in place is no mistake here: they are the
# writes its replay makes again, from the same state and the same reads; `schedule` takes them back
# so that the replay's journal records the store as it stood before them.)


@pytest.mark.parametrize("mutant", [keeps_every_span, replays_every_thread, reads_before_writes, replays_from_the_next_turn])
def test_the_statement_catches_each_mistaken_schedule(mutant):
    caught = []

    @settings(max_examples=500, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(sessions())
    def run(s):
        try:
            check_shared([s], mutant)
        except SpecViolation:
            caught.append(s)

    run()
    assert caught, f"{mutant.__name__} was never caught in 500 sessions"
