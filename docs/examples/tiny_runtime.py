"""A small agent runtime written from scratch, to show what the conformance kit needs.

It shares no code with unsee: its "model" is a rolling hash, its cache one hash per word,
its provenance graph one artifact per transition. It only reads the observations it is
given (kind, parts, reply, compact) and uses `obs.without(sources)`, the protocol's
definition of o \\ {z}.

Verify it:
    pytest --pyargs unsee.specs.conformance --unsee-runtime=tiny_runtime:TinyRuntime -p no:cacheprovider
(run from docs/examples, or put this folder on PYTHONPATH).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import networkx as nx


def _h(*xs) -> str:
    return hashlib.sha256("|".join(map(str, xs)).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class State:
    turn: int = 0
    words: tuple = ()  # the transcript
    cache: tuple = ()  # one rolling hash per word: each depends on every word before it
    memory: tuple = ()
    summary: str = ""
    nodes: tuple = ()  # (id, turn, parents, sources)


@dataclass
class Receipt:
    tau: int
    T: int
    checkpoint: int
    transitions: int
    replayed: list
    compensation: list = field(default_factory=list)


def step(s: State, obs) -> State:
    """F: read the observation, reply with hash-chosen words, maybe compact."""
    t = s.turn + 1
    words, cache = list(s.words), list(s.cache)

    def push(w):
        cache.append(_h(cache[-1] if cache else "", w))
        words.append(w)

    fields = []
    memory = list(s.memory)
    for i, p in enumerate(obs.visible):
        fields.append((f"{t}.f{i}", t, (), frozenset({p.source})))
        for w in p.text.split():
            push(w)
        if obs.kind == "memory":
            memory.append(p.text)
    for _ in range(obs.reply):
        push("r" + cache[-1][:4] if cache else "r0")
    summary = s.summary
    if obs.compact:
        summary = " ".join(words[-3:])
        words, cache = [], []
        for w in summary.split():
            push(w)
    prev = tuple(n[0] for n in s.nodes if n[0].endswith(".turn"))[-1:]
    turn_node = (f"{t}.turn", t, tuple(f[0] for f in fields) + prev, frozenset())
    return State(t, tuple(words), tuple(cache), tuple(memory), summary, s.nodes + tuple(fields) + (turn_node,))


class TinyRuntime:
    def __init__(self, config=None) -> None:
        self.reset()

    def reset(self) -> None:
        self.states = [State()]  # the stored trajectory: R_0..R_T (every boundary is a checkpoint)
        self.log = []
        self.invocations = 0

    def step(self, obs) -> None:
        self.states.append(step(self.states[-1], obs))
        self.log.append(obs)
        self.invocations += 1

    def forget(self, sources, method="B7", checkpoint=None):
        tau = next(t for t, o in enumerate(self.log, 1) if o.sources & set(sources))
        c = 0 if method == "B5" else (tau - 1 if checkpoint is None else checkpoint)
        clean = [o.without(set(sources)) for o in self.log]
        states, T = self.states[: c + 1], len(self.log)
        for o in clean[c:]:
            states.append(step(states[-1], o))
            self.invocations += 1
        self.states, self.log = states, clean
        return Receipt(tau, T, c, T - c, clean[c:])

    def digest(self) -> dict:
        s = self.states[-1]
        return {"turn": _h(s.turn), "transcript": _h(*s.words), "kv": _h(*s.cache), "memory": _h(*s.memory),
                "summary": _h(s.summary), "graph": _h(*s.nodes)}

    def graph(self):
        g = nx.DiGraph()
        for nid, turn, parents, sources in self.states[-1].nodes:
            g.add_node(nid, type="field" if not parents and sources else "turn", turn=turn, source_ids=sources)
            for p in parents:
                g.add_edge(p, nid)
        return g

    @property
    def observations(self):
        return list(self.log)

    @property
    def checkpoints(self):
        return list(range(len(self.states)))

    @property
    def world(self):
        return []
