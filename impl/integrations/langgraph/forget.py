"""`forget(graph, thread_id, sources)` (and `aforget`) on a compiled LangGraph graph: Algorithm 1 on a thread.

The thread is read as a session of `unsee.model`: one observation per invocation (its input
messages, each a part under its source id), the conservative provenance graph over them, and
a checkpoint at every turn boundary. Algorithm 1's pieces are `unsee.model`'s own: the plan
(`plan_forget`: τ, and earlier where a part stood instead of a target, I(z), c*), `sanitize`,
line 8's report (`compensation`: committed calls recognised, the rest listed for compensation)
and its `Receipt`. What is LangGraph's: forking at R_c, replaying turns c+1..T through the same
compiled graph on the sanitized inputs, and erasing the old branch from the checkpointer.

A turn's input is read as LangGraph reads it, each message a part under its source id
(`inputs`: tagged, or named by its place `t<turn>.<k>`); `sources(graph, thread_id)` lists them.

What a graph must satisfy (each checked before anything is written, with an error saying what to do):
- a checkpointer a forget can erase (`checkpointers`: InMemorySaver, SqliteSaver, AsyncSqliteSaver,
  PostgresSaver, AsyncPostgresSaver); an async one is forgotten with `aforget`;
- every model reply from `UnseeChatModel`, or from a model declared with `deterministic(model)`
  (the receipt then says `exactness="declared"`: replayed, not checked);
- every tool of every `ToolNode` marked `read_only(...)` or `consequential(...)`;
- a thread of whole turns (`history.check_history`: no update_state, failed step, several
  interrupts pending at once or durability="exit"); a resume (`Command(resume=...)`) is a turn of
  its own, replayed where the replay asks the same question (else the replay stops there:
  `ThreadReceipt.stopped`); subgraph checkpoints are replayed and erased with the parent's;
- a store only as `forgettable` records it (forgotten across threads: `across`), and the runtime
  context passed where the graph has a `context_schema`.
Every input key is read (`inputs.values_of`), and each turn replays with the `configurable` keys
its checkpoint recorded.
`forgettable(graph)` (module `forgettable`) checks the first and third when the graph is built,
and gives every message that arrives without an id one derived from its place (`message_id`),
so a forgotten thread and a fresh one carry the same ids.
"""

from __future__ import annotations

import time
from typing import Sequence

from langchain_core.messages import RemoveMessage

from unsee.impl.integrations.langgraph.chat import kind_of
from unsee.impl.integrations.langgraph.checkpointers import adapter
from unsee.impl.integrations.langgraph.forgettable import derives_ids, graph_adapter
from unsee.impl.integrations.langgraph.history import (
    aall_checkpoints, alineage, all_checkpoints, check_history, kept_with_subgraphs, lineage,
)
from unsee.impl.integrations.langgraph.inputs import ThreadInputs, part_text, read_inputs, tag_of, value_tag
from unsee.impl.integrations.langgraph.job import (
    NOTHING, STOP_NONE, STOP_OTHER, ThreadReceipt, artifacts_of, asked_at, check_arguments, context_of,
    head_config, prepare_job, replay_failed,
)
from unsee.impl.integrations.langgraph.record import (
    REAPPLYING, acheck_thread, check, check_thread, pairs, record_of, remember,
)
from unsee.impl.integrations.langgraph.tools import REPLAY
from unsee.model.errors import UnseeError
from unsee.model.plan import provenance_graph
from unsee.model.state import Config, Observation, State, graph_digest


def _thread(graph, thread_id):
    tuples = all_checkpoints(adapter(graph.checkpointer).saver, thread_id)
    return read_inputs(check_history(tuples, thread_id) if tuples else [], thread_id)


def sources(graph, thread_id: str) -> list[dict]:
    """Every part of a thread's inputs, in order: {"source", "turn", "kind", "tagged", "text"}
    ("tagged": the message carried its id; else the id is its place, `t<turn>.<k>`, which a
    forget of an earlier part of the same turn renumbers, so read the list again after one; or,
    for a RemoveMessage, the source of the input it removes). "text": its first 80 characters."""
    return _listing(_thread(graph, thread_id))


async def asources(graph, thread_id: str) -> list[dict]:
    tuples = await aall_checkpoints(adapter(graph.checkpointer).saver, thread_id)
    return _listing(read_inputs(check_history(tuples, thread_id) if tuples else [], thread_id))


def _listing(th: ThreadInputs) -> list[dict]:
    out = []
    for t, ms, ss, vs in zip(th.turns, th.messages, th.sources, th.values):
        for m, s in zip(ms, ss):
            out.append({"source": s, "turn": t.index, "kind": kind_of(m),
                        "tagged": not isinstance(m, RemoveMessage) and tag_of(m) is not None, "text": part_text(m)[:80]})
        for v in vs:  # another input key's value: kind "value", its text "<key>: <value>"
            out.append({"source": v.source, "turn": t.index, "kind": "value",
                        "tagged": value_tag(v.value) is not None, "text": v.text[:80]})
    return out


def thread_log(graph, thread_id: str) -> list[Observation]:
    """o_1..o_T of a thread, from its input checkpoints."""
    return _thread(graph, thread_id).log


def thread_graph(graph, thread_id: str):
    """G_T of a thread (networkx)."""
    return provenance_graph(State(Config(), artifacts=artifacts_of(thread_log(graph, thread_id))))


def graph_digest_of(log) -> str:
    return graph_digest(artifacts_of(log))



# --- the forget -------------------------------------------------------------------------------------

def forget(graph, thread_id: str, sources: Sequence[str], method: str = "B7", checkpoint: int | None = None,
           erase: bool = True, redact_ledger: bool = False, context=None, wait: float = 30.0) -> ThreadReceipt:
    """Forget `sources` from a thread: fork from R_c (c: the last boundary before τ, or the forced
    `checkpoint`; method "B5": R_0), replay turns c+1..T on the sanitized inputs through the same
    compiled graph, and erase the old branch (its subgraphs' checkpoints too). The thread's head is
    then the thread a fresh run on the inputs without the sources gives. Everything that can refuse
    does so before anything is written; a replay that fails takes its partial branch back out, and
    the thread is what it was. `redact_ledger`: also erase, in the world ledger, the arguments and
    result of each fired call the twin never makes (the receipt's compensation list is then their
    only copy). `context`: the runtime context the turns ran with (required where the graph has a
    `context_schema`: LangGraph does not checkpoint it); each turn's `configurable` keys come from
    its checkpoint.

    A graph with a store (made `forgettable`) is forgotten across threads (`across`): every thread
    that read what the target changed is replayed from that read, the store ends as the twin's, and
    the receipt's `threads` and `store` say what else the forget touched. `wait`: how long it waits
    for running invocations of threads sharing the store before it refuses.

    A graph whose checkpointer is async (AsyncSqliteSaver, AsyncPostgresSaver) is forgotten with
    `await aforget(...)`."""
    t0 = time.perf_counter()
    check_arguments(sources, method)
    ad = graph_adapter(graph)
    extra = context_of(graph, context)
    if getattr(graph, "store", None) is not None:
        from unsee.impl.integrations.langgraph.across import forget_across

        return forget_across(graph, ad, thread_id, sources, method, checkpoint, erase, redact_ledger, extra, wait, t0)
    if ad.is_async:
        raise UnseeError(f"the graph's checkpointer is an {type(ad.saver).__name__}, whose I/O is async: forget "
                         "with `await aforget(graph, thread_id, sources)`")
    ad.check()
    if not REAPPLYING.get():
        check_thread(graph, thread_id)  # a restored backup: reapply first
    tuples = all_checkpoints(ad.saver, thread_id)
    pending = graph.get_state({"configurable": {"thread_id": thread_id}}).next if tuples else ()
    job = prepare_job(thread_id, sources, method, checkpoint, tuples, pending, ad.rows(thread_id))
    job.derived_ids = derives_ids(graph)
    token = REPLAY.set(job.replay)
    try:
        for act, cfg, asked in job.steps():
            if asked is not None and (now := asked_at(graph.get_state(head_config(thread_id)))) != asked:
                job.stop(job.replay.turn, STOP_OTHER if now else STOP_NONE, now)
                break
            try:  # the graph's own durability: "sync" breaks a subgraph compiled with checkpointer=False
                if act[0] == "update":
                    graph.update_state(cfg, act[1], act[2])
                else:
                    graph.invoke(act[1], cfg, **extra)
            except Exception as e:
                raise replay_failed(e, job.replay.turn) from e
    except BaseException:  # the replay's partial branch leaves: the thread is what it was
        ad.erase(thread_id, kept_with_subgraphs(tuples, tuples))
        raise
    finally:
        REPLAY.reset(token)
    rows, comp, dedup, redacted = job.ledger(redact_ledger)
    ad.update(thread_id, rows)
    line = lineage(ad.saver, thread_id)
    keep = kept_with_subgraphs(all_checkpoints(ad.saver, thread_id), line)
    erased = ad.erase(thread_id, keep) if erase else NOTHING
    remember(graph, thread_id, sources, method, pairs(tuples), pairs(all_checkpoints(ad.saver, thread_id)))
    return job.receipt(line, erased, comp, dedup, redacted, time.perf_counter() - t0, ad.kind)


async def aforget(graph, thread_id: str, sources: Sequence[str], method: str = "B7", checkpoint: int | None = None,
                  erase: bool = True, redact_ledger: bool = False, context=None) -> ThreadReceipt:
    """`forget`'s async twin: the replay runs through `graph.ainvoke`, and the checkpointer is read
    and erased through its async interface (AsyncSqliteSaver, AsyncPostgresSaver, InMemorySaver)."""
    t0 = time.perf_counter()
    check_arguments(sources, method)
    ad = graph_adapter(graph)
    extra = context_of(graph, context)
    if getattr(graph, "store", None) is not None:
        raise UnseeError("a graph with a store is forgotten across threads by forget(graph, ...), which is sync: "
                         "aforget does not replay a store yet (use a sync checkpointer and store for such a graph)")
    if not ad.is_async and ad.kind != "memory":
        raise UnseeError(f"the graph's checkpointer is a {type(ad.saver).__name__}, which has no async interface: "
                         "forget with forget(graph, thread_id, sources)")
    await ad.acheck()
    if not REAPPLYING.get():
        await acheck_thread(graph, thread_id)
    tuples = await aall_checkpoints(ad.saver, thread_id)
    pending = (await graph.aget_state({"configurable": {"thread_id": thread_id}})).next if tuples else ()
    job = prepare_job(thread_id, sources, method, checkpoint, tuples, pending, await ad.arows(thread_id))
    job.derived_ids = derives_ids(graph)
    token = REPLAY.set(job.replay)
    try:
        for act, cfg, asked in job.steps():
            if asked is not None and (now := asked_at(await graph.aget_state(head_config(thread_id)))) != asked:
                job.stop(job.replay.turn, STOP_OTHER if now else STOP_NONE, now)
                break
            try:
                if act[0] == "update":
                    await graph.aupdate_state(cfg, act[1], act[2])
                else:
                    await graph.ainvoke(act[1], cfg, **extra)
            except Exception as e:
                raise replay_failed(e, job.replay.turn) from e
    except BaseException:
        await ad.aerase(thread_id, kept_with_subgraphs(tuples, tuples))
        raise
    finally:
        REPLAY.reset(token)
    rows, comp, dedup, redacted = job.ledger(redact_ledger)
    await ad.aupdate(thread_id, rows)
    line = await alineage(ad.saver, thread_id)
    keep = kept_with_subgraphs(await aall_checkpoints(ad.saver, thread_id), line)
    erased = await ad.aerase(thread_id, keep) if erase else NOTHING
    remember(graph, thread_id, sources, method, pairs(tuples), pairs(await aall_checkpoints(ad.saver, thread_id)))
    return job.receipt(line, erased, comp, dedup, redacted, time.perf_counter() - t0, ad.kind)


def reapply(graph) -> list:
    """Forget again, in the order they were recorded, every recorded forget whose sources a thread
    holds again (a restored backup); append a "reapply" record for each. Returns their receipts."""
    rec = record_of(graph)
    if rec is None:
        raise UnseeError("the graph keeps no forget record: make it forgettable(graph, record=PATH)")
    out = []
    token = REAPPLYING.set(True)
    try:
        for r in rec.records():
            held = {s["source"] for s in sources(graph, r["thread"])}
            again = [s for s in r["sources"] if s in held]
            if again:
                out.append(forget(graph, r["thread"], again, method=r["method"]))
    finally:
        REAPPLYING.reset(token)
    left = check(graph)
    if left["restored"] or left["store"] != "ok":
        raise UnseeError(f"after reapply, threads {left['restored']} still hold erased checkpoints ({left['store']}): "
                         "the backup holds turns the record does not say how to forget")
    return out
