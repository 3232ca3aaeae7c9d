"""Every checkpointer, sync and async, every message form LangGraph accepts: a forget is exact.

One agent as LangChain's documentation writes one (`create_agent` with two tools), made
forgettable, runs six turns whose inputs take every form LangGraph accepts: a `("system", …)`
tuple, a `{"role": "user", …}` dict, the secret, a plain string, a content-block list, a message
tagged with `source_message`. The secret's turn takes one form per run; an untagged secret is
named by its place ("t3.1"). On each checkpointer (InMemorySaver, SqliteSaver, AsyncSqliteSaver,
PostgresSaver and AsyncPostgresSaver against a real server), driven sync (`invoke`, `forget`) or
async (`ainvoke`/`astream`, `aforget`):

- the forgotten thread equals a fresh thread that never saw the secret, turn for turn: every
  state value, every message with its id, and (on tiny-llama) the K/V under torch.equal;
- the booking tool never runs again, and the world ledger is unchanged;
- no byte of the secret is left in the checkpointer's storage: the SQLite file and its WAL; the
  Postgres database's pg_dump and the checkpoint tables' files; the InMemorySaver's dicts.

On tiny-llama the secret's form rotates over the six runs; a scripted deterministic model (which
books with the secret as the reason, so the forget redacts the ledger) runs every form on every
checkpointer.
"""

import asyncio
import sqlite3
from pathlib import Path

import pytest

pytest.importorskip("langgraph", reason="install the test extras: bash scripts/setup.sh --tests")

from langchain.agents import create_agent
from langchain_core.messages import RemoveMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

from unsee.impl.integrations import langgraph as L
from unsee.impl.integrations.langgraph import kit as R
from tests.integrations.test_langgraph import SECRET, Counted, Scripted, file_bytes

FORMS = ("tuple", "dict", "string", "blocks", "tagged", "tagged dict")
CELLS = ("memory sync", "memory async", "sqlite sync", "sqlite async", "postgres sync", "postgres async")


def secret_input(form: str):
    """The secret as one input item of the given form, and the source id that names it."""
    return {"tuple": (("user", SECRET), "t3.1"), "dict": ({"role": "user", "content": SECRET}, "t3.1"),
            "string": (SECRET, "t3.1"), "blocks": ({"role": "user", "content": [{"type": "text", "text": SECRET}]},
                                                  "t3.1"),
            "tagged": (L.source_message(SECRET, "med"), "med"),
            "tagged dict": ({"role": "user", "content": SECRET, "unsee_source": "med"}, "med")}[form]


def turns(form: str):
    """Six turns' `messages` inputs, every form LangGraph accepts; None marks the secret's turn."""
    item, _ = secret_input(form)
    return [[("system", "you are a medical assistant")], [{"role": "user", "content": "hello i need a doctor"}],
            [item], ["please book a visit for me"],
            [{"role": "user", "content": [{"type": "text", "text": "thanks"}]}], [L.source_message("bye", "u6")]]


class Store:
    """One checkpointer of a kind, opened for one agent, and every byte it holds."""

    def __init__(self, kind: str, where: Path, pg) -> None:
        self.kind, self.where, self.pg = kind, where, pg
        self.db = None

    def open(self):
        if self.kind == "memory":
            self.saver = InMemorySaver()
        elif self.kind == "sqlite":
            self.saver = SqliteSaver(sqlite3.connect(str(self.where), check_same_thread=False))
        else:
            import psycopg
            from langgraph.checkpoint.postgres import PostgresSaver
            from psycopg.rows import dict_row

            self.db = self.pg.createdb()
            self.conn = psycopg.connect(self.pg.url(self.db), autocommit=True, prepare_threshold=0,
                                        row_factory=dict_row)
            self.saver = PostgresSaver(self.conn)
            self.saver.setup()
            external(self.conn)
        return self.saver

    async def aopen(self):
        if self.kind == "memory":
            self.saver = InMemorySaver()
        elif self.kind == "sqlite":
            import aiosqlite
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

            self.conn = await aiosqlite.connect(str(self.where))
            self.saver = AsyncSqliteSaver(self.conn)
        else:
            import psycopg
            from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
            from psycopg.rows import dict_row

            self.db = self.pg.createdb()
            self.conn = await psycopg.AsyncConnection.connect(self.pg.url(self.db), autocommit=True,
                                                              prepare_threshold=0, row_factory=dict_row)
            self.saver = AsyncPostgresSaver(self.conn)
            await self.saver.setup()
            with __import__("psycopg").connect(self.pg.url(self.db), autocommit=True) as c:
                external(c)
        return self.saver

    def close(self) -> None:
        if self.kind != "memory" and hasattr(self, "conn"):
            self.conn.close()

    async def aclose(self) -> None:
        if self.kind != "memory" and hasattr(self, "conn"):
            await self.conn.close()

    def stored(self) -> dict[str, bytes]:
        """Every byte the checkpointer holds, by where it is."""
        if self.kind == "memory":
            return {"memory": b"".join(_bytes(x) for x in (self.saver.storage, self.saver.writes, self.saver.blobs,
                                                          getattr(self.saver, "unsee_world", [])))}
        if self.kind == "sqlite":
            return {"sqlite file and WAL": file_bytes(self.where)}
        files = self.pg.table_files(self.db, ("checkpoints", "checkpoint_blobs", "checkpoint_writes", "unsee_world"))
        return {"pg_dump": self.pg.dump(self.db), "the tables' files": b"".join(files.values())}


def external(conn) -> None:
    """Keep the checkpoint tables' large values uncompressed (out of line, as they are), so the
    table files show the secret's bytes where they hold them: a compressed copy would hide them
    from the byte search (pg_dump searches the values themselves)."""
    for table, col in (("checkpoint_blobs", "blob"), ("checkpoint_writes", "blob"), ("checkpoints", "checkpoint")):
        conn.execute(f"ALTER TABLE {table} ALTER COLUMN {col} SET STORAGE EXTERNAL")


def _bytes(x) -> bytes:
    if isinstance(x, bytes):
        return x
    if isinstance(x, str):
        return x.encode()
    if isinstance(x, dict):
        return b"".join(_bytes(k) + _bytes(v) for k, v in x.items())
    if isinstance(x, (list, tuple)):
        return b"".join(_bytes(v) for v in x)
    if hasattr(x, "__dataclass_fields__"):
        return b"".join(_bytes(getattr(x, f)) for f in x.__dataclass_fields__)
    return b""


NEEDLES = (SECRET.encode(), b"type 2 diabetes", b"keep it private")


def leaks(stored: dict[str, bytes]) -> list[str]:
    return [f"{needle!r} in {where}" for where, b in stored.items() for needle in NEEDLES if needle in b]


@pytest.fixture(scope="module")
def tiny():
    from unsee.impl.engine.models import load

    return load("tiny-llama")


def model(name: str, bundle):
    if name == "scripted":
        return L.deterministic(Scripted())
    return L.UnseeChatModel(context=L.KVContext(bundle))


def agent_on(llm, saver, tools):
    return L.forgettable(create_agent(llm, tools.tools, checkpointer=saver))


CFG = {"configurable": {"thread_id": "t1"}}
TEXT = {"tiny": R.Short, "scripted": str}  # bounded arguments keep the tiny model's calls short


def run_sync(kind, form, model_name, bundle, tmp_path, pg):
    store, twin_store = Store(kind, tmp_path / "a.sqlite", pg), Store(kind, tmp_path / "b.sqlite", pg)
    tools, twin_tools = Counted(TEXT[model_name]), Counted(TEXT[model_name])
    llm, twin_llm = model(model_name, bundle), model(model_name, bundle)
    agent, twin = agent_on(llm, store.open(), tools), agent_on(twin_llm, twin_store.open(), twin_tools)
    _, source = secret_input(form)
    for k, msgs in enumerate(turns(form), 1):
        agent.invoke({"messages": msgs}, CFG)
        twin.invoke({"messages": [] if k == 3 else msgs}, CFG)
    before = {"stored": store.stored(), "runs": dict(tools.runs), "world": L.World(store.saver).entries("t1"),
              "sources": L.sources(agent, "t1")}
    receipt = L.forget(agent, "t1", [source], redact_ledger=model_name == "scripted")
    after = {"stored": store.stored(), "world": L.World(store.saver).entries("t1"),
             "diff": L.compare_threads(agent, "t1", twin, "t1", *((llm, twin_llm) if model_name == "tiny" else ()))}
    store.close()
    twin_store.close()
    return receipt, before, after, tools


async def run_async(kind, form, model_name, bundle, tmp_path, pg):
    store, twin_store = Store(kind, tmp_path / "a.sqlite", pg), Store(kind, tmp_path / "b.sqlite", pg)
    tools, twin_tools = Counted(TEXT[model_name]), Counted(TEXT[model_name])
    llm, twin_llm = model(model_name, bundle), model(model_name, bundle)
    agent = agent_on(llm, await store.aopen(), tools)
    twin = agent_on(twin_llm, await twin_store.aopen(), twin_tools)
    _, source = secret_input(form)
    for k, msgs in enumerate(turns(form), 1):
        if k % 2:  # ainvoke and astream both run a turn
            await agent.ainvoke({"messages": msgs}, CFG)
        else:
            async for _ in agent.astream({"messages": msgs}, CFG):
                pass
        await twin.ainvoke({"messages": [] if k == 3 else msgs}, CFG)
    before = {"stored": store.stored(), "runs": dict(tools.runs), "world": await L.World(store.saver).aentries("t1"),
              "sources": await L.asources(agent, "t1")}
    receipt = await L.aforget(agent, "t1", [source], redact_ledger=model_name == "scripted")
    after = {"stored": store.stored(), "world": await L.World(store.saver).aentries("t1"),
             "diff": await L.acompare_threads(agent, "t1", twin, "t1",
                                              *((llm, twin_llm) if model_name == "tiny" else ()))}
    await store.aclose()
    await twin_store.aclose()
    return receipt, before, after, tools


def forgotten(cell, form, model_name, bundle, tmp_path, request):
    kind, mode = cell.split()
    pg = request.getfixturevalue("postgres") if kind == "postgres" else None
    if mode == "sync":
        return run_sync(kind, form, model_name, bundle, tmp_path, pg)
    return asyncio.run(run_async(kind, form, model_name, bundle, tmp_path, pg))


def check(receipt, before, after, tools, model_name, form):
    assert after["diff"] == [], after["diff"]
    assert (receipt.tau, receipt.T, receipt.checkpoint) == (3, 6, 2)
    assert receipt.transitions == receipt.T - receipt.tau + 1 == 4
    assert tools.runs == before["runs"], "no tool ran again"
    assert all(any(n in b for n in NEEDLES) for b in before["stored"].values()), \
        "the secret was in every place searched before the forget (so the search can see it)"
    assert leaks(after["stored"]) == []
    assert receipt.checkpoints_deleted > 0
    src = [s for s in before["sources"] if s["turn"] == 3]
    assert [(s["source"], s["tagged"]) for s in src] == [(secret_input(form)[1], form.startswith("tagged"))]
    if model_name == "tiny":  # the ledger stays as it was: calls that fired happened
        assert after["world"] == before["world"]
        assert receipt.exactness == "checked"
    else:  # the booking carried the secret: listed for compensation, erased from the ledger
        (entry,) = receipt.compensation
        assert entry["committed"]["reason"] == SECRET and receipt.ledger_redacted == 1
        assert [e.call_id for e in after["world"]] != [e.call_id for e in before["world"]]
        assert receipt.exactness == "declared"


@pytest.mark.tiny
@pytest.mark.parametrize("cell,form", list(zip(CELLS, FORMS)))
def test_a_forget_on_tiny_llama_equals_the_twin_on_every_checkpointer(cell, form, tiny, tmp_path, request):
    check(*forgotten(cell, form, "tiny", tiny, tmp_path, request), "tiny", form)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("cell", CELLS)
def test_every_message_form_is_forgotten_on_every_checkpointer(cell, form, tmp_path, request):
    check(*forgotten(cell, form, "scripted", None, tmp_path, request), "scripted", form)


def test_forgetting_a_message_forgets_the_removal_of_it_and_keeps_other_removals(tmp_path):
    """The user removed the secret with LangGraph's RemoveMessage (which changes only the head);
    forgetting its source forgets the removal too: both turns become empty, as in a thread that
    never saw the secret. A removal of an earlier message is replayed as it was."""
    def agent(path):
        return agent_on(L.deterministic(Scripted()), SqliteSaver(sqlite3.connect(str(path), check_same_thread=False)),
                        Counted())

    a, twin = agent(tmp_path / "a.sqlite"), agent(tmp_path / "b.sqlite")
    a.invoke({"messages": [("user", "hello")]}, CFG)
    twin.invoke({"messages": [("user", "hello")]}, CFG)
    hello = a.get_state(CFG).values["messages"][0].id
    a.invoke({"messages": [L.source_message(SECRET, "med")]}, CFG)
    secret = next(m.id for m in a.get_state(CFG).values["messages"] if m.content == SECRET)
    a.invoke({"messages": [RemoveMessage(id=secret)]}, CFG)
    a.invoke({"messages": [RemoveMessage(id=hello), "thanks"]}, CFG)
    for msgs in ([], [], [RemoveMessage(id=hello), "thanks"]):
        twin.invoke({"messages": msgs}, CFG)
    assert [s["source"] for s in L.sources(a, "t1")] == ["t1.1", "med", "med", "t1.1", "t4.2"]  # a removal: its target's
    r = L.forget(a, "t1", ["med"], redact_ledger=True)  # the booking carried the secret: erase it there too
    assert (r.tau, r.transitions, r.ledger_redacted) == (2, 3, 1)
    assert L.compare_threads(a, "t1", twin, "t1") == []
    assert SECRET.encode() not in file_bytes(tmp_path / "a.sqlite")


@pytest.mark.tiny
def test_abatch_runs_two_threads_and_a_forget_of_one_equals_the_other(tiny):
    """`abatch` runs a turn of two threads at once on one UnseeChatModel; the thread that saw the
    secret, forgotten with aforget, equals the one that never did."""
    llm = model("tiny", tiny)
    agent = agent_on(llm, InMemorySaver(), Counted(R.Short))
    a, b = {"configurable": {"thread_id": "a"}}, {"configurable": {"thread_id": "b"}}

    async def main():
        for k, msgs in enumerate(turns("tagged"), 1):
            await agent.abatch([{"messages": msgs}, {"messages": [] if k == 3 else msgs}], [a, b])
        r = await L.aforget(agent, "a", ["med"])
        return r, await L.acompare_threads(agent, "a", agent, "b")

    r, diff = asyncio.run(main())
    assert diff == [] and r.transitions == 4


@pytest.mark.parametrize("cell", ["sqlite sync", "postgres async"])
def test_two_forgets_in_a_row_equal_a_twin_without_either(cell, tmp_path, request):
    """A second forget on a forgotten thread (the ledger's rows already resolved, the places
    renumbered) lands on the thread that never saw either source."""
    kind, mode = cell.split()
    pg = request.getfixturevalue("postgres") if kind == "postgres" else None
    store, twin_store = Store(kind, tmp_path / "a.sqlite", pg), Store(kind, tmp_path / "b.sqlite", pg)
    inputs = turns("tagged")
    inputs[3] = ["please book a visit for me", "with Dr. Rivera"]  # t4.1 and t4.2

    def twin_input(k, msgs):
        return [] if k == 3 else ["with Dr. Rivera"] if k == 4 else msgs

    async def main():
        agent = agent_on(L.deterministic(Scripted()), await store.aopen(), Counted())
        twin = agent_on(L.deterministic(Scripted()), await twin_store.aopen(), Counted())
        for k, msgs in enumerate(inputs, 1):
            await agent.ainvoke({"messages": msgs}, CFG)
            await twin.ainvoke({"messages": twin_input(k, msgs)}, CFG)
        first = await L.aforget(agent, "t1", ["med"])
        assert [s["source"] for s in await L.asources(agent, "t1") if s["turn"] == 4] == ["t4.1", "t4.2"]
        second = await L.aforget(agent, "t1", ["t4.1"])
        assert [s["text"] for s in await L.asources(agent, "t1") if s["turn"] == 4] == ["with Dr. Rivera"]
        diff = await L.acompare_threads(agent, "t1", twin, "t1")
        await store.aclose()
        await twin_store.aclose()
        return first, second, diff

    def sync():
        agent = agent_on(L.deterministic(Scripted()), store.open(), Counted())
        twin = agent_on(L.deterministic(Scripted()), twin_store.open(), Counted())
        for k, msgs in enumerate(inputs, 1):
            agent.invoke({"messages": msgs}, CFG)
            twin.invoke({"messages": twin_input(k, msgs)}, CFG)
        first = L.forget(agent, "t1", ["med"])
        second = L.forget(agent, "t1", ["t4.1"])
        return first, second, L.compare_threads(agent, "t1", twin, "t1")

    first, second, diff = sync() if mode == "sync" else asyncio.run(main())
    assert diff == []
    assert (first.tau, second.tau) == (3, 4) and second.transitions == 3
