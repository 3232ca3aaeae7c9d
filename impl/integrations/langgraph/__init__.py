"""Exact forgetting for LangGraph graphs: the user's own graph, its thread forgotten bit for bit.

A LangGraph thread checkpoints its state after every super-step, but `RemoveMessage` only changes
the head: older checkpoints keep the message, and a fork re-runs the model and the tools
unguarded. `forget(graph, thread_id, sources)` forgets exactly on any compiled graph that meets
four requirements (each checked, with an error that says what to do; see `forget`):

- a `SqliteSaver` checkpointer;
- a deterministic chat model: `UnseeChatModel` (unsee's KV engine, checked), or another model
  declared with `deterministic(model)` (replayed unchecked; the receipt says so);
- every tool marked: `read_only(tool)` or `consequential(tool)`;
- input messages stamped with source ids: `source_message(text, source)`.

Modules: `chat` (the chat models), `tools` (marking, the world ledger), `history` (a thread's
turns, erasure), `forget` (Algorithm 1 on a thread, through `unsee.model`'s plan), `kit`
(the conformance kit's runtime over a graph, and the example graphs).
"""

try:
    import langgraph  # noqa: F401
    from langchain_core.language_models.chat_models import BaseChatModel  # noqa: F401
    from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised by a test that hides langgraph
    raise ImportError("unsee.impl.integrations.langgraph needs LangGraph and LangChain: "
                      "pip install unsee[langgraph]") from e

from unsee.impl.integrations.langgraph.chat import (
    DeclaredDeterministic, KVContext, UnseeChatModel, deterministic, source_message,
)
from unsee.impl.integrations.langgraph.forget import ThreadReceipt, forget, thread_graph, thread_log
from unsee.impl.integrations.langgraph.history import erase_branches, lineage, turns
from unsee.impl.integrations.langgraph.kit import (
    GraphRuntime, langgraph_tiny_llama, react_agent, same_thread, summarizing_agent,
)
from unsee.impl.integrations.langgraph.tools import MarkedTool, World, consequential, read_only

__all__ = [
    "DeclaredDeterministic", "GraphRuntime", "KVContext", "MarkedTool", "ThreadReceipt", "UnseeChatModel", "World",
    "consequential", "deterministic", "erase_branches", "forget", "langgraph_tiny_llama",
    "lineage", "react_agent", "read_only", "same_thread", "source_message", "summarizing_agent", "thread_graph",
    "thread_log", "turns",
]
