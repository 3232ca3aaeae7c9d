"""Seeing exactness: what differs between two threads, e.g. a forgotten thread and its twin.

`compare_threads(graph_a, thread_a, graph_b, thread_b, llm_a=None, llm_b=None)` compares, turn
for turn, the state each turn ended at (R_1..R_T, read from each graph's checkpointer: every
state value, messages field by field with their ids, tool calls and their JSON arguments, the
tokens `UnseeChatModel` recorded), every subgraph checkpoint written under those turns (in order,
by the subgraph's node name: a namespace's task id differs between two runs) and, given the two
`UnseeChatModel`s, the K/V each engine holds, tensor by tensor under `torch.equal`. It returns one line per difference, empty when the
threads are identical. `acompare_threads` is its twin for graphs on an async checkpointer.
"""

from __future__ import annotations

from langchain_core.messages import BaseMessage

from unsee.impl.integrations.langgraph.history import (
    aall_checkpoints, alineage, all_checkpoints, lineage, subgraph_checkpoints, turns_of,
)

_SHOW = 60


def _short(v) -> str:
    r = repr(v)
    return r if len(r) <= _SHOW else r[:_SHOW] + "…"


def _values(t) -> dict:
    vals = t.checkpoint.get("channel_values") or {}
    return {k: v for k, v in vals.items() if not k.startswith("branch:") and not k.startswith("__")}


def _plain(v):
    if isinstance(v, BaseMessage):
        return v.model_dump()
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def diff_values(a: dict, b: dict, where: str = "") -> list[str]:
    """The differences between two states' values (messages field by field)."""
    out = []
    for k in sorted(set(a) | set(b)):
        if k not in a or k not in b:
            out.append(f"{where}{k}: only in thread {'a' if k in a else 'b'}")
            continue
        va, vb = _plain(a[k]), _plain(b[k])
        if va == vb:
            continue
        if isinstance(va, list) and isinstance(vb, list) and all(isinstance(x, dict) for x in va + vb):
            if len(va) != len(vb):
                out.append(f"{where}{k}: {len(va)} != {len(vb)} items")
            for i, (x, y) in enumerate(zip(va, vb)):
                if x != y:
                    for f in sorted(set(x) | set(y), key=str):
                        if x.get(f) != y.get(f):
                            out.append(f"{where}{k}[{i}].{f}: {_short(x.get(f))} != {_short(y.get(f))}")
                    break  # later items differ through this one
        else:
            out.append(f"{where}{k}: {_short(va)} != {_short(vb)}")
    return out


def diff_kv(llm_a, llm_b) -> list[str]:
    """The K/V two UnseeChatModels' engines hold, under torch.equal."""
    import torch

    ka, kb = llm_a.context.kv(), llm_b.context.kv()
    if len(ka) != len(kb):
        return [f"kv: {len(ka)} != {len(kb)} layers"]
    out = []
    for i, (p, q) in enumerate(zip(ka, kb)):
        for name, x, y in zip(("key", "value"), p, q):
            if x.shape != y.shape:
                out.append(f"kv: layer {i} {name} shape {tuple(x.shape)} != {tuple(y.shape)}")
            elif not torch.equal(x, y):
                out.append(f"kv: layer {i} {name} differs (torch.equal)")
    if not ka:
        out.append("kv: neither engine holds a cache")
    return out


def _node_ns(t) -> str:
    """A subgraph checkpoint's namespace without its task ids: `parent_node|child_node`."""
    return "|".join(p.split(":")[0] for p in t.config["configurable"]["checkpoint_ns"].split("|"))


def _diff(line_a, line_b, thread_a, thread_b, llm_a, llm_b, all_a=(), all_b=()) -> list[str]:
    ta, tb = turns_of(line_a, thread_a), turns_of(line_b, thread_b)
    out = [] if len(ta) == len(tb) else [f"turns: {len(ta)} != {len(tb)}"]
    for x, y in zip(ta, tb):
        out += diff_values(_values(x.end), _values(y.end), f"turn {x.index}: ")
    sa, sb = subgraph_checkpoints(all_a, line_a), subgraph_checkpoints(all_b, line_b)
    if len(sa) != len(sb):
        out.append(f"subgraph checkpoints: {len(sa)} != {len(sb)}")
    for i, (x, y) in enumerate(zip(sa, sb)):
        if _node_ns(x) != _node_ns(y):
            out.append(f"subgraph checkpoint {i}: namespace {_node_ns(x)!r} != {_node_ns(y)!r}")
        out += diff_values(_values(x), _values(y), f"subgraph checkpoint {i} ({_node_ns(x)}): ")
    if not ta and not tb:
        out.append("neither thread has a turn")
    if (llm_a is None) != (llm_b is None):
        raise ValueError("give both models (llm_a and llm_b) to compare their K/V, or neither")
    if llm_a is not None:
        out += diff_kv(llm_a, llm_b)
    return out


def compare_threads(graph_a, thread_a: str, graph_b, thread_b: str, llm_a=None, llm_b=None) -> list[str]:
    """What differs between thread `thread_a` of `graph_a` and `thread_b` of `graph_b` (see the
    module): each turn's state, messages with ids, and the K/V of `llm_a` and `llm_b` where given.
    Empty when they are identical."""
    return _diff(lineage(graph_a.checkpointer, thread_a), lineage(graph_b.checkpointer, thread_b),
                 thread_a, thread_b, llm_a, llm_b, all_checkpoints(graph_a.checkpointer, thread_a),
                 all_checkpoints(graph_b.checkpointer, thread_b))


async def acompare_threads(graph_a, thread_a: str, graph_b, thread_b: str, llm_a=None, llm_b=None) -> list[str]:
    """`compare_threads` for graphs on an async checkpointer."""
    return _diff(await alineage(graph_a.checkpointer, thread_a), await alineage(graph_b.checkpointer, thread_b),
                 thread_a, thread_b, llm_a, llm_b, await aall_checkpoints(graph_a.checkpointer, thread_a),
                 await aall_checkpoints(graph_b.checkpointer, thread_b))
