"""A human-in-the-loop agent on SmolLM2 forgets exactly (slow tier).

The agent is LangGraph's review-node pattern: the model proposes a `book_table` call, a `review`
node asks a human with `interrupt()`, resumed with `Command(resume=...)`, and the tool runs once
they accept (an `interrupt()` inside the consequential tool's body is refused: a replay never runs
that body). It runs four turns on SmolLM2-135M-Instruct and SqliteSaver; the second tells it a
passport number (tagged "passport"). The human accepts every booking the agent proposes.

After `forget(agent, "t1", ["passport"])` the thread equals its twin by the rule a forget replays
by (the twin's human answers a question where the twin is asked the same one as the original's
human was; asked another or none, it stops there): every turn's state, message ids, K/V under
`torch.equal`; the booking tool never runs again; no byte of the passport in the SQLite file.
The forget's seconds and the run's are printed (-s).
"""

import os
import sqlite3
import time

import pytest

pytest.importorskip("langgraph", reason="install the test extras: bash scripts/setup.sh --tests")

from typing import Literal

from langchain_core.messages import SystemMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt

from unsee.impl.integrations.langgraph import KVContext, UnseeChatModel, compare_threads, consequential, forget, \
    forgettable, source_message

pytestmark = pytest.mark.slow

PASSPORT = "My passport number is X7Q4812; keep it for the hotel."
TURNS = ["Is it sunny in Lisbon?", PASSPORT, "Book a table for two at Chez Marie at 8pm.", "Thanks, that is all."]


@pytest.fixture(scope="module")
def smollm2():
    from unsee.impl.engine.models import load

    return load("smollm2")


def build(bundle, saver, runs):
    """LangGraph's review-node pattern: the model proposes a call, a `review` node asks the human
    with `interrupt()`, and the tool runs only once they accept."""
    def book_table(restaurant: str, time: str) -> str:
        """Book a table at a restaurant at a time."""
        runs["book_table"] += 1
        return f"Booked {restaurant} at {time}."

    model = UnseeChatModel(context=KVContext(bundle))
    tools = [consequential(book_table, result=lambda restaurant, time: f"Booked {restaurant} at {time}.")]
    bound = model.bind_tools(tools)

    def call_model(state: MessagesState):
        return {"messages": [bound.invoke([SystemMessage("You are a helpful assistant")] + state["messages"])]}

    def route(state: MessagesState) -> Literal["review", "__end__"]:
        return "review" if state["messages"][-1].tool_calls else END

    def review(state: MessagesState) -> Command[Literal["tools", "__end__"]]:
        call = state["messages"][-1].tool_calls[-1]
        answer = interrupt({"question": f"Book {call['args'].get('restaurant')} at {call['args'].get('time')}?"})
        if answer == "accept":
            return Command(goto="tools")
        declined = ToolMessage("The user declined.", tool_call_id=call["id"], name=call["name"])
        return Command(goto=END, update={"messages": [declined]})

    g = StateGraph(MessagesState)
    g.add_node("model", call_model)
    g.add_node("review", review)
    g.add_node("tools", ToolNode(tools))
    g.add_edge(START, "model")
    g.add_conditional_edges("model", route)
    g.add_edge("tools", "model")
    return forgettable(g.compile(checkpointer=saver)), model


def drive(agent, secret: bool, asked: dict | None = None) -> dict:
    """Run the turns; answer "accept" to each question; return turn → the questions answered in it.
    With `asked` (the original's), the twin: in each turn, answer each question the original's human
    answered there if the same one comes, else stop (asked another, or none)."""
    cfg = {"configurable": {"thread_id": "t1"}}
    seen: dict = {}
    for k, text in enumerate(TURNS, 1):
        if k == 2 and not secret:
            result = agent.invoke({"messages": []}, cfg)
        else:
            result = agent.invoke({"messages": [source_message(text, "passport") if k == 2 else ("user", text)]}, cfg)
        if asked is not None:
            for q in asked.get(k, []):
                if [i.value for i in result.get("__interrupt__", [])] != q:
                    return seen
                result = agent.invoke(Command(resume="accept"), cfg)
            continue
        while result.get("__interrupt__"):
            seen.setdefault(k, []).append([i.value for i in result["__interrupt__"]])
            result = agent.invoke(Command(resume="accept"), cfg)
    return seen


def test_a_hitl_agent_on_smollm2_forgets_exactly(smollm2, tmp_path):
    path = tmp_path / "agent.sqlite"
    runs = {"book_table": 0}
    agent, model = build(smollm2, SqliteSaver(sqlite3.connect(str(path), check_same_thread=False)), runs)
    t0 = time.perf_counter()
    asked = drive(agent, True)
    run_s = time.perf_counter() - t0
    assert asked, "the agent never asked for approval: the scenario does not exercise a resume"
    fired = dict(runs)
    receipt = forget(agent, "t1", ["passport"])
    assert runs == fired, "the booking tool ran again"
    twin, twin_model = build(smollm2, InMemorySaver(), {"book_table": 0})
    drive(twin, False, asked)
    assert compare_threads(agent, "t1", twin, "t1", llm_a=model, llm_b=twin_model) == []
    agent.checkpointer.conn.commit()
    blob = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert b"X7Q4812" not in blob
    print(f"\n[hitl smollm2] {len(TURNS)} turns {run_s:.1f} s, forget {receipt.seconds:.1f} s "
          f"(ratio {receipt.seconds / run_s:.3f}); tau={receipt.tau} T={receipt.T} checkpoint={receipt['checkpoint']} "
          f"transitions={receipt.transitions} stopped={receipt.stopped} questions={asked}; load {os.getloadavg()}")
