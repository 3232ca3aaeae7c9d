"""A turn's input as LangGraph reads it, each message's source id, and message ids from provenance.

Inputs are read the way LangGraph's `add_messages` reads them (`convert_to_messages`): messages,
`("user", text)` tuples, `{"role": ..., "content": ...}` dicts, plain strings, content-block
lists and `RemoveMessage`s. A message's source id is its `additional_kwargs["unsee_source"]`
(`source_message(text, source)`, or a dict input with an `"unsee_source"` key); an untagged
one's is its place, `t<turn>.<k>` (the k-th message of turn t's input). A `RemoveMessage` is a
part of the source of the message it removes where that message was an input (so forgetting a
message forgets its removal), else of its own place.

Any other input key is read too: its value is a part (a list: each item a part), under the
source `source_value(value, source)` tagged it with (a dict's `"unsee_source"` key also tags it),
or its place, `t<turn>.<key>` (a list's i-th item: `t<turn>.<key>.<i>`). A tagged value keeps its
tag through the checkpointer on a `forgettable` graph (`SourcedSerde`).

`provenance_ids(add_messages)` gives each message that arrives without an id one derived from
its place (`message_id`), so a forgotten thread and a fresh one carry the same ids.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Sequence

from langchain_core.messages import (
    BaseMessage, HumanMessage, RemoveMessage, SystemMessage, convert_to_messages, message_chunk_to_message,
)

from unsee.impl.integrations.langgraph.chat import HIDDEN, KIND, SOURCE, kind_of
from unsee.impl.integrations.langgraph.history import turns_of
from unsee.model.errors import UnseeError
from unsee.model.state import Observation, Part


def input_messages(value) -> tuple[list, list[BaseMessage]]:
    """A turn's `messages` input as stored (its raw items) and as `add_messages` reads them."""
    raw = [] if value is None else list(value) if isinstance(value, list) else [value]
    return raw, [message_chunk_to_message(m) for m in convert_to_messages(raw)]


def part_text(m: BaseMessage) -> str:
    if isinstance(m, RemoveMessage):
        return f"remove {m.id}"
    return m.content if isinstance(m.content, str) else json.dumps(m.content, sort_keys=True)


def tag_of(m: BaseMessage) -> str | None:
    """The source id an input message carries (None: untagged)."""
    src = m.additional_kwargs.get(SOURCE)
    return src if isinstance(src, str) and src else None


def sources_of(messages: Sequence[BaseMessage], turn: int, removed: dict | None = None) -> list[str]:
    """Each input message's source id: its tag, or its place `t<turn>.<k>`; a RemoveMessage's is
    the source of the input message it removes (`removed`: id → source), else its place."""
    out = []
    for k, m in enumerate(messages, 1):
        if isinstance(m, RemoveMessage):
            out.append((removed or {}).get(m.id) or f"t{turn}.{k}")
        else:
            out.append(tag_of(m) or f"t{turn}.{k}")
    return out


def observation_of(messages: Sequence[BaseMessage], turn: int, sources: Sequence[str] | None = None) -> Observation:
    """A turn's input messages as o_t: one part per message (a message's hidden parts, which
    stand instead of a target, follow it)."""
    messages = convert_to_messages(messages)
    sources = sources or sources_of(messages, turn)
    parts = []
    for m, src in zip(messages, sources):
        parts.append(Part(src, part_text(m)))
        parts += [Part(*h) for h in m.additional_kwargs.get(HIDDEN) or ()]
    kind = kind_of(messages[0]) if messages else "user"
    return Observation(kind if all(kind_of(m) == kind for m in messages) else "user", tuple(parts))


def messages_of(o: Observation, originals: Sequence = (), sources: Sequence[str] | None = None,
                raws: Sequence | None = None, ids: Sequence | None = None) -> list:
    """õ_t back as input: a part keeps its original input item as the user gave it (`raws`, or
    the message), a part that now shows (it stood instead of a forgotten one) becomes a message
    of the observation's kind; each carries the hidden parts that follow it. `ids`: the id each
    original took in the state, given to one that came without one (a graph whose reducer draws
    random ids keeps them through a forget)."""
    originals = convert_to_messages(originals)
    sources = sources or sources_of(originals, 0)
    raws = list(raws if raws is not None else originals)
    for k, (m, i) in enumerate(zip(originals, ids or ())):
        if i is not None and m.id is None and not isinstance(m, RemoveMessage):
            raws[k] = m.model_copy(update={"id": i})
    by_part = {(s, part_text(m)): (m, r) for m, s, r in zip(originals, sources, raws)}
    out: list = []
    for p in o.parts:
        if p.instead_of is not None:
            if not out:
                raise UnseeError(f"part {p.source!r} stands instead of {p.instead_of!r} but no message carries it")
            last = out[-1] = convert_to_messages([out[-1]])[0].model_copy(deep=True)
            last.additional_kwargs[HIDDEN] = list(last.additional_kwargs.get(HIDDEN) or ()) + [
                [p.source, p.text, p.instead_of]]
            continue
        old = by_part.get((p.source, p.text))
        if old is not None:
            m, raw = old
            if HIDDEN in m.additional_kwargs:  # hidden parts are o's to say again, not the old input's
                kw = {k: v for k, v in m.additional_kwargs.items() if k != HIDDEN}
                out.append(m.model_copy(update={"additional_kwargs": kw}))
            else:
                out.append(raw)
        else:
            cls = SystemMessage if o.kind in ("system", "memory") else HumanMessage
            kw = {SOURCE: p.source} | ({KIND: o.kind} if o.kind in ("memory", "tool") else {})
            out.append(cls(content=p.text, additional_kwargs=kw))
    return out


# --- values of other input keys ---------------------------------------------------------------------

class SourcedStr(str):
    """A string input value tagged with a source id; a `str` everywhere else."""

    unsee_source: str = ""


class SourcedDict(dict):
    """A dict input value tagged with a source id; a `dict` everywhere else."""

    unsee_source: str = ""


SOURCED = (SourcedStr, SourcedDict)


def source_value(value, source: str):
    """`value` (a string or a dict: a key's whole value, or an item of a list) tagged with the source
    id a forget can name, and usable as the value it wraps: `{"docs": [source_value(text, "med")]}`.
    The tag reaches the checkpointer on a graph made `forgettable`; on another graph the value is
    named by its place (`sources` lists it)."""
    if not isinstance(source, str) or not source:
        raise UnseeError(f"a source id is a non-empty string, not {source!r}")
    if isinstance(value, str):
        out = SourcedStr(value)
    elif isinstance(value, dict):
        out = SourcedDict(value)
    else:
        raise UnseeError(f"source_value tags a string or a dict (an item of a list too), not a "
                         f"{type(value).__name__}: wrap it in a dict")
    out.unsee_source = source
    return out


def value_tag(v) -> str | None:
    """The source id an input value carries (`source_value`, or a dict's "unsee_source" key)."""
    if isinstance(v, SOURCED):
        return v.unsee_source
    if isinstance(v, BaseMessage):  # a message in an edit's values: tagged as an input message is
        return tag_of(v)
    if isinstance(v, dict) and isinstance(v.get(SOURCE), str) and v[SOURCE]:
        return v[SOURCE]
    return None


@dataclass(frozen=True)
class Value:
    """One part of a turn's input outside `messages`: a key's value, or one item of a list."""

    key: str
    index: int | None  # the item's place in the list (0-based); None: the key's whole value
    value: object
    source: str

    @property
    def text(self) -> str:
        v = self.value
        body = v if isinstance(v, str) else part_text(v) if isinstance(v, BaseMessage) else json.dumps(
            v, sort_keys=True, default=repr)
        return f"{self.key}: {body}"


def values_of(inp: dict, turn: int, skip=("messages",)) -> list[Value]:
    """The parts of a turn's input keys other than `skip`, in key order."""
    out = []
    for key, v in inp.items():
        if key in skip:
            continue
        if isinstance(v, list):
            out += [Value(key, i, x, value_tag(x) or f"t{turn}.{key}.{i + 1}") for i, x in enumerate(v)]
        else:
            out.append(Value(key, None, v, value_tag(v) or f"t{turn}.{key}"))
    return out


def input_of(values: Sequence[Value], kept: set, original: dict, skip=("messages",)) -> dict:
    """The input keys other than `skip` as the twin gives them: a list keeps its kept items (it
    may become empty), a whole value whose part is gone leaves the input."""
    out = {}
    for key, v in original.items():
        if key in skip:
            continue
        mine = [x for x in values if x.key == key]
        if isinstance(v, list):
            out[key] = [x.value for x in mine if (x.source, x.text) in kept]
        elif mine and (mine[0].source, mine[0].text) in kept:
            out[key] = v
    return out


class SourcedSerde:
    """The checkpointer's serializer, keeping `source_value` tags: a value holding tagged strings or
    dicts is written as its plain value and the tags' paths (type "unsee-sourced"), and read back
    tagged; anything else goes through the inner serializer unchanged."""

    TYPE = "unsee-sourced"

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    @staticmethod
    def _plain(obj, path, tags):
        if isinstance(obj, SOURCED):
            tags.append([list(path), obj.unsee_source])
            obj = str(obj) if isinstance(obj, str) else dict(obj)
        if isinstance(obj, dict):  # a tag is kept under str and int keys (a path JSON writes back as it was)
            items = [(k, SourcedSerde._plain(v, path + (k,), tags) if type(k) in (str, int) else v) for k, v in obj.items()]
            return obj if all(v is obj[k] for k, v in items) else dict(items)
        if isinstance(obj, (list, tuple)) and type(obj) in (list, tuple):
            items = [SourcedSerde._plain(v, path + (i,), tags) for i, v in enumerate(obj)]
            return obj if all(a is b for a, b in zip(items, obj)) else type(obj)(items)
        return obj

    @staticmethod
    def _tag(obj, path, source):
        if not path:
            return source_value(obj, source)
        head, rest = path[0], path[1:]
        if isinstance(obj, tuple):
            return tuple(SourcedSerde._tag(v, rest, source) if i == head else v for i, v in enumerate(obj))
        obj[head] = SourcedSerde._tag(obj[head], rest, source)
        return obj

    def dumps_typed(self, obj):
        tags: list = []
        plain = self._plain(obj, (), tags)
        if not tags:
            return self.inner.dumps_typed(obj)
        typ, data = self.inner.dumps_typed(plain)  # the value's bytes as the inner serializer writes them
        return self.TYPE, json.dumps([typ, tags]).encode() + b"\n" + data

    def loads_typed(self, data):
        typ, blob = data
        if typ != self.TYPE:
            return self.inner.loads_typed(data)
        head, _, body = blob.partition(b"\n")
        inner_typ, tags = json.loads(head)
        obj = self.inner.loads_typed((inner_typ, body))
        for path, source in tags:
            obj = self._tag(obj, tuple(path), source)
        return obj


def keep_tags(saver) -> None:
    """Make a checkpointer keep `source_value` tags (once)."""
    if not isinstance(saver.serde, SourcedSerde):
        saver.serde = SourcedSerde(saver.serde)


def messages_in(t) -> list:
    return (t.checkpoint.get("channel_values") or {}).get("messages") or []


@dataclass
class ThreadInputs:
    """A thread's turns and their inputs as a forget reads them."""

    line: list
    turns: list
    raws: list  # per turn: its messages input as stored
    messages: list  # per turn: as add_messages reads it
    sources: list  # per turn: each message's source id
    log: list  # per turn: o_t
    input_ids: set = field(default_factory=set)  # ids the inputs' messages took in the state
    values: list = field(default_factory=list)  # per turn: its other input keys' parts (`Value`s)
    ids: list = field(default_factory=list)  # per turn: the id each input message took in the state (None: a removal)


def read_inputs(line, thread_id: str) -> ThreadInputs:
    hist = turns_of(line, thread_id)
    raws, msgs, srcs, log, removed, input_ids, values, ids = [], [], [], [], {}, set(), [], []
    for t in hist:
        if t.resumed or t.updated:  # a human's answer (t<turn>.resume), or an edit's values (every key)
            vs = ([Value("resume", None, t.resume, value_tag(t.resume) or f"t{t.index}.resume")] if t.resumed
                  else values_of(t.input, t.index, skip=()))
            raws.append([]), msgs.append([]), srcs.append([]), values.append(vs), ids.append([])
            log.append(Observation("user", tuple(Part(v.source, v.text) for v in vs)))
            continue
        raw, ms = input_messages(t.input.get("messages"))
        before = {m.id for m in messages_in(t.start)}
        new = [m for m in messages_in(t.after) if m.id not in before]
        adding = [m for m in ms if not isinstance(m, RemoveMessage) and (m.id is None or m.id not in before)]
        if len(new) != len(adding):
            raise UnseeError(f"thread {thread_id!r}: turn {t.index}'s input ({len(adding)} messages as read back) "
                             f"added {len(new)} messages to the state; a forget cannot tell its messages apart "
                             "(a bare tuple as the messages value? pass a list: {'messages': [(role, text)]})")
        ss = sources_of(ms, t.index, removed)
        adding_sources = [s for m, s in zip(ms, ss) if not isinstance(m, RemoveMessage)
                          and (m.id is None or m.id not in before)]
        for m, s in zip(new, adding_sources):
            removed[m.id] = s
            input_ids.add(m.id)
        took = iter(m.id for m in new)
        ids.append([None if isinstance(m, RemoveMessage) else m.id if m.id in before else next(took) for m in ms])
        vs = values_of(t.input, t.index)
        raws.append(raw)
        msgs.append(ms)
        srcs.append(ss)
        values.append(vs)
        o = observation_of(ms, t.index, ss)
        log.append(Observation(o.kind, o.parts + tuple(Part(v.source, v.text) for v in vs)))
    return ThreadInputs(line, hist, raws, msgs, srcs, log, input_ids, values, ids)


def message_id(previous: str, k: int) -> str:
    """The id of the k-th message without an id in one write to a messages channel, after the
    message whose id is `previous` ("" on an empty channel): a function of the thread's history
    alone, so a forgotten thread and a fresh thread without the target carry the same ids."""
    return "m-" + hashlib.sha256(f"{previous}\x00{k}".encode()).hexdigest()[:24]


def provenance_ids(reducer):
    """`add_messages` (or a reducer like it) that first gives each message arriving without an id
    the id `message_id` derives from its place, instead of the random one LangGraph draws."""
    if getattr(reducer, "unsee_provenance", False):
        return reducer

    def reduce(left, right, **kw):
        items = right if isinstance(right, list) else [right]
        msgs = [message_chunk_to_message(m) for m in convert_to_messages(items)]
        last = left[-1] if isinstance(left, list) and left else left if not isinstance(left, list) else None
        previous = getattr(last, "id", None) or ""
        out, k = [], 0
        for m in msgs:
            if m.id is None and not isinstance(m, RemoveMessage):
                k += 1
                m = m.model_copy(update={"id": message_id(previous, k)})
            out.append(m)
        return reducer(left, out, **kw)

    reduce.unsee_provenance = True
    reduce.__doc__ = reducer.__doc__
    return reduce


