"""A held-out agent, written from LangGraph's quickstart, forgets exactly on SmolLM2.

The agent is the quickstart's: `create_react_agent(model, tools=[...], prompt="You are a helpful
assistant")` with tools as plain Python functions with docstrings, a checkpointer, and
`agent.invoke({"messages": [{"role": "user", "content": ...}]}, {"configurable": {"thread_id": "1"}})`.
unsee's part is what its docs ask: the model is `UnseeChatModel` on SmolLM2-135M-Instruct, the
read-only tool is marked `read_only`, the one that acts on the world `consequential`, and the
graph `forgettable`. It runs seven turns; the third tells it a passport number. Three ways:

- SqliteSaver, `invoke`, the docs' dicts (the passport's dict names its source, "passport");
- AsyncSqliteSaver, `ainvoke`, ("user", text) tuples, untagged: `asources` names the passport
  turn "t3.1", and `aforget` forgets it;
- PostgresSaver against a real server, `invoke`, tuples and dicts mixed.

Each time: every call is a real call with JSON arguments under its tool's schema; the forget
equals a thread that never saw the passport (every turn's state, messages with their ids, the K/V
under torch.equal); the booking tool never runs again; and the passport's bytes are nowhere: not
in any file of the run's directory (SQLite), not in pg_dump of the database nor the checkpoint
tables' files (Postgres). The forget's seconds and the seven turns' seconds are printed (-s).
"""

import asyncio
import json
import os
import sqlite3
import time
from pathlib import Path

import pytest

pytest.importorskip("langgraph", reason="install the test extras: bash scripts/setup.sh --tests")

from langchain_core.messages import AIMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.prebuilt import create_react_agent

from unsee.impl.integrations.langgraph import (
    KVContext, UnseeChatModel, World, acompare_threads, aforget, asources, compare_threads, consequential,
    forget, forgettable, read_only,
)
from tests.integrations.test_tool_calls_chat import conforms, schemas

pytestmark = pytest.mark.slow

PASSPORT = "My passport number is X7Q4812 and I was born on 3 March 1988; keep it for the hotel."
NEEDLES = (b"X7Q4812", b"3 March 1988", PASSPORT.encode())
TURNS = ["What is the weather in Paris?",
         "Book a table for two at Chez Marie at 8pm.",
         PASSPORT,
         "What is the weather in Rome?",
         "Book a table for four at Da Luigi at 7pm.",
         "Is it sunny in Tokyo?",
         "Thanks, that is all."]


class Tools:
    """The quickstart's tools (plain functions with docstrings), with how often each really ran."""

    def __init__(self) -> None:
        self.runs = {"get_weather": 0, "book_table": 0}

        def get_weather(city: str) -> str:
            """Get weather for a given city."""
            self.runs["get_weather"] += 1
            return f"It's always sunny in {city}!"

        def book_table(restaurant: str, time: str) -> str:
            """Book a table at a restaurant for the given time."""
            self.runs["book_table"] += 1
            return booked(restaurant, time)

        self.raw = [get_weather, book_table]
        self.tools = [read_only(get_weather), consequential(book_table, result=booked)]


def booked(restaurant: str, time: str) -> str:
    return f"Booked {restaurant} at {time}."


@pytest.fixture(scope="module")
def smollm2():
    from unsee.impl.engine.models import load

    return load("smollm2")


def build(bundle, saver, tools):
    model = UnseeChatModel(context=KVContext(bundle))
    agent = create_react_agent(model, tools=tools.tools, prompt="You are a helpful assistant", checkpointer=saver)
    return forgettable(agent), model


def inputs(form: str) -> list:
    """The seven turns' input, each one list of messages in the scenario's form (None: the passport)."""
    out = []
    for k, text in enumerate(TURNS, 1):
        if form == "dicts":
            m = {"role": "user", "content": text} | ({"unsee_source": "passport"} if k == 3 else {})
        elif form == "tuples":
            m = ("user", text)
        else:  # mixed: tuples on odd turns, dicts on even ones
            m = ("user", text) if k % 2 else {"role": "user", "content": text}
        out.append([m])
    return out


def every_call_is_valid_json(messages, tools) -> int:
    want = schemas([t.inner for t in tools.tools])
    n = 0
    for m in messages:
        if isinstance(m, AIMessage):
            assert not m.invalid_tool_calls, m.invalid_tool_calls
            for c in m.tool_calls:
                assert conforms(c["args"], want[c["name"]]), c
                json.loads(json.dumps(c["args"]))
                n += 1
    return n


def report(name, run_s, forget_s, receipt):
    print(f"\n[{name}] 7 turns {run_s:.1f} s, forget {forget_s:.1f} s (ratio {forget_s / run_s:.3f}); "
          f"tau={receipt.tau} T={receipt.T} transitions={receipt.transitions} replies={receipt.work.replies} "
          f"skipped={receipt.work.replies_skipped} decoded={receipt.work.tokens_decoded}; load {os.getloadavg()}")


def check(before_runs, tools, receipt, diff, messages):
    assert diff == [], diff
    assert receipt.transitions == receipt.T - receipt.tau + 1 == 5 and receipt.tau == 3
    assert every_call_is_valid_json(messages, tools) >= 6, "the agent called its tools with JSON arguments"
    assert tools.runs["book_table"] == before_runs["book_table"] > 0, "the booking tool never ran again"


def test_the_quickstart_agent_on_sqlite_forgets_a_turn_exactly(smollm2, tmp_path):
    cfg = {"configurable": {"thread_id": "1"}}
    tools = Tools()
    agent, model = build(smollm2, SqliteSaver(sqlite3.connect(str(tmp_path / "agent.sqlite"), check_same_thread=False)),
                         tools)
    t0 = time.perf_counter()
    for msgs in inputs("dicts"):
        agent.invoke({"messages": msgs}, cfg)
    run_s = time.perf_counter() - t0
    messages = agent.get_state(cfg).values["messages"]
    runs = dict(tools.runs)
    assert any(n in b"".join(p.read_bytes() for p in tmp_path.iterdir()) for n in NEEDLES)
    t0 = time.perf_counter()
    receipt = forget(agent, "1", ["passport"], redact_ledger=True)
    forget_s = time.perf_counter() - t0
    twin, twin_model = build(smollm2, SqliteSaver(sqlite3.connect(":memory:", check_same_thread=False)), Tools())
    for k, msgs in enumerate(inputs("dicts"), 1):
        twin.invoke({"messages": [] if k == 3 else msgs}, cfg)
    check(runs, tools, receipt, compare_threads(agent, "1", twin, "1", model, twin_model), messages)
    assert World(agent.checkpointer).entries("1"), "the bookings that fired are in the ledger"
    stored = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert [n for n in NEEDLES if n in stored] == [], "the passport left no byte in the run's directory"
    report("sqlite", run_s, forget_s, receipt)


def test_the_quickstart_agent_on_async_sqlite_with_tuples_forgets_with_aforget(smollm2, tmp_path):
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    cfg = {"configurable": {"thread_id": "1"}}
    tools = Tools()

    async def main():
        async with aiosqlite.connect(str(tmp_path / "agent.sqlite")) as conn, aiosqlite.connect(":memory:") as tconn:
            agent, model = build(smollm2, AsyncSqliteSaver(conn), tools)
            t0 = time.perf_counter()
            for msgs in inputs("tuples"):
                await agent.ainvoke({"messages": msgs}, cfg)
            run_s = time.perf_counter() - t0
            messages = (await agent.aget_state(cfg)).values["messages"]
            runs = dict(tools.runs)
            named = [s["source"] for s in await asources(agent, "1") if "X7Q4812" in s["text"]]
            assert named == ["t3.1"]
            t0 = time.perf_counter()
            receipt = await aforget(agent, "1", named, redact_ledger=True)
            forget_s = time.perf_counter() - t0
            twin, twin_model = build(smollm2, AsyncSqliteSaver(tconn), Tools())
            for k, msgs in enumerate(inputs("tuples"), 1):
                await twin.ainvoke({"messages": [] if k == 3 else msgs}, cfg)
            diff = await acompare_threads(agent, "1", twin, "1", model, twin_model)
            return run_s, forget_s, receipt, diff, messages, runs

    run_s, forget_s, receipt, diff, messages, runs = asyncio.run(main())
    check(runs, tools, receipt, diff, messages)
    stored = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert [n for n in NEEDLES if n in stored] == []
    report("async sqlite", run_s, forget_s, receipt)


def test_the_quickstart_agent_on_postgres_forgets_a_turn_and_pg_dump_holds_no_byte_of_it(smollm2, postgres):
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    from tests.integrations.test_langgraph_checkpointers import external

    def saver(db):
        conn = psycopg.connect(postgres.url(db), autocommit=True, prepare_threshold=0, row_factory=dict_row)
        s = PostgresSaver(conn)
        s.setup()
        external(conn)
        return s

    cfg = {"configurable": {"thread_id": "1"}}
    tools, db = Tools(), postgres.createdb()
    agent, model = build(smollm2, saver(db), tools)
    t0 = time.perf_counter()
    for msgs in inputs("mixed"):
        agent.invoke({"messages": msgs}, cfg)
    run_s = time.perf_counter() - t0
    messages = agent.get_state(cfg).values["messages"]
    runs = dict(tools.runs)
    tables = ("checkpoints", "checkpoint_blobs", "checkpoint_writes", "unsee_world")
    assert any(n in postgres.dump(db) for n in NEEDLES)
    assert any(n in b for b in postgres.table_files(db, tables).values() for n in NEEDLES)
    t0 = time.perf_counter()
    receipt = forget(agent, "1", ["t3.1"], redact_ledger=True)
    forget_s = time.perf_counter() - t0
    twin, twin_model = build(smollm2, saver(postgres.createdb()), Tools())
    for k, msgs in enumerate(inputs("mixed"), 1):
        twin.invoke({"messages": [] if k == 3 else msgs}, cfg)
    check(runs, tools, receipt, compare_threads(agent, "1", twin, "1", model, twin_model), messages)
    assert [n for n in NEEDLES if n in postgres.dump(db)] == [], "pg_dump holds no byte of the passport"
    files = postgres.table_files(db, tables)
    assert [(t, n) for t, b in files.items() for n in NEEDLES if n in b] == [], "nor do the tables' files"
    report("postgres", run_s, forget_s, receipt)
