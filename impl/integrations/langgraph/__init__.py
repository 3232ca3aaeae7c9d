"""Exact forgetting for LangGraph graphs: the user's own graph, its thread forgotten bit for bit.

A LangGraph thread checkpoints its state after every super-step, but `RemoveMessage` only changes
the head: older checkpoints keep the message, and a fork re-runs the model and the tools
unguarded. `forget(graph, thread_id, sources)` (`await aforget(...)` on an async checkpointer) forgets
exactly on any compiled graph that meets three requirements (each checked before anything is
written, with an error that says what to do; see `forget`):

- a checkpointer a forget can erase: InMemorySaver, SqliteSaver, AsyncSqliteSaver, PostgresSaver
  or AsyncPostgresSaver;
- a deterministic chat model: `UnseeChatModel` (unsee's KV engine, checked), or another model
  declared with `deterministic(model)` (replayed unchecked; the receipt says so);
- every tool marked: `read_only(tool)` or `consequential(tool)`.

Inputs may take any form LangGraph accepts; `source_message(text, source)` names a part, an
untagged one is named by its place (`sources(graph, thread_id)` lists them). `forgettable(graph)`
checks the graph when it is built and gives messages ids derived from their place, so a forgotten
thread equals a fresh one id for id (`compare_threads` says what differs).

Modules: `chat` (the chat models), `tools` (marking, the world ledger), `savers` (one adapter
per checkpointer: the ledger's table, erasure), `history` (a thread's turns: inputs, resumes,
edits), `inputs` (a turn's parts, `source_value`), `forgettable` (what a graph must be), `forget`
(Algorithm 1 on a thread, through `unsee.model`'s plan), `shared` and `across` (a Store shared by
threads: journaled, and forgotten across them), `record` (the forget record outside the database:
tombstones, `check_record`, `reapply`), `compare` (what differs between two threads), `kit` (the
conformance kit's runtime over a graph, and the example graphs).
"""

try:
    import langgraph  # noqa: F401
    from langchain_core.language_models.chat_models import BaseChatModel  # noqa: F401
    from langgraph.checkpoint.memory import InMemorySaver  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised by a test that hides langgraph
    raise ImportError("unsee.impl.integrations.langgraph needs LangGraph and LangChain: "
                      "pip install unsee[langgraph]") from e

from unsee.impl.integrations.langgraph.chat import KVContext, UnseeChatModel, source_message
from unsee.impl.integrations.langgraph.declared import DeclaredDeterministic, deterministic
from unsee.impl.integrations.langgraph.compare import acompare_threads, compare_threads
from unsee.impl.integrations.langgraph.forget import (
    aforget, asources, forget, reapply, sources, thread_graph, thread_log,
)
from unsee.impl.integrations.langgraph.job import ThreadReceipt
from unsee.impl.integrations.langgraph.forgettable import forgettable
from unsee.impl.integrations.langgraph.record import check as check_record
from unsee.impl.integrations.langgraph.inputs import message_id, source_value
from unsee.impl.integrations.langgraph.history import erase_branches, lineage, turns
from unsee.impl.integrations.langgraph.kit import (
    GraphRuntime, langgraph_tiny_llama, react_agent, same_thread, summarizing_agent,
)
from unsee.impl.integrations.langgraph.checkpointers import adapter
from unsee.impl.integrations.langgraph.tools import MarkedTool, World, consequential, read_only

__all__ = [
    "DeclaredDeterministic", "GraphRuntime", "KVContext", "MarkedTool", "ThreadReceipt", "UnseeChatModel", "World",
    "acompare_threads", "adapter", "aforget", "asources", "check_record", "compare_threads", "consequential",
    "deterministic", "erase_branches", "forget", "forgettable", "langgraph_tiny_llama", "lineage", "message_id",
    "react_agent", "read_only", "reapply", "same_thread", "source_message", "source_value", "sources",
    "summarizing_agent", "thread_graph", "thread_log", "turns",
]
