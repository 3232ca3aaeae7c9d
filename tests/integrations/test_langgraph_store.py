"""A LangGraph Store shared by threads, forgotten across them (issue: shared memory across threads).

Each test runs the same turns twice: once with the secret (then forgets it) and once as the twin
that never saw it, and compares every thread, the store's items and every byte the checkpointer
and the store hold. On InMemoryStore, SqliteStore and PostgresStore (a real server, as the
checkpointer tests run it).
"""

from __future__ import annotations

import json
import sqlite3
import threading

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from unsee.impl.integrations import langgraph as L
from unsee.impl.integrations.langgraph.record import ForgetRecord
from unsee.impl.integrations.langgraph.shared import RecordedStore, spans_of
from unsee.model.errors import UnseeError

SECRET = "remember: my passport is P4471902"
SID = "secret"


def file_bytes(path) -> bytes:
    return b"".join(p.read_bytes() for p in (path, path.with_name(path.name + "-wal")) if p.exists())


class Backing:
    """A checkpointer and a store of one kind, and every byte they hold."""

    def __init__(self, kind, tmp_path, pg=None, name="a") -> None:
        self.kind, self.pg = kind, pg
        self.cp_path, self.st_path = tmp_path / f"{name}-cp.sqlite", tmp_path / f"{name}-store.sqlite"
        if kind == "memory":
            self.saver, self.store = InMemorySaver(), InMemoryStore()
        elif kind == "sqlite":
            from langgraph.checkpoint.sqlite import SqliteSaver
            from langgraph.store.sqlite import SqliteStore

            self.saver = SqliteSaver(sqlite3.connect(str(self.cp_path), check_same_thread=False))
            self.store = SqliteStore(sqlite3.connect(str(self.st_path), check_same_thread=False,
                                                     isolation_level=None))
            self.store.setup()
        else:
            import psycopg
            from langgraph.checkpoint.postgres import PostgresSaver
            from langgraph.store.postgres import PostgresStore
            from psycopg.rows import dict_row

            self.db = pg.createdb()
            self.conn = psycopg.connect(pg.url(self.db), autocommit=True, prepare_threshold=0, row_factory=dict_row)
            self.saver = PostgresSaver(self.conn)
            self.saver.setup()
            self.store_conn = psycopg.connect(pg.url(self.db), autocommit=True, prepare_threshold=0,
                                              row_factory=dict_row)
            self.store = PostgresStore(self.store_conn)
            self.store.setup()

    def held(self) -> dict[str, bytes]:
        if self.kind == "memory":
            return {"memory": repr((self.saver.storage, self.saver.writes, self.saver.blobs,
                                    self.store._data)).encode()}
        if self.kind == "sqlite":
            return {"checkpointer file": file_bytes(self.cp_path), "store file": file_bytes(self.st_path)}
        files = self.pg.table_files(self.db, ("checkpoints", "checkpoint_blobs", "checkpoint_writes", "store",
                                              "unsee_store_journal"))
        return {"pg_dump": self.pg.dump(self.db), "the tables' files": b"".join(files.values())}


def items(store, keys=True) -> list:
    """The store's items by value (and key), every namespace."""
    out = []
    for ns in store.list_namespaces():
        for it in store.search(ns, limit=1000):
            out.append((ns, it.key if keys else "", json.dumps(it.value, sort_keys=True)))
    return sorted(out)


def memory_graph(saver, store, llm=None, made_forgettable=True):
    """The memory pattern of LangGraph's docs: a node that searches the user's memories for its
    prompt, saves a message that says "remember" under a key that counts them, and deletes them
    all when asked to forget everything."""
    llm = llm or L.UnseeChatModel.from_model("tiny-llama")

    def call_model(state: MessagesState, config: RunnableConfig, *, store: BaseStore):
        ns = ("memories", config["configurable"]["user_id"])
        found = store.search(ns, query=str(state["messages"][-1].content))
        text = str(state["messages"][-1].content)
        if "remember" in text.lower():
            store.put(ns, f"m{len(found)}", {"data": text})
        if "wipe" in text.lower():
            for it in found:
                store.delete(ns, it.key)
        info = "\n".join(d.value["data"] for d in found)
        return {"messages": llm.invoke([{"role": "system", "content": f"User info: {info}"}] + state["messages"])}

    g = StateGraph(MessagesState)
    g.add_node(call_model)
    g.add_edge(START, "call_model")
    graph = g.compile(checkpointer=saver, store=store)
    return (L.forgettable(graph) if made_forgettable else graph), llm


def cfg(thread, user="u1"):
    return {"configurable": {"thread_id": thread, "user_id": user}}


def say(text):
    return {"messages": [("user", text)]}


def run(graph, secret: bool) -> None:
    """t1 tells the secret, t2 recalls it, t1 goes on, t3 (another user) never reads it."""
    graph.invoke(say("hi, I am Ann"), cfg("t1"))
    graph.invoke(say("remember: I like green tea"), cfg("t3", "u2"))
    graph.invoke({"messages": [L.source_message(SECRET, SID)] if secret else []}, cfg("t1"))
    graph.invoke(say("remember: I like tea"), cfg("t1"))
    graph.invoke(say("what do you remember about me?"), cfg("t2"))
    graph.invoke(say("and more?"), cfg("t1"))
    graph.invoke(say("remember: call me Ann"), cfg("t2"))
    graph.invoke(say("what do you know?"), cfg("t3", "u2"))


def twin_of(kind, tmp_path, pg, llm):
    b = Backing(kind, tmp_path, pg, name="twin")
    graph, _ = memory_graph(b.saver, b.store, llm)
    run(graph, False)
    return graph, b


def assert_is_the_twin(graph, b, kind, tmp_path, pg, llm) -> None:
    """Every thread and the store equal the twin's, and no byte of the secret is left where b keeps it."""
    twin, tb = twin_of(kind, tmp_path, pg, llm)
    for t in ("t1", "t2", "t3"):
        assert L.compare_threads(graph, t, twin, t) == [], t
    assert items(b.store) == items(tb.store)
    for where, blob in b.held().items():
        assert b"P4471902" not in blob, f"the secret is left in the {where}"


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_a_secret_one_thread_saved_and_another_read_is_forgotten_in_both(kind, tmp_path, request):
    pg = request.getfixturevalue("postgres") if kind == "postgres" else None
    b = Backing(kind, tmp_path, pg)
    graph, llm = memory_graph(b.saver, b.store)
    run(graph, True)
    assert any(b"P4471902" in blob for blob in b.held().values())
    receipt = L.forget(graph, "t1", [SID])
    assert_is_the_twin(graph, b, kind, tmp_path, pg, llm)
    # the cost: t1 from τ (T−τ+1), t2 from its first read of what changed, t3 (another user's namespace) kept
    assert (receipt.tau, receipt["T"], receipt.transitions) == (2, 4, 3)
    assert [(r.thread_id, r.tau, r.transitions, r.sources) for r in receipt.threads] == [
        ("t2", 1, 2, ("store-read@t1",))]
    assert receipt.store["threads"] == ["t1", "t2"]
    # u1's memories are keyed by how many there were: the twin has one fewer, so the last key goes
    assert receipt.store["items_removed"] == ["memories/u1:m3"]
    assert receipt.store["spans_kept"] == 1  # t3's second turn read only u2's memories
    assert receipt.exactness == "checked"
    # the journal is the twin's: a second forget of another source runs on it
    L.forget(graph, "t2", ["t2.1"])


def test_b5_resets_every_thread_and_ends_where_b7_does(tmp_path):
    b7, b5 = Backing("memory", tmp_path, name="b7"), Backing("memory", tmp_path, name="b5")
    g7, llm = memory_graph(b7.saver, b7.store)
    g5, _ = memory_graph(b5.saver, b5.store, llm)
    run(g7, True)
    run(g5, True)
    r7, r5 = L.forget(g7, "t1", [SID]), L.forget(g5, "t1", [SID], method="B5")
    for t in ("t1", "t2", "t3"):
        assert L.compare_threads(g7, t, g5, t) == [], t
    assert items(b7.store) == items(b5.store)
    b7_total = r7.transitions + sum(r.transitions for r in r7.threads)
    b5_total = r5.transitions + sum(r.transitions for r in r5.threads)
    assert (b7_total, b5_total) == (5, 8)  # B5 replays all 8 turns of the three threads


def test_a_thread_that_read_nothing_changed_is_not_replayed(tmp_path):
    b = Backing("memory", tmp_path)
    graph, llm = memory_graph(b.saver, b.store)
    graph.invoke(say("hello"), cfg("t1"))
    graph.invoke(say("remember: I like tea"), cfg("t2"))
    graph.invoke({"messages": [L.source_message("my name is Ann", SID)]}, cfg("t1"))  # says no "remember"
    graph.invoke(say("what do you remember?"), cfg("t2"))
    receipt = L.forget(graph, "t1", [SID])
    assert receipt.threads == () and receipt.store["spans_kept"] == 1 and receipt.transitions == 1


def test_a_delete_is_replayed_and_a_store_emptied_by_the_twin_stays_empty(tmp_path):
    b = Backing("memory", tmp_path)
    graph, llm = memory_graph(b.saver, b.store)
    graph.invoke(say("hello"), cfg("t1"))
    graph.invoke({"messages": [L.source_message(SECRET, SID)]}, cfg("t1"))
    graph.invoke(say("remember: tea"), cfg("t2"))
    graph.invoke(say("please wipe it all"), cfg("t2"))
    graph.invoke(say("remember: coffee"), cfg("t1"))
    L.forget(graph, "t1", [SID])
    tb = Backing("memory", tmp_path, name="twin")
    twin, _ = memory_graph(tb.saver, tb.store, llm)
    twin.invoke(say("hello"), cfg("t1"))
    twin.invoke({"messages": []}, cfg("t1"))
    twin.invoke(say("remember: tea"), cfg("t2"))
    twin.invoke(say("please wipe it all"), cfg("t2"))
    twin.invoke(say("remember: coffee"), cfg("t1"))
    assert items(b.store) == items(tb.store)
    for t in ("t1", "t2"):
        assert L.compare_threads(graph, t, twin, t) == [], t


# --- refused before a byte changes ------------------------------------------------------------------

def snapshot(b):
    return (repr((b.saver.storage, b.saver.writes)), items(b.store), repr(b.store._data))


def test_a_store_written_outside_the_graph_is_refused(tmp_path):
    b = Backing("memory", tmp_path)
    graph, _ = memory_graph(b.saver, b.store)
    run(graph, True)
    b.store.put(("memories", "u1"), "m0", {"data": "changed by hand"})  # the store itself, not graph.store
    before = snapshot(b)
    with pytest.raises(UnseeError, match="written outside the graph"):
        L.forget(graph, "t1", [SID])
    assert snapshot(b) == before


def test_writes_through_graph_store_outside_a_thread_are_kept(tmp_path):
    b = Backing("memory", tmp_path)
    graph, llm = memory_graph(b.saver, b.store)
    graph.invoke(say("hello"), cfg("t1"))
    graph.invoke({"messages": [L.source_message(SECRET, SID)]}, cfg("t1"))
    graph.store.put(("memories", "u1"), "seed", {"data": "likes jazz"})  # the app, between turns
    graph.invoke(say("what do you remember?"), cfg("t1"))
    L.forget(graph, "t1", [SID])
    assert ("memories", "u1") in b.store.list_namespaces()
    # the app's write is kept where it was; the last turn (it says "remember") saved itself beside it
    assert sorted((it.key, it.value["data"]) for it in b.store.search(("memories", "u1"))) == [
        ("m1", "what do you remember?"), ("seed", "likes jazz")]


def test_a_thread_run_before_the_graph_was_made_forgettable_is_refused(tmp_path):
    b = Backing("memory", tmp_path)
    llm = L.UnseeChatModel.from_model("tiny-llama")
    g = StateGraph(MessagesState)
    g.add_node("m", lambda s: {"messages": llm.invoke(s["messages"])})
    g.add_edge(START, "m")
    graph = g.compile(checkpointer=b.saver, store=b.store)
    graph.invoke({"messages": [L.source_message(SECRET, SID)]}, cfg("t1"))
    with pytest.raises(UnseeError, match="was not recorded"):
        L.forget(graph, "t1", [SID])
    L.forgettable(graph)
    with pytest.raises(UnseeError, match="1 turns in its checkpoints but 0 invocations"):
        L.forget(graph, "t1", [SID])


def test_a_store_with_a_ttl_or_of_an_unknown_class_is_refused_at_forgettable():
    class MyStore(InMemoryStore):
        pass

    for store, why in ((MyStore(), "exactly those classes"),):
        llm = L.UnseeChatModel.from_model("tiny-llama")
        g = StateGraph(MessagesState)
        g.add_node("m", lambda s: {"messages": llm.invoke(s["messages"])})
        g.add_edge(START, "m")
        with pytest.raises(UnseeError, match=why):
            L.forgettable(g.compile(checkpointer=InMemorySaver(), store=store))
    from langgraph.store.sqlite import SqliteStore

    ttl = SqliteStore(sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None),
                      ttl={"default_ttl": 1.0})
    with pytest.raises(UnseeError, match="has a ttl"):
        RecordedStore(ttl)


def test_turns_of_two_threads_that_ran_at_the_same_time_are_refused(tmp_path):
    b = Backing("memory", tmp_path)
    graph, _ = memory_graph(b.saver, b.store)
    run(graph, True)
    j = graph.store.journal  # t2's turn began while t1's last turn still ran: move its begin earlier
    ev = j._events
    last_t1 = max(i for i, e in enumerate(ev) if e["e"] == "begin" and e["thread"] == "t1")
    nxt = next(i for i, e in enumerate(ev) if i > last_t1 and e["e"] == "begin")
    ev.insert(last_t1 + 1, ev.pop(nxt))
    with pytest.raises(UnseeError, match="ran at the same time"):
        L.forget(graph, "t1", [SID])


# --- concurrency: a forget while another thread writes ---------------------------------------------

@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_forget_while_another_thread_writes_loses_no_write(kind, tmp_path):
    b = Backing(kind, tmp_path)
    graph, llm = memory_graph(b.saver, b.store)
    run(graph, True)
    n, errors, first = 6, [], threading.Event()

    def writer():
        try:
            for k in range(n):
                graph.invoke(say(f"remember: fact {k}"), cfg("t9", "u9"))
                first.set()  # the forget starts now: the writer's next turns meet it at the gate
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    w = threading.Thread(target=writer)
    w.start()
    assert first.wait(30)
    receipt = L.forget(graph, "t1", [SID])
    w.join()
    assert not errors
    got = sorted(json.loads(v)["data"] for ns, _k, v in items(b.store) if ns == ("memories", "u9"))
    # the node keys each memory by how many it found: every write is there, none replayed over
    assert got == sorted(f"remember: fact {k}" for k in range(n))
    sp = spans_of(graph.store.journal.events())
    assert sp.turns["t9"] == n
    assert receipt.store["threads"] == ["t1", "t2"]
    assert not any(b"P4471902" in blob for blob in b.held().values())


# --- held-out memory agents (written from LangGraph's docs by someone who had not read this code) ---

def _threads(graph) -> list[str]:
    return sorted({t.config["configurable"]["thread_id"] for t in graph.checkpointer.list(None)})


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
@pytest.mark.parametrize("agent", ["node_memory_agent", "tool_memory_agent", "profile_agent", "shared_memory_agent"])
def test_heldout_memory_agents_forget_exactly_in_every_thread(agent, kind, tmp_path, request):
    """t1 equals its twin, t2 equals the twin's t2, the store equals the twin's (items by value: the
    docs' agents key some items by uuid4), no byte of the secret in the checkpointer's or the
    store's storage, and no consequential tool fired again."""
    from tests.integrations import heldout_memory_agents as M

    build, drive = M.AGENTS[agent]
    pg = request.getfixturevalue("postgres") if kind == "postgres" else None
    b = Backing(kind, tmp_path, pg)
    graph, counters = build(b.saver, b.store)
    drive(graph, True)
    assert any(b"P4471902" in blob for blob in b.held().values())
    fired = dict(counters)
    receipt = L.forget(graph, "t1", [M.SECRET_ID])
    assert counters == fired, "a consequential tool ran again in the replay"
    tb = Backing(kind, tmp_path, pg, name="twin")  # the same kind: each orders a search its own way
    twin, _ = build(tb.saver, tb.store)
    drive(twin, False)
    assert _threads(graph) == _threads(twin)
    for t in _threads(graph):
        assert L.compare_threads(graph, t, twin, t) == [], t
    assert items(b.store, keys=agent != "node_memory_agent") == items(tb.store, keys=agent != "node_memory_agent")
    for where, blob in b.held().items():
        assert b"P4471902" not in blob, f"the secret is left in the {where}"
    assert receipt.exactness == "checked" and receipt.transitions == receipt["T"] - receipt["checkpoint"]


# --- forgotten stays forgotten: a backup taken before a forget, restored -----------------------------

def _pg_dump(pg, db) -> bytes:
    import subprocess

    return subprocess.run([str(pg.bin / "pg_dump"), "-h", pg.socket, "-U", "postgres", db], check=True,
                          capture_output=True, timeout=120).stdout


def _pg_restore(pg, sql: bytes) -> str:
    import subprocess

    db = pg.createdb()
    subprocess.run([str(pg.bin / "psql"), "-q", "-v", "ON_ERROR_STOP=1", "-h", pg.socket, "-U", "postgres", "-d", db],
                   input=sql, check=True, capture_output=True, timeout=120)
    return db


def _reopen(kind, tmp_path, pg, db=None):
    """The graph opened again on what the backing holds now (a new process would do this)."""
    b = Backing.__new__(Backing)
    b.kind, b.pg = kind, pg
    b.cp_path, b.st_path = tmp_path / "a-cp.sqlite", tmp_path / "a-store.sqlite"
    if kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.store.sqlite import SqliteStore

        b.saver = SqliteSaver(sqlite3.connect(str(b.cp_path), check_same_thread=False))
        b.store = SqliteStore(sqlite3.connect(str(b.st_path), check_same_thread=False, isolation_level=None))
    else:
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
        from langgraph.store.postgres import PostgresStore
        from psycopg.rows import dict_row

        b.db = db
        b.conn = psycopg.connect(pg.url(db), autocommit=True, prepare_threshold=0, row_factory=dict_row)
        b.store_conn = psycopg.connect(pg.url(db), autocommit=True, prepare_threshold=0, row_factory=dict_row)
        b.saver, b.store = PostgresSaver(b.conn), PostgresStore(b.store_conn)
    return b


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_a_restored_backup_is_refused_until_the_forget_is_reapplied(kind, tmp_path, request):
    import copy
    import shutil

    pg = request.getfixturevalue("postgres") if kind == "postgres" else None
    record = tmp_path / "elsewhere" / "forgets.jsonl"
    b = Backing(kind, tmp_path, pg)
    llm = L.UnseeChatModel.from_model("tiny-llama")
    graph, _ = memory_graph(b.saver, b.store, llm)
    L.forgettable(graph, record=record)
    run(graph, True)
    if kind == "memory":  # the backup
        saved = copy.deepcopy((b.saver.storage, b.saver.writes, b.saver.blobs, b.store._data, graph.store.journal._events))
    elif kind == "sqlite":  # a file copy, its WAL with it
        for p in (b.cp_path, b.st_path):
            for f in (p, p.with_name(p.name + "-wal")):
                if f.exists():
                    shutil.copy(f, tmp_path / (f.name + ".bak"))
    else:
        dump = _pg_dump(pg, b.db)
    L.forget(graph, "t1", [SID])
    assert [r["kind"] for r in ForgetRecord(record).records()] == ["forget", "forget"]  # t1, and t2 it replayed
    if kind == "memory":  # the backup restored
        (b.saver.storage, b.saver.writes, b.saver.blobs, b.store._data, graph.store.journal._events) = saved
    else:
        if kind == "sqlite":
            b.saver.conn.close()
            b.store.conn.close()
            for p in (b.cp_path, b.st_path):
                for f in (p, p.with_name(p.name + "-wal"), p.with_name(p.name + "-shm")):
                    f.unlink(missing_ok=True)
                    if (tmp_path / (f.name + ".bak")).exists():
                        shutil.copy(tmp_path / (f.name + ".bak"), f)
            b = _reopen(kind, tmp_path, pg)
        else:
            b = _reopen(kind, tmp_path, pg, _pg_restore(pg, dump))
        graph, _ = memory_graph(b.saver, b.store, llm)
        L.forgettable(graph, record=record)
    assert any(b"P4471902" in blob for blob in b.held().values())
    for use in (lambda: graph.invoke(say("hello again"), cfg("t1")), lambda: graph.invoke(say("hi"), cfg("t2")),
                lambda: L.forget(graph, "t1", ["t1.1"])):
        with pytest.raises(UnseeError, match=r"taken before that forget was restored.*reapply\(graph\)"):
            use()
    assert L.check_record(graph)["restored"] == ["t1", "t2"]
    receipts = L.reapply(graph)
    assert [r.thread_id for r in receipts] == ["t1"]
    assert L.check_record(graph) == {"threads": 3, "restored": [], "store": "ok", "records": 4}
    assert_is_the_twin(graph, b, kind, tmp_path, pg, llm)
    graph.invoke(say("hello again"), cfg("t1"))  # usable again


def test_a_store_restored_alone_is_refused_and_an_altered_record_does_not_check(tmp_path):
    import copy

    record = tmp_path / "forgets.jsonl"
    b = Backing("memory", tmp_path)
    graph, _ = memory_graph(b.saver, b.store)
    L.forgettable(graph, record=record)
    run(graph, True)
    saved = copy.deepcopy((b.store._data, graph.store.journal._events))
    L.forget(graph, "t1", [SID])
    b.store._data, graph.store.journal._events = saved  # only the store's backup restored
    with pytest.raises(UnseeError, match="store's journal is not what forget #"):
        L.forget(graph, "t2", ["t2.1"])
    lines = record.read_text().splitlines()
    record.write_text("\n".join([lines[0].replace('"forget"', '"reapply"')] + lines[1:]) + "\n")
    with pytest.raises(UnseeError, match="does not check at line 1"):
        L.check_record(graph)


# --- a store with a vector index: the target's vectors go too --------------------------------------

def _embed(texts: list[str]) -> list[list[float]]:
    """A deterministic embedding: eight numbers from each text's digest."""
    import hashlib

    return [[b / 255 for b in hashlib.sha256(t.encode()).digest()[:8]] for t in texts]


# (SqliteStore's index needs sqlite-vec loaded as an extension, which this machine's Python sqlite3 cannot
# load; Postgres' needs pgvector on the server: the same code path, the index rows written by LangGraph)
@pytest.mark.parametrize("kind", ["memory"])
def test_a_store_with_a_vector_index_loses_the_targets_vectors(kind, tmp_path):
    import struct

    index = {"dims": 8, "embed": _embed, "fields": ["data"]}

    def open_(name):
        if kind == "memory":
            return InMemorySaver(), InMemoryStore(index=index)
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.store.sqlite import SqliteStore

        store = SqliteStore(sqlite3.connect(str(tmp_path / f"{name}-store.sqlite"), check_same_thread=False,
                                            isolation_level=None), index=index)
        store.setup()
        return SqliteSaver(sqlite3.connect(str(tmp_path / f"{name}-cp.sqlite"), check_same_thread=False)), store

    saver, store = open_("a")
    graph, llm = memory_graph(saver, store)
    run(graph, True)
    vector = _embed([SECRET])[0]
    packed = struct.pack("8f", *vector)

    def vectors(st):
        if kind == "memory":
            return [v for ns in st._vectors.values() for fields in ns.values() for v in fields.values()]
        with st.lock:
            return [struct.unpack("8f", r[0]) for r in st.conn.execute("SELECT embedding FROM store_vectors")]

    def close(v):
        return all(abs(a - b) < 1e-6 for a, b in zip(v, vector))

    assert any(close(v) for v in vectors(store))
    L.forget(graph, "t1", [SID])
    assert not any(close(v) for v in vectors(store)), "the secret's vector is left in the index"
    if kind == "sqlite":
        assert packed not in file_bytes(tmp_path / "a-store.sqlite")
    tsaver, tstore = open_("twin")
    twin, _ = memory_graph(tsaver, tstore, llm)
    run(twin, False)
    for t in ("t1", "t2", "t3"):
        assert L.compare_threads(graph, t, twin, t) == [], t
    assert items(store) == items(tstore)
    assert sorted(map(tuple, vectors(store))) == sorted(map(tuple, vectors(tstore)))


def test_a_forget_refuses_when_a_running_turn_does_not_end_in_its_wait(tmp_path):
    b = Backing("memory", tmp_path)
    graph, llm = memory_graph(b.saver, b.store)
    run(graph, True)
    go, started = threading.Event(), threading.Event()
    inner = graph.store.inner

    class Slow:  # the store a slow turn blocks in, after it began
        def __getattr__(self, name):
            return getattr(inner, name)

        def batch(self, ops):
            started.set()
            go.wait(10)
            return inner.batch(ops)

    graph.store.inner = Slow()
    w = threading.Thread(target=lambda: graph.invoke(say("remember: slow"), cfg("t9", "u9")))
    w.start()
    assert started.wait(10)
    before = snapshot(b)
    with pytest.raises(UnseeError, match="still running after 0.2 s"):
        L.forget(graph, "t1", [SID], wait=0.2)
    assert snapshot(b) == before
    graph.store.inner = inner
    go.set()
    w.join()
    L.forget(graph, "t1", [SID])
    assert [it.value["data"] for it in b.store.search(("memories", "u9"))] == ["remember: slow"]
