"""The conformance kit's runtime over a user's LangGraph graph, and two graphs to run it on.

`GraphRuntime(build)`: `unsee.specs.protocol.Runtime` over one thread of the graph
`build(llm, saver)` returns. A step is one `graph.invoke` on the observation's parts as input
messages (each stamped with its source id; what the graph does with them, replies, tool calls
and summaries, is the graph's); `forget` is `forget(graph, thread, sources)`; the state is the
thread's head checkpoint plus the engine's cache. The graph is made `forgettable`, so every
message's id is a function of the thread.

`react_agent` is a `create_react_agent` graph written as LangGraph's documentation writes one,
with a read-only tool and a consequential one; `summarizing_agent` a custom `StateGraph` whose
summarization node condenses the conversation once it grows.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import sqlite3
from dataclasses import replace
from typing import Annotated

from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, SystemMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, create_react_agent
from pydantic import Field

from unsee.impl.integrations.langgraph.chat import UnseeChatModel
from unsee.impl.integrations.langgraph.compare import compare_threads
from unsee.impl.integrations.langgraph.forget import forget, graph_digest_of, thread_graph
from unsee.impl.integrations.langgraph.forgettable import forgettable
from unsee.impl.integrations.langgraph.inputs import messages_of
from unsee.impl.integrations.langgraph.tools import World, consequential, read_only
from unsee.model.errors import UnseeError
from unsee.model.replay import sanitize
from unsee.model.state import Config, Observation


Short = Annotated[str, Field(max_length=12)]  # a bound on the arguments keeps a tiny model's calls short


@tool
def find_doctor(specialty: Short) -> str:
    """Find a doctor for a medical specialty."""
    return f"Dr. Rivera sees {specialty} patients"


@tool
def book_appointment(doctor: Short, reason: Short) -> str:
    """Book an appointment with a doctor, giving the reason for the visit."""
    return booked(doctor, reason)


def booked(doctor: str, reason: str) -> str:
    return f"booked {doctor} for {reason}"


def medical_tools():
    """The example's tools, marked: looking a doctor up changes nothing; booking is a side effect."""
    return [read_only(find_doctor), consequential(book_appointment, result=booked)]


def react_agent(llm, saver, tools=None):
    """A prebuilt ReAct agent: model ⇄ tools until the model answers."""
    return create_react_agent(llm, tools if tools is not None else medical_tools(), checkpointer=saver)


class SummaryState(MessagesState):
    summary: str


def summarizing_agent(llm, saver, tools=None, keep: int = 6):
    """model ⇄ tools, then a summarization node once the conversation holds more than `keep`
    messages: the model summarizes it, the summary goes to the state and the messages but the last
    leave the context."""
    tools = tools if tools is not None else medical_tools()
    bound = llm.bind_tools(tools)

    def agent(state: SummaryState):
        msgs = list(state["messages"])
        if state.get("summary"):
            msgs = [SystemMessage(f"Summary of the conversation so far: {state['summary']}")] + msgs
        return {"messages": [bound.invoke(msgs)]}

    def summarize(state: SummaryState):
        out = llm.invoke(list(state["messages"]) + [HumanMessage("Summarize the conversation so far.")])
        return {"summary": out.content, "messages": [RemoveMessage(id=m.id) for m in state["messages"][:-1]]}

    def route(state: SummaryState):
        last = state["messages"][-1]
        if isinstance(last, AIMessage) and last.tool_calls:
            return "tools"
        return "summarize" if len(state["messages"]) > keep else END

    b = StateGraph(SummaryState)
    b.add_node("agent", agent)
    b.add_node("tools", ToolNode(tools))
    b.add_node("summarize", summarize)
    b.add_edge(START, "agent")
    b.add_conditional_edges("agent", route, ["tools", "summarize", END])
    b.add_edge("tools", "agent")
    b.add_edge("summarize", END)
    return b.compile(checkpointer=saver)


GRAPHS = {"react": react_agent, "summarizing": summarizing_agent}


def _h(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=repr).encode()).hexdigest()[:16]


def thread_values(values: dict) -> dict:
    """A thread's state as plain values: messages as dicts without the ids LangGraph draws at random
    (the model's and the tools' messages carry ids that are functions of the thread)."""
    out = {k: v for k, v in values.items() if k != "messages"}
    out["messages"] = [{k: v for k, v in m.model_dump().items() if k != "id" or not _drawn(m)}
                       for m in values.get("messages") or []]
    return out


def _drawn(m) -> bool:
    return isinstance(m, (HumanMessage, SystemMessage))


class GraphRuntime:
    """`unsee.specs.protocol.Runtime` over one thread of a user's graph (see the module)."""

    name = "langgraph"

    def __init__(self, build=react_agent, model: str = "tiny-llama", config: Config = Config(),
                 path: str = ":memory:", dtype: str = "float32", device: str | None = None,
                 **llm) -> None:
        self.conn = sqlite3.connect(path, check_same_thread=False)
        self.saver = SqliteSaver(self.conn)
        self.llm = UnseeChatModel.from_model(model, dtype=dtype, device=device, sampling=config.sampling,
                                             seed=config.seed or 0, **llm)
        self.agent = forgettable(build(self.llm, self.saver))
        self.world_ledger = World(self.saver)
        self._threads = itertools.count()
        self.thread_id: str | None = None
        self.reset()

    @property
    def config(self) -> dict:
        return {"configurable": {"thread_id": self.thread_id}}

    def reset(self) -> None:
        if self.thread_id is not None:  # a fresh session: the old thread leaves the file
            self.saver.delete_thread(self.thread_id)
            self.world_ledger.drop(self.thread_id)
        self.thread_id = f"thread-{next(self._threads)}"
        self.llm.context.reset()
        self.log: list[Observation] = []
        self._invocations = 0
        self.receipt = None

    def values(self) -> dict:
        return self.agent.get_state(self.config).values

    def step(self, obs: Observation) -> None:
        self.agent.invoke({"messages": messages_of(obs)}, self.config, durability="sync")
        self.log.append(obs)
        self._invocations += 1

    def forget(self, sources, method: str = "B7", checkpoint: int | None = None):
        r = forget(self.agent, self.thread_id, list(sources), method, checkpoint)
        fed = [sanitize(o, sources) for o in self.log]
        if [o.parts for o in fed[r.checkpoint:]] != [o.parts for o in r.replayed]:
            raise UnseeError("the thread's inputs are not the observations this runtime fed it")
        self.log = fed
        self._invocations += r.transitions
        self.receipt = replace(r, replayed=tuple(fed[r.checkpoint:]), digests=self.digest())
        return self.receipt

    def digest(self) -> dict[str, str]:
        v = thread_values(self.values())
        out = {k: _h(x) for k, x in v.items()}
        return {**out, "turn": _h(len(self.log)), "graph": graph_digest_of(self.log), "kv": self.llm.context.digest()}

    def graph(self):
        return thread_graph(self.agent, self.thread_id)

    @property
    def invocations(self) -> int:
        return self._invocations

    @property
    def observations(self) -> tuple[Observation, ...]:
        return tuple(self.log)

    @property
    def checkpoints(self) -> tuple[int, ...]:
        return tuple(range(len(self.log) + 1))

    @property
    def world(self):
        return self.world_ledger.entries(self.thread_id)

    def kv(self) -> list:
        return self.llm.context.kv()


def same_thread(a: GraphRuntime, b: GraphRuntime) -> list[str]:
    """What differs between two runtimes' threads (`compare_threads`: each turn's state, messages
    with their ids, tool calls and arguments, and the engine's K/V under torch.equal). Empty when
    they are identical."""
    return compare_threads(a.agent, a.thread_id, b.agent, b.thread_id, a.llm, b.llm)


def _cfg(cfg: dict) -> Config:
    return Config(sampling=cfg.get("sampling", False), seed=cfg.get("seed", 0))


def langgraph_tiny_llama(cfg: dict) -> GraphRuntime:
    """For the kit: `--unsee-runtime=unsee.impl.integrations.langgraph:langgraph_tiny_llama`
    (a `create_react_agent` graph on tiny-llama)."""
    return GraphRuntime(react_agent, "tiny-llama", _cfg(cfg))


def langgraph_summarizing_tiny_llama(cfg: dict) -> GraphRuntime:
    """The custom graph with a summarization node, for the kit."""
    return GraphRuntime(summarizing_agent, "tiny-llama", _cfg(cfg))
