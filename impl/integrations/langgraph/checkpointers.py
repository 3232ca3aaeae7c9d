"""Which checkpointers a forget can handle: `adapter(saver)`, the adapter of each (`savers`, `postgres`).

Exactly InMemorySaver, SqliteSaver, AsyncSqliteSaver, PostgresSaver and AsyncPostgresSaver: a
subclass or another `BaseCheckpointSaver` may keep checkpoints anywhere, and a forget could not
say it erased them, so it is refused (before anything is written) with what to use instead.
"""

from __future__ import annotations

from unsee.impl.integrations.langgraph.savers import Adapter, AsyncSqliteAdapter, MemoryAdapter, SqliteAdapter
from unsee.model.errors import UnseeError


def _classes() -> dict:
    """checkpointer class → adapter class, for the checkpointer packages installed."""
    out = {}
    from langgraph.checkpoint.memory import InMemorySaver

    out[InMemorySaver] = MemoryAdapter
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver

        out[SqliteSaver] = SqliteAdapter
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        out[AsyncSqliteSaver] = AsyncSqliteAdapter
    except ImportError:  # pragma: no cover - the extra pins it
        pass
    try:
        from langgraph.checkpoint.postgres import PostgresSaver
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        from unsee.impl.integrations.langgraph.postgres import AsyncPostgresAdapter, PostgresAdapter

        out[PostgresSaver] = PostgresAdapter
        out[AsyncPostgresSaver] = AsyncPostgresAdapter
    except ImportError:  # without langgraph-checkpoint-postgres no graph can have one
        pass
    return out


SUPPORTED = "InMemorySaver, SqliteSaver, AsyncSqliteSaver, PostgresSaver or AsyncPostgresSaver"


def adapter(saver) -> Adapter:
    """The adapter of a graph's checkpointer; any other checkpointer is refused with what to use."""
    if saver is None or saver is True or saver is False:
        raise UnseeError("the graph has no checkpointer, so its threads have no history to fork from: compile it "
                         f"with checkpointer=... (one of {SUPPORTED})")
    cls = _classes().get(type(saver))
    if cls is None:
        raise UnseeError(f"the graph's checkpointer is a {type(saver).__module__}.{type(saver).__name__}; a forget "
                         f"can erase only what it knows the storage of: use one of {SUPPORTED} (exactly those "
                         "classes: a subclass may store checkpoints elsewhere)")
    return cls(saver)
