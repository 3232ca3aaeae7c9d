"""A LangGraph `Store` (long-term memory shared by threads), recorded, and forgotten across threads.

A graph compiled with `store=` reads and writes one key-value store from every thread: a fact
saved in one thread is read in the next. `forgettable(graph)` wraps that store in a
`RecordedStore`, which journals, in the order they happened:

- each invocation of a thread (`invoke`, `stream`, `ainvoke`, `astream`, `update_state`): a *span*,
  its begin and end; the k-th span of a thread is its turn k;
- each operation a node or tool makes on the store: a put or delete with the item's value before
  and after it, and a get, search or namespace listing with what it asked and a keyed digest of
  what it got (the digest is salted per journal, so it says nothing of a value it did not read).

A forget on such a graph (`forget_across`) is `unsee.model.shared.schedule`: the store is
restored to just before the target thread's first replayed turn (the journal's before-images, in
reverse), and every span from there on runs again in the order it ran: the target thread's turns
are replayed on their sanitized inputs; another thread's span is kept when each of its reads,
asked again of the store as it now stands, gets what it got before (its writes re-applied), else
that thread is planned from that turn (`plan_forget` with the read as its source) and replayed, its
later spans too. The store ends as the twin's, every thread that read what the target changed is
its twin's, and each replayed thread's old branch is erased as a one-thread forget erases it; the
journal's tail is rewritten with the spans as the twin ran them, and the store's tables are
vacuumed. Anything that fails puts the store, the journal and every thread back as they were.

Where the journal lives: a list on the `RecordedStore` (`InMemoryStore`), table
`unsee_store_journal` in the same file (`SqliteStore`) or database (`PostgresStore`). The
concurrency rule is a gate per process: a span holds it shared, a forget exclusively; a forget
waits up to `wait` seconds for the running spans and refuses if they do not end, and spans that
begin during a forget wait for it (so nothing they write is lost or replayed over).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import hmac
import json
from dataclasses import dataclass, field

from unsee.impl.integrations.langgraph.journal import Gate, Journal, PostgresJournal, SqliteJournal
from unsee.model.errors import UnseeError
from unsee.model.shared import Op, Span

REPLAYING: contextvars.ContextVar = contextvars.ContextVar("unsee_store_replaying", default=None)
TOOL: contextvars.ContextVar = contextvars.ContextVar("unsee_store_tool", default=None)  # (tool, args json) running


def canonical_value(v) -> str | None:
    return None if v is None else json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _ns(ns) -> list:
    return list(ns)


# --- the recorded store --------------------------------------------------------------------------------

def store_kind(store) -> str:
    """"memory", "sqlite" or "postgres": the stores a forget knows the storage of, exactly those classes."""
    from langgraph.store.memory import InMemoryStore

    kinds = {InMemoryStore: "memory"}
    with contextlib.suppress(ImportError):
        from langgraph.store.sqlite import SqliteStore

        kinds[SqliteStore] = "sqlite"
    with contextlib.suppress(ImportError):
        from langgraph.store.postgres import PostgresStore

        kinds[PostgresStore] = "postgres"
    kind = kinds.get(type(store))
    if kind is None:
        raise UnseeError(f"the graph's store is a {type(store).__name__}: a forget can replay and erase only a store it "
                         "knows the storage of: InMemoryStore, SqliteStore or PostgresStore, exactly those classes "
                         "(an async store is not supported yet)")
    if getattr(store, "ttl_config", None):
        raise UnseeError("the graph's store has a ttl: its items expire on their own, when a replay cannot say; "
                         "open the store without ttl= to forget on it")
    return kind


_CLASS: list = []


def RecordedStore(inner):  # noqa: N802 - it stands for the class
    """The graph's store, recorded: every operation goes to `inner` and is journaled (see the
    module). A `BaseStore` (the class is made on first use, so importing this module needs no
    LangGraph)."""
    if not _CLASS:
        from langgraph.store.base import BaseStore

        _CLASS.append(type("RecordedStore", (_Recorded, BaseStore), {"__doc__": _Recorded.__doc__}))
    return _CLASS[0](inner)


class _Recorded:
    """A store whose every operation is journaled (see the module)."""

    def __init__(self, inner) -> None:
        self.kind = store_kind(inner)
        self.inner = inner
        self.journal = {"memory": Journal, "sqlite": SqliteJournal, "postgres": PostgresJournal}[self.kind](
            *(() if self.kind == "memory" else (inner,)))
        self.gate = Gate()

    def restamp(self, ns, key) -> None:
        """SQLite's CURRENT_TIMESTAMP counts seconds, so items written within one second tie in a
        search's newest-first order, and which comes first is the query plan's choice: an item a
        recorded SqliteStore writes is stamped to the microsecond, each later than the last."""
        if self.kind != "sqlite":
            return
        from datetime import datetime, timedelta, timezone

        now = datetime.now(timezone.utc).replace(tzinfo=None)
        last = getattr(self, "_last_stamp", None)
        if last is not None and now <= last:
            now = last + timedelta(microseconds=1)
        self._last_stamp = now
        at = now.isoformat(sep=" ")
        stamp(self, (tuple(ns), key), [at, at])

    # the digest of what a read got: keyed by the journal's salt
    def digest(self, got) -> str:
        text = json.dumps(got, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
        return hmac.new(self.journal.salt, text.encode(), hashlib.sha256).hexdigest()

    def _where(self) -> str | None:
        try:
            from langgraph.config import get_config

            return (get_config().get("configurable") or {}).get("thread_id")
        except Exception:
            return None

    def _one(self, op, capture: list | None):
        from langgraph.store.base import GetOp, ListNamespacesOp, PutOp, SearchOp

        inner = self.inner
        if isinstance(op, PutOp):
            before = inner.batch([GetOp(op.namespace, op.key)])[0]
            where = list(inner._data[tuple(op.namespace)]).index(op.key) if (
                before is not None and self.kind == "memory") else None
            inner.batch([op])
            if op.value is not None:
                self.restamp(op.namespace, op.key)
            event = {"e": "op", "op": "put", "ns": _ns(op.namespace), "key": op.key,
                     "value": None if op.value is None else dict(op.value),
                     "index": op.index if op.index is None or op.index is False else list(op.index),
                     "before": None if before is None else before.value}
            if before is not None:  # where the old item stood, so a forget puts it back as it was
                event["before_at"] = [before.created_at.isoformat(), before.updated_at.isoformat()]
                if where is not None:
                    event["before_pos"] = where
            if op.ttl is not None:
                event["ttl"] = op.ttl
            result = None
        else:
            result = inner.batch([op])[0]
            if isinstance(op, GetOp):
                ask = {"op": "get", "ns": _ns(op.namespace), "key": op.key}
            elif isinstance(op, SearchOp):
                ask = {"op": "search", "prefix": _ns(op.namespace_prefix), "query": op.query, "filter": op.filter,
                       "limit": op.limit, "offset": op.offset}
            elif isinstance(op, ListNamespacesOp):
                ask = {"op": "list", "match": [[c.match_type, list(c.path)] for c in op.match_conditions or ()],
                       "max_depth": op.max_depth, "limit": op.limit, "offset": op.offset}
            else:  # pragma: no cover - BaseStore has these four
                raise UnseeError(f"unknown store operation {type(op).__name__}")
            event = {"e": "op", "op": "read", "ask": ask, "got": self.digest(got_of(result))}
        tool = TOOL.get()
        if tool is not None:
            event["tool"] = list(tool)
        if capture is not None:
            capture.append(event)
        else:
            event["thread"] = self._where()
            self.journal.append(event)
        return result

    def batch(self, ops):
        capture = REPLAYING.get()
        if capture is not None:
            return [self._one(op, capture) for op in ops]
        if self._where() is None:  # outside any thread: it waits for a forget like a span
            with self.gate.shared():
                return [self._one(op, None) for op in ops]
        return [self._one(op, None) for op in ops]

    async def abatch(self, ops):
        return await asyncio.get_running_loop().run_in_executor(None, contextvars.copy_context().run, self.batch, ops)

    # a span: one invocation of a thread
    def begin(self, thread_id) -> None:
        self.journal.append({"e": "begin", "thread": thread_id})

    def end(self, thread_id) -> None:
        self.journal.append({"e": "end", "thread": thread_id})


def stamp(store, key, at, pos=None) -> None:
    """Give the item under `key` (namespace, key) the creation and update times `at` (ISO text) it
    had, and, in an InMemoryStore, its place among its namespace's items: the order searches
    return items in (the newest first in SQLite and Postgres, by place in memory)."""
    from datetime import datetime

    from langgraph.store.base import Item

    inner, (ns, k) = store.inner, key
    created, updated = datetime.fromisoformat(at[0]), datetime.fromisoformat(at[1])
    if store.kind == "memory":
        items = inner._data[ns]
        old = items[k]
        items[k] = Item(value=old.value, key=k, namespace=ns, created_at=created, updated_at=updated)
        if pos is not None and list(items).index(k) != pos:
            order = [x for x in items if x != k]
            order.insert(pos, k)
            inner._data[ns] = {x: items[x] for x in order}
    elif store.kind == "sqlite":
        with inner.lock:
            inner.conn.execute("UPDATE store SET created_at = ?, updated_at = ? WHERE prefix = ? AND key = ?",
                               (created.isoformat(sep=" "), updated.isoformat(sep=" "), ".".join(ns), k))
    else:
        with inner._cursor() as cur:
            cur.execute("UPDATE store SET created_at = %s, updated_at = %s WHERE prefix = %s AND key = %s",
                        (created, updated, ".".join(ns), k))


def got_of(result):
    """What a read got, as its digest sees it: items by namespace, key and value (and a search's score)."""
    from langgraph.store.base import Item, SearchItem

    if result is None:
        return None
    if isinstance(result, SearchItem):
        return [list(result.namespace), result.key, result.value, result.score]
    if isinstance(result, Item):
        return [list(result.namespace), result.key, result.value]
    if isinstance(result, (list, tuple)):
        return [got_of(r) if isinstance(r, Item) else list(r) if isinstance(r, tuple) else r for r in result]
    return result


def is_recorded(store) -> bool:
    return isinstance(store, _Recorded)


def recorded(graph):
    """The graph's RecordedStore, or None where it has no store."""
    store = getattr(graph, "store", None)
    return store if isinstance(store, _Recorded) else None


def record_spans(graph) -> None:
    """Wrap the graph's store (`RecordedStore`) and its entry points, so each invocation is a span
    (see the module). Idempotent."""
    if getattr(graph, "unsee_spans", False) or getattr(graph, "store", None) is None:
        return
    store = graph.store if isinstance(graph.store, _Recorded) else RecordedStore(graph.store)
    graph.store = store
    stream, astream, update, aupdate = graph.stream, graph.astream, graph.update_state, graph.aupdate_state

    def thread_of(config):
        return ((config or {}).get("configurable") or {}).get("thread_id")

    def spanned(*args, **kw):
        config = args[1] if len(args) > 1 else kw.get("config")
        if REPLAYING.get() is not None:
            yield from stream(*args, **kw)
            return
        tid = thread_of(config)
        with store.gate.shared():
            store.begin(tid)
            try:
                yield from stream(*args, **kw)
            finally:
                store.end(tid)

    async def aspanned(*args, **kw):
        config = args[1] if len(args) > 1 else kw.get("config")
        if REPLAYING.get() is not None:
            async for chunk in astream(*args, **kw):
                yield chunk
            return
        tid = thread_of(config)
        async with store.gate.ashared():
            store.begin(tid)
            try:
                async for chunk in astream(*args, **kw):
                    yield chunk
            finally:
                store.end(tid)

    def update_state(config, values, as_node=None, task_id=None):
        if REPLAYING.get() is not None:
            return update(config, values, as_node, task_id)
        with store.gate.shared():
            store.begin(thread_of(config))
            try:
                return update(config, values, as_node, task_id)
            finally:
                store.end(thread_of(config))

    async def aupdate_state(config, values, as_node=None, task_id=None):
        if REPLAYING.get() is not None:
            return await aupdate(config, values, as_node, task_id)
        async with store.gate.ashared():
            store.begin(thread_of(config))
            try:
                return await aupdate(config, values, as_node, task_id)
            finally:
                store.end(thread_of(config))

    graph.stream, graph.astream = spanned, aspanned
    graph.update_state, graph.aupdate_state, graph.unsee_spans = update_state, aupdate_state, True


# --- the journal read as spans -------------------------------------------------------------------------

@dataclass
class Spans:
    """The journal as `unsee.model.shared` spans, with where each began and ended."""

    spans: list = field(default_factory=list)  # Span, in the order they began
    bounds: list = field(default_factory=list)  # (first seq, last seq) of each
    events: list = field(default_factory=list)  # each span's events (begin, ops, end)
    turns: dict = field(default_factory=dict)  # thread → its number of spans


def op_of(event) -> Op:
    if event["op"] == "read":
        return Op("read", event["ask"], event["got"])
    return Op("write", (tuple(event["ns"]), event["key"]),
              None if event["value"] is None else {"value": event["value"], "index": event.get("index")})


def spans_of(events: list[dict]) -> Spans:
    out = Spans()
    open_: dict = {}  # thread → index of its open span

    def new(thread, turn, seq, evs):
        out.spans.append(Span(thread, turn, ()))
        out.bounds.append([seq, seq])
        out.events.append(evs)
        return len(out.spans) - 1

    for e in events:
        thread, seq = e.get("thread"), e["seq"]
        if e["e"] == "begin":
            turn = out.turns[thread] = out.turns.get(thread, 0) + 1
            open_[thread] = new(thread, turn, seq, [e])
        elif e["e"] == "end":
            i = open_.pop(thread, None)
            if i is not None:
                out.bounds[i][1] = seq
                out.events[i].append(e)
        else:
            i = open_.get(thread) if thread is not None else None
            if i is None:
                i = new(None, 0, seq, [])
            s = out.spans[i]
            out.spans[i] = Span(s.thread, s.turn, s.ops + (op_of(e),))
            out.bounds[i][1] = max(out.bounds[i][1], seq)
            out.events[i].append(e)
    if open_:
        thread = next(iter(open_))
        raise UnseeError(f"an invocation of thread {thread!r} on the shared store has not ended (it is running, or its "
                         "process stopped mid-turn): a forget waits for whole turns")
    return out
