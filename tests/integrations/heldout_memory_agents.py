"""Held-out LangGraph agents with long-term memory (a `Store`), in the shapes LangGraph's docs show.

Written from LangGraph's and LangChain's public docs and source, and from unsee's user guide
(docs/langgraph.md) and README only, by someone who has not read unsee's code. Each agent is
compiled with `store=` (the store the test passes in: InMemoryStore, SqliteStore or PostgresStore)
and follows a doc page:

- node_memory_agent: "Memory > Add long-term memory" (docs.langchain.com/oss/python/langgraph/
  add-memory#add-long-term-memory, the "using Postgres store" example; the same code as the
  older "How to add cross-thread persistence (Graph API)" how-to): a `call_model` node taking
  `config: RunnableConfig, *, store: BaseStore`, the user id from `config["configurable"]`,
  namespace `("memories", user_id)`, `store.search(namespace, query=...)` for the system prompt
  and, when the message says "remember", `store.put(namespace, str(uuid.uuid4()), {"data": ...})`
  (a random key, as in the docs).
- tool_memory_agent: LangChain "Long-term memory" (docs.langchain.com/oss/python/langchain/
  long-term-memory: `create_agent(..., store=store)`), LangGraph "Memory > Read long-term memory
  in tools" / "Write long-term memory from tools" (`get_store()` inside a tool) and the
  `InjectedStore` API reference (langgraph.prebuilt.InjectedStore's docstring: a `@tool` with
  `store: Annotated[BaseStore, InjectedStore()]`); the user id fixed when the agent is built. A
  `@before_agent` middleware ("Middleware > before_agent", whose `runtime.store` is the agent's
  store) saves a user message that says "remember", so the secret surely reaches the store
  whatever the tiny model calls. `send_email` is consequential.
- profile_agent: "Memory (conceptual) > Semantic memory > Profile" (one JSON document per user,
  updated each turn) with "Persistence > Memory store" and "Read long-term memory in tools"
  (`store.get(namespace, key)` / `store.put` under a fixed key): an `update_profile` node and a
  `call_model` node that reads the profile.
- shared_memory_agent: "Persistence > Memory store" ("the namespace can be any length and
  represent anything, does not have to be user specific") and "Memory (conceptual) > Memory
  storage" (`store.search(namespace, filter=..., query=...)`), with `BaseStore.delete` (API
  reference) when the user says "forget that": facts under `("facts",)`, shared by all users,
  written by user u1's thread and searched by user u2's, and the reverse.

Each builder is `build_<name>(checkpointer, store, **kw) -> (graph, counters)`; `counters` counts
the executions of each consequential tool's body (empty where there is none). `kw` may give
`llm` (an `UnseeChatModel` to use instead of a new tiny-llama one, e.g. to compare K/V) and, for
tool_memory_agent, `user_id` (default "u1"). Each `run_<name>(graph, with_secret)` drives thread
"t1" (SECRET in exactly one input, tagged with source id "secret"; with `with_secret=False` that
turn's input is empty, as a twin that never saw it would run), then thread "t2" of the same user
(of user "u2" for shared_memory_agent) that recalls, then, for node_memory_agent, profile_agent
and shared_memory_agent, one more turn of "t1" (threads interleave in production).
"""

from __future__ import annotations

import hashlib
import re
import uuid
from typing import Annotated

from langchain.agents import AgentState, create_agent
from langchain.agents.middleware import before_agent
from langchain_core.messages import AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.config import get_store
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedStore
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore

from unsee.impl.integrations import langgraph as L

SECRET = "remember: my passport number is P4471902 and I was diagnosed with epilepsy"
SECRET_ID = "secret"
USER_ID = "u1"
OTHER_USER_ID = "u2"


def _llm(kw: dict):
    return kw.get("llm") or L.UnseeChatModel.from_model("tiny-llama")


def _config(thread_id: str, **configurable) -> dict:
    return {"configurable": {"thread_id": thread_id, **configurable}}


def _secret_turn(with_secret: bool) -> dict:
    """A turn whose only input is the secret message; a twin's turn is empty."""
    return {"messages": [L.source_message(SECRET, SECRET_ID)] if with_secret else []}


def _user(text: str) -> dict:
    return {"messages": [("user", text)]}


def _drive(graph, turns: list[dict], config: dict) -> None:
    for turn in turns:
        graph.invoke(turn, config)


def _text(message: AnyMessage) -> str:
    """A message's text (a string, or its text blocks)."""
    content = message.content
    if isinstance(content, str):
        return content
    return " ".join(block["text"] if isinstance(block, dict) else str(block) for block in content
                    if not isinstance(block, dict) or block.get("type") == "text")


def _last_user_text(state) -> str | None:
    """The text of the newest message where it is the user's, else None (an empty turn, a tool
    result or the model's own reply is last)."""
    messages = state["messages"]
    if messages and isinstance(messages[-1], HumanMessage):
        return _text(messages[-1])
    return None


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:16]


# 1. The docs' StateGraph memory node ---------------------------------------------------------

def build_node_memory_agent(checkpointer, store, **kw):
    llm = _llm(kw)

    def call_model(state: MessagesState, config: RunnableConfig, *, store: BaseStore):
        user_id = config["configurable"]["user_id"]
        namespace = ("memories", user_id)
        memories = store.search(namespace, query=str(state["messages"][-1].content))
        info = "\n".join([d.value["data"] for d in memories])
        system_msg = f"You are a helpful assistant talking to the user. User info: {info}"

        # Store new memories if the user asks the model to remember
        last_message = state["messages"][-1]
        if "remember" in _text(last_message).lower():
            memory = _text(last_message)
            store.put(namespace, str(uuid.uuid4()), {"data": memory})

        response = llm.invoke([{"role": "system", "content": system_msg}] + state["messages"])
        return {"messages": response}

    builder = StateGraph(MessagesState)
    builder.add_node(call_model)
    builder.add_edge(START, "call_model")
    graph = builder.compile(checkpointer=checkpointer, store=store)
    return L.forgettable(graph), {}


def run_node_memory_agent(graph, with_secret: bool) -> None:
    t1, t2 = _config("t1", user_id=USER_ID), _config("t2", user_id=USER_ID)
    _drive(graph, [
        _user("Hi! I am planning a trip to Lisbon next month."),
        _secret_turn(with_secret),
        _user("Which documents do I need at the border?"),
    ], t1)
    _drive(graph, [
        _user("what do you remember about me?"),
        _user("Is there anything about my health the airline should know?"),
    ], t2)
    _drive(graph, [_user("Thanks, that is all for the trip.")], t1)


# 2. A prebuilt agent with memory tools (InjectedStore, get_store) ----------------------------

def build_tool_memory_agent(checkpointer, store, **kw):
    llm, counters = _llm(kw), {"send_email": 0}
    user_id = kw.get("user_id", USER_ID)  # fixed when the agent is built, not read from config
    namespace = ("memories", user_id)

    @tool
    def save_memory(memory: str, store: Annotated[BaseStore, InjectedStore()]) -> str:
        """Save a memory about the user, to recall in later conversations."""
        store.put(namespace, f"memory-{_digest(memory)}", {"data": memory})
        return "Saved the memory."

    # Named search_memories (langmem's name), not recall_memories: with the latter the tiny test
    # model picks it on every turn, and send_email would never fire.
    def search_memories(query: str) -> str:
        """Recall what is remembered about the user that matches a query."""
        # Same as that provided to `create_agent`
        store = get_store()
        memories = store.search(namespace, query=query, limit=5)
        return "\n".join(m.value["data"] for m in memories) or "No memories yet."

    def send_email(to: str, body: str) -> str:
        """Send an e-mail on the user's behalf."""
        counters["send_email"] += 1
        return f"sent to {to}"

    @before_agent
    def remember_user_message(state: AgentState, runtime: Runtime) -> None:
        # Stands for the model deciding to call save_memory on a message that says "remember"
        # (the tiny test model calls a random tool with random arguments).
        text = _last_user_text(state)
        if text is not None and "remember" in text.lower():
            runtime.store.put(namespace, f"message-{_digest(text)}", {"data": text})

    tools = [
        L.read_only(save_memory),  # writes only the agent's own store
        L.read_only(search_memories),
        L.consequential(send_email, result=lambda to, body: f"sent to {to}"),
    ]
    graph = create_agent(
        llm,
        tools,
        system_prompt="You are a helpful assistant.",
        middleware=[remember_user_message],
        checkpointer=checkpointer,
        store=store,
    )
    return L.forgettable(graph), counters


def run_tool_memory_agent(graph, with_secret: bool) -> None:
    _drive(graph, [
        _user("Hi, I am organising my trip to Lisbon."),
        _secret_turn(with_secret),
        _user("Please e-mail my travel agent the details."),
    ], _config("t1"))
    _drive(graph, [
        _user("what do you remember about me?"),
        _user("Send my doctor a note about the trip."),
    ], _config("t2"))


# 3. A user profile document under a fixed key ------------------------------------------------

def build_profile_agent(checkpointer, store, **kw):
    llm = _llm(kw)

    def update_profile(state: MessagesState, config: RunnableConfig, *, store: BaseStore):
        text = _last_user_text(state)
        if text is None:
            return {}
        namespace = ("profile", config["configurable"]["user_id"])
        item = store.get(namespace, "profile")
        profile = dict(item.value) if item else {"name": "", "facts": [], "last_request": ""}
        name = re.search(r"my name is (\w+)", text, re.IGNORECASE)
        if name:
            profile["name"] = name.group(1)
        if "remember" in text.lower():
            profile["facts"] = [*profile["facts"], text]
        profile["last_request"] = text  # overwritten every turn
        store.put(namespace, "profile", profile)
        return {}

    def call_model(state: MessagesState, config: RunnableConfig, *, store: BaseStore):
        item = store.get(("profile", config["configurable"]["user_id"]), "profile")
        profile = item.value if item else {}
        facts = "; ".join(profile.get("facts", []))
        system = (f"You are a helpful assistant. The user's name: {profile.get('name') or 'unknown'}. "
                  f"Known facts: {facts or 'none'}. Their last request: {profile.get('last_request', '')}")
        return {"messages": [llm.invoke([{"role": "system", "content": system}] + state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("update_profile", update_profile)
    builder.add_node("call_model", call_model)
    builder.add_edge(START, "update_profile")
    builder.add_edge("update_profile", "call_model")
    builder.add_edge("call_model", END)
    graph = builder.compile(checkpointer=checkpointer, store=store)
    return L.forgettable(graph), {}


def run_profile_agent(graph, with_secret: bool) -> None:
    t1, t2 = _config("t1", user_id=USER_ID), _config("t2", user_id=USER_ID)
    _drive(graph, [
        _user("Hello, my name is Ana and I live in Porto."),
        _secret_turn(with_secret),
        _user("I would like a quiet hotel in Lisbon."),
        _user("remember: I prefer trains to buses."),
    ], t1)
    _drive(graph, [
        _user("what do you remember about me?"),
        _user("Suggest a weekend plan for me."),
    ], t2)
    _drive(graph, [_user("What was my last request?")], t1)


# 4. Facts shared by all users, with a delete ------------------------------------------------

FACTS = ("facts",)


class FactsState(MessagesState):
    last_fact: str


def build_shared_memory_agent(checkpointer, store, **kw):
    llm = _llm(kw)

    def manage_facts(state: FactsState, config: RunnableConfig, *, store: BaseStore):
        text = _last_user_text(state)
        if text is None:
            return {}
        user_id = config["configurable"]["user_id"]
        if "forget that" in text.lower():
            if state.get("last_fact"):
                store.delete(FACTS, state["last_fact"])
                return {"last_fact": ""}
            return {}
        if "remember:" in text.lower():
            key = f"fact-{_digest(user_id, text)}"
            store.put(FACTS, key, {"text": text, "author": user_id, "kind": "fact"})
            return {"last_fact": key}
        return {}

    def call_model(state: FactsState, config: RunnableConfig, *, store: BaseStore):
        query = str(state["messages"][-1].content)
        facts = store.search(FACTS, query=query, filter={"kind": "fact"}, limit=10)
        known = "\n".join(f"- {f.value['text']} (from {f.value['author']})" for f in facts)
        system = (f"You are a team travel assistant talking to {config['configurable']['user_id']}. "
                  f"Facts the team shared:\n{known or '- none'}")
        return {"messages": [llm.invoke([{"role": "system", "content": system}] + state["messages"])]}

    builder = StateGraph(FactsState)
    builder.add_node("manage_facts", manage_facts)
    builder.add_node("call_model", call_model)
    builder.add_edge(START, "manage_facts")
    builder.add_edge("manage_facts", "call_model")
    builder.add_edge("call_model", END)
    graph = builder.compile(checkpointer=checkpointer, store=store)
    return L.forgettable(graph), {}


def run_shared_memory_agent(graph, with_secret: bool) -> None:
    t1, t2 = _config("t1", user_id=USER_ID), _config("t2", user_id=OTHER_USER_ID)
    _drive(graph, [
        _user("Hi, I am booking the team trip to Lisbon."),
        _secret_turn(with_secret),
        _user("remember: I always book a window seat."),
    ], t1)
    _drive(graph, [
        _user("remember: the Lisbon office closes at 6pm."),
        _user("What do you remember about the people on this trip?"),
    ], t2)
    _drive(graph, [
        _user("Actually, forget that."),
        _user("What should the team know before we fly?"),
    ], t1)


AGENTS = {
    "node_memory_agent": (build_node_memory_agent, run_node_memory_agent),
    "tool_memory_agent": (build_tool_memory_agent, run_tool_memory_agent),
    "profile_agent": (build_profile_agent, run_profile_agent),
    "shared_memory_agent": (build_shared_memory_agent, run_shared_memory_agent),
}
