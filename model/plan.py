"""Algorithm 1, lines 1–4 and 8's report: what a forget reads, recomputes and must answer for.

`plan_forget(session, sources)` is the one place the plan of a forget is made, whoever runs it
(the reference, the KV engine, `unsee show`, a LangGraph thread, the benchmarks):

  line 1  s ← LocateSource(G, z)        `locate_source`: the observation fields that carried z
  line 2  τ ← FirstEntry(G, s)          `first_entry`, and earlier where a part stood instead of z
  line 3  I(z) ← TaintClosure(G, s)     `suffix_closure` (= `taint_closure` on `provenance_graph`)
  line 4  c* ← argmax{c : boundary < τ}  `choose_checkpoint`

and `compensation(world, effects, boundary)` is line 8's report (A3), the one rule that says which
committed side effect a replay recognised and which the twin would not have made.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import networkx as nx

from unsee.model.errors import UnknownSource, UnseeError


@dataclass(frozen=True)
class Checkpoint:
    """Metadata only (no tensors): where the state at `boundary` lives and how to restore it."""

    boundary: int  # R_boundary: the state after `boundary` transitions
    token_offset: int
    cache_handle: str
    env_snapshot: str
    manifest: tuple[str, ...]  # the block artifact ids in context, in order


@dataclass(frozen=True)
class Witness:
    """Why τ is τ: the first transition t whose observation the twin sees otherwise, and how.
    `kind` is "entered" (a visible part of `source`, a target, is in o_t) or "stood instead" (a
    part of `source`, not a target, stands instead of a target: F reads it only without z)."""

    turn: int
    source: str
    kind: str


@dataclass(frozen=True)
class ForgetPlan:
    """Algorithm 1, lines 1–4, for one forget request on a session of T transitions.

    The replay it calls for runs transitions `checkpoint.boundary + 1 .. T` (`suffix`), each once:
    T − c invocations of F, T − τ + 1 when c* = τ − 1 (Corollary 1)."""

    sources: tuple[str, ...]
    carriers: tuple[str, ...]  # line 1: the observation fields that carried z
    tau: int  # line 2
    witness: Witness
    taint: frozenset[str]  # line 3: I(z), the carriers included
    checkpoint: Checkpoint  # line 4: c* (R_0's for a full reset)
    T: int

    @property
    def boundary(self) -> int:
        return self.checkpoint.boundary

    @property
    def suffix(self) -> range:
        """The transitions the replay runs, o_{c+1}..o_T."""
        return range(self.boundary + 1, self.T + 1)

    @property
    def transitions(self) -> int:
        return self.T - self.boundary


def plan_forget(s, sources, checkpoint: int | None = None, reset: bool = False) -> ForgetPlan:
    """The plan of forgetting `sources` from session `s` (`unsee.model.replay.Session`, or any
    value with its `state`, `observations`, `checkpoints` and `forgotten`).

    `checkpoint` forces a coarser splice point c < τ (for ablations); `reset` plans a full reset
    (B5): the replay starts from R_0 whatever checkpoints exist."""
    sources = tuple(sources)
    if not sources:
        raise UnseeError("a forget request needs at least one source id")
    carriers = tuple(a for src in sources for a in locate_source(s, src))  # line 1
    tau, witness = first_entry(s, carriers, sources)  # line 2
    taint = frozenset(suffix_closure(s.state.artifacts, carriers))  # line 3
    if reset:
        c = next(c for c in s.checkpoints if c.boundary == 0)
    elif checkpoint is not None:
        cands = [c for c in s.checkpoints if c.boundary == checkpoint]
        if not cands or checkpoint >= tau:
            raise UnseeError(f"no checkpoint at boundary {checkpoint} before τ={tau}")
        c = cands[0]
    else:
        c = choose_checkpoint(s.checkpoints, tau)  # line 4
    return ForgetPlan(sources, carriers, tau, witness, taint, c, len(s.observations))


def locate_source(s, source: str) -> tuple[str, ...]:
    """Line 1: s ← LocateSource(G, z): the observation artifacts that carried z."""
    found = tuple(a.id for a in s.state.artifacts
                  if a.parents == () and source in a.source_ids)
    if not found:
        if source in s.forgotten:
            raise UnknownSource(f"source {source!r} was already forgotten; nothing to do")
        known = sorted({src for o in s.observations for src in o.sources})
        raise UnknownSource(f"source {source!r} never entered this session; known sources: {known}")
    return found


def first_entry(s, carriers, sources) -> tuple[int, Witness]:
    """Line 2: τ ← FirstEntry(G, s): the transition at which z first entered.

    A part that stands instead of a target is read only in the world without it, so o_t ≠ o^{-z}_t
    there although z is not in G: the shared prefix (Lemma 1) ends before it too."""
    by_id = {a.id: a for a in s.state.artifacts}
    first = min((by_id[a] for a in carriers), key=lambda a: a.turn)
    tau = first.turn
    z = frozenset(sources)
    for t, o in enumerate(s.observations[:tau - 1], 1):
        shown = [p for p in o.parts if p.instead_of in z and p.source not in z]
        if shown:
            return t, Witness(t, shown[0].source, "stood instead")
    return tau, Witness(tau, min(first.source_ids & z), "entered")


def provenance_graph(state) -> nx.DiGraph:
    """G_t as a networkx DiGraph; node attributes carry the provenance tuple."""
    g = nx.DiGraph()
    for a in state.artifacts:
        g.add_node(a.id, type=a.type, turn=a.turn, source_ids=a.source_ids,
                   token_span=a.token_span, committed=a.committed)
        for p in a.parents:
            g.add_edge(p, a.id)
    return g


def taint_closure(graph: nx.DiGraph, source_artifacts) -> set[str]:
    """Line 3: I(z) ← TaintClosure(G, s) = {a : z ⇝_G a} (the sources included)."""
    out: set[str] = set()
    for a in source_artifacts:
        out.add(a)
        out |= nx.descendants(graph, a)
    return out


def suffix_closure(artifacts, source_artifacts) -> set[str]:
    """Line 3 without building G: the same set as `taint_closure(provenance_graph(R), ·)`.

    Artifacts are kept in creation order and every parent is created before its child, so
    one pass over the artifacts from the first source artifact on finds {a : z ⇝_G a}: the
    cost is the suffix's, not the session's."""
    out = set(source_artifacts)
    need, first = set(out), len(artifacts)
    for i in range(len(artifacts) - 1, -1, -1):  # back to the earliest source artifact
        if not need:
            break
        if artifacts[i].id in need:
            need.discard(artifacts[i].id)
            first = i
    if need:
        raise KeyError(f"source artifacts not in the graph: {sorted(need)}")
    for a in artifacts[first + 1:]:
        if a.id not in out and any(p in out for p in a.parents):
            out.add(a.id)
    return out


def choose_checkpoint(checkpoints, tau: int) -> Checkpoint:
    """Line 4: c* ← argmax{c ∈ C : boundary(c) < τ}."""
    return max((c for c in checkpoints if c.boundary < tau), key=lambda c: c.boundary)


def replay_tools(world, effects):
    """Line 8: shadow-execute consequential calls with call-id de-duplication (A3).

    A call whose id and arguments match a committed one is recognised (never fired again).
    Any other counterfactual call is *not* fired either: it is returned for compensation.
    Arguments are compared as canonical JSON text and reported decoded (JSON objects).
    """
    committed = {e.call_id: e for e in world}
    dedup, differs = [], []
    for e in effects:
        old = committed.get(e.call_id)
        if old is not None and old.tool == e.tool and old.args == e.args:
            dedup.append(e.call_id)
        else:
            differs.append({"call_id": e.call_id, "tool": e.tool, "args": arguments(e.args),
                            "committed": None if old is None else arguments(old.args),
                            "reason": "not committed" if old is None else "arguments differ"})
    return dedup, differs


def compensation(world, effects, boundary: int) -> tuple[list[str], list[dict]]:
    """Line 8's report on a whole replay from R_boundary (A3): the call ids it recognised as
    committed, and every call on which the world and the twin disagree: a counterfactual call the
    world did not commit as it is (`replay_tools`), then each side effect committed after the
    splice point that the twin never makes. `effects`: every call the replay made, in order."""
    dedup, comp = replay_tools(world, effects)
    made = {e.call_id for e in effects}
    comp += [{"call_id": e.call_id, "tool": e.tool, "args": None, "committed": arguments(e.args),
              "reason": "counterfactual makes no such call"} for e in world if e.turn > boundary and e.call_id not in made]
    return dedup, comp


def arguments(args: str):
    """A call's arguments as the JSON value they encode (what receipts and compensation show)."""
    return json.loads(args)
