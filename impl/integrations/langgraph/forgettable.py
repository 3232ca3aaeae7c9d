"""What a graph must be for a forget, checked before anything is written, and `forgettable(graph)`.

A forget replays a thread through the same compiled graph, so the graph must be one whose
storage a forget can erase (its checkpointer's adapter, `checkpointers`), whose tools are marked
(`tools`), whose store, if it has one, is one a forget knows the storage of (`shared`), and
with no static interrupt (a pause there leaves no mark). `forgettable(graph)` checks that when the graph
is built, and makes its threads ones a forget reproduces exactly: message ids derived from their
place, `source_value` tags kept by the checkpointer, `update_state` recording the node an
edit is made as, and every operation on the graph's store journaled (`shared.record_spans`).
"""

from __future__ import annotations

from unsee.impl.integrations.langgraph.checkpointers import adapter
from unsee.impl.integrations.langgraph.history import UPDATE
from unsee.impl.integrations.langgraph.inputs import keep_tags, provenance_ids
from unsee.impl.integrations.langgraph.record import ForgetRecord, guard
from unsee.impl.integrations.langgraph.shared import is_recorded, record_spans, store_kind
from unsee.impl.integrations.langgraph.tools import marked_tools
from unsee.model.errors import UnseeError


def forgettable(graph, record=None, key: bytes | None = None):
    """Make a compiled graph's threads carry ids a forget can reproduce, and check now what a
    forget would check later: its checkpointer (`savers`) and its tools (each marked).

    Every channel reduced by `add_messages` (a `MessagesState`'s, `create_agent`'s) gives each
    message that arrives without an id one derived from its place (`message_id`) instead of a
    random one, and the checkpointer keeps the tags of `source_value`s (`SourcedSerde`); the graph
    is changed in place and returned. Call it once, before the first invocation: a thread's earlier
    messages keep the ids they were given.

    `record`: a path (on other storage than the checkpointer's database) where every forget is
    recorded with the tombstones of what it erased (`record`, chained under `key` if given): a
    thread a restored backup brings back is then refused until `reapply(graph)`."""
    from langgraph.channels.binop import BinaryOperatorAggregate
    from langgraph.graph.message import add_messages

    graph_adapter(graph)
    keep_tags(graph.checkpointer)
    record_edits(graph)
    record_spans(graph)  # a store: journaled, each invocation a span (`shared`)
    if record is not None:
        graph.unsee_record = ForgetRecord(record, key)
        guard(graph)
    n = 0
    for ch in graph.channels.values():
        if isinstance(ch, BinaryOperatorAggregate) and (ch.operator is add_messages or
                                                        getattr(ch.operator, "unsee_provenance", False)):
            ch.operator = provenance_ids(ch.operator)
            n += 1
    if not n:
        raise UnseeError("the graph has no channel reduced by add_messages (a MessagesState's messages): "
                         "a forget reads a thread's inputs from its messages")
    return graph


def record_edits(graph) -> None:
    """Make the graph's `update_state`/`aupdate_state` record the node an edit is made as (in the
    checkpoint's metadata, `history.UPDATE`), so a forget can replay the edit as it was made."""
    if getattr(graph, "unsee_edits", False):
        return
    sync, async_ = graph.update_state, graph.aupdate_state

    def mark(config, as_node):
        return {**config, "metadata": {**(config.get("metadata") or {}), UPDATE: "" if as_node is None else as_node}}

    def update_state(config, values, as_node=None, task_id=None):
        return sync(mark(config, as_node), values, as_node, task_id)

    async def aupdate_state(config, values, as_node=None, task_id=None):
        return await async_(mark(config, as_node), values, as_node, task_id)

    graph.update_state, graph.aupdate_state, graph.unsee_edits = update_state, aupdate_state, True


def derives_ids(graph) -> bool:
    """Whether the graph gives messages ids derived from their place (`forgettable`)."""
    return any(getattr(getattr(ch, "operator", None), "unsee_provenance", False) for ch in graph.channels.values())


def graph_adapter(graph):
    """The graph's checkpointer's adapter, once the graph's shape is one a forget can replay."""
    ad = adapter(getattr(graph, "checkpointer", None))
    marked_tools(graph)
    if getattr(graph, "store", None) is not None and not is_recorded(graph.store):
        store_kind(graph.store)  # one whose storage a forget knows, without a ttl

    stops = list(getattr(graph, "interrupt_before_nodes", None) or ()) + list(
        getattr(graph, "interrupt_after_nodes", None) or ())
    if stops:
        raise UnseeError(f"the graph interrupts before or after nodes {stops}: a turn paused there and resumed "
                         "with invoke(None) leaves no mark in its checkpoints, and a replay of its input would stop "
                         "there; compile it without interrupt_before/interrupt_after and call interrupt() inside "
                         "the node instead (a forget replays its resumes)")
    return ad
