"""The oracle: what a forget must produce, from the paper's definitions alone.

Every expected value the specs compare a runtime against comes from here: o^{-z}, τ, I(z),
the checkpoint a forget must splice at, the checkpoints a policy promises, the number of
invocations of F, and the side effects a forget must report for compensation. The code is
written apart from `unsee.model` (it imports only its data classes and tool names) and is
kept obvious on purpose: a check that computes its expectation with the function under test
checks nothing. `tests/model/test_oracle.py` compares it with `unsee.model` on every generated case.

Definitions (Method section; Z is the set of sources a request names, or every source a
runtime has forgotten so far):

- o \\ Z: every part whose source is in Z is removed, including a part that stands
  `instead_of` something; a part that stood instead of a source in Z becomes an ordinary
  part. An observation left with no part is still an observation (T does not change).
- τ: the first transition whose observation carries a source in Z, among the parts F reads
  (not the `instead_of` ones, which F does not see while their source is present).
- I(z) = {a : z ⇝_G a}: the recorded observation fields (nodes with no parents) that
  carry a source in Z, and everything reachable from them along G's edges.
- the splice point: c* = max{c ∈ C : c ≤ τ−1} (Algorithm 1, line 4); a forget from c
  invokes F exactly T−c times, T−τ+1 when c = τ−1; a full reset T times.
"""

from __future__ import annotations

import json

from dataclasses import replace

from unsee.model.state import CONSEQUENTIAL_TOOLS, Observation
from unsee.specs.protocol import canonical, plain

# --- the counterfactual stream -------------------------------------------------------------


def without(obs: Observation, forgotten) -> Observation:
    """o \\ Z: drop the parts whose source is in Z; show the parts that stood instead of one."""
    z = set(forgotten)
    parts = []
    for p in obs.parts:
        if p.source in z:
            continue
        if p.instead_of in z:
            p = replace(p, instead_of=None)
        parts.append(p)
    return replace(obs, parts=tuple(parts))


def counterfactual(stream, forgotten) -> tuple[Observation, ...]:
    """o^{-z}: every observation of the stream, without Z (one per transition, as before)."""
    return tuple(without(o, forgotten) for o in stream)


def carries(obs: Observation, forgotten) -> bool:
    """Does F read a part of `obs` whose source is in Z?"""
    z = set(forgotten)
    return any(p.source in z for p in obs.parts if p.instead_of is None)


def first_entry(stream, forgotten) -> int:
    """τ: the first transition (1-based) whose observation carries a source in Z."""
    for t, o in enumerate(stream, 1):
        if carries(o, forgotten):
            return t
    raise ValueError(f"none of {sorted(set(forgotten))} occurs in the stream")


def sources_in(stream) -> set[str]:
    """Every source id the stream's observations hold, in any part (hidden or not)."""
    return {p.source for o in stream for p in o.parts} | {p.instead_of for o in stream for p in o.parts
                                                          if p.instead_of is not None}


# --- the provenance graph --------------------------------------------------------------------


def taint_closure(graph, forgotten) -> set:
    """I(z) on a provenance graph (a networkx DiGraph whose nodes carry `source_ids`): the
    parentless nodes carrying a source in Z, and every node reachable from them."""
    z = set(forgotten)
    todo = [n for n, d in graph.nodes(data=True) if not graph.pred[n] and z & set(d.get("source_ids", ()))]
    seen = set(todo)
    while todo:
        n = todo.pop()
        for m in graph.succ[n]:
            if m not in seen:
                seen.add(m)
                todo.append(m)
    return seen


# --- checkpoints and cost --------------------------------------------------------------------


def splice_point(boundaries, tau: int) -> int:
    """c* = max{c ∈ C : c ≤ τ−1}: the latest checkpoint that holds no part of Z."""
    before = [b for b in boundaries if b <= tau - 1]
    if not before:
        raise ValueError(f"no checkpoint at or before τ−1 = {tau - 1} among {sorted(boundaries)}")
    return max(before)


def promised_checkpoints(policy: str, stream) -> set[int]:
    """The boundaries a checkpoint policy promises for a log (R_b: the state after b transitions).

    "every": every turn boundary 0..T−1; "start": session start only; "events": session start
    and the boundary before each memory injection, each compaction, and each transition that
    commits a consequential call (one planned by the transition before it)."""
    T = len(stream)
    if policy == "every":
        return set(range(T))
    if policy == "start":
        return {0}
    if policy == "events":
        out = {0}
        for t, o in enumerate(stream, 1):  # the boundary before transition t is t−1
            commits = t > 1 and stream[t - 2].tool in CONSEQUENTIAL_TOOLS
            if o.kind == "memory" or o.compact or commits:
                out.add(t - 1)
        return out
    raise ValueError(f"the oracle knows the policies every, events and start, not {policy!r}")


def transitions(T: int, c: int) -> int:
    """Invocations of F by a forget that restores R_c: transitions c+1..T."""
    return T - c


# --- side effects (A3) -----------------------------------------------------------------------


def compensation(committed, counterfactual_effects, c: int) -> list[dict]:
    """The side effects a forget spliced at c must report: every call after c that the real
    world committed and the twin does not make with the same tool and arguments (compared as
    canonical JSON), and every call the twin makes that was never committed. One entry per
    call id, arguments as plain JSON values (tuples become lists):

        {"call_id", "tool", "args": the twin's arguments or None,
         "committed": the committed arguments or None, "reason"}

    reason: "not committed" (only the twin makes it), "counterfactual makes no such call"
    (only the real world made it), "arguments differ" (both, differently)."""
    real = {e.call_id: e for e in committed if e.turn > c}
    twin = {e.call_id: e for e in counterfactual_effects if e.turn > c}
    out = []
    for cid in sorted(set(real) | set(twin)):
        r, w = real.get(cid), twin.get(cid)
        if r is not None and w is not None and _call(r) == _call(w):
            continue
        reason = ("not committed" if r is None else "counterfactual makes no such call" if w is None
                  else "arguments differ")
        out.append({"call_id": cid, "tool": (w or r).tool, "args": None if w is None else plain(decoded(w.args)),
                    "committed": None if r is None else plain(decoded(r.args)), "reason": reason})
    return out


def decoded(args):
    """A call's arguments as a JSON value: JSON text is parsed (a runtime may keep the text it
    decoded, as unsee does, or the value); anything else is taken as the value."""
    if isinstance(args, str):
        try:
            return json.loads(args)
        except ValueError:
            return args
    return args


def _call(e) -> tuple[str, str]:
    """A call's identity: its tool and its arguments as canonical JSON text."""
    return e.tool, canonical(decoded(e.args))


def deduplicated(committed, counterfactual_effects, c: int) -> list[str]:
    """The calls after c the twin makes exactly as committed: recognised, never fired again."""
    real = {e.call_id: _call(e) for e in committed if e.turn > c}
    return sorted(e.call_id for e in counterfactual_effects if e.turn > c and real.get(e.call_id) == _call(e))

