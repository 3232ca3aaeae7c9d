"""The runtime protocol: what a runtime exposes for the kit to check it, and the types of
every value it returns, checked where they cross into the kit.

A runtime is a mutable object holding one session:

- `reset()`                   go to R_init with an empty log (a fresh session);
- `step(obs)`                 apply F once to one observation (`unsee.model.Observation`);
                              the runtime decides replies, plans, tool calls, compaction;
                              what it returns is ignored;
- `forget(sources, method="B7", checkpoint=None)`
                              forget every source in one operation and return a receipt;
- `digest()`                  layer name → digest string of the current state;
- `graph()`                   the provenance graph G_t, a `networkx.DiGraph`;
- `invocations`               how many times F has run since `reset()`, replays included;
- `observations`              the (sanitized) observation log, one entry per transition;
- `checkpoints`               the boundaries b at which R_b can be restored;
- `world`                     the side effects that fired outside the runtime;
- `trajectory()` (optional)   after a forget, the digests of R̃_c..R̃_T;
- `layers()` (optional)       layer name → the texts the runtime holds there.

What it persists (optional): the hooks of `unsee.specs.persistence`, through `Checked.hook`.

Records (a receipt, a world entry, a compensation entry) may be objects with attributes or
mappings with the same keys: `Checked` reads either into the kit's own frozen dataclasses
below, and checks every field. A value that breaks the protocol stops the run with
`ProtocolViolation`, "the runtime returned … at step k (the call): what was expected; what
to do"; an exception the runtime raises becomes `RuntimeRaised`, "the runtime raised X: …
at step k (the call)". The contract in words, field by field, is section 1 of
docs/verify-your-runtime.md; `RECEIPT`, `WORLD_ENTRY`, `COMPENSATION_ENTRY` and `NODE` are
what that section lists (a test keeps the two in step).
"""

from __future__ import annotations

from types import MappingProxyType

import json
from dataclasses import dataclass, fields, is_dataclass
from numbers import Integral
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

from unsee.model.state import Observation


class SpecViolation(AssertionError):
    """A paper statement does not hold on this runtime (the message says where)."""


class ProtocolViolation(SpecViolation):
    """The runtime returned a value the protocol does not allow (the message names the field)."""


class RuntimeRaised(SpecViolation):
    """The runtime under test raised an exception where the protocol expects a result."""


GUIDE = 'see "The types" in docs/verify-your-runtime.md'
REASONS = ("not committed", "counterfactual makes no such call", "arguments differ")

# field → (required, what it holds): the contract of each record, as the guide states it
RECEIPT = MappingProxyType({
    "tau": (True, "int ≥ 1: the first transition (1-based) whose observation has a visible part from a forgotten source"),
    "T": (True, "int ≥ 1: the length of the log before the forget"),
    "checkpoint": (True, "int ≥ 0: the boundary c spliced at (0 for B5)"),
    "transitions": (True, "int ≥ 0: the invocations of F by this forget (T − c)"),
    "compensation": (True, "a list of compensation entries (empty when nothing needs compensating)"),
    "replayed": (True, "a list of the sanitized observations fed to F, o^-z_{c+1}..o^-z_T"),
    "method": (False, 'str: the method asked for, "B7" or "B5"'),
    "sources": (False, "a list of str: the source ids the request named"),
    "taint": (False, "a collection of node ids of graph() before the forget: I(z)"),
    "digests": (False, "a mapping layer → str: digest() of the state after the forget"),
    "deduplicated": (False, "a list of str: call ids the replay recognised as already committed"),
})
WORLD_ENTRY = MappingProxyType({
    "call_id": (True, "str: the call's id, unique in the ledger and the same in a replay that makes the same call"),
    "tool": (True, "str: the tool's name"),
    "args": (True, "any JSON value (dict, list, str, number, bool, None): the arguments, compared as canonical JSON"),
    "turn": (True, "int ≥ 1: the transition the call committed in"),
})
COMPENSATION_ENTRY = MappingProxyType({
    "call_id": (True, "str: the call's id"),
    "tool": (True, "str: the tool's name"),
    "args": (True, "JSON value or None: the twin's arguments (None when the twin makes no such call)"),
    "committed": (True, "JSON value or None: the committed arguments (None when it never committed)"),
    "reason": (True, f"one of {', '.join(map(repr, REASONS))}"),
})
NODE = MappingProxyType({
    "type": (True, 'str: what the node is ("field" for an observation field, or any name for what F made)'),
    "turn": (True, "int ≥ 0: the transition that recorded or made it"),
    "source_ids": (True, "a set (or list) of str: the sources a recorded field carries; empty for what F made"),
})


@dataclass(frozen=True)
class WorldEntry:
    """A committed side effect (`world`); `args` is the plain JSON value of what was given."""

    call_id: str
    tool: str
    args: Any
    turn: int


@dataclass(frozen=True)
class CompensationEntry:
    """One call after the splice point on which the world and the twin disagree (A3)."""

    call_id: str
    tool: str
    args: Any
    committed: Any
    reason: str

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Receipt:
    """What a forget reports. Optional fields are None when the runtime left them out;
    `given` holds every field the runtime returned, by name, as it returned them."""

    tau: int
    T: int
    checkpoint: int
    transitions: int
    compensation: tuple[CompensationEntry, ...]
    replayed: tuple[Observation, ...]
    method: str | None = None
    sources: tuple[str, ...] | None = None
    taint: frozenset | None = None
    digests: dict | None = None
    deduplicated: tuple[str, ...] | None = None
    given: Mapping[str, Any] | None = None


Digests = dict  # layer name → digest string
Trajectory = list  # of Digests: R̃_c..R̃_T


def canonical(value) -> str:
    """A JSON value as canonical text (sorted keys, tuples as lists): how arguments compare."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def plain(value):
    """A JSON value with tuples made lists and keys sorted: what the kit stores and compares."""
    return json.loads(canonical(value))


# --- reading values at the boundary ------------------------------------------------------------------


class Boundary:
    """Where a value crossed into the kit, for the messages: the call and the step."""

    def __init__(self, call: str, where: str) -> None:
        self.call, self.where = call, where

    def fail(self, what: str, expected: str, fix: str) -> ProtocolViolation:
        return ProtocolViolation(f"the runtime returned {what} at {self.where} ({self.call}): {expected}; {fix}")


def _is_int(x) -> bool:
    return isinstance(x, Integral) and not isinstance(x, bool)


def kind_of(x) -> str:
    """How a message names a value: its type, and its text when that says more."""
    if x is None:
        return "None"
    text = repr(x)
    return f"a {type(x).__name__}" + ("" if text.startswith("<") else f" ({text:.60})")


def _record_fields(value) -> dict | None:
    """Every field of a record given as a mapping, a dataclass, a named tuple or a plain object."""
    if isinstance(value, Mapping):
        return dict(value)
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in fields(value)}
    if hasattr(value, "_asdict"):  # a named tuple (a foreign runtime's record)
        return dict(value._asdict())
    if hasattr(value, "__dict__") and not callable(value):  # a plain object
        return {k: v for k, v in vars(value).items() if not k.startswith("_")}
    return None


def _read(value, spec: dict, name: str, at: Boundary) -> dict:
    """The fields of `spec` from a record, with every required one present."""
    # a scalar or a bare sequence is no record; a named tuple (it has `_asdict`) is
    if value is None or (isinstance(value, (str, bytes, int, float, list, tuple)) and not hasattr(value, "_asdict")):
        raise at.fail(f"{name} as {kind_of(value)}", f"{name} is an object with attributes or a mapping with the keys "
                      f"{', '.join(k for k, (req, _) in spec.items() if req)}", f"return one ({GUIDE})")
    got = _record_fields(value) or {}
    for k in spec:  # attributes a class computes (properties) are read too
        if k not in got and not isinstance(value, Mapping) and hasattr(value, k):
            got[k] = getattr(value, k)
    for k, (req, what) in spec.items():
        if req and k not in got:
            raise at.fail(f"{name} without `{k}`", f"{name} carries `{k}`, {what}",
                          f"add `{k}` to it, as an attribute or a key ({GUIDE})")
    return got


def _int(x, field: str, name: str, at: Boundary, low: int = 0) -> int:
    if not _is_int(x) or x < low:
        raise at.fail(f"{name} with `{field}` = {kind_of(x)}", f"`{field}` is an int ≥ {low}",
                      f"give `{field}` as a whole number ({GUIDE})")
    return int(x)


def _str(x, field: str, name: str, at: Boundary) -> str:
    if not isinstance(x, str):
        raise at.fail(f"{name} with `{field}` = {kind_of(x)}", f"`{field}` is a str", f"give `{field}` as a str ({GUIDE})")
    return x


def _json(x, field: str, name: str, at: Boundary, none: bool = False):
    if x is None and none:
        return None
    try:
        return plain(x)
    except (TypeError, ValueError) as e:
        raise at.fail(f"{name} with `{field}` = {kind_of(x)}", f"`{field}` is a JSON value ({e})",
                      f"give the arguments as dicts, lists, str, numbers, bools or None ({GUIDE})") from None


def read_list(x, what: str, at: Boundary, of: str) -> list:
    if isinstance(x, (str, bytes, Mapping)) or not hasattr(x, "__iter__"):  # whatever the runtime returned
        raise at.fail(f"{what} as {kind_of(x)}", f"{what} is a list (or tuple) of {of}", f"return a list ({GUIDE})")
    return list(x)


def read_world_entry(value, at: Boundary, name: str = "a world entry") -> WorldEntry:
    d = _read(value, WORLD_ENTRY, name, at)
    return WorldEntry(_str(d["call_id"], "call_id", name, at), _str(d["tool"], "tool", name, at),
                      _json(d["args"], "args", name, at), _int(d["turn"], "turn", name, at, 1))


def read_world(value, at: Boundary) -> tuple[WorldEntry, ...]:
    items = read_list(value, "the world ledger", at, "world entries (call_id, tool, args, turn)")
    return tuple(read_world_entry(x, at, f"world entry {i}") for i, x in enumerate(items))


def read_compensation_entry(value, at: Boundary, name: str = "a compensation entry") -> CompensationEntry:
    d = _read(value, COMPENSATION_ENTRY, name, at)
    reason = _str(d["reason"], "reason", name, at)
    if reason not in REASONS:
        raise at.fail(f"{name} with `reason` = {reason!r}", f"`reason` is one of {', '.join(map(repr, REASONS))}",
                      "use the one that says why the call differs")
    return CompensationEntry(_str(d["call_id"], "call_id", name, at), _str(d["tool"], "tool", name, at),
                             _json(d["args"], "args", name, at, none=True),
                             _json(d["committed"], "committed", name, at, none=True), reason)


def read_observations(value, at: Boundary, what: str) -> tuple[Observation, ...]:
    items = read_list(value, what, at, "unsee.model.Observation")
    for i, o in enumerate(items):
        if not isinstance(o, Observation):
            raise at.fail(f"{what} with item {i} as {kind_of(o)}", "each is an unsee.model.Observation",
                          "keep the Observation objects step() was given, or `obs.without(sources)` of them")
    return tuple(items)


def read_digests(value, at: Boundary, what: str = "digests") -> dict[str, str]:
    if not isinstance(value, Mapping) or not value:
        raise at.fail(f"{what} as {kind_of(value)}", f"{what} is a non-empty mapping layer name → digest string",
                      "return one str per layer of the state, e.g. {'transcript': ..., 'kv': ...}")
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise at.fail(f"{what} with {k!r}: {kind_of(v)}", "each layer name and each digest is a str",
                          "hash each layer to a str (e.g. a hex digest)")
    return dict(value)


def read_receipt(value, at: Boundary) -> Receipt:
    name = "a receipt"
    d = _read(value, RECEIPT, name, at)
    comp = read_list(d["compensation"], "the receipt's compensation", at, "compensation entries")
    opt = {k: d.get(k) for k in RECEIPT if not RECEIPT[k][0]}
    if opt["method"] is not None:
        _str(opt["method"], "method", name, at)
    for k in ("sources", "deduplicated"):
        if opt[k] is not None:
            opt[k] = tuple(_str(x, k, name, at) for x in read_list(opt[k], f"the receipt's {k}", at, "str"))
    if opt["taint"] is not None:
        try:
            opt["taint"] = frozenset(read_list(opt["taint"], "the receipt's taint", at, "node ids"))
        except TypeError:
            raise at.fail("a receipt whose `taint` holds an unhashable id", "`taint` holds node ids of graph()",
                          "give the ids of the nodes, not the nodes' data") from None
    if opt["digests"] is not None:
        opt["digests"] = read_digests(opt["digests"], at, "the receipt's digests")
    return Receipt(_int(d["tau"], "tau", name, at, 1), _int(d["T"], "T", name, at, 1),
                   _int(d["checkpoint"], "checkpoint", name, at), _int(d["transitions"], "transitions", name, at),
                   tuple(read_compensation_entry(x, at, f"compensation entry {i}") for i, x in enumerate(comp)),
                   read_observations(d["replayed"], at, "the receipt's replayed"), **opt, given=d)


def read_graph(value, at: Boundary):
    """G as a DiGraph the kit owns: every node's `type`, `turn` and `source_ids` (a frozenset) checked."""
    import networkx as nx

    if not isinstance(value, nx.DiGraph):
        raise at.fail(f"a graph as {kind_of(value)}", "graph() returns a networkx.DiGraph (edges point from an input "
                      "to what was made from it)", "build an nx.DiGraph() and add_node/add_edge on it")
    g = nx.DiGraph()
    for n, data in value.nodes(data=True):
        name = f"graph node {n!r}"
        if not data and value.degree(n):
            raise at.fail(f"a graph with an edge to or from {n!r}, a node it never added", "every node an edge names "
                          "is added with `type`, `turn` and `source_ids`", "add the node, or drop edges to removed nodes")
        d = _read(data, NODE, name, at)
        ids = d["source_ids"]
        if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):  # whatever the runtime stored
            raise at.fail(f"{name} with `source_ids` = {kind_of(ids)}", "`source_ids` is a set of str",
                          "give a set, e.g. {'z1'} or set()")
        g.add_node(n, **{**d, "type": _str(d["type"], "type", name, at), "turn": _int(d["turn"], "turn", name, at),
                         "source_ids": frozenset(_str(s, "source_ids", name, at) for s in ids)})
    g.add_edges_from(value.edges)
    return g


def read_checkpoints(value, at: Boundary) -> tuple[int, ...]:
    items = read_list(value, "the checkpoints", at, "boundaries (int ≥ 0)")
    return tuple(_int(b, "checkpoints", "checkpoints", at) for b in items)


def read_layers(value, at: Boundary) -> dict[str, list[str]]:
    if not isinstance(value, Mapping):
        raise at.fail(f"layers as {kind_of(value)}", "layers() returns a mapping layer name → list of texts",
                      "return e.g. {'transcript': [...], 'memory': [...]}")
    return {str(k): [str(x) for x in read_list(v, f"layer {k!r}", at, "texts")] for k, v in value.items()}


# --- the runtime, checked ------------------------------------------------------------------------------

MEMBERS = ("reset", "step", "forget", "digest", "graph", "invocations", "observations", "checkpoints", "world")


def call(fn, what: str, where: str):
    """Run one call of the runtime; an exception becomes `RuntimeRaised`, naming it."""
    try:
        return fn()
    except AssertionError:
        raise
    except Exception as e:  # noqa: BLE001 -- any exception of the runtime is the finding
        raise RuntimeRaised(f"the runtime raised {type(e).__name__}: {e} at {where} ({what})") from e


class Checked:
    """A runtime seen through the protocol: every call's exception and every returned value
    is checked as it crosses into the kit (`RuntimeRaised`, `ProtocolViolation`), and records
    come back as the kit's types. `label` says which runtime a message is about; any other
    member passes through to `runtime` unchecked."""

    def __init__(self, runtime, label: str = "") -> None:
        # members the class defines or the instance holds; a proxy's own `__getattr__` is asked last
        missing = [m for m in MEMBERS if not (hasattr(type(runtime), m) or m in getattr(runtime, "__dict__", {}))
                   and not call(lambda m=m: hasattr(runtime, m), f"rt.{m}", "construction")]
        if missing:
            raise ProtocolViolation(f"the runtime returned by the factory, a {type(runtime).__name__}, lacks "
                                    f"{', '.join(missing)}: a runtime has {', '.join(MEMBERS)} (section 1 of "
                                    "docs/verify-your-runtime.md); add them")
        self.runtime, self.label, self.steps, self.forgot = runtime, label, 0, False

    def __getattr__(self, name):  # any other member: the runtime's own, unchecked
        return getattr(self.runtime, name)

    def _at(self, call_: str, where: str | None = None) -> Boundary:
        if where is None:
            where = (f"step {self.steps}" if self.steps else "the start") + (", after the forget" if self.forgot else "")
        return Boundary(call_, where + (f" of {self.label}" if self.label else ""))

    def _call(self, fn, what: str, where: str | None = None):
        at = self._at(what, where)
        return call(fn, at.call, at.where), at

    def reset(self) -> None:
        self._call(self.runtime.reset, "rt.reset()")
        self.steps, self.forgot = 0, False

    def step(self, obs: Observation) -> None:
        self._call(lambda: self.runtime.step(obs), "rt.step(...)", f"step {self.steps + 1}")
        self.steps, self.forgot = self.steps + 1, False

    def forget(self, sources, method: str = "B7", checkpoint: int | None = None) -> Receipt:
        what = f"rt.forget({list(sources)!r}, method={method!r}, checkpoint={checkpoint!r})"
        value, at = self._call(lambda: self.runtime.forget(list(sources), method=method, checkpoint=checkpoint),
                               what, f"the forget after step {self.steps}")
        self.forgot = True
        return read_receipt(value, at)

    def digest(self) -> dict[str, str]:
        value, at = self._call(self.runtime.digest, "rt.digest()")
        return read_digests(value, at, "digest()")

    def graph(self):
        value, at = self._call(self.runtime.graph, "rt.graph()")
        return read_graph(value, at)

    def offers(self, name: str) -> bool:
        return callable(getattr(self.runtime, name, None))  # an optional protocol method (e.g. `trajectory`)

    def trajectory(self) -> list[dict[str, str]] | None:
        """R̃_c..R̃_T's digests, or None for a runtime without `trajectory()`."""
        if not self.offers("trajectory"):
            return None
        value, at = self._call(self.runtime.trajectory, "rt.trajectory()")
        return [read_digests(d, at, f"trajectory()[{i}]")
                for i, d in enumerate(read_list(value, "trajectory()", at, "digests"))]

    def layers(self) -> dict[str, list[str]] | None:
        """layer → texts, or None for a runtime without `layers()`."""
        if not self.offers("layers"):
            return None
        value, at = self._call(self.runtime.layers, "rt.layers()")
        return read_layers(value, at)

    def hook(self, name: str, read, *args):
        """An optional hook `name(*args)` (`unsee.specs.persistence`): None for a runtime without it,
        else its value as `read(value, at)` returns it."""
        if not self.offers(name):
            return None
        value, at = self._call(lambda: getattr(self.runtime, name)(*args),
                               f"rt.{name}({', '.join(map(repr, args))})")
        return read(value, at)

    @property
    def invocations(self) -> int:
        value, at = self._call(lambda: self.runtime.invocations, "rt.invocations")
        return _int(value, "invocations", "invocations", at)

    @property
    def observations(self) -> tuple[Observation, ...]:
        value, at = self._call(lambda: self.runtime.observations, "rt.observations")
        return read_observations(value, at, "the log")

    @property
    def checkpoints(self) -> tuple[int, ...]:
        value, at = self._call(lambda: self.runtime.checkpoints, "rt.checkpoints")
        return read_checkpoints(value, at)

    @property
    def world(self) -> tuple[WorldEntry, ...]:
        value, at = self._call(lambda: self.runtime.world, "rt.world")
        return read_world(value, at)


def checked(runtime, label: str = "") -> Checked:
    return runtime if isinstance(runtime, Checked) else Checked(runtime, label)


@runtime_checkable
class Runtime(Protocol):
    def reset(self) -> None: ...

    def step(self, obs: Observation) -> Any: ...

    def forget(self, sources: Sequence[str], method: str = "B7", checkpoint: int | None = None) -> Any: ...

    def digest(self) -> Mapping[str, str]: ...

    def graph(self) -> Any: ...

    @property
    def invocations(self) -> int: ...

    @property
    def observations(self) -> Sequence[Observation]: ...

    @property
    def checkpoints(self) -> Sequence[int]: ...

    @property
    def world(self) -> Sequence[Any]: ...


RuntimeFactory = Callable[[], Runtime]
