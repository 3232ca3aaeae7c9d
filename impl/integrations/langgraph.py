"""Exact forgetting for LangGraph agents: provenance, a KV-engine chat model, `forget`, erasure.

A LangGraph agent checkpoints its typed state after every super-step, but `RemoveMessage`
only changes the head: every older checkpoint still holds the message, and a fork re-runs
the model and the tools unguarded. This module makes a LangGraph agent forgettable exactly:

- `UnseeChatModel`: a LangChain chat model on unsee's KV engine (greedy, or sampled with
  draws seeded by (seed, turn, purpose)). Its cache is the canonical cache of the message
  list it was last synced to (one prefill per message; a model turn's header, then its
  reply), so a thread's K/V at a boundary is a function of the thread's state alone.
- `build_agent`: a graph of an ingest node (one observation per turn, every message stamped
  with the source id it came from), a chat-model node, a `ToolNode` with a read-only tool
  (`lookup`) and a consequential one (`send`), and a summarization node that compacts the
  message list. Its state carries the provenance graph and the observation log, so the
  checkpointer holds what a forget needs.
- `forget(graph, thread_id, sources)`: τ from the provenance; fork from the checkpoint that
  ended turn τ−1; replay turns τ..T with the sources removed through the same compiled
  graph (read-only tools answer from the environment snapshot in the state; consequential
  calls that match the committed ones are recognised and never fire again; the others are
  listed for compensation); the thread's head is the counterfactual; every checkpoint and
  write of the forgotten branch is deleted with secure_delete on, then VACUUM and a WAL
  truncation, so no byte of the target stays in the SQLite file.
- `LangGraphRuntime`: the conformance kit's runtime protocol (`unsee.specs.protocol`) over
  one thread: a step is one `graph.invoke`, so the kit checks LangGraph runs as transitions.

Every turn (one `invoke`) maps one `unsee.model.Observation`: its visible parts become
messages (system, user, memory as a system message, tool as a user message), `reply` the
number of tokens the chat model writes, `tool` the tool it calls (`lookup` or `send`), and
`compact` a summarization at the end of the turn.
"""

from __future__ import annotations

try:
    import langgraph  # noqa: F401
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import (AIMessage, AnyMessage, BaseMessage, HumanMessage, RemoveMessage,
                                         SystemMessage, ToolMessage)
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.runnables import RunnableConfig
    from langchain_core.tools import InjectedToolCallId, tool
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph, add_messages
    from langgraph.prebuilt import InjectedState, ToolNode
    from langgraph.types import Command
except ImportError as e:  # pragma: no cover - exercised by a test that hides langgraph
    raise ImportError("unsee.impl.integrations.langgraph needs LangGraph and LangChain: "
                      "pip install unsee[langgraph]") from e

import hashlib
import itertools
import json
import operator
import sqlite3
import time
import weakref
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any, Sequence, TypedDict

import networkx as nx
from pydantic import ConfigDict

from unsee.model.lm import draws as seeded_draws
from unsee.model.session import UnknownSource, UnseeError
from unsee.model.state import Config, LedgerEntry, Observation, Part

SALT = {"reply": 0, "plan": 1, "summary": 2}
REPLAY_KEY = "unsee_replay"  # configurable key a forget sets; tools read it (objects never reach metadata)
DRAFTS_KEY = "unsee_drafts"  # the forgotten branch's replies by (turn, purpose): drafts for the chat model


# --- the chat model on the KV engine ------------------------------------------------------------

def _kind(m: BaseMessage) -> str:
    k = (m.additional_kwargs.get("unsee") or {}).get("kind")
    if k:
        return k
    if isinstance(m, SystemMessage):
        return "system"
    if isinstance(m, ToolMessage):
        return "tool"
    if isinstance(m, AIMessage):
        return "assistant"
    return "user"


class KVContext:
    """One thread's cache on a KVEngine: the canonical cache of the messages it was synced to.

    `chain` names the blocks resident after BOS (a running hash per message). `sync` keeps the
    longest resident prefix (a crop: dropped rows are zeroed) and prefills the rest on the
    canonical schedule, so the cache never depends on the path that led to a message list."""

    def __init__(self, bundle, threads: int = 1) -> None:
        from unsee.impl.engine.kv import KVEngine, row_independence

        self.bundle = bundle
        self.template = bundle.template
        self.engine = KVEngine(bundle.model, bundle.device, threads)
        self.bos = tuple(self.template.bos())
        self.chain: list[tuple[str, int]] = []  # (running key, tokens) per resident message
        self.exact_rows, _ = row_independence(self.engine)
        self.cropped = 0  # tokens kept by a sync (no compute)
        self.generations = 0  # model turns written
        self.skipped = 0  # of which a draft was F's reply (checked by one prefill, nothing decoded)

    def reset(self) -> None:
        self.engine.reset()
        self.chain = []

    def render(self, m: BaseMessage) -> tuple[tuple[int, ...], int]:
        """A message's tokens and how many of them are its first prefill (the rest: a reply)."""
        meta = m.additional_kwargs.get("unsee") or {}
        if isinstance(m, AIMessage):
            head = tuple(self.template.header(meta.get("purpose", "reply")))
            toks = tuple(meta["tokens"]) if "tokens" in meta else tuple(self.template.encode_raw(str(m.content)))
            return head + toks, len(head)
        toks = tuple(self.template.block(_kind(m), str(m.content)))
        return toks, len(toks)

    @staticmethod
    def _key(prev: str, toks, split: int) -> str:
        return hashlib.sha256(f"{prev}|{split}|{','.join(map(str, toks))}".encode()).hexdigest()[:24]

    def sync(self, messages: Sequence[BaseMessage]) -> int:
        """Make the cache the canonical cache of `messages`; returns the tokens computed."""
        e = self.engine
        if len(e) == 0:
            e.prefill(self.bos)
            self.chain = []
        prev, keys = "", []
        rendered = [self.render(m) for m in messages]
        for toks, split in rendered:
            prev = self._key(prev, toks, split)
            keys.append(prev)
        keep = 0
        while keep < min(len(keys), len(self.chain)) and self.chain[keep][0] == keys[keep]:
            keep += 1
        length = len(self.bos) + sum(n for _, n in self.chain[:keep])
        if keep < len(self.chain):
            e.crop(length)
        self.cropped += length - len(self.bos)
        self.chain = self.chain[:keep]
        computed = 0
        for key, (toks, split) in zip(keys[keep:], rendered[keep:]):
            e.prefill(toks[:split])
            e.prefill(toks[split:])
            self.chain.append((key, len(toks)))
            computed += len(toks)
        return computed

    def generate(self, messages: Sequence[BaseMessage], purpose: str, n: int, draws=None,
                 draft=None) -> tuple[int, ...]:
        """F's model turn: sync to `messages`, prefill the header, and take the reply's fixed point.
        `draft` (a recorded reply) only saves decoding: the fixed point is F's either way."""
        self.sync(messages)
        head = tuple(self.template.header(purpose))
        self.engine.prefill(head)
        reply, decoded, _ = self.engine.fixed_point(n, draws, draft=draft, exact_rows=self.exact_rows)
        self.skipped += decoded == 0
        prev = self.chain[-1][0] if self.chain else ""
        self.chain.append((self._key(prev, head + reply, len(head)), len(head) + n))
        self.generations += 1
        return reply

    def kv(self) -> list:
        return self.engine.kv_tensors()

    def digest(self) -> str:
        from unsee.impl.engine.kv import tensor_digest

        return tensor_digest(t for pair in self.engine.kv_tensors() for t in pair)


class UnseeChatModel(BaseChatModel):
    """A LangChain chat model whose θ is a transformers model on unsee's KV engine.

    `invoke(messages, max_tokens=n, purpose="reply"|"summary", turn=t)`; bound with
    `bind_tools(tools, tool_choice=name)` it writes a tool call instead: two plan tokens give
    the arguments (`key` = first mod `n_keys`, `value` = second) and the call id `call-t<turn>`.
    Greedy by default; `sampling=True` draws with (seed, turn, purpose), so a replay of turn t
    draws what a fresh run of turn t draws (A1)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    context: Any
    sampling: bool = False
    seed: int | None = 0
    plan_tokens: int = 2
    summary_tokens: int = 4
    n_keys: int = 4

    @classmethod
    def from_model(cls, name: str = "tiny-llama", dtype: str = "float32", device: str | None = None,
                   threads: int = 1, **kw) -> "UnseeChatModel":
        """tiny-llama | tiny-qwen2 | tiny-mistral | smollm2 | a local folder or .gguf file."""
        from unsee.impl.engine.models import load

        return cls(context=KVContext(load(name, dtype=dtype, device=device), threads), **kw)

    @property
    def _llm_type(self) -> str:
        return "unsee-kv"

    def bind_tools(self, tools, *, tool_choice: str | None = None, **kw):
        names = [getattr(t, "name", t) for t in tools]
        if tool_choice is not None and tool_choice not in names:
            raise UnseeError(f"tool_choice {tool_choice!r} is not one of the bound tools {names}")
        return self.bind(tools=names, tool_choice=tool_choice, **kw)

    def _draws(self, turn: int, purpose: str, n: int):
        return seeded_draws(self.seed, turn, SALT[purpose], n) if self.sampling else None

    def _generate(self, messages, stop=None, run_manager=None, **kw) -> ChatResult:
        turn = int(kw.get("turn", 0))
        choice = kw.get("tool_choice")
        if choice:
            purpose, n = "plan", self.plan_tokens
        else:
            purpose = kw.get("purpose", "reply")
            n = int(kw.get("max_tokens", self.summary_tokens if purpose == "summary" else 8))
        if n < 1:
            raise UnseeError("a model turn writes at least one token")
        toks = self.context.generate(messages, purpose, n, self._draws(turn, purpose, n), kw.get("draft"))
        meta = {"unsee": {"tokens": list(toks), "purpose": purpose}}
        calls = []
        if choice:
            args = {"key": toks[0] % self.n_keys}
            if choice == "send":
                args["value"] = toks[1]
            calls = [{"name": choice, "args": args, "id": f"call-t{turn}", "type": "tool_call"}]
        msg = AIMessage(content=self.context.template.detokenize(toks), additional_kwargs=meta, tool_calls=calls,
                        id=kw.get("message_id"))
        return ChatResult(generations=[ChatGeneration(message=msg)])


# --- the agent graph --------------------------------------------------------------------------

class AgentState(TypedDict, total=False):
    obs: dict  # this turn's observation (Observation.to_json()), the graph's input
    turn: int
    inputs: list  # this turn's field artifacts and the last message of R_{t-1}
    messages: Annotated[list[AnyMessage], add_messages]
    memory: Annotated[list, operator.add]  # plaintext memory records: {"id", "text" | "tokens"}
    summary: list | None
    env: dict  # the environment the tools act on (str key → int)
    ledger: Annotated[list, operator.add]  # consequential calls this state made: {"call_id", "tool", "args", "turn"}
    provenance: Annotated[list, operator.add]  # G_t: {"id", "type", "parents", "sources", "turn", "committed"}
    log: Annotated[list, operator.add]  # the observations, one per turn (what a forget replays)


class _Prov:
    """Stamps the artifacts one node creates (the conservative graph: every artifact a turn
    generates has that turn's inputs among its parents)."""

    def __init__(self, state, turn: int) -> None:
        rows = state.get("provenance") or []
        self.turn = turn
        self.sources = {r["id"]: set(r["sources"]) for r in rows}
        self.count = sum(1 for r in rows if r["turn"] == turn)
        self.inputs = tuple(state.get("inputs") or ())
        self.rows: list[dict] = []

    def _add(self, type_: str, parents: tuple, sources: set, committed: bool = False) -> str:
        self.count += 1
        aid = f"t{self.turn}.{self.count}.{type_}"
        self.rows.append({"id": aid, "type": type_, "parents": list(parents), "sources": sorted(sources),
                          "turn": self.turn, "committed": committed})
        self.sources[aid] = set(sources)
        return aid

    def field(self, kind: str, source: str) -> str:
        return self._add(kind, (), {source})

    def derived(self, type_: str, parents: tuple, committed: bool = False) -> str:
        parents = tuple(dict.fromkeys(tuple(p for p in parents if p) + self.inputs))
        src: set = set()
        for p in parents:
            src |= self.sources[p]
        return self._add(type_, parents, src, committed)


def _last_id(messages) -> str | None:
    return messages[-1].id if messages else None


def _message(kind: str, text: str, source: str, aid: str) -> BaseMessage:
    meta = {"unsee": {"kind": kind, "source": source}}
    if kind in ("system", "memory"):
        return SystemMessage(text, id=aid, additional_kwargs=meta)
    return HumanMessage(text, id=aid, additional_kwargs=meta, name="tool" if kind == "tool" else None)


def _ai(m: AIMessage, aid: str, turn: int, sources) -> AIMessage:
    meta = {"unsee": {**m.additional_kwargs["unsee"], "turn": turn, "sources": sorted(sources)}}
    return AIMessage(content=m.content, id=aid, additional_kwargs=meta, tool_calls=list(m.tool_calls))


class World:
    """The side effects that fired outside the agent, kept in the checkpointer's SQLite file
    (table `unsee_world`): a forget reads it and never adds to it."""

    def __init__(self, saver: SqliteSaver) -> None:
        self.saver = saver
        with saver.cursor() as cur:
            cur.execute("CREATE TABLE IF NOT EXISTS unsee_world (thread_id TEXT NOT NULL, call_id TEXT NOT NULL, "
                        "tool TEXT NOT NULL, args TEXT NOT NULL, turn INTEGER NOT NULL, seq INTEGER NOT NULL)")
        self.fired = 0  # side effects fired through this object (a test counts them)

    def fire(self, thread_id: str, call_id: str, tool_name: str, args: tuple, turn: int) -> None:
        with self.saver.cursor() as cur:
            seq = cur.execute("SELECT COUNT(*) FROM unsee_world").fetchone()[0]
            cur.execute("INSERT INTO unsee_world VALUES (?, ?, ?, ?, ?, ?)",
                        (thread_id, call_id, tool_name, json.dumps(list(args)), turn, seq))
        self.fired += 1

    def entries(self, thread_id: str) -> tuple[LedgerEntry, ...]:
        with self.saver.cursor(transaction=False) as cur:
            rows = cur.execute("SELECT call_id, tool, args, turn FROM unsee_world WHERE thread_id = ? ORDER BY seq",
                               (thread_id,)).fetchall()
        return tuple(LedgerEntry(c, t, tuple(json.loads(a)), n) for c, t, a, n in rows)


class Replay:
    """What a forget hands the consequential tools: the committed calls to recognise, and the
    calls the counterfactual makes (none of them fires)."""

    def __init__(self, committed: Sequence[LedgerEntry]) -> None:
        self.committed = {e.call_id: e for e in committed}
        self.effects: list[LedgerEntry] = []

    def shadow(self, call_id: str, tool_name: str, args: tuple, turn: int) -> None:
        self.effects.append(LedgerEntry(call_id, tool_name, tuple(args), turn))


def make_tools(world: World):
    """`lookup` (read-only: answers from the environment in the state, i.e. the snapshot a
    checkpoint restores) and `send` (consequential: writes the environment and fires into the
    world, except under a forget, which recognises or reports it instead)."""

    def result(state, tool_call_id, name, text, committed=False, update=None):
        t = state["turn"]
        p = _Prov(state, t)
        plan = next(m.id for m in reversed(state["messages"]) if isinstance(m, AIMessage)
                    and any(c["id"] == tool_call_id for c in m.tool_calls))
        cid = p.derived("tool_call", (plan,), committed=committed)
        rid = p.derived("tool_result", (cid, _last_id(state["messages"])))
        msg = ToolMessage(text, tool_call_id=tool_call_id, id=rid, name=name,
                          additional_kwargs={"unsee": {"kind": "tool", "turn": t, "sources": sorted(p.sources[rid])}})
        return Command(update={"messages": [msg], "provenance": p.rows, **(update or {})})

    @tool
    def lookup(key: int, state: Annotated[dict, InjectedState],
               tool_call_id: Annotated[str, InjectedToolCallId]) -> Command:
        """Read the value stored under `key` (read-only)."""
        value = state["env"].get(str(key), 0)
        return result(state, tool_call_id, "lookup", f"lookup key {key} value {value}")

    @tool
    def send(key: int, value: int, state: Annotated[dict, InjectedState],
             tool_call_id: Annotated[str, InjectedToolCallId], config: RunnableConfig) -> Command:
        """Store `value` under `key` in the outside world (a consequential side effect)."""
        t = state["turn"]
        replay = config.get("configurable", {}).get(REPLAY_KEY)
        if replay is None:
            world.fire(config["configurable"]["thread_id"], tool_call_id, "send", (key, value), t)
        else:
            replay.shadow(tool_call_id, "send", (key, value), t)
        env = {**state["env"], str(key): value}
        entry = {"call_id": tool_call_id, "tool": "send", "args": [key, value], "turn": t}
        return result(state, tool_call_id, "send", f"send key {key} value {value}", committed=True,
                      update={"env": env, "ledger": [entry]})

    return [lookup, send]


@dataclass
class _Agent:
    llm: UnseeChatModel
    saver: SqliteSaver
    world: World
    initial_env: dict


_AGENTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def build_agent(llm: UnseeChatModel, saver: SqliteSaver, env: dict | None = None):
    """The forgettable agent: ingest → chat model → ToolNode(lookup, send) → summarize, compiled
    with `saver` (a SqliteSaver). Input per turn: `observe(Observation(...))`."""
    world = World(saver)
    tools = make_tools(world)

    def ingest(state: AgentState):
        obs = Observation.from_json(state["obs"])
        t = state.get("turn", 0) + 1
        p = _Prov(state, t)
        last = _last_id(state.get("messages") or [])
        fields = [p.field(obs.kind, part.source) for part in obs.visible]
        p.inputs = tuple(fields) + ((last,) if last else ())
        msgs, memory = [], []
        for part, f in zip(obs.visible, fields):
            if obs.kind == "memory":
                memory.append({"id": p.derived("memory_record", (f,)), "text": part.text})
            bid = p.derived("block", (f, last))
            msgs.append(_message(obs.kind, part.text, part.source, bid))
            last = bid
        return {"turn": t, "inputs": list(p.inputs), "messages": msgs, "memory": memory, "provenance": p.rows,
                "log": [state["obs"]]}

    def agent(state: AgentState, config: RunnableConfig):
        obs = Observation.from_json(state["obs"])
        t = state["turn"]
        drafts = (config.get("configurable") or {}).get(DRAFTS_KEY) or {}
        p = _Prov(state, t)
        msgs = list(state["messages"])
        new = []
        if obs.reply:
            out = llm.invoke(msgs, max_tokens=obs.reply, purpose="reply", turn=t, draft=drafts.get((t, "reply")))
            aid = p.derived("reply", (_last_id(msgs),))
            new.append(_ai(out, aid, t, p.sources[aid]))
            msgs.append(new[-1])
        if obs.tool:
            out = llm.bind_tools(tools, tool_choice=obs.tool).invoke(msgs, turn=t, draft=drafts.get((t, "plan")))
            aid = p.derived("plan", (_last_id(msgs),))
            new.append(_ai(out, aid, t, p.sources[aid]))
        return {"messages": new, "provenance": p.rows}

    def summarize(state: AgentState, config: RunnableConfig):
        t = state["turn"]
        p = _Prov(state, t)
        msgs = list(state["messages"])
        drafts = (config.get("configurable") or {}).get(DRAFTS_KEY) or {}
        out = llm.invoke(msgs, purpose="summary", max_tokens=llm.summary_tokens, turn=t,
                         draft=drafts.get((t, "summary")))
        sid = p.derived("summary", (_last_id(msgs),))
        keep = list(itertools.takewhile(lambda m: _kind(m) == "system", msgs))
        rec = p.derived("memory_record", (sid,))
        toks = out.additional_kwargs["unsee"]["tokens"]
        return {"messages": [RemoveMessage(id=m.id) for m in msgs[len(keep):]] + [_ai(out, sid, t, p.sources[sid])],
                "summary": list(toks), "memory": [{"id": rec, "tokens": list(toks)}], "provenance": p.rows}

    def after_agent(state: AgentState):
        m = state["messages"][-1] if state.get("messages") else None
        if isinstance(m, AIMessage) and m.tool_calls:
            return "tools"
        return after_tools(state)

    def after_tools(state: AgentState):
        return "summarize" if state["obs"].get("compact") else END

    b = StateGraph(AgentState)
    b.add_node("ingest", ingest)
    b.add_node("agent", agent)
    b.add_node("tools", ToolNode(tools))
    b.add_node("summarize", summarize)
    b.add_edge(START, "ingest")
    b.add_edge("ingest", "agent")
    b.add_conditional_edges("agent", after_agent, ["tools", "summarize", END])
    b.add_conditional_edges("tools", after_tools, ["summarize", END])
    b.add_edge("summarize", END)
    graph = b.compile(checkpointer=saver)
    _AGENTS[graph] = _Agent(llm, saver, world, dict(env if env is not None else
                                                    {str(k): v for k, v in Config().env}))
    return graph


def observe(obs: Observation) -> dict:
    """The graph input for one turn."""
    return {"obs": obs.to_json()}


def _parts(graph) -> _Agent:
    try:
        return _AGENTS[graph]
    except KeyError:
        raise UnseeError("this graph was not built by unsee.impl.integrations.langgraph.build_agent") from None


def start_thread(graph, thread_id: str) -> None:
    """R_0 of a new thread: an empty state with the initial environment, as a checkpoint."""
    a = _parts(graph)
    cfg = {"configurable": {"thread_id": thread_id}}
    if graph.get_state(cfg).values:
        raise UnseeError(f"thread {thread_id!r} already exists")
    graph.update_state(cfg, {"turn": 0, "env": dict(a.initial_env), "messages": [], "summary": None}, as_node=START)


def run_turn(graph, thread_id: str, obs: Observation, config: dict | None = None) -> dict:
    """One transition: `graph.invoke` on one observation; the engine's cache then holds the
    canonical cache of the thread's messages."""
    cfg = {"configurable": {"thread_id": thread_id, **((config or {}).get("configurable") or {})}}
    out = graph.invoke(observe(obs), cfg, durability="sync")
    _parts(graph).llm.context.sync(out.get("messages") or [])
    return out


# --- checkpoint history ---------------------------------------------------------------------------

def lineage(saver: SqliteSaver, thread_id: str) -> list:
    """The head's checkpoints, root first (other branches of the thread left out)."""
    tuples = {t.config["configurable"]["checkpoint_id"]: t for t in saver.list({"configurable": {"thread_id": thread_id}})}
    if not tuples:
        return []
    head = max(tuples)  # checkpoint ids are time-ordered
    out = []
    cid = head
    while cid is not None:
        t = tuples[cid]
        out.append(t)
        cid = (t.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    return out[::-1]


def boundaries(saver: SqliteSaver, thread_id: str) -> list:
    """The checkpoint that ends each turn, R_0..R_T (index b is boundary b): a checkpoint the
    next one does not continue inside the same turn (the next is the input of a new turn, or
    there is none)."""
    line = lineage(saver, thread_id)
    out = []
    for i, t in enumerate(line):
        src = t.metadata.get("source")
        nxt = line[i + 1] if i + 1 < len(line) else None
        if src != "input" and (nxt is None or nxt.metadata.get("source") == "input"):
            out.append(t)
    return out


def _config_of(t) -> dict:
    c = t.config["configurable"]
    return {"configurable": {"thread_id": c["thread_id"], "checkpoint_ns": c.get("checkpoint_ns", ""),
                             "checkpoint_id": c["checkpoint_id"]}}


def erase_branches(saver: SqliteSaver, thread_id: str) -> dict:
    """Delete every checkpoint and write of the thread off the head's lineage, with
    secure_delete on; then VACUUM and truncate the WAL, so the freed pages leave the file."""
    keep = {t.config["configurable"]["checkpoint_id"] for t in lineage(saver, thread_id)}
    with saver.lock:
        conn = saver.conn
        conn.commit()
        conn.execute("PRAGMA secure_delete = ON")
        ids = [r[0] for r in conn.execute("SELECT checkpoint_id FROM checkpoints WHERE thread_id = ?", (thread_id,))]
        wids = [r[0] for r in conn.execute("SELECT DISTINCT checkpoint_id FROM writes WHERE thread_id = ?", (thread_id,))]
        drop = sorted(set(ids) - keep)
        wdrop = sorted(set(wids) - keep)
        n_c = n_w = 0
        for i in range(0, len(drop), 500):
            chunk = drop[i:i + 500]
            q = ",".join("?" * len(chunk))
            n_c += conn.execute(f"DELETE FROM checkpoints WHERE thread_id = ? AND checkpoint_id IN ({q})",
                                (thread_id, *chunk)).rowcount
        for i in range(0, len(wdrop), 500):
            chunk = wdrop[i:i + 500]
            q = ",".join("?" * len(chunk))
            n_w += conn.execute(f"DELETE FROM writes WHERE thread_id = ? AND checkpoint_id IN ({q})",
                                (thread_id, *chunk)).rowcount
        conn.commit()
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return {"checkpoints_deleted": n_c, "writes_deleted": n_w}


# --- forget -------------------------------------------------------------------------------------------

@dataclass
class Receipt:
    """What a forget did, like the CLI's receipt (`to_json()`)."""

    thread_id: str
    sources: tuple[str, ...]
    method: str
    tau: int
    T: int
    checkpoint: int
    transitions: int
    tokens_prefilled: int
    tokens_decoded: int
    tokens_restored: int  # cache rows of R_c kept by a crop (no compute)
    seconds: float  # the whole forget: history walk, restore, replay, erasure
    replay_seconds: float  # the T−c invocations of the graph
    erase_seconds: float  # deleting the forgotten branch, VACUUM, WAL truncation
    fork_checkpoint_id: str
    head_checkpoint_id: str
    checkpoints_deleted: int
    writes_deleted: int
    replies_skipped: int = 0  # replay replies whose recorded draft was F's: one prefill, no decoding
    compensation: tuple[dict, ...] = ()
    deduplicated: tuple[str, ...] = ()
    replayed: tuple[Observation, ...] = field(default=(), repr=False)

    def to_json(self) -> dict:
        d = asdict(self)
        d["replayed"] = [o.to_json() for o in self.replayed]
        return d


def first_entry(values: dict, sources) -> int:
    """τ: the first turn whose observation fields carry any of the sources (from the provenance)."""
    z = set(sources)
    turns = [r["turn"] for r in values.get("provenance") or [] if not r["parents"] and z & set(r["sources"])]
    if not turns:
        known = sorted({s for r in values.get("provenance") or [] if not r["parents"] for s in r["sources"]})
        raise UnknownSource(f"none of {sorted(z)} entered this thread; known sources: {known}")
    return min(turns)


def forget(graph, thread_id: str, sources: Sequence[str], method: str = "B7", checkpoint: int | None = None,
           erase: bool = True, _fork_offset: int = 0) -> Receipt:
    """Forget `sources` from a thread: fork from the checkpoint that ended turn τ−1 (or the
    forced boundary `checkpoint`; method "B5": from R_0 with a fresh cache), replay the logged
    observations after it with the sources removed, and erase the forgotten branch."""
    if not sources:
        raise UnseeError("a forget request needs at least one source id")
    if method not in ("B7", "B5"):
        raise UnseeError(f"method {method!r} is not B7 or B5")
    a = _parts(graph)
    ctx = a.llm.context
    t0 = time.perf_counter()
    bounds = boundaries(a.saver, thread_id)
    head = graph.get_state(_config_of(bounds[-1]))
    T = head.values.get("turn", 0)
    if len(bounds) != T + 1:
        raise UnseeError(f"thread {thread_id!r}: {len(bounds)} turn boundaries for T={T}; was a turn interrupted?")
    tau = first_entry(head.values, sources)
    if method == "B5":
        c = 0
    elif checkpoint is not None:
        if not 0 <= checkpoint < tau:
            raise UnseeError(f"no checkpoint at boundary {checkpoint} before τ={tau}")
        c = checkpoint
    else:
        c = tau - 1 + _fork_offset
    log = [Observation.from_json(o) for o in head.values.get("log") or []]
    committed = a.world.entries(thread_id)
    fork = bounds[c]
    before = (ctx.engine.tokens_prefilled, ctx.engine.tokens_decoded, ctx.cropped)
    if method == "B5":
        ctx.reset()
    ctx.sync(graph.get_state(_config_of(fork)).values.get("messages") or [])  # restore R_c's cache
    restored = ctx.cropped - before[2]
    replay = Replay(committed)
    drafts: dict = {}  # the forgotten branch's replies: each is checked, never trusted
    for t in lineage(a.saver, thread_id):
        for m in t.checkpoint.get("channel_values", {}).get("messages") or []:
            meta = (m.additional_kwargs.get("unsee") or {}) if isinstance(m, AIMessage) else {}
            if meta.get("turn", 0) > c and "tokens" in meta:
                drafts[(meta["turn"], meta["purpose"])] = list(meta["tokens"])
    skipped = ctx.skipped
    extra = {REPLAY_KEY: replay, DRAFTS_KEY: drafts}
    cfg = {"configurable": {**_config_of(fork)["configurable"], **extra}}
    replayed = []
    out: dict = {}
    t1 = time.perf_counter()
    for obs in log[c:]:
        o = obs.without(frozenset(sources))
        replayed.append(o)
        out = graph.invoke(observe(o), cfg, durability="sync")
        cfg = {"configurable": {"thread_id": thread_id, **extra}}
    replay_s = time.perf_counter() - t1
    if not replayed:  # the fork is the head (c = T): nothing to replay
        out = head.values
    dedup, comp = [], []
    for e in replay.effects:
        old = replay.committed.get(e.call_id)
        if old is not None and old.tool == e.tool and tuple(old.args) == tuple(e.args):
            dedup.append(e.call_id)
        else:
            comp.append({"call_id": e.call_id, "tool": e.tool, "args": list(e.args),
                         "committed": None if old is None else list(old.args),
                         "reason": "not committed" if old is None else "arguments differ"})
    new_ids = {e.call_id for e in replay.effects}
    for e in committed:
        if e.turn > c and e.call_id not in new_ids:
            comp.append({"call_id": e.call_id, "tool": e.tool, "args": None, "committed": list(e.args),
                         "reason": "counterfactual makes no such call"})
    ctx.sync(out.get("messages") or [])
    t2 = time.perf_counter()
    erased = erase_branches(a.saver, thread_id) if erase else {"checkpoints_deleted": 0, "writes_deleted": 0}
    erase_s = time.perf_counter() - t2
    new_head = boundaries(a.saver, thread_id)[-1]
    return Receipt(thread_id, tuple(sources), method, tau, T, c, len(replayed),
                   ctx.engine.tokens_prefilled - before[0], ctx.engine.tokens_decoded - before[1], restored,
                   time.perf_counter() - t0, replay_s, erase_s, fork.config["configurable"]["checkpoint_id"],
                   new_head.config["configurable"]["checkpoint_id"], erased["checkpoints_deleted"],
                   erased["writes_deleted"], ctx.skipped - skipped, tuple(comp), tuple(dedup), tuple(replayed))


# --- digests and the provenance graph ---------------------------------------------------------------

def _h(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=repr).encode()).hexdigest()[:16]


def state_digests(values: dict) -> dict[str, str]:
    """One digest per layer of a thread's state (the cache is the engine's; see `LangGraphRuntime`)."""
    return {
        "turn": _h(values.get("turn", 0)),
        "transcript": _h([m.model_dump() for m in values.get("messages") or []]),
        "memory": _h(values.get("memory") or []),
        "summary": _h(values.get("summary")),
        "environment": _h(sorted((values.get("env") or {}).items())),
        "ledger": _h(values.get("ledger") or []),
        "graph": _h(values.get("provenance") or []),
        "log": _h(values.get("log") or []),
    }


def provenance_graph(values: dict) -> nx.DiGraph:
    g = nx.DiGraph()
    for r in values.get("provenance") or []:
        g.add_node(r["id"], type=r["type"], turn=r["turn"], source_ids=frozenset(r["sources"]),
                   committed=r["committed"])
        for p in r["parents"]:
            g.add_edge(p, r["id"])
    return g


# --- the conformance kit's runtime protocol ---------------------------------------------------------

class LangGraphRuntime:
    """`unsee.specs.protocol.Runtime` over one LangGraph thread (`agent`, the compiled graph):
    `step` is one `graph.invoke`,
    `forget` is `forget(graph, thread, sources)`, the state is the thread's head checkpoint
    plus the engine's cache. Checkpoints: LangGraph saves one after every super-step, so
    every turn boundary 0..T can be restored whatever the policy (`policy` is accepted and
    has nothing to choose)."""

    name = "langgraph"

    def __init__(self, model: str = "tiny-llama", config: Config = Config(), policy: str = "every",
                 path: str = ":memory:", fork_offset: int = 0, dtype: str = "float32",
                 device: str | None = None) -> None:
        self.policy = policy
        self.path = path
        self.conn = sqlite3.connect(path, check_same_thread=False)
        self.saver = SqliteSaver(self.conn)
        self.llm = UnseeChatModel.from_model(model, dtype=dtype, device=device, sampling=config.sampling,
                                             seed=config.seed,
                                             summary_tokens=config.summary_tokens, n_keys=config.n_keys)
        self.agent = build_agent(self.llm, self.saver, {str(k): v for k, v in config.env})
        self.fork_offset = fork_offset
        self._threads = itertools.count()
        self.reset()

    @property
    def engine(self):
        return self.llm.context.engine

    def reset(self) -> None:
        old = getattr(self, "thread_id", None)
        if old is not None:  # a fresh session: the old thread leaves the file
            self.saver.delete_thread(old)
            with self.saver.cursor() as cur:
                cur.execute("DELETE FROM unsee_world WHERE thread_id = ?", (old,))
        self.thread_id = f"thread-{next(self._threads)}"
        self.llm.context.reset()
        start_thread(self.agent, self.thread_id)
        self.llm.context.sync([])
        self._invocations = 0
        self._last: int | None = None
        self.receipt: Receipt | None = None

    def _values(self, t=None) -> dict:
        if t is None:
            return self.agent.get_state({"configurable": {"thread_id": self.thread_id}}).values
        return self.agent.get_state(_config_of(t)).values

    def step(self, obs: Observation) -> None:
        run_turn(self.agent, self.thread_id, obs)
        self._invocations += 1

    def forget(self, sources, method: str = "B7", checkpoint: int | None = None) -> Receipt:
        r = forget(self.agent, self.thread_id, list(sources), method, checkpoint, _fork_offset=self.fork_offset)
        self._invocations += r.transitions
        self._last = r.checkpoint
        self.receipt = r
        return r

    def digest(self) -> dict[str, str]:
        return {**state_digests(self._values()), "kv": self.llm.context.digest()}

    def trajectory(self) -> list[dict[str, str]]:
        if self._last is None:
            raise UnseeError("no forget has run on this thread yet: there is no spliced trajectory")
        bounds = boundaries(self.saver, self.thread_id)
        return [state_digests(self._values(t)) for t in bounds[self._last:-1]] + [self.digest()]

    def graph(self) -> nx.DiGraph:
        """G_t: the provenance recorded in the head checkpoint."""
        return provenance_graph(self._values())

    @property
    def invocations(self) -> int:
        return self._invocations

    @property
    def observations(self) -> tuple[Observation, ...]:
        return tuple(Observation.from_json(o) for o in self._values().get("log") or [])

    @property
    def checkpoints(self) -> tuple[int, ...]:
        return tuple(range(len(boundaries(self.saver, self.thread_id))))

    @property
    def world(self) -> tuple[LedgerEntry, ...]:
        return _parts(self.agent).world.entries(self.thread_id)

    def kv(self) -> list:
        return self.llm.context.kv()


def _cfg(cfg: dict) -> Config:
    return Config(sampling=cfg.get("sampling", False), seed=cfg.get("seed", 0))


def langgraph_tiny_llama(cfg: dict) -> LangGraphRuntime:
    """For the kit: `--unsee-runtime=unsee.impl.integrations.langgraph:langgraph_tiny_llama`."""
    return LangGraphRuntime("tiny-llama", _cfg(cfg), cfg.get("policy", "every"))


def langgraph_fork_at_tau(cfg: dict) -> LangGraphRuntime:
    """A mutant the kit must reject: it forks from the checkpoint after turn τ, not τ−1."""
    return LangGraphRuntime("tiny-llama", _cfg(cfg), cfg.get("policy", "every"), fork_offset=1)


# --- a worked example: forget vs. a full re-run of the thread ----------------------------------------

SECRET = "my IBAN is DE89-3704-0044-0532-0130-00 keep it private"


def demo_stream(secret: str = SECRET) -> list[Observation]:
    """A 10-turn thread: the target `z1` (the secret) enters at turn 3, before a consequential
    call, a read-only lookup, a memory injection and a compaction."""
    def o(kind, src, text, **kw):
        return Observation(kind, (Part(src, text),), **kw)

    return [o("system", "sys", "you are a helpful assistant"),
            o("user", "u2", "hello please keep notes for me", reply=3),
            o("user", "z1", secret, reply=3, tool="send"),
            o("tool", "r4", "report ok meeting friday", reply=2, tool="lookup"),
            o("memory", "m5", "prefers acme", reply=2),
            o("user", "u6", "send the report", reply=3, tool="send"),
            o("user", "u7", "thanks", reply=2, compact=True),
            o("user", "u8", "what is the budget", reply=3, tool="lookup"),
            o("user", "u9", "ok send it", reply=2, tool="send"),
            o("user", "u10", "bye", reply=2)]


def same_state(a: "LangGraphRuntime", b: "LangGraphRuntime") -> list[str]:
    """What differs between two runtimes' heads: messages (every field), each state value, and
    the engine's K/V under torch.equal. Empty when they are bit-identical."""
    import torch

    va, vb = a._values(), b._values()
    out = [k for k in sorted(set(va) | set(vb)) if k != "messages" and va.get(k) != vb.get(k)]
    if [m.model_dump() for m in va.get("messages") or []] != [m.model_dump() for m in vb.get("messages") or []]:
        out.append("messages")
    ka, kb = a.kv(), b.kv()
    if len(ka) != len(kb) or not all(torch.equal(x, y) for p, q in zip(ka, kb) for x, y in zip(p, q)):
        out.append("kv")
    return out


def compare(model: str = "tiny-llama", stream=None, sources=("z1",), path: str = ":memory:",
            config: Config = Config()) -> dict:
    """Run the thread, forget `sources`, run a fresh thread on o^{-z}; report both costs."""
    stream = list(stream or demo_stream())
    rt = LangGraphRuntime(model, config, path=path)
    t0 = time.perf_counter()
    for obs in stream:
        rt.step(obs)
    run_s = time.perf_counter() - t0
    fired = _parts(rt.agent).world.fired
    r = rt.forget(list(sources))
    twin = LangGraphRuntime(model, config)
    t0 = time.perf_counter()
    for obs in stream:
        twin.step(obs.without(frozenset(sources)))
    rerun_s = time.perf_counter() - t0
    return {"model": model, "T": r.T, "tau": r.tau, "checkpoint": r.checkpoint,
            "forget_transitions": r.transitions, "rerun_transitions": len(stream),
            "forget_seconds": round(r.seconds, 3), "replay_seconds": round(r.replay_seconds, 3),
            "erase_seconds": round(r.erase_seconds, 3), "rerun_seconds": round(rerun_s, 3),
            "first_run_seconds": round(run_s, 3), "speedup": round(rerun_s / r.seconds, 2),
            "differs_from_fresh_thread": same_state(rt, twin), "fired_again": _parts(rt.agent).world.fired - fired,
            "deduplicated": list(r.deduplicated), "compensation": r.compensation,
            "replies_skipped": r.replies_skipped,
            "checkpoints_deleted": r.checkpoints_deleted, "writes_deleted": r.writes_deleted}


if __name__ == "__main__":  # python -m unsee.impl.integrations.langgraph [model]
    import sys

    print(json.dumps(compare(sys.argv[1] if len(sys.argv) > 1 else "tiny-llama"), indent=1))
