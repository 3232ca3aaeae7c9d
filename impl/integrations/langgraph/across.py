"""A forget on a graph with a store: `unsee.model.shared.schedule` over the store's journal.

`forget_across` is `forget` where the graph's threads share a `RecordedStore` (`shared`). Before
anything is written it reads the journal as spans, reads and checks the history of every thread
that has one (any of them may have to be replayed), plans the target thread (`job.prepare_job`, as a
one-thread forget does) and refuses what it cannot replay: turns of two threads that ran at the
same time, an item written with a ttl, a consequential tool that used the store (a replay never
runs its body), a store written outside the graph since the journal last saw it. Then it restores
the store to just before the target's first replayed turn and runs `schedule` (see `shared`).
A thread another thread's read brings in is planned by `plan_forget` with that read as its
source (τ at that turn, c* before it); where c* falls earlier (the turn resumes an interrupt or
edits the state) it refuses, since the turns between would replay out of the store's order.
"""

from __future__ import annotations

import time

from unsee.impl.integrations.langgraph.forgettable import derives_ids
from unsee.impl.integrations.langgraph.job import (
    NOTHING, STOP_NONE, STOP_OTHER, asked_at, head_config, prepare_job, replay_failed,
)
from unsee.impl.integrations.langgraph.history import all_checkpoints, kept_with_subgraphs, lineage
from unsee.impl.integrations.langgraph.record import REAPPLYING, check_store, check_thread, journal_digest, pairs, remember
from unsee.impl.integrations.langgraph.shared import REPLAYING, canonical_value, op_of, recorded, spans_of, stamp
from unsee.impl.integrations.langgraph.tools import CONSEQUENTIAL, REPLAY, marked_tools
from unsee.model.errors import UnseeError
from unsee.model.shared import overlapping, schedule
from unsee.model.state import Part

RESET = "store:reset"  # B5's source for a thread replayed only because the whole store is reset


def _read_source(turn: int) -> str:
    return f"store-read@t{turn}"


class _Runtime:
    """`unsee.model.shared.Runtime` on a graph and its recorded store."""

    def __init__(self, graph, store, hist, method, extra, index, events) -> None:
        self.graph, self.store, self.hist, self.method, self.extra = graph, store, hist, method, extra
        self.all_events = events  # the journal's tail, span by span: what the replay runs over
        self.index = index  # (ns, key) → the index the item's current value was put with
        self.original: dict = {}  # (ns, key) → (value, index) when the forget began: what a failure puts back
        self.jobs: dict = {}  # thread → (job, its steps)
        self.captured: dict = {}  # (thread, turn) → the events its replay made

    # the store as it stands
    def _put(self, key, value, index, at=None, pos=None) -> None:
        from langgraph.store.base import PutOp

        if key not in self.original:
            self.original[key] = self._item(key) + (self.index.get(key),)
        self.store.inner.batch([PutOp(key[0], key[1], value, index=index)])
        if value is not None and at is not None:
            stamp(self.store, key, at, pos)
        elif value is not None:
            self.store.restamp(*key)
        self.index[key] = index

    def _item(self, key) -> tuple:
        """(value, [created, updated], place) of the item under `key` now ((None, None, None): none)."""
        from langgraph.store.base import GetOp

        item = self.store.inner.batch([GetOp(key[0], key[1])])[0]
        if item is None:
            return None, None, None
        pos = list(self.store.inner._data[key[0]]).index(key[1]) if self.store.kind == "memory" else None
        return item.value, [item.created_at.isoformat(), item.updated_at.isoformat()], pos

    def read(self, ask):
        from langgraph.store.base import GetOp, ListNamespacesOp, MatchCondition, SearchOp

        if ask["op"] == "get":
            op = GetOp(tuple(ask["ns"]), ask["key"])
        elif ask["op"] == "search":
            op = SearchOp(tuple(ask["prefix"]), ask["filter"], ask["limit"], ask["offset"], ask["query"])
        else:
            op = ListNamespacesOp(tuple(MatchCondition(t, tuple(p)) for t, p in ask["match"]) or None,
                                  ask["max_depth"], ask["limit"], ask["offset"])
        from unsee.impl.integrations.langgraph.shared import got_of

        return self.store.digest(got_of(self.store.inner.batch([op])[0]))

    def write(self, key, rec):
        value, at, pos = self._item(key)
        was = None if value is None else {"value": value, "index": self.index.get(key), "at": at, "pos": pos}
        self._put(key, None if rec is None else rec["value"], None if rec is None else rec.get("index"),
                  None if rec is None else rec.get("at"), None if rec is None else rec.get("pos"))
        return was

    # the threads
    def start(self, thread, turn, op) -> None:
        tuples, pending, rows = self.hist[thread]
        src = RESET if self.method == "B5" else _read_source(turn)
        job = prepare_job(thread, [src], self.method, None, tuples, pending, rows,
                       reads={turn: (Part(src, str(op.value if op is not None else "")),)})
        if job.plan.boundary != turn - 1:
            raise UnseeError(f"thread {thread!r} read at turn {turn} what the forget changed, but its last checkpoint "
                             f"before that turn is turn {job.plan.boundary}'s (turn {turn} resumes an interrupt or "
                             "edits the state): its turns between would replay out of the store's order; a forget "
                             "cannot replay that thread yet")
        self._begin(thread, job)

    def _begin(self, thread, job) -> None:
        job.derived_ids = derives_ids(self.graph)
        touched = {tuple(e["tool"]) for evs in self.all_events for e in evs if e.get("tool")}
        job.replay.recorded = {k: v for k, v in job.replay.recorded.items() if k not in touched}
        self.jobs[thread] = (job, job.steps())

    def replay(self, thread, turn):
        job, steps = self.jobs[thread]
        try:
            act, cfg, asked = next(steps)
        except StopIteration:
            return None
        if job.replay.turn != turn:
            raise UnseeError(f"thread {thread!r}: the store's journal and the thread's checkpoints disagree on turn "
                             f"{turn} (the replay is at turn {job.replay.turn})")
        if asked is not None and (now := asked_at(self.graph.get_state(head_config(thread)))) != asked:
            job.stop(turn, STOP_OTHER if now else STOP_NONE, now)
            return None
        capture: list = []
        token, tok = REPLAY.set(job.replay), REPLAYING.set(capture)
        try:
            if act[0] == "update":
                self.graph.update_state(cfg, act[1], act[2])
            else:
                self.graph.invoke(act[1], cfg, **self.extra)
        except Exception as e:
            raise replay_failed(e, turn) from e
        finally:
            REPLAYING.reset(tok)
            REPLAY.reset(token)
            self._captured(capture)
        self.captured[(thread, turn)] = capture
        return tuple(op_of(e) for e in capture)

    def _captured(self, capture) -> None:
        for e in capture:
            if e["op"] == "put":
                key = (tuple(e["ns"]), e["key"])
                self.original.setdefault(key, (e["before"], e.get("before_at"), e.get("before_pos"), self.index.get(key)))
                self.index[key] = e.get("index")

    def rollback(self) -> None:
        """Every item the forget wrote, back as it was when the forget began."""
        from langgraph.store.base import PutOp

        for key, (value, at, pos, index) in self.original.items():
            self.store.inner.batch([PutOp(key[0], key[1], value, index=index)])
            if value is not None and at is not None:
                stamp(self.store, key, at, pos)


def _history(graph, ad, threads) -> dict:
    """thread → (checkpoints, next nodes, ledger rows), read before anything is written."""
    out = {}
    for u in threads:
        tuples = all_checkpoints(ad.saver, u)
        pending = graph.get_state(head_config(u)).next if tuples else ()
        out[u] = (tuples, pending, ad.rows(u))
    return out


def _indexes(events) -> tuple[dict, dict]:
    """Per write event (by seq), the index its key's previous value was put with; and each key's last."""
    last, before = {}, {}
    for e in events:
        if e["e"] == "op" and e["op"] == "put":
            key = (tuple(e["ns"]), e["key"])
            before[e["seq"]] = last.get(key)
            last[key] = e.get("index")
    return before, last


def _check_tail(graph, store, tail_events, ad) -> None:
    """Refuse, before anything is written, what the replay of the journal's tail cannot reproduce."""
    consequential = {n for n, t in marked_tools(graph).items() if t.kind == CONSEQUENTIAL}
    current: dict = {}
    for evs in tail_events:
        for e in evs:
            if e["e"] != "op":
                continue
            if e.get("ttl") is not None:
                raise UnseeError(f"item {e['key']!r} of namespace {tuple(e['ns'])} was put with a ttl: it expires on its "
                                 "own, when a replay cannot say; put items without ttl= to forget on this store")
            if e.get("tool") and e["tool"][0] in consequential:
                raise UnseeError(f"the consequential tool {e['tool'][0]!r} used the store: a replay never runs a "
                                 "consequential tool's body, so it could not make those reads and writes again; let a "
                                 "read-only tool or a node use the store")
            if e["op"] == "put":
                current[(tuple(e["ns"]), e["key"])] = e["value"]
    from langgraph.store.base import GetOp

    for key, value in current.items():
        item = store.inner.batch([GetOp(key[0], key[1])])[0]
        if canonical_value(None if item is None else item.value) != canonical_value(value):
            raise UnseeError(f"item {key[1]!r} of namespace {key[0]} is not what the store's journal last wrote there: "
                             "the store was written outside the graph (through the store itself, not graph.store); "
                             "a forget cannot tell what the replay must restore")


def _items(before: dict, after: dict) -> dict:
    """What the store lost, changed or gained, by (namespace, key)."""
    out = {"items_removed": [], "items_changed": [], "items_added": []}
    for key in sorted(set(before) | set(after), key=repr):
        a, b = before.get(key), after.get(key)
        name = "/".join(key[0]) + ":" + key[1]
        if a is not None and b is None:
            out["items_removed"].append(name)
        elif a is None and b is not None:
            out["items_added"].append(name)
        elif canonical_value(a) != canonical_value(b):
            out["items_changed"].append(name)
    return out


def forget_across(graph, ad, thread_id, sources, method, checkpoint, erase, redact_ledger, extra, wait, t0):
    store = recorded(graph)
    if store is None:
        raise UnseeError("the graph has a store that was not recorded: make it forgettable (forgettable(graph)) before "
                         "its first invocation, so every read and write of its store is journaled")
    if ad.is_async:
        raise UnseeError(f"the graph's checkpointer is an {type(ad.saver).__name__}: a graph with a store is forgotten "
                         "by forget(graph, ...), which needs a sync checkpointer")
    ad.check()
    with store.gate.exclusive(wait):
        events = store.journal.events()
        sp = spans_of(events)
        threads = sorted({s.thread for s in sp.spans if s.thread is not None} | {thread_id})
        if not REAPPLYING.get():  # a restored backup of the checkpointer or the store: reapply first
            check_store(graph)
            for u in threads:
                check_thread(graph, u)
        hist = _history(graph, ad, threads)
        for u in threads:
            n = len(_prepare_turns(u, hist[u]))
            if n != sp.turns.get(u, 0):
                raise UnseeError(f"thread {u!r} has {n} turns in its checkpoints but {sp.turns.get(u, 0)} invocations in "
                                 "the store's journal: it ran before the graph was made forgettable, or through a graph "
                                 "not made forgettable; a forget cannot place its turns among the other threads'")
        job = prepare_job(thread_id, sources, method, checkpoint, *hist[thread_id])
        c = job.plan.boundary
        first = next((i for i, s in enumerate(sp.spans) if s.thread == thread_id and s.turn == c + 1), None)
        if method == "B5":
            first = 0
        if first is None:  # pragma: no cover - every turn has a span (checked above)
            raise UnseeError(f"thread {thread_id!r}: turn {c + 1} has no span in the store's journal")
        tail = list(range(first, len(sp.spans)))
        clash = overlapping([(sp.spans[i].thread, sp.spans[i].turn, *sp.bounds[i]) for i in tail])
        if clash is not None:
            (a, ta, *_), (b, tb, *_) = clash
            raise UnseeError(f"turn {ta} of thread {a!r} and turn {tb} of thread {b!r} ran at the same time on the shared "
                             "store: a forget replays turns one at a time and cannot reproduce how their reads and "
                             "writes interleaved")
        _check_tail(graph, store, [sp.events[i] for i in tail], ad)

        seq0 = sp.bounds[first][0]
        before_index, last_index = _indexes(events)
        rt = _Runtime(graph, store, hist, method, extra, dict(last_index), [sp.events[i] for i in tail])
        start = {thread_id: c + 1}
        rt._begin(thread_id, job)
        kept_before = _store_items(store, [sp.events[i] for i in tail])
        try:
            for i in reversed(tail):  # the store as it stood just before the first replayed span
                for e in reversed(sp.events[i]):
                    if e["e"] == "op" and e["op"] == "put":
                        rt._put((tuple(e["ns"]), e["key"]), e["before"], before_index[e["seq"]],
                                e.get("before_at"), e.get("before_pos"))
            if method == "B5":
                for u in threads:
                    if u != thread_id:
                        start[u] = 1
                        rt.start(u, 1, None)
            spans = [sp.spans[i] for i in tail]
            out = schedule(spans, start, rt)
            for u, (j, steps) in rt.jobs.items():
                if not j.stopped and next(steps, None) is not None:  # pragma: no cover - spans == turns (checked)
                    raise UnseeError(f"thread {u!r} has turns the store's journal does not hold")
        except BaseException:
            rt.rollback()
            for u in rt.jobs:
                tuples = hist[u][0]
                ad.erase(u, kept_with_subgraphs(tuples, tuples))
            raise
        # commit: each thread's ledger and old branch, then the journal's tail as the twin ran it
        receipts = {}
        for u, (j, _steps) in rt.jobs.items():
            rows, comp, dedup, redacted = j.ledger(redact_ledger)
            ad.update(u, rows)
            line = lineage(ad.saver, u)
            keep = kept_with_subgraphs(all_checkpoints(ad.saver, u), line)
            erased = ad.erase(u, keep) if erase else NOTHING
            receipts[u] = (j, line, erased, comp, dedup, redacted, pairs(hist[u][0]), pairs(all_checkpoints(ad.saver, u)))
        index_of = {id(sp.spans[i]): i for i in tail}
        new_events = []
        for s in out.spans:
            if id(s) in index_of:
                new_events += sp.events[index_of[id(s)]]
            else:
                new_events.append({"e": "begin", "thread": s.thread})
                new_events += [dict(e, thread=s.thread) for e in rt.captured[(s.thread, s.turn)]]
                new_events.append({"e": "end", "thread": s.thread})
        store.journal.rewrite(seq0, new_events)
        kept_after = _store_items(store, [sp.events[i] for i in tail] + [rt.captured[k] for k in rt.captured])
        if erase:
            store.journal.vacuum()
        journal = journal_digest(store.journal.events())
        for u, r in receipts.items():  # one record per thread the forget erased checkpoints of
            remember(graph, u, sources if u == thread_id else [], method, r[6], r[7], journal)
    seconds = time.perf_counter() - t0
    others = tuple(j.receipt(line, er, comp, dedup, red, seconds, ad.kind)
                   for u, (j, line, er, comp, dedup, red, *_) in receipts.items() if u != thread_id)
    j, line, er, comp, dedup, red, *_ = receipts[thread_id]
    mine = j.receipt(line, er, comp, dedup, red, seconds, ad.kind)
    summary = _items(kept_before, kept_after) | {"spans": len(tail), "spans_kept": out.kept,
                                                  "threads": sorted(rt.jobs), "store": store.kind}
    from dataclasses import replace

    return replace(mine, threads=others, store=summary)


def _prepare_turns(thread, hist):
    from unsee.impl.integrations.langgraph.history import check_history
    from unsee.impl.integrations.langgraph.inputs import read_inputs

    tuples, pending, _rows = hist
    return read_inputs(check_history(tuples, thread, tuple(pending or ())), thread).turns if tuples else []


def _store_items(store, event_lists) -> dict:
    """The current value of every item those events wrote."""
    from langgraph.store.base import GetOp

    keys = {(tuple(e["ns"]), e["key"]) for evs in event_lists for e in evs if e.get("op") == "put"}
    out = {}
    for k in keys:
        item = store.inner.batch([GetOp(k[0], k[1])])[0]
        out[k] = None if item is None else item.value
    return out
