"""`forget(graph, thread_id, sources)` on a compiled LangGraph graph: Algorithm 1 on a thread.

The thread is read as a session of `unsee.model`: one observation per `graph.invoke` (its input
messages, each a part under its source id), the conservative provenance graph over them, and
a checkpoint at every turn boundary. Algorithm 1's pieces are `unsee.model`'s own: the plan
(`plan_forget`: τ, and earlier where a part stood instead of a target, I(z), c*), `sanitize`,
line 8's report (`compensation`: committed calls recognised, the rest listed for compensation)
and its `Receipt`. What is LangGraph's: forking at R_c, replaying turns c+1..T through the same
compiled graph on the sanitized inputs, and erasing the old branch from the checkpointer's file.

What a graph must satisfy (each checked, with an error saying what to do):
- a `SqliteSaver` checkpointer;
- every model reply from `UnseeChatModel`, or from a model declared with `deterministic(model)`
  (the receipt then says `exactness="declared"`: replayed, not checked);
- every tool of every `ToolNode` marked `read_only(...)` or `consequential(...)`;
- every input message stamped with its source id (`source_message(text, source)`, or
  `additional_kwargs={"unsee_source": id}`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, fields
from typing import Sequence

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from unsee.impl.integrations.langgraph.chat import HIDDEN, KIND, SOURCE, exactness, kind_of
from unsee.impl.integrations.langgraph.history import config_at, erase_branches, lineage, turns
from unsee.impl.integrations.langgraph.tools import REPLAY, Replay, World, marked_tools
from unsee.model.errors import UnseeError
from unsee.model.grammar import canonical
from unsee.model.plan import Checkpoint, compensation, plan_forget, provenance_graph
from unsee.model.receipt import Effects, Receipt, Work, make_receipt
from unsee.model.replay import Session, sanitize
from unsee.model.state import Artifact, Config, Observation, Part, State, graph_digest


@dataclass(frozen=True)
class ThreadReceipt(Receipt):
    """The model's receipt (plan, work, side effects), and what the forget did to the thread and
    its checkpointer."""

    thread_id: str = ""
    exactness: str = "checked"  # "declared": a model the user declared deterministic was replayed unchecked
    fork_checkpoint_id: str = ""
    head_checkpoint_id: str = ""
    checkpoints_deleted: int = 0
    writes_deleted: int = 0
    tools_served: int = 0  # read-only calls answered with what they returned before


def _saver(graph):
    saver = getattr(graph, "checkpointer", None)
    if saver is None or saver is True or saver is False:
        raise UnseeError("the graph has no checkpointer: compile it with checkpointer=SqliteSaver(...) "
                         "(langgraph.checkpoint.sqlite), the file a forget forks from and erases")
    World(saver)  # refuses any other checkpointer, and makes the world ledger's table
    return saver


def _source(m: BaseMessage, turn: int) -> str:
    src = m.additional_kwargs.get(SOURCE)
    if not isinstance(src, str) or not src:
        raise UnseeError(f"an input message of turn {turn} ({_short(m)}) carries no source id: stamp inputs with "
                         "source_message(text, source) or additional_kwargs={'unsee_source': id}")
    return src


def _short(m) -> str:
    text = m.content if isinstance(m.content, str) else str(m.content)
    return f"{type(m).__name__} {text[:30]!r}"


def observation_of(messages: Sequence[BaseMessage], turn: int) -> Observation:
    """A turn's input messages as o_t: one part per message (a message's hidden parts, which
    stand instead of a target, follow it)."""
    parts = []
    for m in messages:
        parts.append(Part(_source(m, turn), m.content if isinstance(m.content, str) else json.dumps(m.content)))
        parts += [Part(*h) for h in m.additional_kwargs.get(HIDDEN) or ()]
    kind = kind_of(messages[0]) if messages else "user"
    return Observation(kind if all(kind_of(m) == kind for m in messages) else "user", tuple(parts))


def messages_of(o: Observation, originals: Sequence[BaseMessage] = ()) -> list[BaseMessage]:
    """õ_t back as input messages: a part keeps its original message (class and stamps, without
    the id LangGraph drew), a part that now shows (it stood instead of a forgotten one) becomes
    a message of the observation's kind; each carries the hidden parts that follow it."""
    by_part = {(m.additional_kwargs.get(SOURCE), m.content): m for m in originals}
    out: list[BaseMessage] = []
    for p in o.parts:
        if p.instead_of is not None:
            if not out:
                raise UnseeError(f"part {p.source!r} stands instead of {p.instead_of!r} but no message carries it")
            last = out[-1]
            last.additional_kwargs[HIDDEN] = list(last.additional_kwargs.get(HIDDEN) or ()) + [
                [p.source, p.text, p.instead_of]]
            continue
        old = by_part.get((p.source, p.text))
        if old is not None:
            kw = {k: v for k, v in old.additional_kwargs.items() if k != HIDDEN}
            out.append(old.model_copy(update={"id": None, "additional_kwargs": kw}))
        else:
            cls = SystemMessage if o.kind in ("system", "memory") else HumanMessage
            kw = {SOURCE: p.source} | ({KIND: o.kind} if o.kind in ("memory", "tool") else {})
            out.append(cls(content=p.text, additional_kwargs=kw))
    return out


def artifacts_of(log: Sequence[Observation]) -> tuple[Artifact, ...]:
    """G_T, the conservative provenance graph of a thread: each turn's fields (one per visible
    part, no parents) and the turn's state, derived from its fields and the previous turn's
    state (every node of a turn may read the whole state)."""
    out, last = [], ()
    for t, o in enumerate(log, 1):
        fields = []
        for k, p in enumerate(o.visible, 1):
            fields.append(Artifact(f"t{t}.{k}.{o.kind}", o.kind, (), frozenset({p.source}), None, t))
        src = frozenset().union(*(a.source_ids for a in fields + list(last)))
        state = Artifact(f"t{t}.state", "state", tuple(a.id for a in fields) + tuple(a.id for a in last), src, None, t)
        out += fields + [state]
        last = (state,)
    return tuple(out)


def session_of(log: Sequence[Observation], world=()) -> Session:
    """The thread as a session of the model (observations, G_T, a checkpoint at every boundary)."""
    cfg = Config()
    state = State(cfg, turn=len(log), artifacts=artifacts_of(log))
    checkpoints = tuple(Checkpoint(b, 0, f"thread:{b}", "", ()) for b in range(len(log) + 1))
    return Session(cfg, "every", tuple(log), (state,), checkpoints, world=tuple(world))


def thread_log(graph, thread_id: str) -> list[Observation]:
    """o_1..o_T of a thread, from its input checkpoints."""
    return [observation_of(t.input.get("messages") or [], t.index) for t in turns(_saver(graph), thread_id)]


def thread_graph(graph, thread_id: str):
    """G_T of a thread (networkx)."""
    return provenance_graph(State(Config(), artifacts=artifacts_of(thread_log(graph, thread_id))))


def graph_digest_of(log) -> str:
    return graph_digest(artifacts_of(log))


def _recorded(tuples) -> dict:
    """(tool, canonical args) → the results the forgotten branch's calls got, from its messages."""
    calls, out = {}, {}
    for t in tuples:
        for m in t.checkpoint.get("channel_values", {}).get("messages") or []:
            if isinstance(m, AIMessage):
                for c in m.tool_calls:
                    calls[c["id"]] = (c["name"], canonical(c["args"]))
            elif isinstance(m, ToolMessage) and m.tool_call_id in calls:
                out.setdefault(calls[m.tool_call_id], [m.content])
    return out


def drafts_of(tuples) -> dict:
    """turn → [(kind, tokens)]: the replies UnseeChatModel wrote on a branch (kind "call": a tool
    call's JSON arguments, "reply": a text reply), in order, for a replay to check as drafts."""
    out: dict = {}
    seen: set = set()
    turn = 0
    for t in tuples:
        turn += t.metadata.get("source") == "input"
        for m in t.checkpoint.get("channel_values", {}).get("messages") or []:
            meta = m.additional_kwargs.get("unsee") or {} if isinstance(m, AIMessage) else {}
            if m.id in seen or "tokens" not in meta:
                continue
            seen.add(m.id)
            kind = "call" if m.tool_calls or m.invalid_tool_calls else "reply"
            out.setdefault(turn, []).append((kind, meta["tokens"][-meta["segments"][-1]:]))
    return out


def forget(graph, thread_id: str, sources: Sequence[str], method: str = "B7", checkpoint: int | None = None,
           erase: bool = True) -> ThreadReceipt:
    """Forget `sources` from a thread: fork from R_c (c: the last boundary before τ, or the forced
    `checkpoint`; method "B5": R_0), replay turns c+1..T on the sanitized inputs through the same
    compiled graph, and erase the old branch. The thread's head is then the thread a fresh run on
    the inputs without the sources gives."""
    if isinstance(sources, str):
        raise UnseeError(f"sources is a list of source ids: forget(graph, thread_id, [{sources!r}])")
    if method not in ("B7", "B5"):
        raise UnseeError(f"method {method!r} is not B7 or B5")
    t0 = time.perf_counter()
    saver = _saver(graph)
    marked_tools(graph)
    hist = turns(saver, thread_id)
    if not hist:
        raise UnseeError(f"thread {thread_id!r} has no turns in this graph's checkpointer")
    log = [observation_of(t.input.get("messages") or [], t.index) for t in hist]
    world = World(saver)
    rows = world.rows(thread_id)
    s = session_of(log, [e for e, _ in rows])
    plan = plan_forget(s, sources, checkpoint, reset=method == "B5")  # lines 1–4
    c = plan.boundary
    old = lineage(saver, thread_id)
    how = exactness([m for t in old for m in t.checkpoint.get("channel_values", {}).get("messages") or []])
    replay = Replay(recorded=_recorded(old), committed={e.call_id: e for e, _ in rows},
                    results={e.call_id: r for e, r in rows}, drafts=drafts_of(old) if method == "B7" else {})
    replayed = []
    cfg = config_at(thread_id, hist, c)  # line 5: the fork
    token = REPLAY.set(replay)
    try:
        for t in hist[c:]:  # lines 6–10
            o = sanitize(log[t.index - 1], plan.sources)
            replayed.append(o)
            replay.turn, replay.seen = t.index, {}
            graph.invoke({**t.input, "messages": messages_of(o, t.input.get("messages") or [])}, cfg,
                         durability="sync")
            cfg = {"configurable": {"thread_id": thread_id}}
    finally:
        REPLAY.reset(token)
    dedup, comp = compensation(s.world, replay.effects, c)  # line 8's report (A3)
    erased = erase_branches(saver, thread_id) if erase else {"checkpoints_deleted": 0, "writes_deleted": 0}
    head = turns(saver, thread_id)[-1].end
    fork = "" if c == 0 else hist[c - 1].end.config["configurable"]["checkpoint_id"]
    work = Work(transitions=len(replayed), tokens_decoded=replay.decoded, replies=replay.replies,
                replies_skipped=replay.skipped)
    receipt = make_receipt(method, plan, work, Effects(tuple(dedup), tuple(comp)), {}, time.perf_counter() - t0,
                           replayed)
    return ThreadReceipt(**{f.name: getattr(receipt, f.name) for f in fields(Receipt)}, thread_id=thread_id,
                         exactness=how, fork_checkpoint_id=fork,
                         head_checkpoint_id=head.config["configurable"]["checkpoint_id"],
                         checkpoints_deleted=erased["checkpoints_deleted"], writes_deleted=erased["writes_deleted"],
                         tools_served=replay.served)
