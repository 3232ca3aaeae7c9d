"""Forgotten stays forgotten: a record of forgets outside the checkpointer's database.

A forget erases a thread's old branch, but a backup of the checkpointer's database taken before it
(a copied SQLite file, a `pg_dump`) brings the branch back when it is restored, and nothing in
LangGraph would notice. `forgettable(graph, record=PATH)` keeps, at PATH (on other storage than
the database), an append-only JSON-lines file: one record per forget (and per `reapply`), each
chained to the one before by an HMAC-SHA256 under `key` (SHA-256 without one), checked whole
whenever it is read. A record holds the thread, the source ids forgotten and the method, the
*tombstones* of the checkpoints the forget erased (salted digests of thread and checkpoint id: a
tombstone says which checkpoint must not exist, never what it held), and, for a graph with a
store, a digest of the store's journal as the forget left it.

Through the forgettable graph, a thread whose head checkpoint is a tombstone is refused at its
next invoke (or stream, update), a forget checks every checkpoint of the threads it touches and the
store's journal, and `check(graph)` checks them all; each refusal says to run `reapply(graph)`,
which forgets again, in order, every recorded forget whose sources a thread holds again, appends a
"reapply" record, and leaves the database as the forgets left it.
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import json
import os
import time
from pathlib import Path

from unsee.model.errors import UnseeError

KINDS = ("forget", "reapply")
REAPPLYING: contextvars.ContextVar = contextvars.ContextVar("unsee_reapplying", default=False)


class ForgetRecord:
    """The record file at `path`, chained under `key` (bytes; None: SHA-256)."""

    def __init__(self, path, key: bytes | None = None) -> None:
        self.path = Path(path)
        self.key = key

    def _mac(self, prev: str, body: dict) -> str:
        data = prev.encode() + b"|" + json.dumps(body, sort_keys=True).encode()
        if self.key is None:
            return hashlib.sha256(data).hexdigest()
        return hmac.new(self.key, data, hashlib.sha256).hexdigest()

    def records(self) -> list[dict]:
        """Every record, the chain checked; an error names the first that does not check."""
        if not self.path.exists():
            return []
        out, prev = [], ""
        for n, line in enumerate(self.path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                mac = d.pop("mac")
            except (ValueError, KeyError, TypeError):
                raise UnseeError(f"the forget record {self.path} is damaged at line {n}; restore it from its copy") from None
            if d.get("seq") != len(out) or self._mac(prev, d) != mac:
                raise UnseeError(f"the forget record {self.path} does not check at line {n}: it was altered, or read "
                                 "with another key; a forget record is only appended to")
            out.append({**d, "mac": mac})
            prev = mac
        return out

    def salt(self, records=None) -> str:
        records = self.records() if records is None else records
        return records[0]["salt"] if records else os.urandom(16).hex()

    @staticmethod
    def stone(salt: str, thread_id: str, checkpoint_id: str) -> str:
        return hashlib.sha256(f"{salt}\x1f{thread_id}\x1f{checkpoint_id}".encode()).hexdigest()[:32]

    def append(self, kind: str, thread_id: str, sources, method: str, erased, journal: str | None = None) -> dict:
        """One record: `erased` the (namespace, checkpoint id) pairs the forget deleted."""
        if kind not in KINDS:
            raise ValueError(kind)
        records = self.records()
        salt = self.salt(records)
        body = {"seq": len(records), "kind": kind, "thread": thread_id, "sources": list(sources), "method": method,
                "tombstones": sorted({self.stone(salt, thread_id, cid) for _ns, cid in erased}),
                "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        if not records:
            body["salt"] = salt
        if journal is not None:
            body["journal"] = journal
        mac = self._mac(records[-1]["mac"] if records else "", body)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps({**body, "mac": mac}, sort_keys=True) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        return body


def record_of(graph) -> ForgetRecord | None:
    return getattr(graph, "unsee_record", None)


RESTORED = ("thread {thread!r} holds checkpoints a forget erased (recorded in {path}, forget #{seq}): a backup taken "
            "before that forget was restored. Run reapply(graph) to forget again what the record lists, before using "
            "the thread")


def stones(records) -> dict[str, dict]:
    """tombstone → the record that made it."""
    return {s: r for r in records for s in r["tombstones"]}


def _refuse_erased(rec, records, thread_id: str, ids) -> None:
    """Refuse if one of the thread's checkpoint `ids` is a tombstone of `records`."""
    salt, dead = records[0]["salt"], stones(records)
    for cid in ids:
        r = dead.get(ForgetRecord.stone(salt, thread_id, cid))
        if r is not None:
            raise UnseeError(RESTORED.format(thread=thread_id, path=rec.path, seq=r["seq"]))


def _ids(tuples) -> list:
    return [t.config["configurable"]["checkpoint_id"] for t in tuples if t is not None]


def check_thread(graph, thread_id: str, whole: bool = True) -> None:
    """Refuse a thread whose checkpoints include one a recorded forget erased (`whole`: all of them;
    else its head, the cheap check an invoke makes)."""
    rec = record_of(graph)
    records = rec.records() if rec is not None else []
    if records:
        saver, config = graph.checkpointer, {"configurable": {"thread_id": thread_id}}
        _refuse_erased(rec, records, thread_id,
                       _ids(saver.list(config)) if whole else _ids([saver.get_tuple(config)]))


async def acheck_thread(graph, thread_id: str, whole: bool = True) -> None:
    """`check_thread` through the checkpointer's async interface."""
    rec = record_of(graph)
    records = rec.records() if rec is not None else []
    if records:
        saver, config = graph.checkpointer, {"configurable": {"thread_id": thread_id}}
        ids = _ids([t async for t in saver.alist(config)]) if whole else _ids([await saver.aget_tuple(config)])
        _refuse_erased(rec, records, thread_id, ids)


def journal_digest(events) -> str:
    body = [{k: v for k, v in e.items() if k != "seq"} for e in events]
    return f"{len(body)}:" + hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def check_store(graph) -> None:
    """Refuse a store whose journal does not begin as the last forget left it (restored or rolled back)."""
    from unsee.impl.integrations.langgraph.shared import recorded

    rec, store = record_of(graph), recorded(graph)
    if rec is None or store is None:
        return
    last = next((r for r in reversed(rec.records()) if "journal" in r), None)
    if last is None:
        return
    n = int(last["journal"].split(":")[0])
    if journal_digest(store.journal.events()[:n]) != last["journal"]:
        raise UnseeError(f"the store's journal is not what forget #{last['seq']} (recorded in {rec.path}) left: a "
                         "backup of the store taken before that forget was restored. Run reapply(graph) to forget "
                         "again what the record lists, before using the graph")


def check(graph) -> dict:
    """Every thread of the graph's checkpointer and its store against the record: {"threads": n
    checked, "restored": [threads holding an erased checkpoint], "store": "ok" | why}. Never raises
    for a restored thread (it is listed); raises where the record itself does not check."""
    rec = record_of(graph)
    if rec is None:
        raise UnseeError("the graph keeps no forget record: make it forgettable(graph, record=PATH)")
    threads = sorted({t.config["configurable"]["thread_id"] for t in graph.checkpointer.list(None)})
    restored = []
    for u in threads:
        try:
            check_thread(graph, u)
        except UnseeError:
            restored.append(u)
    try:
        check_store(graph)
        store = "ok"
    except UnseeError as e:
        store = str(e)
    return {"threads": len(threads), "restored": restored, "store": store, "records": len(rec.records())}


def remember(graph, thread_id, sources, method, before, after, journal=None) -> None:
    """Append the record of a forget that erased `before` − `after` ((namespace, checkpoint id) pairs)."""
    rec = record_of(graph)
    if rec is not None:
        rec.append("reapply" if REAPPLYING.get() else "forget", thread_id, sources, method, set(before) - set(after),
                   journal)


def pairs(tuples) -> set:
    return {(t.config["configurable"].get("checkpoint_ns", ""), t.config["configurable"]["checkpoint_id"]) for t in tuples}


def guard(graph) -> None:
    """Refuse, at each invocation through the graph, a thread whose head a recorded forget erased."""
    if getattr(graph, "unsee_guarded", False):
        return
    stream, astream, update, aupdate = graph.stream, graph.astream, graph.update_state, graph.aupdate_state

    def _thread(config):
        from unsee.impl.integrations.langgraph.tools import REPLAY

        tid = ((config or {}).get("configurable") or {}).get("thread_id")
        return tid if tid is not None and REPLAY.get() is None and not REAPPLYING.get() else None

    def guarded(*args, **kw):
        if (tid := _thread(args[1] if len(args) > 1 else kw.get("config"))) is not None:
            check_thread(graph, tid, whole=False)
        yield from stream(*args, **kw)

    async def aguarded(*args, **kw):
        if (tid := _thread(args[1] if len(args) > 1 else kw.get("config"))) is not None:
            await acheck_thread(graph, tid, whole=False)
        async for chunk in astream(*args, **kw):
            yield chunk

    def update_state(config, values, as_node=None, task_id=None):
        if (tid := _thread(config)) is not None:
            check_thread(graph, tid, whole=False)
        return update(config, values, as_node, task_id)

    async def aupdate_state(config, values, as_node=None, task_id=None):
        if (tid := _thread(config)) is not None:
            await acheck_thread(graph, tid, whole=False)
        return await aupdate(config, values, as_node, task_id)

    graph.stream, graph.astream, graph.update_state, graph.aupdate_state = guarded, aguarded, update_state, aupdate_state
    graph.unsee_guarded = True
