"""Production shapes on one thread: exact, or refused before a byte changes, never "checked" and wrong.

Two parts:

- A sweep over every kind of input a secret can arrive in (a message; a custom key's list item,
  string or dict, tagged or named by its place; a human's answer to an `interrupt()`; an
  `update_state` value; a config value; a runtime-context value). For each, a forget of the
  secret's source either is refused, with the SQLite file byte for byte as it was, or returns and
  then the thread equals a twin that never saw the secret (`compare_threads`: every turn's state,
  message ids, subgraph checkpoints) and no byte of the secret is left in the file. Some kinds
  must be exact (`EXACT`); the rest may be refused, never wrong.
- The held-out agents (`heldout_production_agents.py`, written from LangGraph's docs by someone
  who had not read unsee's code: human approval in a review node and inside a tool, resumed with
  `Command`; a custom `docs` key; a key derived from messages; a subgraph as a node, called in a
  node, compiled with `checkpointer=False`; a node reading `configurable["user_id"]`), each on
  tiny-llama, exact against its twin on `InMemorySaver`, `SqliteSaver` and `PostgresSaver`: state,
  ids, subgraph checkpoints, K/V under `torch.equal`, no consequential tool run again, no secret
  byte in the file or the database. The one exception is refused before a byte changes: approval
  asked inside a consequential tool's body, which a replay never runs (its advice, a review node,
  is `hitl_node_agent`, which is exact).

The twin of a human-in-the-loop thread follows the rule a forget replays by: where the original's
human answered a question, the twin's human gives the same answer if the twin is asked the same
question; where the twin is asked another (it derives from the secret), or nothing, the twin stops
there, as the forgotten thread does (`receipt.stopped`).
"""

import json
import sqlite3
from dataclasses import dataclass
from typing import Annotated

import pytest

pytest.importorskip("langgraph", reason="install the test extras: bash scripts/setup.sh --tests")

from langchain_core.messages import SystemMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, interrupt

from unsee.impl.integrations import langgraph as L
from unsee.impl.integrations.langgraph.history import lineage, turns_of
from unsee.model.errors import UnseeError
from tests.integrations import heldout_production_agents as H
from tests.integrations.test_langgraph_checkpointers import Store

SECRET = "passport P4471902 diagnosed with epilepsy"
SID = "secret"


def file_bytes(path) -> bytes:
    """The database file and its WAL: every byte of the checkpoints (the -shm file is SQLite's index
    of the WAL in shared memory, whose read marks any reader moves)."""
    return b"".join(p.read_bytes() for p in (path, path.with_name(path.name + "-wal")) if p.exists())


def saver_at(path):
    return SqliteSaver(sqlite3.connect(str(path), check_same_thread=False))


# --- the sweep --------------------------------------------------------------------------------------

def concat(a: list, b: list) -> list:
    return (a or []) + (b or [])


class Sweep(MessagesState):
    docs: Annotated[list, concat]  # documents: strings or dicts, added turn by turn
    note: str  # a string key, overwritten
    meta: dict  # a dict key, overwritten
    digest: str  # derived from every key and the caller's user_id


@dataclass
class Ctx:
    user: str = ""


def sweep_graph(saver, context=False, ask=False):
    """A node derives `digest` from every input key and the configurable user_id, and the model
    answers with the digest in its prompt; with `ask`, a node then asks a human a fixed question
    (`interrupt`) on every turn whose last message says "book"."""
    llm = L.UnseeChatModel.from_model("tiny-llama")

    def derive(state: Sweep, config, runtime=None):
        who = config["configurable"].get("user_id", "")
        if context:
            who += "|" + runtime.context.user
        body = [state.get("docs") or [], state.get("note") or "", state.get("meta") or {}, who]
        return {"digest": json.dumps(body, sort_keys=True, default=str)}

    def model(state: Sweep):
        return {"messages": [llm.invoke([SystemMessage("Notes: " + state["digest"][-300:])] + state["messages"])]}

    def approve(state: Sweep):
        if len(state["messages"]) > 1 and "book" in str(state["messages"][-2].content):
            answer = interrupt("Shall I book it?")
            return {"note": f"approved: {answer}"}
        return {}

    g = StateGraph(Sweep, context_schema=Ctx if context else None)
    g.add_node("derive", derive)
    g.add_node("model", model)
    g.add_node("approve", approve)
    g.add_edge(START, "derive")
    g.add_edge("derive", "model")
    g.add_edge("model", "approve" if ask else END)
    g.add_edge("approve", END)
    return L.forgettable(g.compile(checkpointer=saver)), llm


def turn(**kw):
    return kw


# kind → (graph options, the turns with the secret, the same turns without it, how it is named)
CASES = {
    "message": ({}, [turn(messages=[("user", "hello")]), turn(messages=[L.source_message(SECRET, SID)]),
                     turn(messages=[("user", "thanks")])],
                [turn(messages=[("user", "hello")]), turn(messages=[]), turn(messages=[("user", "thanks")])], SID),
    "list item (string, tagged)": (
        {}, [turn(messages=[("user", "read these")], docs=["a menu", L.source_value(SECRET, SID)]),
             turn(messages=[("user", "summarize")], docs=["a map"])],
        [turn(messages=[("user", "read these")], docs=["a menu"]), turn(messages=[("user", "summarize")], docs=["a map"])],
        SID),
    "list item (dict, tagged)": (
        {}, [turn(messages=[("user", "read")], docs=[L.source_value({"title": "lab", "body": SECRET}, SID), {"t": 1}]),
             turn(messages=[("user", "more")])],
        [turn(messages=[("user", "read")], docs=[{"t": 1}]), turn(messages=[("user", "more")])], SID),
    "list item (named by its place)": (
        {}, [turn(messages=[("user", "read")], docs=["a menu"]), turn(messages=[("user", "and")], docs=["x", SECRET]),
             turn(messages=[("user", "more")])],
        [turn(messages=[("user", "read")], docs=["a menu"]), turn(messages=[("user", "and")], docs=["x"]),
         turn(messages=[("user", "more")])], "t2.docs.2"),
    "string key (tagged)": (
        {}, [turn(messages=[("user", "hi")], note="plain"), turn(messages=[("user", "note")], note=L.source_value(SECRET, SID)),
             turn(messages=[("user", "bye")])],
        [turn(messages=[("user", "hi")], note="plain"), turn(messages=[("user", "note")]), turn(messages=[("user", "bye")])],
        SID),
    "dict key (unsee_source key)": (
        {}, [turn(messages=[("user", "hi")], meta={"unsee_source": SID, "id": SECRET}), turn(messages=[("user", "bye")])],
        [turn(messages=[("user", "hi")]), turn(messages=[("user", "bye")])], SID),
    "string key (named by its place)": (
        {}, [turn(messages=[("user", "hi")]), turn(messages=[("user", "set")], note=SECRET), turn(messages=[("user", "bye")])],
        [turn(messages=[("user", "hi")]), turn(messages=[("user", "set")]), turn(messages=[("user", "bye")])], "t2.note"),
    "secret before a human's approval": (
        {"ask": True},
        [turn(messages=[("user", "hi")]), turn(messages=[L.source_message(SECRET, SID)]),
         turn(messages=[("user", "book a table")]), Command(resume="yes"), turn(messages=[("user", "thanks")])],
        [turn(messages=[("user", "hi")]), turn(messages=[]), turn(messages=[("user", "book a table")]),
         Command(resume="yes"), turn(messages=[("user", "thanks")])], SID),
    "a human's answer (resume value)": (
        {"ask": True}, [turn(messages=[("user", "book a table")]), Command(resume=L.source_value(SECRET, SID)),
                        turn(messages=[("user", "thanks")])],
        [turn(messages=[("user", "book a table")])], SID),
    "update_state value": ({}, [turn(messages=[("user", "hi")]), ("update", {"note": L.source_value(SECRET, SID)}),
                                turn(messages=[("user", "bye")])],
                           [turn(messages=[("user", "hi")]), ("update", {}), turn(messages=[("user", "bye")])], SID),
    "update_state value (named by its place)": (
        {}, [turn(messages=[("user", "hi")]), ("update", {"note": "kept", "docs": ["a", SECRET]}),
             turn(messages=[("user", "bye")])],
        [turn(messages=[("user", "hi")]), ("update", {"note": "kept", "docs": ["a"]}), turn(messages=[("user", "bye")])],
        "t2.docs.2"),
    "config value": ({}, [turn(messages=[("user", "hi")]), turn(messages=[("user", "bye")])], None, SID),
    "context value": ({"context": True}, [turn(messages=[("user", "hi")]), turn(messages=[("user", "bye")])], None, SID),
}
EXACT = {k for k, (_opts, _w, without, _s) in CASES.items() if without is not None}


def drive(graph, thread, turns, kind):
    config = {"configurable": {"thread_id": thread, "user_id": SECRET if kind == "config value" else "u7"}}
    extra = {"context": Ctx(SECRET)} if kind == "context value" else {}
    for t in turns:
        if isinstance(t, tuple):
            graph.update_state(config, t[1])
        else:
            graph.invoke(t, config, **extra)


@pytest.mark.parametrize("kind", list(CASES))
def test_every_input_kind_is_exact_or_refused_before_a_byte_changes(kind, tmp_path):
    opts, with_secret, without, source = CASES[kind]
    path = tmp_path / "a.sqlite"
    graph, llm = sweep_graph(saver_at(path), **opts)
    drive(graph, "t1", with_secret, kind)
    assert SECRET.encode() in file_bytes(path)
    before = file_bytes(path)
    try:
        receipt = L.forget(graph, "t1", [source], **({"context": Ctx(SECRET)} if opts.get("context") else {}))
    except UnseeError as e:
        assert kind not in EXACT, f"{kind}: refused ({e})"
        assert file_bytes(path) == before, f"{kind}: a refused forget wrote to the checkpointer"
        return
    assert kind in EXACT, f"{kind}: returned ({receipt.exactness}) where it should have been refused"
    twin, twin_llm = sweep_graph(InMemorySaver(), **opts)
    drive(twin, "t1", without, kind)
    assert L.compare_threads(graph, "t1", twin, "t1", llm_a=llm, llm_b=twin_llm) == []
    assert SECRET.encode() not in file_bytes(path) and b"P4471902" not in file_bytes(path)
    # T−τ+1, or one more per turn between c and τ where a fork at τ−1 would find an old resume or edit
    last = receipt.stopped["turn"] - 1 if receipt.stopped else receipt["T"]  # a stopped replay ends before that turn
    assert receipt.transitions == last - receipt["checkpoint"]  # T−τ+1, or more where R_{τ−1} held an old answer or edit


def test_a_refusal_names_where_a_source_can_be():
    graph, _ = sweep_graph(InMemorySaver())
    drive(graph, "t1", CASES["config value"][1], "config value")
    with pytest.raises(UnseeError, match="a value given in the config or the runtime context is no input"):
        L.forget(graph, "t1", [SID])


def test_a_resume_is_replayed_where_the_same_question_is_asked():
    """The secret comes before a human's approval whose question does not derive from it: the
    forget replays the recorded answer (the twin's human gives the same), and the thread equals
    the twin's, resumes included."""
    graph, llm = sweep_graph(InMemorySaver(), ask=True)
    _opts, with_secret, without, _ = CASES["secret before a human's approval"]
    drive(graph, "t1", with_secret, "")
    line = lineage(graph.checkpointer, "t1")
    assert [t.index for t in turns_of(line, "t1") if t.resumed] == [4]
    receipt = L.forget(graph, "t1", [SID])
    assert receipt.stopped == {} and receipt.transitions == 4 == receipt["T"] - receipt["tau"] + 1
    assert graph.get_state({"configurable": {"thread_id": "t1"}}).values["note"] == "approved: yes"
    twin, twin_llm = sweep_graph(InMemorySaver(), ask=True)
    drive(twin, "t1", without, "")
    assert L.compare_threads(graph, "t1", twin, "t1", llm_a=llm, llm_b=twin_llm) == []


def test_a_forgotten_answer_leaves_the_thread_paused_at_its_question():
    graph, _ = sweep_graph(InMemorySaver(), ask=True)
    drive(graph, "t1", CASES["a human's answer (resume value)"][1], "")
    receipt = L.forget(graph, "t1", [SID])
    assert receipt.stopped == {"turn": 2, "why": "its answer was forgotten"}
    state = graph.get_state({"configurable": {"thread_id": "t1"}})
    assert [i.value for i in state.interrupts] == ["Shall I book it?"]


# --- the held-out agents ----------------------------------------------------------------------------

def recording(asked: dict):
    """The scenarios' driver, recording the questions the human answered in each scenario turn."""
    def drive_(graph, turns, config, answers=None):
        result = {}
        for number, t in enumerate(turns, start=1):
            result = graph.invoke(t, config)
            while result.get("__interrupt__"):
                asked.setdefault(number, []).append([i.value for i in result["__interrupt__"]])
                result = graph.invoke(Command(resume=answers[number]), config)
        return result
    return drive_


def twin_driver(asked: dict):
    """The twin's driver, by the rule a forget replays by: where the original's human answered a
    question, the twin's answers it the same if it is asked the same; asked another, or nothing,
    the twin stops there (its human has not answered)."""
    def drive_(graph, turns, config, answers=None):
        result = {}
        for number, t in enumerate(turns, start=1):
            result = graph.invoke(t, config)
            for question in asked.get(number, []):
                if [i.value for i in result.get("__interrupt__", [])] != question:
                    return result
                result = graph.invoke(Command(resume=answers[number]), config)
        return result
    return drive_


def run_with(shape, driver, saver, secret, monkeypatch):
    builder, scenario = H.SHAPES[shape]
    graph, llm, counters = builder(saver)
    with monkeypatch.context() as m:
        m.setattr(H, "_drive", driver)
        scenario(graph, "t1", secret)
    return graph, llm, counters


def held_now(store) -> bytes:
    """What a checkpointer holds, comparable before and after a refusal: the InMemorySaver's dicts,
    the SQLite file and its WAL (not -shm, whose read marks readers move), the Postgres tables' rows
    as pg_dump writes them (less the random key of its \\restrict lines)."""
    if store.kind == "sqlite":
        return file_bytes(store.where)
    if store.kind == "postgres":
        return b"\n".join(line for line in store.pg.dump(store.db).split(b"\n") if b"restrict " not in line)
    return b"".join(store.stored().values())


# an interrupt() inside a consequential tool's body: a replay never runs that body, so cannot ask again
REFUSED = {"hitl_booking_agent": r"asked inside the consequential tool 'book_hotel'.*ask in a node before the tool"}


@pytest.mark.parametrize("saver", ["memory", "sqlite", "postgres"])
@pytest.mark.parametrize("shape", list(H.SHAPES))
def test_heldout_production_agents_forget_exactly(shape, saver, tmp_path, monkeypatch, request):
    store = Store(saver, tmp_path / "a.sqlite", request.getfixturevalue("postgres") if saver == "postgres" else None)
    asked: dict = {}
    try:
        graph, llm, counters = run_with(shape, recording(asked), store.open(), True, monkeypatch)
        held = store.pg.dump(store.db) if saver == "postgres" else b"".join(store.stored().values())
        assert H.SECRET.encode() in held  # (Postgres: its ledger table exists once a tool fired or a forget ran)
        fired = dict(counters)
        if shape in REFUSED:  # refused before a byte changes, with what to do (the review node: hitl_node_agent)
            before = held_now(store)
            with pytest.raises(UnseeError, match=REFUSED[shape]):
                L.forget(graph, "t1", [H.SECRET_ID])
            assert held_now(store) == before, "a refused forget changed what the checkpointer holds"
            return
        receipt = L.forget(graph, "t1", [H.SECRET_ID])
        assert receipt.exactness == "checked"
        assert counters == fired, "a consequential tool ran again in the replay"
        twin, twin_llm, _ = run_with(shape, twin_driver(asked), InMemorySaver(), False, monkeypatch)
        assert L.compare_threads(graph, "t1", twin, "t1", llm_a=llm, llm_b=twin_llm) == []
        last = receipt.stopped["turn"] - 1 if receipt.stopped else receipt["T"]
        assert receipt.transitions == last - receipt["checkpoint"]
        if shape.startswith("subgraph_node") or shape.startswith("subgraph_in"):
            assert any(t.config["configurable"]["checkpoint_ns"] for t in graph.checkpointer.list(
                {"configurable": {"thread_id": "t1"}})), "the shape wrote no subgraph checkpoint to compare"
        for where, blob in store.stored().items():
            assert H.SECRET.encode() not in blob and b"P4471902" not in blob, f"the secret is left in {where}"
    finally:
        store.close()


# --- edits, ids, subgraph comparison ---------------------------------------------------------------

def test_an_edit_on_a_graph_not_made_forgettable_is_refused(tmp_path):
    """update_state records the node an edit is made as only on a forgettable graph."""
    path = tmp_path / "a.sqlite"
    graph, _ = sweep_graph(saver_at(path))
    plain = graph.builder.compile(checkpointer=graph.checkpointer)  # the same graph, not made forgettable
    cfg = {"configurable": {"thread_id": "t1"}}
    plain.invoke({"messages": [("user", "hi")]}, cfg)
    plain.update_state(cfg, {"note": SECRET})
    before = file_bytes(path)
    with pytest.raises(UnseeError, match=r"update_state on a graph not made forgettable.*make the graph forgettable\(graph\)"):
        L.forget(graph, "t1", ["t2.note"])
    assert file_bytes(path) == before


def test_an_edit_of_a_paused_thread_is_refused_and_its_advice_works():
    """An edit made while the thread is paused at an interrupt is refused; the advice (give the
    edit as the answer, Command(resume=...)) gives a thread the forget replays."""
    graph, _ = sweep_graph(InMemorySaver(), ask=True)
    cfg = {"configurable": {"thread_id": "t1"}}
    graph.invoke({"messages": [L.source_message(SECRET, SID)]}, cfg)
    graph.invoke({"messages": [("user", "book it")]}, cfg)
    graph.update_state(cfg, {"note": "edited while paused"})
    with pytest.raises(UnseeError, match=r"answer the interrupt with the edit instead \(Command\(resume=\.\.\.\)\)"):
        L.forget(graph, "t1", [SID])
    other, _ = sweep_graph(InMemorySaver(), ask=True)
    other.invoke({"messages": [L.source_message(SECRET, SID)]}, cfg)
    other.invoke({"messages": [("user", "book it")]}, cfg)
    other.invoke(Command(resume="edited while paused"), cfg)
    assert L.forget(other, "t1", [SID]).transitions == 3


def test_without_forgettable_a_forget_keeps_the_ids_of_the_inputs_it_replays():
    """LangGraph draws a random id for each message given without one; a forget on a graph not
    made forgettable gives each replayed input the id it had."""
    llm = L.UnseeChatModel.from_model("tiny-llama")
    g = StateGraph(MessagesState)
    g.add_node("model", lambda s: {"messages": [llm.invoke(s["messages"])]})
    g.add_edge(START, "model")
    g.add_edge("model", END)
    graph = g.compile(checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "t1"}}
    for m in [[("user", "hello")], [L.source_message(SECRET, SID)], [("user", "bye"), "and more"]]:
        graph.invoke({"messages": m}, cfg)
    humans = [m.id for m in graph.get_state(cfg).values["messages"] if m.type == "human"]
    L.forget(graph, "t1", [SID])
    after = [m.id for m in graph.get_state(cfg).values["messages"] if m.type == "human"]
    assert after == [humans[0]] + humans[2:]


def test_compare_threads_sees_a_subgraph_checkpoint_that_differs(monkeypatch):
    """The subgraph comparison can fail: the thread with the secret and its twin differ in the
    subgraph's checkpoints, and compare_threads names them."""
    asked: dict = {}
    a, llm_a, _ = run_with("subgraph_node_agent", recording(asked), InMemorySaver(), True, monkeypatch)
    b, llm_b, _ = run_with("subgraph_node_agent", recording(asked), InMemorySaver(), False, monkeypatch)
    assert any(d.startswith("subgraph checkpoint") for d in L.compare_threads(a, "t1", b, "t1"))


def test_a_graph_with_a_runtime_context_is_forgotten_with_the_context_it_ran_with():
    """The refusal says to pass the context; following it, the forget is exact."""
    graph, llm = sweep_graph(InMemorySaver(), context=True)
    cfg = {"configurable": {"thread_id": "t1", "user_id": "u7"}}
    for m in ([("user", "hi")], [L.source_message(SECRET, SID)], [("user", "bye")]):
        graph.invoke({"messages": m}, cfg, context=Ctx("ana"))
    with pytest.raises(UnseeError, match=r"pass the context the thread's turns ran with, forget\(\.\.\., context=\.\.\.\)"):
        L.forget(graph, "t1", [SID])
    L.forget(graph, "t1", [SID], context=Ctx("ana"))
    twin, twin_llm = sweep_graph(InMemorySaver(), context=True)
    for m in ([("user", "hi")], [], [("user", "bye")]):
        twin.invoke({"messages": m}, cfg, context=Ctx("ana"))
    assert L.compare_threads(graph, "t1", twin, "t1", llm_a=llm, llm_b=twin_llm) == []


# --- shapes a reviewer found returning "checked" and wrong, now refused or exact ----------------------

class Noted(MessagesState):
    note: str
    seen: str


def noting_graph(saver=None):
    """A node asks a fixed question when the last message says "book"; another echoes the state."""
    def ask(state: Noted):
        if "book" in str(state["messages"][-1].content):
            return {"seen": f"ans:{interrupt('ok?')}"}
        return {}

    def echo(state: Noted):
        return {"seen": (state.get("seen") or "") + "|" + (state.get("note") or "") + "|" +
                "/".join(str(m.content) for m in state["messages"])}

    g = StateGraph(Noted)
    g.add_node("ask", ask)
    g.add_node("echo", echo)
    g.add_edge(START, "ask")
    g.add_edge("ask", "echo")
    g.add_edge("echo", END)
    return L.forgettable(g.compile(checkpointer=saver or InMemorySaver()))


CFG1 = {"configurable": {"thread_id": "t1"}}


def with_secret(graph):
    graph.invoke({"messages": [("user", "hello")]}, CFG1)
    graph.invoke({"messages": [L.source_message(SECRET, SID)]}, CFG1)


def refused_as_it_was(graph, match):
    saver = graph.checkpointer
    before = repr(sorted((k, v) for k, v in saver.storage["t1"].items())) + repr(sorted(saver.writes.items()))
    with pytest.raises(UnseeError, match=match):
        L.forget(graph, "t1", [SID])
    assert repr(sorted((k, v) for k, v in saver.storage["t1"].items())) + repr(sorted(saver.writes.items())) == before


def test_a_commands_update_is_refused_alone_or_with_a_resume():
    g = noting_graph()
    with_secret(g)
    g.invoke(Command(update={"note": "EXTRA"}), CFG1)
    refused_as_it_was(g, r"changed by a Command's update or goto")
    g = noting_graph()
    with_secret(g)
    g.invoke({"messages": [("user", "book it")]}, CFG1)
    g.invoke(Command(resume="yes", update={"note": "EXTRA"}), CFG1)
    refused_as_it_was(g, r"changed by a Command's update or goto")


def test_a_resume_by_interrupt_id_is_refused():
    g = noting_graph()
    with_secret(g)
    asked = g.invoke({"messages": [("user", "book it")]}, CFG1)["__interrupt__"][0]
    g.invoke(Command(resume={asked.id: "yes"}), CFG1)
    refused_as_it_was(g, r"resumed by interrupt id")


def test_a_run_continued_from_an_edit_is_refused():
    g = noting_graph()
    with_secret(g)
    g.update_state(CFG1, {"note": "EDIT"}, as_node="ask")
    g.invoke(None, CFG1)
    refused_as_it_was(g, r"continues an edit \(invoke\(None\) after update_state\)")


def test_a_subgraph_with_its_own_persistent_state_is_refused():
    """A subgraph compiled with checkpointer=True keeps its state across the parent's turns in a fixed
    namespace, which a fork of the parent does not take back: the forget kept the secret there."""
    sb = StateGraph(Noted)
    sb.add_node("n", lambda s: {"seen": (s.get("seen") or "") + "|" + str(s["messages"][-1].content)})
    sb.add_edge(START, "n")
    sb.add_edge("n", END)
    sub = sb.compile(checkpointer=True)
    g = StateGraph(Noted)
    g.add_node("call", lambda s: {"seen": sub.invoke({"messages": s["messages"][-1:]})["seen"]})
    g.add_edge(START, "call")
    g.add_edge("call", END)
    graph = L.forgettable(g.compile(checkpointer=InMemorySaver()))
    with_secret(graph)
    graph.invoke({"messages": [("user", "bye")]}, CFG1)
    refused_as_it_was(graph, r"subgraph compiled with checkpointer=True \(namespace 'call'\)")


def test_a_tagged_message_inside_an_edit_is_forgotten():
    g, twin = noting_graph(), noting_graph()
    g.invoke({"messages": [("user", "hello")]}, CFG1)
    g.update_state(CFG1, {"messages": [L.source_message(SECRET, SID)], "note": "kept"}, as_node="echo")
    g.invoke({"messages": [("user", "bye")]}, CFG1)
    assert [s["source"] for s in L.sources(g, "t1") if s["turn"] == 2] == [SID, "t2.note"]
    L.forget(g, "t1", [SID])
    twin.invoke({"messages": [("user", "hello")]}, CFG1)
    twin.update_state(CFG1, {"messages": [], "note": "kept"}, as_node="echo")
    twin.invoke({"messages": [("user", "bye")]}, CFG1)
    assert L.compare_threads(g, "t1", twin, "t1") == []
    assert SECRET not in repr(g.get_state(CFG1).values)
