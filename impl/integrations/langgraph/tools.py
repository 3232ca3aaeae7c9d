"""Tools a forget can replay: each marked read-only or consequential, and the world ledger.

`read_only(tool)` and `consequential(tool)` wrap a LangChain tool (the same name, description
and argument schema) for a `ToolNode` or `create_react_agent`:

- outside a forget, a read-only tool runs; a consequential one runs and its call is written to
  the world ledger (table `unsee_world` in the checkpointer's SQLite file): the side effects
  that happened, which no replay may fire again;
- during a forget's replay, a read-only call identical to one the forgotten branch made (same
  tool, same canonical JSON arguments) is answered with what it returned then; a new one runs.
  A consequential call is never run: one the world committed at the same turn with the same
  tool and canonical arguments is recognised and answered with its recorded result; any other
  is listed for compensation and answered with `result(**args)` (or a fixed notice).

Each call's identity is its turn, tool and canonical arguments: the call id of the ledger is
`t<turn>:<tool>:<digest of the arguments>` (with `#k` for the k-th identical call of a turn).
"""

from __future__ import annotations

import contextvars
import threading
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Callable

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from pydantic import ConfigDict

from unsee.model.grammar import canonical
from unsee.model.errors import UnseeError
from unsee.model.state import LedgerEntry

READ_ONLY, CONSEQUENTIAL = "read-only", "consequential"
NOT_RUN = "{tool} was not run: a forget fires no side effect; the call is listed for compensation"


def call_key(turn: int, tool: str, args_json: str) -> str:
    return f"t{turn}:{tool}:{hashlib.sha256(args_json.encode()).hexdigest()[:12]}"


@dataclass
class Replay:
    """What a forget hands the marked tools while it replays turn `turn`."""

    turn: int = 0
    recorded: dict = field(default_factory=dict)  # (tool, args json) → results the forgotten branch got, in order
    committed: dict = field(default_factory=dict)  # call id → LedgerEntry the world committed
    results: dict = field(default_factory=dict)  # call id → the result text the committed call returned
    effects: list = field(default_factory=list)  # the counterfactual's consequential calls, none fired
    seen: dict = field(default_factory=dict)  # call key → how often this turn made it
    served: int = 0  # read-only calls answered from the record
    drafts: dict = field(default_factory=dict)  # turn → [(kind, tokens)]: the forgotten branch's replies, in order
    replies: int = 0  # model turns the replay wrote with UnseeChatModel
    skipped: int = 0  # of which the recorded draft was F's reply: one prefill checked it, nothing decoded
    decoded: int = 0  # tokens decoded one forward each

    def draft(self, kind: str):
        """The next recorded reply of this kind in this turn (a draft: checked, never trusted), or None."""
        queue = self.drafts.get(self.turn) or []
        for i, (k, toks) in enumerate(queue):
            if k == kind:
                del queue[i]
                return toks
        return None

    def wrote(self, decoded: int) -> None:
        self.replies += 1
        self.skipped += decoded == 0
        self.decoded += decoded


_FIRING = threading.Lock()
REPLAY: contextvars.ContextVar[Replay | None] = contextvars.ContextVar("unsee_replay", default=None)


class World:
    """The side effects that fired, in the checkpointer's SQLite file (table `unsee_world`)."""

    def __init__(self, saver) -> None:
        if not hasattr(saver, "conn") or not hasattr(saver, "cursor"):
            raise UnseeError(f"the graph's checkpointer is a {type(saver).__name__}; a forgettable graph needs "
                             "a SqliteSaver (langgraph.checkpoint.sqlite), whose file a forget can erase")
        self.saver = saver
        with saver.cursor() as cur:
            cur.execute("CREATE TABLE IF NOT EXISTS unsee_world (thread_id TEXT NOT NULL, call_id TEXT NOT NULL, "
                        "tool TEXT NOT NULL, args TEXT NOT NULL, turn INTEGER NOT NULL, result TEXT NOT NULL, "
                        "seq INTEGER NOT NULL)")

    def fire(self, thread_id: str, entry: LedgerEntry, result: str) -> None:
        with self.saver.cursor() as cur:
            seq = cur.execute("SELECT COUNT(*) FROM unsee_world").fetchone()[0]
            cur.execute("INSERT INTO unsee_world VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (thread_id, entry.call_id, entry.tool, entry.args, entry.turn, result, seq))

    def entries(self, thread_id: str) -> tuple[LedgerEntry, ...]:
        return tuple(e for e, _ in self.rows(thread_id))

    def rows(self, thread_id: str) -> list[tuple[LedgerEntry, str]]:
        with self.saver.cursor(transaction=False) as cur:
            rows = cur.execute("SELECT call_id, tool, args, turn, result FROM unsee_world WHERE thread_id = ? "
                               "ORDER BY seq", (thread_id,)).fetchall()
        return [(LedgerEntry(c, t, a, n), r) for c, t, a, n, r in rows]

    def drop(self, thread_id: str) -> None:
        with self.saver.cursor() as cur:
            cur.execute("DELETE FROM unsee_world WHERE thread_id = ?", (thread_id,))


def _current_turn(config: dict) -> int:
    """The turn a tool runs in: the input checkpoints on the lineage of the task's checkpoint."""
    from unsee.impl.integrations.langgraph.history import lineage

    conf = config.get("configurable") or {}
    saver = conf.get("__pregel_checkpointer")
    return sum(1 for t in lineage(saver, conf["thread_id"]) if t.metadata.get("source") == "input")


class MarkedTool(BaseTool):
    """A tool with its kind (read-only or consequential); see the module docstring."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    inner: BaseTool
    kind: str
    result: Callable[..., str] | None = None

    def __init__(self, inner: BaseTool, kind: str, result=None) -> None:
        if isinstance(inner, MarkedTool):
            raise UnseeError(f"tool {inner.name!r} is already marked {inner.kind}")
        if not isinstance(inner, BaseTool):
            raise UnseeError(f"{inner!r} is not a LangChain tool: decorate the function with "
                             "langchain_core.tools.tool first")
        super().__init__(name=inner.name, description=inner.description, args_schema=inner.args_schema,
                         inner=inner, kind=kind, result=result,
                         metadata={**(inner.metadata or {}), "unsee": kind})

    def _run(self, *args, **kwargs) -> Any:  # pragma: no cover - invoke is the entry point
        raise UnseeError(f"tool {self.name!r} is called through invoke with a tool call (a ToolNode does that)")

    def _visible(self, args: dict) -> dict:
        """The arguments the model wrote (a ToolNode adds injected ones: state, store, runtime)."""
        fields = set(self.tool_call_schema.model_json_schema().get("properties", {}))
        return {k: v for k, v in args.items() if k in fields}

    def invoke(self, input, config=None, **kwargs):
        if not (isinstance(input, dict) and input.get("type") == "tool_call"):
            return self.inner.invoke(input, config, **kwargs)
        from langchain_core.runnables.config import ensure_config

        config = ensure_config(config)
        args_json = canonical(self._visible(input["args"]))
        replay = REPLAY.get()
        if replay is None and self.kind == CONSEQUENTIAL:
            with _FIRING:  # a ToolNode runs a message's calls in threads: number and record them one at a time
                return self._fire(input, config, args_json, **kwargs)
        if replay is None:
            return _named(self.inner.invoke(input, config, **kwargs), input["id"])
        if self.kind == READ_ONLY:
            old = replay.recorded.get((self.name, args_json))
            if old:
                replay.served += 1
                return _message(old[0], input["id"], self.name)
            return _named(self.inner.invoke(input, config, **kwargs), input["id"])
        key = call_key(replay.turn, self.name, args_json)
        k = replay.seen[key] = replay.seen.get(key, 0) + 1
        key += f"#{k}" if k > 1 else ""  # the k-th identical call of a turn
        replay.effects.append(LedgerEntry(key, self.name, args_json, replay.turn))
        old = replay.committed.get(key)
        if old is not None and old.tool == self.name and old.args == args_json:
            return _message(replay.results[key], input["id"], self.name)
        text = self.result(**json.loads(args_json)) if self.result is not None else NOT_RUN.format(tool=self.name)
        return _message(text, input["id"], self.name)

    def _fire(self, input, config, args_json: str, **kwargs):
        """Run a consequential call and record it in the world ledger, numbered as a replay numbers it."""
        conf = config["configurable"]
        world, turn = World(conf["__pregel_checkpointer"]), _current_turn(config)
        key = call_key(turn, self.name, args_json)
        k = 1 + sum(e.call_id.split("#")[0] == key for e in world.entries(conf["thread_id"]) if e.turn == turn)
        key += f"#{k}" if k > 1 else ""
        out = self.inner.invoke(input, config, **kwargs)
        text = out.content if isinstance(out, ToolMessage) else str(out)
        world.fire(conf["thread_id"], LedgerEntry(key, self.name, args_json, turn), str(text))
        return _named(out, input["id"])


def _message(content, call_id: str, name: str) -> ToolMessage:
    return ToolMessage(content=content, tool_call_id=call_id, name=name, id=f"{call_id}.result")


def _named(out, call_id: str):
    """A tool's ToolMessage with an id that is a function of its call (LangGraph would draw one)."""
    if isinstance(out, ToolMessage) and out.id is None:
        return out.model_copy(update={"id": f"{call_id}.result"})
    return out


def read_only(tool: BaseTool) -> MarkedTool:
    """Mark a tool read-only: it changes nothing outside the agent, so a replay may serve or re-run it.
    Usable as a decorator under `@tool`."""
    return MarkedTool(tool, READ_ONLY)


def consequential(tool: BaseTool | None = None, *, result: Callable[..., str] | None = None):
    """Mark a tool consequential: its calls are side effects, recorded in the world ledger and never
    fired by a replay. `result(**args)`: the text a replay answers a call the world never committed
    with (the tool's own result where it is a function of the arguments). Usable as a decorator."""
    if tool is None:
        return lambda t: MarkedTool(t, CONSEQUENTIAL, result)
    return MarkedTool(tool, CONSEQUENTIAL, result)


def marked_tools(graph) -> dict[str, MarkedTool]:
    """The tools of every ToolNode in a compiled graph, each checked to be marked."""
    from langgraph.prebuilt import ToolNode

    out: dict[str, MarkedTool] = {}
    for name, node in graph.nodes.items():
        bound = getattr(node, "bound", None)
        if isinstance(bound, ToolNode):
            for tname, t in bound.tools_by_name.items():
                if not isinstance(t, MarkedTool):
                    raise UnseeError(f"tool {tname!r} of node {name!r} is not marked: wrap it as read_only({tname}) "
                                     f"or consequential({tname}) (unsee.impl.integrations.langgraph) so a forget "
                                     "knows whether a replay may run it")
                out[tname] = t
    return out
