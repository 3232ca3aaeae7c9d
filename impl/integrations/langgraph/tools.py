"""Tools a forget can replay: each marked read-only or consequential, and the world ledger.

`read_only(tool)` and `consequential(tool)` wrap a LangChain tool (the same name, description
and argument schema) for a `ToolNode` or `create_react_agent`:

- outside a forget, a read-only tool runs; a consequential one runs and its call is written to
  the world ledger (beside the thread's checkpoints: `savers`): the side effects that happened,
  which no replay may fire again;
- during a forget's replay, a read-only call identical to one the forgotten branch made (same
  tool, same canonical JSON arguments) is answered with what it returned then; a new one runs.
  A consequential call is never run: one the world committed at the same turn with the same
  tool and canonical arguments is recognised and answered with its recorded result; any other
  is listed for compensation and answered with `result(**args)` (or a fixed notice).

Each call's identity is its turn, tool and canonical arguments: the call id of the ledger is
`t<turn>:<tool>:<digest of the arguments>` (with `#k` for the k-th identical call of a turn). A
call is recorded with the checkpoint its step ran from; its turn and id are resolved from the
thread's checkpoints when the ledger is read (`resolve`), so they do not depend on whether the
turn's earlier checkpoints were saved yet (LangGraph saves them in the background). Both sync
(`invoke`) and async (`ainvoke`) graphs call the same logic.
"""

from __future__ import annotations

import contextlib
import contextvars
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


REPLAY: contextvars.ContextVar[Replay | None] = contextvars.ContextVar("unsee_replay", default=None)


class World:
    """The side effects that fired, beside the thread's checkpoints (`savers`: table `unsee_world`
    in a SQLite file or a Postgres database, a list on an InMemorySaver)."""

    def __init__(self, saver) -> None:
        from unsee.impl.integrations.langgraph.checkpointers import adapter

        self.saver = saver
        self.adapter = adapter(saver)

    def entries(self, thread_id: str) -> tuple[LedgerEntry, ...]:
        return tuple(e for e, _ in self.rows(thread_id))

    def rows(self, thread_id: str) -> list[tuple[LedgerEntry, str]]:
        """Each fired call with its result, turns and call ids resolved from the thread's checkpoints."""
        from unsee.impl.integrations.langgraph.history import all_checkpoints

        rows = self.adapter.rows(thread_id)
        if any(r.turn == 0 for r in rows):
            rows = resolve(rows, all_checkpoints(self.saver, thread_id))
        return [(LedgerEntry(r.call_id, r.tool, r.args, r.turn), r.result) for r in rows]

    async def aentries(self, thread_id: str) -> tuple[LedgerEntry, ...]:
        from unsee.impl.integrations.langgraph.history import aall_checkpoints

        rows = await self.adapter.arows(thread_id)
        if any(r.turn == 0 for r in rows):
            rows = resolve(rows, await aall_checkpoints(self.saver, thread_id))
        return tuple(LedgerEntry(r.call_id, r.tool, r.args, r.turn) for r in rows)

    def drop(self, thread_id: str) -> None:
        self.adapter.drop(thread_id)

    async def adrop(self, thread_id: str) -> None:
        await self.adapter.adrop(thread_id)


def resolve(rows, tuples) -> list:
    """The ledger's rows with each turn and call id set: the turn is the number of turns started
    (input checkpoints, edits and resumes) from the thread's root to the checkpoint the call's step ran from; the call id is
    `call_key` with `#k` for the k-th identical call of a turn (in the order the calls fired).
    A row whose checkpoint the checkpointer does not hold is refused with why."""
    from dataclasses import replace

    from unsee.impl.integrations.langgraph.history import resumes

    parent, starts = {}, {}
    for t in tuples:
        conf = t.config["configurable"]
        if conf.get("checkpoint_ns", "") == "":
            cid = conf["checkpoint_id"]
            parent[cid] = (t.parent_config or {}).get("configurable", {}).get("checkpoint_id")
            # the turns that start here: an input, and each resume (a call that ran from a checkpoint
            # paused at an interrupt ran after its resume: the task had stopped at the interrupt)
            starts[cid] = (t.metadata.get("source") in ("input", "update")) + len(resumes(t))

    def turn_of(cid):
        n = 0
        while cid in parent:
            n += starts[cid]
            cid = parent[cid]
        return n

    out, seen = [], {}
    for r in rows:
        if r.turn == 0:
            turn = turn_of(r.checkpoint_id) if r.checkpoint_id in parent else None
            if not turn:
                raise UnseeError(f"the world ledger's call of {r.tool!r} ran from checkpoint {r.checkpoint_id!r}, "
                                 "which the checkpointer does not hold (the thread was run with durability='exit', "
                                 "or its checkpoints were deleted): its turn is unknown, so a forget cannot "
                                 "recognise it")
            key = call_key(turn, r.tool, r.args)
            k = seen[(turn, key)] = seen.get((turn, key), 0) + 1
            r = replace(r, turn=turn, call_id=key + (f"#{k}" if k > 1 else ""))
        else:
            base = r.call_id.split("#")[0]
            seen[(r.turn, base)] = seen.get((r.turn, base), 0) + 1
        out.append(r)
    return out


class MarkedTool(BaseTool):
    """A tool with its kind (read-only or consequential); see the module docstring."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    inner: BaseTool
    kind: str
    result: Callable[..., str] | None = None

    def __init__(self, inner: BaseTool, kind: str, result=None) -> None:
        if isinstance(inner, MarkedTool):
            raise UnseeError(f"tool {inner.name!r} is already marked {inner.kind}")
        if not isinstance(inner, BaseTool) and callable(inner) and getattr(inner, "__doc__", None):
            from langchain_core.tools import tool as as_tool

            inner = as_tool(inner)  # a plain function, as LangGraph's docs pass tools: made a tool as they make it
        if not isinstance(inner, BaseTool):
            raise UnseeError(f"{inner!r} is not a LangChain tool: give a function with a docstring, or decorate it "
                             "with langchain_core.tools.tool")
        super().__init__(name=inner.name, description=inner.description, args_schema=inner.args_schema,
                         inner=inner, kind=kind, result=result,
                         metadata={**(inner.metadata or {}), "unsee": kind})

    def _run(self, *args, **kwargs) -> Any:  # pragma: no cover - invoke is the entry point
        raise UnseeError(f"tool {self.name!r} is called through invoke with a tool call (a ToolNode does that)")

    def _visible(self, args: dict) -> dict:
        """The arguments the model wrote (a ToolNode adds injected ones: state, store, runtime)."""
        fields = set(self.tool_call_schema.model_json_schema().get("properties", {}))
        return {k: v for k, v in args.items() if k in fields}

    def _replayed(self, input, replay: Replay, args_json: str):
        """A consequential call during a forget's replay: never run (see the module)."""
        key = call_key(replay.turn, self.name, args_json)
        k = replay.seen[key] = replay.seen.get(key, 0) + 1
        key += f"#{k}" if k > 1 else ""  # the k-th identical call of a turn
        replay.effects.append(LedgerEntry(key, self.name, args_json, replay.turn))
        old = replay.committed.get(key)
        if old is not None and old.tool == self.name and old.args == args_json:
            return _message(replay.results[key], input["id"], self.name)
        text = self.result(**json.loads(args_json)) if self.result is not None else NOT_RUN.format(tool=self.name)
        return _message(text, input["id"], self.name)

    def _served(self, input, replay: Replay, args_json: str):
        """A read-only call the forgotten branch made, answered with what it returned then (or None)."""
        old = replay.recorded.get((self.name, args_json))
        if old:
            replay.served += 1
            return _message(old[0], input["id"], self.name)
        return None

    def invoke(self, input, config=None, **kwargs):
        if not (isinstance(input, dict) and input.get("type") == "tool_call"):
            return self.inner.invoke(input, config, **kwargs)
        from langchain_core.runnables.config import ensure_config

        config = ensure_config(config)
        args_json = canonical(self._visible(input["args"]))
        replay = REPLAY.get()
        if replay is None:
            with _running(self.name, args_json):
                out = _named(self.inner.invoke(input, config, **kwargs), input["id"])
            if self.kind == CONSEQUENTIAL and (where := _where(config)) is not None:
                where[0].record(where[1], where[2], self.name, args_json, _text(out))
            return out
        if self.kind == READ_ONLY:
            served = self._served(input, replay, args_json)
            if served is not None:
                return served
            with _running(self.name, args_json):
                return _named(self.inner.invoke(input, config, **kwargs), input["id"])
        return self._replayed(input, replay, args_json)

    async def ainvoke(self, input, config=None, **kwargs):
        if not (isinstance(input, dict) and input.get("type") == "tool_call"):
            return await self.inner.ainvoke(input, config, **kwargs)
        from langchain_core.runnables.config import ensure_config

        config = ensure_config(config)
        args_json = canonical(self._visible(input["args"]))
        replay = REPLAY.get()
        if replay is None:
            with _running(self.name, args_json):
                out = _named(await self.inner.ainvoke(input, config, **kwargs), input["id"])
            if self.kind == CONSEQUENTIAL and (where := _where(config)) is not None:
                await where[0].arecord(where[1], where[2], self.name, args_json, _text(out))
            return out
        if self.kind == READ_ONLY:
            served = self._served(input, replay, args_json)
            if served is not None:
                return served
            with _running(self.name, args_json):
                return _named(await self.inner.ainvoke(input, config, **kwargs), input["id"])
        return self._replayed(input, replay, args_json)


@contextlib.contextmanager
def _running(name: str, args_json: str):
    """The tool call a store operation is made in (`shared` journals it: a read-only call that used
    the store is run again by a replay, never answered from the record)."""
    from unsee.impl.integrations.langgraph.shared import TOOL

    token = TOOL.set((name, args_json))
    try:
        yield
    finally:
        TOOL.reset(token)


def _where(config):
    """(adapter, thread id, checkpoint id) where a fired call is recorded: the thread's
    checkpointer and the checkpoint the tool's step ran from. None where the graph has no
    checkpointer, or one a forget cannot handle: its threads can never be forgotten, and refusing
    here would break the turn mid-step."""
    from unsee.impl.integrations.langgraph.checkpointers import adapter

    conf = config.get("configurable") or {}
    saver, thread = conf.get("__pregel_checkpointer"), conf.get("thread_id")
    cid = (conf.get("checkpoint_map") or {}).get("")
    if saver is None or thread is None or cid is None:
        return None
    try:
        return adapter(saver), thread, cid
    except UnseeError:
        return None


def _text(out) -> str:
    return str(out.content if isinstance(out, ToolMessage) else out)


def _message(content, call_id: str, name: str) -> ToolMessage:
    return ToolMessage(content=content, tool_call_id=call_id, name=name, id=f"{call_id}.result")


def _named(out, call_id: str):
    """A tool's ToolMessage with an id that is a function of its call (LangGraph would draw one)."""
    if isinstance(out, ToolMessage) and out.id is None:
        return out.model_copy(update={"id": f"{call_id}.result"})
    return out


def read_only(tool) -> MarkedTool:
    """Mark a tool read-only: it changes nothing outside the agent, so a replay may serve or re-run it.
    A LangChain tool, or a plain function with a docstring (made a tool as `create_agent` makes one).
    Usable as a decorator."""
    return MarkedTool(tool, READ_ONLY)


def consequential(tool: BaseTool | None = None, *, result: Callable[..., str] | None = None):
    """Mark a tool consequential: its calls are side effects, recorded in the world ledger and never
    fired by a replay. `result(**args)`: the text a replay answers a call the world never committed
    with (the tool's own result where it is a function of the arguments). A LangChain tool or a
    plain function with a docstring. Usable as a decorator."""
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
