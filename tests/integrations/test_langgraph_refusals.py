"""What a forget cannot handle is refused before anything is written, with an error that says why.

A checkpointer it does not know the storage of (a custom `BaseCheckpointSaver`, even a subclass
of a known one), a graph without a checkpointer, a graph with static interrupts, a thread
changed by `update_state`, run with
durability="exit", a removal of a message the replay may write under another id, a sync forget
on an async checkpointer (the error names `aforget`) and the reverse: each is refused and the
thread's checkpoints are byte for byte what they were. `deterministic(model)` refuses a model it
cannot make exact (a hosted model's client, sampling settings) and says why; it takes a model
whose `bind_tools` returns the model itself, as `create_agent` calls it, and gives replies and
calls ids derived from what the model saw.
"""

import asyncio
import pickle
import sqlite3

import pytest

pytest.importorskip("langgraph", reason="install the test extras: bash scripts/setup.sh --tests")

from langchain.agents import create_agent
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, interrupt

from unsee.impl.integrations import langgraph as L
from unsee.model.errors import UnseeError
from tests.integrations.test_langgraph import SECRET, Counted, Scripted

CFG = {"configurable": {"thread_id": "t1"}}


def sqlite_agent(path, **kw):
    saver = SqliteSaver(sqlite3.connect(str(path), check_same_thread=False))
    return create_agent(L.deterministic(Scripted()), Counted().tools, checkpointer=saver, **kw)


def stored(path) -> bytes:
    """The database file and its WAL: every byte of the checkpoints. (The -shm file is SQLite's
    index of the WAL in shared memory, whose read marks any reader moves.)"""
    return b"".join(p.read_bytes() for p in (path, path.with_name(path.name + "-wal")) if p.exists())


def refused(call, path, match):
    """The forget raises UnseeError matching `match`, and the file is byte for byte as it was."""
    before = stored(path)
    with pytest.raises(UnseeError, match=match):
        call()
    assert stored(path) == before, "a refused forget wrote to the checkpointer"


# --- checkpointers and graph shapes -------------------------------------------------------------------

class MySaver(InMemorySaver):
    """A user's own checkpointer (here a subclass of a known one: it may store anywhere)."""


def test_a_custom_checkpointer_is_refused_and_left_as_it_was():
    saver = MySaver()
    agent = create_agent(L.deterministic(Scripted()), Counted().tools, checkpointer=saver)
    agent.invoke({"messages": [("user", SECRET)]}, CFG)
    before = pickle.dumps((dict(saver.storage), dict(saver.writes), dict(saver.blobs)))
    with pytest.raises(UnseeError, match=r"MySaver; a forget can erase only .*exactly those classes"):
        L.forget(agent, "t1", ["t1.1"])
    assert pickle.dumps((dict(saver.storage), dict(saver.writes), dict(saver.blobs))) == before
    with pytest.raises(UnseeError, match="MySaver"):
        L.forgettable(agent)  # refused when the graph is built, too


def test_a_graph_without_a_checkpointer_is_refused():
    agent = create_agent(L.deterministic(Scripted()), Counted().tools)
    agent.invoke({"messages": [("user", "hello")]})
    with pytest.raises(UnseeError, match="has no checkpointer"):
        L.forget(agent, "t1", ["t1.1"])


def test_a_graph_with_static_interrupts_is_refused(tmp_path):
    """A turn paused at interrupt_before and resumed with invoke(None) leaves no mark in the
    checkpoints; a replay of its input would stop at the breakpoint, so the graph is refused."""
    agent = sqlite_agent(tmp_path / "a.sqlite", interrupt_before=["tools"])
    agent.invoke({"messages": [("user", SECRET)]}, CFG)
    agent.invoke(None, CFG)
    refused(lambda: L.forget(agent, "t1", ["t1.1"]), tmp_path / "a.sqlite", r"interrupts before or after nodes")


def interrupting(path):
    """A graph whose node asks a human (LangGraph's interrupt())."""
    def ask(state: MessagesState):
        answer = interrupt("may I book?")
        return {"messages": [SystemMessage(f"you said {answer}", id=f"a{len(state['messages'])}")]}

    b = StateGraph(MessagesState)
    b.add_node("ask", ask)
    b.add_edge(START, "ask")
    b.add_edge("ask", END)
    return b.compile(checkpointer=SqliteSaver(sqlite3.connect(str(path), check_same_thread=False)))


def test_an_interrupted_turn_is_forgotten_paused_or_resumed(tmp_path):
    """Once refused, now replayed: a thread paused at an interrupt() is forgotten as it stands (the
    replay pauses at the same question), and after the human's answer the answer is replayed where
    the same question is asked; no byte of the secret is left."""
    path = tmp_path / "a.sqlite"
    g = interrupting(path)
    g.invoke({"messages": [("user", SECRET)]}, CFG)
    assert g.get_state(CFG).next == ("ask",)
    assert L.forget(g, "t1", ["t1.1"]).stopped == {}
    assert [i.value for i in g.get_state(CFG).interrupts] == ["may I book?"]
    g.invoke({"messages": [("user", SECRET)]}, CFG)  # a new turn on the paused thread
    g.invoke(Command(resume="yes"), CFG)
    receipt = L.forget(g, "t1", ["t2.1"])
    assert receipt.stopped == {} and receipt.transitions == 2
    assert [m.content for m in g.get_state(CFG).values["messages"]] == ["you said yes"]
    g.checkpointer.conn.commit()
    assert SECRET.encode() not in stored(path)


def test_a_thread_changed_by_update_state_is_refused(tmp_path):
    agent = sqlite_agent(tmp_path / "a.sqlite")
    agent.invoke({"messages": [("user", "hello")]}, CFG)
    agent.update_state(CFG, {"messages": [HumanMessage("added by hand")]})
    agent.invoke({"messages": [("user", SECRET)]}, CFG)
    refused(lambda: L.forget(agent, "t1", ["t2.1"]), tmp_path / "a.sqlite", "update_state")


def test_a_thread_run_with_durability_exit_is_refused(tmp_path):
    agent = sqlite_agent(tmp_path / "a.sqlite")
    agent.invoke({"messages": [("user", "hello")]}, CFG, durability="exit")
    agent.invoke({"messages": [("user", SECRET)]}, CFG, durability="exit")
    refused(lambda: L.forget(agent, "t1", ["t2.1"]), tmp_path / "a.sqlite", "durability='exit'")


def test_a_step_that_failed_is_refused(tmp_path):
    class Failing(Scripted):
        def _generate(self, messages, stop=None, run_manager=None, **kw):
            if "fail" in messages[-1].text:
                raise RuntimeError("the model is down")
            return super()._generate(messages, stop, run_manager, **kw)

    saver = SqliteSaver(sqlite3.connect(str(tmp_path / "a.sqlite"), check_same_thread=False))
    agent = create_agent(L.deterministic(Failing()), Counted().tools, checkpointer=saver)
    agent.invoke({"messages": [("user", "hello")]}, CFG)
    with pytest.raises(RuntimeError):
        agent.invoke({"messages": [("user", "fail now")]}, CFG)
    refused(lambda: L.forget(agent, "t1", ["t1.1"]), tmp_path / "a.sqlite", "has not finished|failed")


def test_removing_a_message_written_after_the_fork_is_refused(tmp_path):
    """The model's reply after the target may differ, and its id with it: a later RemoveMessage of
    it cannot be replayed."""
    agent = L.forgettable(sqlite_agent(tmp_path / "a.sqlite"))
    agent.invoke({"messages": [("user", "hello")]}, CFG)
    agent.invoke({"messages": [("user", SECRET)]}, CFG)
    reply = agent.get_state(CFG).values["messages"][-1]
    agent.invoke({"messages": [RemoveMessage(id=reply.id)]}, CFG)
    refused(lambda: L.forget(agent, "t1", ["t2.1"]), tmp_path / "a.sqlite", "written after the fork point")


def test_a_sync_forget_on_an_async_checkpointer_names_aforget(tmp_path):
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    path = tmp_path / "a.sqlite"

    async def main():
        async with aiosqlite.connect(str(path)) as conn:
            agent = create_agent(L.deterministic(Scripted()), Counted().tools, checkpointer=AsyncSqliteSaver(conn))
            await agent.ainvoke({"messages": [("user", SECRET)]}, CFG)
            await conn.commit()
            refused(lambda: L.forget(agent, "t1", ["t1.1"]), path, r"await aforget\(graph, thread_id, sources\)")

    asyncio.run(main())


def test_aforget_on_a_sync_only_checkpointer_names_forget(tmp_path):
    agent = sqlite_agent(tmp_path / "a.sqlite")
    agent.invoke({"messages": [("user", SECRET)]}, CFG)
    refused(lambda: asyncio.run(L.aforget(agent, "t1", ["t1.1"])), tmp_path / "a.sqlite",
            r"no async interface: forget with forget\(graph, thread_id, sources\)")


# --- deterministic(model) -------------------------------------------------------------------------------

class Local(BaseChatModel):
    """A local model with the settings a user may give one; it answers with a fixed text."""

    temperature: float | None = None
    top_p: float | None = None
    do_sample: bool | None = None
    model_kwargs: dict = {}

    @property
    def _llm_type(self) -> str:
        return "local"

    def _generate(self, messages, stop=None, run_manager=None, **kw):
        return ChatResult(generations=[ChatGeneration(message=AIMessage(f"ok {len(messages)}"))])


class Hosted(Local):
    openai_api_key: str | None = None


@pytest.mark.parametrize("settings,why", [
    ({"temperature": 0.7}, r"samples \(temperature=0.7\)"),
    ({"top_p": 0.9}, r"samples \(top_p=0.9\)"),
    ({"do_sample": True}, r"samples \(do_sample=True\)"),
    ({"model_kwargs": {"temperature": 0.5}}, r"samples \(temperature=0.5\)"),
])
def test_deterministic_refuses_a_sampling_model(settings, why):
    with pytest.raises(UnseeError, match=why):
        L.deterministic(Local(**settings))


def test_deterministic_takes_a_greedy_model_whatever_its_top_p():
    assert isinstance(L.deterministic(Local(temperature=0, top_p=0.9)), L.DeclaredDeterministic)
    assert isinstance(L.deterministic(Local(do_sample=False, top_p=0.5)), L.DeclaredDeterministic)


def test_deterministic_refuses_a_hosted_models_client():
    with pytest.raises(UnseeError, match="openai_api_key set, so its replies come from a server"):
        L.deterministic(Hosted(openai_api_key="sk-test", temperature=0))
    ChatOpenAI = type("ChatOpenAI", (Local,), {"__module__": "langchain_openai.chat_models.base"})
    with pytest.raises(UnseeError, match=r"client of a hosted model \(langchain_openai"):
        L.deterministic(ChatOpenAI(temperature=0))


class Decides(Local):
    """A model that decides its calls without a schema: bind_tools returns the model itself. It
    books on a diagnosis, with the call id a random draw (as some models do)."""

    def bind_tools(self, tools, **kw):
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kw):
        import uuid

        last = messages[-1]
        if isinstance(last, HumanMessage) and "diagnosis" in last.text:
            msg = AIMessage("", tool_calls=[{"name": "book_appointment", "id": str(uuid.uuid4()), "type": "tool_call",
                                             "args": {"doctor": "Dr. Rivera", "reason": "checkup"}}])
        else:
            msg = AIMessage(f"noted {len(messages)}")
        return ChatResult(generations=[ChatGeneration(message=msg)])


def test_a_model_whose_bind_tools_returns_itself_works_with_create_agent_and_forgets_exactly(tmp_path):
    def agent():
        saver = SqliteSaver(sqlite3.connect(":memory:", check_same_thread=False))
        return L.forgettable(create_agent(L.deterministic(Decides()), Counted().tools, checkpointer=saver))

    a, twin = agent(), agent()
    turns = [("u1", "hello"), ("med", SECRET), ("u2", "my diagnosis is a cold, book me"), ("u3", "thanks")]
    for src, text in turns:
        a.invoke({"messages": [L.source_message(text, src)]}, CFG)
        twin.invoke({"messages": [] if src == "med" else [L.source_message(text, src)]}, CFG)
    ids = [m.id for m in a.get_state(CFG).values["messages"]]
    assert all(i.startswith(("m-", "ai-", "call-")) for i in ids), ids  # no lc_run-- or uuid ids left
    r = L.forget(a, "t1", ["med"])
    assert r.exactness == "declared" and r.transitions == 3
    assert L.compare_threads(a, "t1", twin, "t1") == []


# --- what compare_threads sees ----------------------------------------------------------------------------

def test_compare_threads_names_what_differs():
    def thread(texts, reply_id=None):
        saver = InMemorySaver()
        g = L.forgettable(create_agent(L.deterministic(Scripted()), Counted().tools, checkpointer=saver))
        for t in texts:
            g.invoke({"messages": [("user", t)]}, CFG)
        if reply_id:
            g.invoke({"messages": [AIMessage("hand-written", id=reply_id)]}, CFG)
        return g

    a = thread(["hello", "book"])
    assert L.compare_threads(a, "t1", thread(["hello", "book"]), "t1") == []
    diff = L.compare_threads(a, "t1", thread(["hello", "boom"]), "t1")
    assert diff == ["turn 2: messages[2].content: 'book' != 'boom'"], diff
    assert L.compare_threads(a, "t1", thread(["hello"]), "t1") == ["turns: 2 != 1"]
    x, y = thread(["hello"], reply_id="r1"), thread(["hello"], reply_id="r2")
    assert L.compare_threads(x, "t1", y, "t1") == ["turn 2: messages[2].id: 'r1' != 'r2'"]


def test_a_bare_tuple_as_the_messages_value_is_refused_with_what_to_pass(tmp_path):
    """LangGraph reads {"messages": ("user", "hi")} as one message; its checkpoint stores the tuple
    as a list, which reads back as two. The forget sees the mismatch and says what to pass."""
    agent = sqlite_agent(tmp_path / "a.sqlite")
    agent.invoke({"messages": ("user", SECRET)}, CFG)
    refused(lambda: L.forget(agent, "t1", ["t1.1"]), tmp_path / "a.sqlite", r"pass a list: \{'messages': \[\(role, text\)\]\}")


@pytest.mark.parametrize("saver", ["sqlite", "memory"])
def test_a_replay_that_fails_leaves_the_thread_as_it_was(saver, tmp_path):
    """The model fails halfway through the replay: the forget raises an UnseeError that names the
    turn and the cause, the branch it had written is taken back out, and the thread's checkpoints
    are the ones it had; a later forget works."""
    down = {"now": False}

    class Flaky(Scripted):
        def _generate(self, messages, stop=None, run_manager=None, **kw):
            if down["now"] and "thanks" in messages[-1].text:
                raise RuntimeError("the model is down")
            return super()._generate(messages, stop, run_manager, **kw)

    store = InMemorySaver() if saver == "memory" else SqliteSaver(sqlite3.connect(str(tmp_path / "a.sqlite"),
                                                                                   check_same_thread=False))
    agent = L.forgettable(create_agent(L.deterministic(Flaky()), Counted().tools, checkpointer=store))
    for text in ["hello", SECRET, "thanks"]:
        agent.invoke({"messages": [("user", text)]}, CFG)
    ids = [t.config["configurable"]["checkpoint_id"] for t in store.list(CFG)]
    values = agent.get_state(CFG).values
    down["now"] = True
    with pytest.raises(UnseeError, match=r"the replay of turn 3 failed \(RuntimeError: the model is down\).*"
                                         "the thread is as it was") as e:
        L.forget(agent, "t1", ["t2.1"])
    assert isinstance(e.value.__cause__, RuntimeError)
    assert [t.config["configurable"]["checkpoint_id"] for t in store.list(CFG)] == ids
    assert agent.get_state(CFG).values == values
    down["now"] = False
    assert L.forget(agent, "t1", ["t2.1"]).transitions == 2
