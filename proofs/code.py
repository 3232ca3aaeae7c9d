"""Proofs about the code that runs: CrossHair on the pure functions of `unsee.model`.

The Z3 obligations (`unsee.proofs.obligations`) are about an abstract F. These are about the
Python that Algorithm 1 executes. Each entry of PROOFS puts one function of `unsee.model`
under a contract written from the paper's definitions (never by calling the function again):

  first_entry        τ: the first step whose observation removing z changes (z ∈ o_τ, or a span
                     standing instead of z), located by `plan_forget` (first_entry on the
                     provenance graph a recorded session produced, and the log's spans);
  sanitize           o \\ {z}: no span of z is left, every other span kept verbatim (A2);
  Observation.without  the same contract on the method sanitize and o^{-z} call;
  replay_tools       A3: a counterfactual call is recognised iff a committed call has the same id,
                     tool and arguments; every other one is listed for compensation;
  compensation       A3 at the splice point c: a call committed after c (at c+1 = τ too) that the
                     replay never makes is listed, none committed at c or before;
  taint_closure      I(z) = {a : z ⇝_G a} on the graph `provenance_graph` builds;
  choose_checkpoint  c* = argmax{c ∈ C : boundary(c) < τ}: clean, and the latest such;
  restore            restoring a checkpoint of a recorded session gives R_boundary in every
                     layer, the cache included, with the checkpoint's prompt manifest and offset.

Inputs are symbolic within small bounds (each entry's `bounds`: at most 3 steps, 3 spans,
3 artifacts, 4 checkpoints, 2 recorded observations, 2 calls a ledger). A function that raises
on an input that meets its precondition is a counterexample (never a traceback). Each contract
is also checked on a deliberately broken copy of its function, which must come back as a counterexample: a
contract that no broken copy can fail would prove nothing (non-vacuity, like the refuted
statements of the Z3 obligations).

Budget: a cap on the paths CrossHair explores per contract (`CodeProof.paths`; deterministic:
CrossHair's search is seeded) and a ceiling of CPU seconds per contract (`budget`, default 60)
that a run on a slow machine may hit first; the result says which one stopped it. Results:

  exhausted          CrossHair explored every path through the function and its contract
                     under the preconditions: for inputs within the bounds, a proof;
  no counterexample  the budget ran out first: every path explored held, not all were explored;
  counterexample     an input within the bounds breaks the contract (it is reported);
  vacuous, error     no input met the preconditions, or the contract could not be read.

Only the first two are acceptable for the real functions; only the third for a broken copy.
"""

from __future__ import annotations

import json

import collections
import time
from dataclasses import dataclass, replace
from typing import Callable

from unsee.model.plan import (Checkpoint, Witness, choose_checkpoint, compensation, locate_source, plan_forget,
                              provenance_graph, replay_tools, suffix_closure, taint_closure)
from unsee.model.replay import restore, run, sanitize
from unsee.model.state import Artifact, Config, LedgerEntry, Observation, Part, State

EXHAUSTED, NO_COUNTEREXAMPLE, COUNTEREXAMPLE = "exhausted", "no counterexample", "counterexample"
VACUOUS, ERROR = "vacuous", "error"
BUDGET_SECONDS = 60.0  # per contract: a ceiling; the path caps are the budget a normal run uses
PER_PATH_SECONDS = 10.0

Z = "z"  # the forget target
NAMES = (Z, "a")  # source ids by index: 0 is the target


# --- τ: first_entry (Algorithm 1, lines 1–2) ---------------------------------------------

ABSENT, ENTERS, HIDDEN, SHOWN = 0, 1, 2, 3  # what step t's observation holds of z


def entry_stream(entries: tuple[int, ...]) -> tuple[Observation, ...]:
    """One user turn per step; ENTERS adds a span of z that F reads, HIDDEN a span of z that
    exists only in the world without another target (F does not read it), SHOWN a span of another
    source that stands instead of z (F reads it only in the world without z)."""
    out = []
    for t, e in enumerate(entries, 1):
        parts = (Part(f"u{t}", f"turn {t}"),)
        if e == ENTERS:
            parts += (Part(Z, "alice lives at elm street"),)
        elif e == HIDDEN:
            parts += (Part(Z, "alice lives at oak street", instead_of="y"),)
        elif e == SHOWN:
            parts += (Part(f"u{t}", "a file of 12 bytes", instead_of=Z),)
        out.append(Observation("user", parts))
    return tuple(out)


def tau_pre(entries) -> bool:
    return len(entries) <= 3 and all(e in (ABSENT, ENTERS, HIDDEN, SHOWN) for e in entries) and ENTERS in entries


def tau_post(entries, tau) -> bool:
    """τ ≥ 1 is the first step whose observation removing z changes: z ∈ o_τ (read by F) or a span
    that stands instead of z, and neither at any t < τ (a span of z that F does not read, shown only
    in a world without another target, is not an entry: o_t ∖ z reads the same)."""
    changed = (ENTERS, SHOWN)
    return 1 <= tau <= len(entries) and entries[tau - 1] in changed and not set(changed) & set(entries[:tau - 1])


def located_tau(entries: tuple[int, ...]) -> int:
    """
    pre: tau_pre(entries)
    post: tau_post(entries, __return__)
    """
    return plan_forget(run(entry_stream(entries)), (Z,)).tau


def broken_first_entry(s, carriers, sources):
    """first_entry taking the last entry of z instead of the first."""
    by_id = {a.id: a for a in s.state.artifacts}
    last = max((by_id[a] for a in carriers), key=lambda a: a.turn)
    return last.turn, Witness(last.turn, min(last.source_ids), "entered")


def located_tau_broken(entries: tuple[int, ...]) -> int:
    """
    pre: tau_pre(entries)
    post: tau_post(entries, __return__)
    """
    s = run(entry_stream(entries))
    return broken_first_entry(s, locate_source(s, Z), (Z,))[0]


# --- o \ {z}: sanitize (line 7) ----------------------------------------------------------

def spans(sources, instead) -> tuple[Part, ...]:
    """Span k comes from NAMES[sources[k]]; instead[k] ≥ 0 makes it stand instead of NAMES[instead[k]]
    (another source than its own)."""
    return tuple(Part(NAMES[s], f"span {k}", None if i < 0 else NAMES[i]) for k, (s, i) in enumerate(zip(sources, instead)))


def sanitize_pre(sources, instead, reply) -> bool:
    return (len(sources) <= 3 and len(instead) == len(sources) and all(0 <= s < len(NAMES) for s in sources)
            and all(-1 <= i < len(NAMES) and i != s for s, i in zip(sources, instead)) and reply >= 0)


def sanitize_post(sources, instead, reply, compact, o) -> bool:
    """o \\ {z}: no span of z is left (read now or shown later); every other span is kept verbatim
    and in order, a span that stood instead of z is now shown; kind, reply, tool and compaction
    are unchanged (A2: õ_t = o^{-z}_t)."""
    kept = [k for k, s in enumerate(sources) if NAMES[s] != Z]
    return (Z not in {p.source for p in o.parts}
            and [(p.source, p.text) for p in o.parts] == [(NAMES[sources[k]], f"span {k}") for k in kept]
            and [p.instead_of for p in o.parts] == [None if instead[k] < 0 or NAMES[instead[k]] == Z
                                                     else NAMES[instead[k]] for k in kept]
            and (o.kind, o.reply, o.tool, o.compact) == ("tool", reply, None, compact))


def sanitized(sources: tuple[int, ...], instead: tuple[int, ...], reply: int, compact: bool) -> Observation:
    """
    pre: sanitize_pre(sources, instead, reply)
    post: sanitize_post(sources, instead, reply, compact, __return__)
    """
    return sanitize(Observation("tool", spans(sources, instead), reply=reply, compact=compact), (Z,))


def broken_sanitize(obs: Observation, sources) -> Observation:
    """sanitize removing only the spans of z that F reads now: a span of z that stood instead of
    another target stays in the log (and would enter once that target is forgotten)."""
    z = frozenset(sources)
    parts = tuple(replace(p, instead_of=None) if p.instead_of in z else p
                  for p in obs.parts if p.source not in z or p.instead_of is not None)
    return replace(obs, parts=parts)


def sanitized_broken(sources: tuple[int, ...], instead: tuple[int, ...], reply: int, compact: bool) -> Observation:
    """
    pre: sanitize_pre(sources, instead, reply)
    post: sanitize_post(sources, instead, reply, compact, __return__)
    """
    return broken_sanitize(Observation("tool", spans(sources, instead), reply=reply, compact=compact), (Z,))


def withheld(sources: tuple[int, ...], instead: tuple[int, ...], reply: int, compact: bool) -> Observation:
    """
    pre: sanitize_pre(sources, instead, reply)
    post: sanitize_post(sources, instead, reply, compact, __return__)
    """
    return Observation("tool", spans(sources, instead), reply=reply, compact=compact).without(frozenset({Z}))


def withheld_broken(sources: tuple[int, ...], instead: tuple[int, ...], reply: int, compact: bool) -> Observation:
    """
    pre: sanitize_pre(sources, instead, reply)
    post: sanitize_post(sources, instead, reply, compact, __return__)
    """
    return broken_sanitize(Observation("tool", spans(sources, instead), reply=reply, compact=compact), (Z,))


# --- A3: replay_tools (line 8) -----------------------------------------------------------

TOOL_NAMES = ("send", "post")


def ledger(calls) -> tuple[LedgerEntry, ...]:
    """Call k = (id, tool, argument) as a committed or counterfactual entry c{id}, TOOL_NAMES[tool], with
    the JSON arguments [argument]."""
    return tuple(LedgerEntry(f"c{i}", TOOL_NAMES[k], json.dumps([a]), 1) for i, k, a in calls)


def tools_pre(world, effects) -> bool:
    ok = lambda calls: (len(calls) <= 2 and len({c[0] for c in calls}) == len(calls)  # noqa: E731
                        and all(0 <= i < 3 and 0 <= k < 2 and 0 <= a < 2 for i, k, a in calls))
    return ok(world) and ok(effects)


def tools_post(world, effects, report) -> bool:
    """A3: a counterfactual call is recognised (never fired again) iff a committed call has the same
    id, tool and arguments; every other call is listed for compensation, in order, with the committed
    arguments under its id (if any) and the reason "not committed" or "arguments differ"."""
    dedup, differs = report
    committed = {c[0]: c for c in world}
    same = [c for c in effects if committed.get(c[0]) == c]
    rest = [c for c in effects if committed.get(c[0]) != c]
    return (list(dedup) == [f"c{c[0]}" for c in same]
            and [(d["call_id"], d["tool"], d["args"], d["committed"], d["reason"]) for d in differs]
            == [(f"c{i}", TOOL_NAMES[k], [a], None if i not in committed else [committed[i][2]],
                 "not committed" if i not in committed else "arguments differ") for i, k, a in rest])


def recognised(world: tuple[tuple[int, int, int], ...], effects: tuple[tuple[int, int, int], ...]):
    """
    pre: tools_pre(world, effects)
    post: tools_post(world, effects, __return__)
    """
    return replay_tools(ledger(world), ledger(effects))


def broken_replay_tools(world, effects):
    """replay_tools recognising a call by its id alone: a call with other arguments (or another tool)
    under a committed id is taken as already fired, and nothing is listed for compensation."""
    committed = {e.call_id for e in world}
    return ([e.call_id for e in effects if e.call_id in committed],
            [{"call_id": e.call_id, "tool": e.tool, "args": json.loads(e.args), "committed": None,
              "reason": "not committed"}
             for e in effects if e.call_id not in committed])


def recognised_broken(world: tuple[tuple[int, int, int], ...], effects: tuple[tuple[int, int, int], ...]):
    """
    pre: tools_pre(world, effects)
    post: tools_post(world, effects, __return__)
    """
    return broken_replay_tools(ledger(world), ledger(effects))


# --- A3 at its boundary: compensation (line 8's report) -----------------------------------

def committed_at(calls) -> tuple[LedgerEntry, ...]:
    """Call k = (id, argument, turn) as a committed send c{id} with the JSON arguments [argument]."""
    return tuple(LedgerEntry(f"c{i}", "send", json.dumps([a]), t) for i, a, t in calls)


def compensation_pre(world, effects, c) -> bool:
    ok = lambda calls, n: (len(calls) <= 2 and len({x[0] for x in calls}) == len(calls)  # noqa: E731
                           and all(len(x) == n and 0 <= x[0] < 3 and 0 <= x[1] < 2 for x in calls))
    return ok(world, 3) and ok(effects, 2) and all(1 <= x[2] <= 4 for x in world) and 0 <= c <= 3


def compensation_post(world, effects, c, report) -> bool:
    """A3 at the splice point c: every call committed after c (turn > c: the one at c+1, τ under the
    every policy, included) whose id the replay never makes is listed as "counterfactual makes no
    such call", with its committed arguments; no call committed at c or before is; and the replay's
    own calls are recognised iff committed with the same id and arguments."""
    dedup, listed = report
    made = {i for i, _ in effects}
    committed = {i: a for i, a, _ in world}
    gone = [(d["call_id"], d["committed"]) for d in listed if d["reason"] == "counterfactual makes no such call"]
    return (list(dedup) == [f"c{i}" for i, a in effects if committed.get(i) == a]
            and gone == [(f"c{i}", [a]) for i, a, t in world if t > c and i not in made])


def compensated(world: tuple[tuple[int, int, int], ...], effects: tuple[tuple[int, int], ...], c: int):
    """
    pre: compensation_pre(world, effects, c)
    post: compensation_post(world, effects, c, __return__)
    """
    return compensation(committed_at(world), committed_at(tuple((i, a, c + 1) for i, a in effects)), c)


def broken_compensation(world, effects, boundary: int):
    """compensation listing the calls only the world made from c+2 on: a call committed at τ = c+1
    that the replay never makes goes unreported (an off-by-one at the boundary)."""
    dedup, comp = replay_tools(world, effects)
    made = {e.call_id for e in effects}
    return dedup, comp + [{"call_id": e.call_id, "tool": e.tool, "args": None, "committed": json.loads(e.args),
                           "reason": "counterfactual makes no such call"}
                          for e in world if e.turn > boundary + 1 and e.call_id not in made]


def compensated_broken(world: tuple[tuple[int, int, int], ...], effects: tuple[tuple[int, int], ...], c: int):
    """
    pre: compensation_pre(world, effects, c)
    post: compensation_post(world, effects, c, __return__)
    """
    return broken_compensation(committed_at(world), committed_at(tuple((i, a, c + 1) for i, a in effects)), c)


# --- I(z): taint_closure (line 3) on small graphs ----------------------------------------

def graph_state(edges, seeds) -> State:
    """Artifact i is a{i}; edges[i][j] (j < i) records a data-flow edge a{j} → a{i}; seeds[i]
    makes a{i} a source of z. Parents always precede their children, as in a recorded session."""
    arts = []
    for i, row in enumerate(edges):
        parents = tuple(f"a{j}" for j in range(i) if row[j])
        arts.append(Artifact(f"a{i}", "block", parents, frozenset({Z}) if seeds[i] else frozenset(), None, i))
    return State(Config(), artifacts=tuple(arts))


def closure_pre(edges, seeds) -> bool:
    """z's source artifacts are recorded observation fields: inputs, with no parents."""
    return (len(edges) <= 3 and len(seeds) == len(edges) and all(len(row) == i for i, row in enumerate(edges))
            and not any(seeds[i] and any(row) for i, row in enumerate(edges)))


def closure_post(edges, seeds, closure) -> bool:
    """I(z) = {a : z ⇝_G a}, the least set that holds the sources and is closed under the recorded
    edges: it holds every source, every child of a member is a member, and (parents precede
    children) every other member has a parent that is a member; no other artifact is in it."""
    n = len(edges)
    inside = [f"a{i}" in closure for i in range(n)]
    return (set(closure) <= {f"a{i}" for i in range(n)}
            and all(inside[i] for i in range(n) if seeds[i])
            and all(inside[i] for i in range(n) for j in range(i) if edges[i][j] and inside[j])
            and all(seeds[i] or any(edges[i][j] and inside[j] for j in range(i)) for i in range(n) if inside[i]))


def seeds_of(seeds) -> list[str]:
    return [f"a{i}" for i in range(len(seeds)) if seeds[i]]


def tainted(edges: tuple[tuple[bool, ...], ...], seeds: tuple[bool, ...]) -> set[str]:
    """
    pre: closure_pre(edges, seeds)
    post: closure_post(edges, seeds, __return__)
    """
    return taint_closure(provenance_graph(graph_state(edges, seeds)), seeds_of(seeds))


def broken_taint_closure(graph, source_artifacts) -> set[str]:
    """taint_closure following one edge only: the sources and their direct children."""
    out: set[str] = set()
    for a in source_artifacts:
        out.add(a)
        out |= set(graph.successors(a))
    return out


def tainted_broken(edges: tuple[tuple[bool, ...], ...], seeds: tuple[bool, ...]) -> set[str]:
    """
    pre: closure_pre(edges, seeds)
    post: closure_post(edges, seeds, __return__)
    """
    return broken_taint_closure(provenance_graph(graph_state(edges, seeds)), seeds_of(seeds))




def tainted_one_pass(edges: tuple[tuple[bool, ...], ...], seeds: tuple[bool, ...]) -> set[str]:
    """
    pre: closure_pre(edges, seeds)
    post: closure_post(edges, seeds, __return__)
    """
    return suffix_closure(graph_state(edges, seeds).artifacts, seeds_of(seeds))


def broken_suffix_closure(artifacts, source_artifacts) -> set[str]:
    """the one-pass closure starting one artifact late: a child right after the first source is missed."""
    out = set(source_artifacts)
    first = min((i for i, a in enumerate(artifacts) if a.id in out), default=len(artifacts))
    for a in artifacts[first + 2:]:
        if a.id not in out and any(p in out for p in a.parents):
            out.add(a.id)
    return out


def tainted_one_pass_broken(edges: tuple[tuple[bool, ...], ...], seeds: tuple[bool, ...]) -> set[str]:
    """
    pre: closure_pre(edges, seeds)
    post: closure_post(edges, seeds, __return__)
    """
    return broken_suffix_closure(graph_state(edges, seeds).artifacts, seeds_of(seeds))

# --- c*: choose_checkpoint (line 4) ------------------------------------------------------

def checkpoints_at(boundaries) -> tuple[Checkpoint, ...]:
    return tuple(Checkpoint(b, 0, "kv:session", "env", ()) for b in boundaries)


def checkpoint_pre(boundaries, tau) -> bool:
    return tau >= 1 and len(boundaries) <= 4 and all(b >= 0 for b in boundaries) and any(b < tau for b in boundaries)


def checkpoint_post(boundaries, tau, chosen) -> bool:
    """c* = argmax{c ∈ C : boundary(c) < τ}: a checkpoint of C at a boundary ≤ τ−1 (the clean
    prefix, Lemma 1) with no checkpoint of C between it and τ (so τ−1 itself when C has it)."""
    return chosen in boundaries and chosen <= tau - 1 and not any(chosen < b <= tau - 1 for b in boundaries)


def chosen_boundary(boundaries: tuple[int, ...], tau: int) -> int:
    """
    pre: checkpoint_pre(boundaries, tau)
    post: checkpoint_post(boundaries, tau, __return__)
    """
    return choose_checkpoint(checkpoints_at(boundaries), tau).boundary


def broken_choose_checkpoint(checkpoints, tau: int) -> Checkpoint:
    """choose_checkpoint admitting a checkpoint at τ itself (after τ−1: z is in its state)."""
    return max((c for c in checkpoints if c.boundary <= tau), key=lambda c: c.boundary)


def chosen_boundary_broken(boundaries: tuple[int, ...], tau: int) -> int:
    """
    pre: checkpoint_pre(boundaries, tau)
    post: checkpoint_post(boundaries, tau, __return__)
    """
    return broken_choose_checkpoint(checkpoints_at(boundaries), tau).boundary


# --- R_{τ−1}: restore (line 5) -----------------------------------------------------------

TEMPLATES = (  # what a recorded observation may be: each exercises a different layer
    Observation("user", (Part("u", "plan the trip"),), reply=1),  # a decoded reply
    Observation("memory", (Part(Z, "alice lives at elm street"),)),  # a memory record
    Observation("user", (Part("u", "send it"),), tool="send"),  # a pending plan, committed next step
    Observation("user", (Part("u", "summarize"),), reply=1, compact=True),  # a rebuilt context
)


def restore_pre(shape) -> bool:
    return len(shape) <= 2 and all(0 <= k < len(TEMPLATES) for k in shape)


def restore_post(recorded) -> bool:
    """Restoring checkpoint c gives R_boundary(c) in every layer (Theorem 1's base: R̃_{τ−1} =
    R_{τ−1}), the cache included (cropping is restoring), and the context that c's prompt
    manifest and token offset name."""
    s, restored = recorded
    return len(restored) == len(s.checkpoints) and all(
        r == s.states[c.boundary] and tuple(b.artifact for b in r.blocks) == c.manifest and len(r.tokens) == c.token_offset
        for c, r in zip(s.checkpoints, restored))


def restored_states(shape: tuple[int, ...]):
    """
    pre: restore_pre(shape)
    post: restore_post(__return__)
    """
    s = run([TEMPLATES[k] for k in shape])
    return s, tuple(restore(s, c) for c in s.checkpoints)


def broken_restore(s, c: Checkpoint) -> State:
    """restore whose crop keeps the cache one manifest block short, the tokens right, and without
    restore's own checks (the non-cache layers against R_boundary, the cache's length against
    the context's): only the contract can see it."""
    stored = s.states[c.boundary]
    live = s.state
    env = dict(s.snapshots)[c.env_snapshot]
    if s.lm.resident(live.kv) and tuple(b.artifact for b in live.blocks[: len(c.manifest)]) == c.manifest:
        short = live.blocks[len(c.manifest) - 1].start if c.manifest else 0
        tokens, kv = live.tokens[: c.token_offset], s.lm.crop(live.kv, short)
    else:
        tokens = stored.tokens
        kv = s.lm.rebuild(tokens, stored.blocks)
    return replace(stored, tokens=tokens, kv=kv, env=env)


def restored_states_broken(shape: tuple[int, ...]):
    """
    pre: restore_pre(shape)
    post: restore_post(__return__)
    """
    s = run([TEMPLATES[k] for k in shape])
    return s, tuple(broken_restore(s, c) for c in s.checkpoints)


# --- the table and the runner ------------------------------------------------------------

@dataclass(frozen=True)
class CodeProof:
    name: str  # the function under contract
    contract: str
    bounds: str
    check: Callable  # the real function under its contract
    broken: Callable  # a deliberately broken copy under the same contract
    mutation: str
    paths: int  # the path cap: the deterministic budget
    warm: tuple = ()  # one input that meets the precondition: called concretely before CrossHair runs


PROOFS = (
    CodeProof("unsee.model.plan.first_entry", tau_post.__doc__,
              "every recorded stream of ≤ 3 steps, z absent, entering, hidden or replaced by a span standing instead "
              "of it at each (through run, plan_forget)",
              located_tau, located_tau_broken, broken_first_entry.__doc__, 200,
              ((ABSENT, ENTERS),)),
    CodeProof("unsee.model.replay.sanitize", sanitize_post.__doc__,
              "≤ 3 spans, each from z or another source, standing instead of the other or of none; "
              "any reply length, compact or not",
              sanitized, sanitized_broken, broken_sanitize.__doc__, 250, ((0, 1), (-1, 0), 0, False)),
    CodeProof("unsee.model.state.Observation.without", sanitize_post.__doc__,
              "≤ 3 spans, each from z or another source, standing instead of the other or of none; "
              "any reply length, compact or not; Z = {z}",
              withheld, withheld_broken, broken_sanitize.__doc__, 250, ((0, 1), (-1, 0), 0, False)),
    CodeProof("unsee.model.plan.replay_tools", tools_post.__doc__,
              "≤ 2 committed and ≤ 2 counterfactual calls, ids < 3 (distinct within each), 2 tools, 2 arguments",
              recognised, recognised_broken, broken_replay_tools.__doc__, 150,
              (((0, 0, 0),), ((0, 0, 1),))),
    CodeProof("unsee.model.plan.compensation", compensation_post.__doc__,
              "≤ 2 committed calls at turns 1..4 and ≤ 2 replayed calls, ids < 3 (distinct within each), 2 "
              "arguments, every splice point c ≤ 3",
              compensated, compensated_broken, broken_compensation.__doc__, 150, (((0, 0, 1),), (), 0)),
    CodeProof("unsee.model.plan.taint_closure", closure_post.__doc__,
              "every DAG on ≤ 3 artifacts, every set of parentless sources (through provenance_graph)",
              tainted, tainted_broken, broken_taint_closure.__doc__, 150,
              (((), (True,)), (True, False))),
    CodeProof("unsee.model.plan.suffix_closure", closure_post.__doc__,
              "every DAG on ≤ 3 artifacts, every set of parentless sources (the one pass B7 runs)",
              tainted_one_pass, tainted_one_pass_broken, broken_suffix_closure.__doc__, 150,
              (((), (True,)), (True, False))),
    CodeProof("unsee.model.plan.choose_checkpoint", checkpoint_post.__doc__,
              "≤ 4 checkpoints at any boundaries ≥ 0, any τ ≥ 1 with one before it",
              chosen_boundary, chosen_boundary_broken, broken_choose_checkpoint.__doc__, 150,
              ((0, 1), 2)),
    CodeProof("unsee.model.replay.restore", restore_post.__doc__,
              "every checkpoint of every recorded session of ≤ 2 observations (reply, memory, send, compact)",
              restored_states, restored_states_broken, broken_restore.__doc__, 100, ((0,),)),
)


@dataclass(frozen=True)
class Outcome:
    result: str
    paths: int
    seconds: float
    stopped: str  # "exhausted", "path cap", "time budget", or "counterexample"
    counterexample: str | None = None

    def to_json(self) -> dict:
        d = {"result": self.result, "paths": self.paths, "stopped": self.stopped, "seconds": round(self.seconds, 3)}
        if self.counterexample:
            d["counterexample"] = self.counterexample
        return d


@dataclass(frozen=True)
class CodeResult:
    name: str
    contract: str
    bounds: str
    path_cap: int
    real: Outcome
    mutation: str
    broken: Outcome

    @property
    def ok(self) -> bool:
        return self.real.result in (EXHAUSTED, NO_COUNTEREXAMPLE) and self.broken.result == COUNTEREXAMPLE

    def to_json(self) -> dict:
        return {"name": self.name, "contract": " ".join(self.contract.split()), "bounds": self.bounds,
                "path_cap": self.path_cap or None, **self.real.to_json(),
                "broken": {"mutation": " ".join(self.mutation.split()), **self.broken.to_json()}}


def shorten(message: str, limit: int = 200) -> str:
    """CrossHair's message names the call and what it returned; a recorded session is long."""
    head, sep, ret = message.partition(" (which returns ")
    if sep and len(ret) > limit:
        return f"{head}{sep}{ret[:limit]} …)"
    return message


def analyze(fn: Callable, paths: int | None, budget: float) -> Outcome:
    """Run CrossHair on one function's PEP 316 contract; paths=None leaves only the time budget."""
    from unittest import mock

    import crosshair.core_and_libs  # noqa: F401  (registers CrossHair's models of the standard library)
    from crosshair import core
    from crosshair.core import analyze_function, run_checkables
    from crosshair.options import AnalysisKind, AnalysisOptionSet
    from crosshair.statespace import MessageType

    stats: collections.Counter = collections.Counter()
    options = AnalysisOptionSet(analysis_kind=[AnalysisKind.PEP316], max_iterations=paths or 10**9,
                                per_condition_timeout=budget, per_path_timeout=min(PER_PATH_SECONDS, budget),
                                max_uninteresting_iterations=0, stats=stats)
    t0 = time.perf_counter()
    # The options are all given here; CrossHair's reader of option comments in the source cannot
    # open the namespace package `unsee` of an editable install, so it is not consulted.
    with mock.patch.object(core, "collect_options", lambda thing: AnalysisOptionSet()):
        messages = run_checkables(analyze_function(fn, options))
    seconds = time.perf_counter() - t0
    n = stats["num_paths"]
    kinds = {m.state for m in messages}
    failed = [m for m in messages if m.state in (MessageType.POST_FAIL, MessageType.POST_ERR, MessageType.EXEC_ERR)]
    if failed:
        return Outcome(COUNTEREXAMPLE, n, seconds, "counterexample", shorten(failed[0].message))
    if MessageType.PRE_UNSAT in kinds:
        return Outcome(VACUOUS, n, seconds, "precondition never met")
    if kinds - {MessageType.CONFIRMED, MessageType.CANNOT_CONFIRM} or not messages:
        return Outcome(ERROR, n, seconds, "no analysis", "; ".join(m.message for m in messages) or "no contract found")
    if kinds == {MessageType.CONFIRMED}:
        return Outcome(EXHAUSTED, n, seconds, "exhausted")
    return Outcome(NO_COUNTEREXAMPLE, n, seconds, "path cap" if paths and n >= paths else "time budget")


def warm_up() -> None:
    """One concrete call of each checked function before CrossHair runs: networkx compiles its
    dispatch wrappers on first use, which CrossHair's patched builtins would otherwise interrupt.
    A function that raises here is not this warm-up's finding: its own entry calls it again
    (`concrete_failure`) and reports the exception as its counterexample."""
    for proof in PROOFS:
        try:
            proof.check(*proof.warm)
        except Exception:  # noqa: BLE001  (reported by the entry's own analysis, see above)
            pass


def concrete_failure(fn: Callable, args: tuple) -> Outcome | None:
    """The function called on one input that meets its precondition: if it raises, that input is a
    counterexample (a function that raises never breaks the command with a traceback)."""
    t0 = time.perf_counter()
    try:
        fn(*args)
    except Exception as e:  # noqa: BLE001  (any exception of the code under check is a finding)
        return Outcome(COUNTEREXAMPLE, 1, time.perf_counter() - t0, "counterexample",
                       shorten(f"raised {type(e).__name__}: {e} when calling {fn.__name__}{args!r}"))
    return None


def analyze_entry(index: int, which: str, budget: float = BUDGET_SECONDS, paths: int | None = None) -> Outcome:
    """One half of PROOFS[index]: "real" (the function) or "broken" (its broken copy). `paths`
    overrides the entry's cap (0: no cap, only the time budget). An exception of the function is a
    counterexample; one of CrossHair itself is an error, reported, never raised."""
    proof = PROOFS[index]
    fn = proof.check if which == "real" else proof.broken
    warm_up()
    failed = concrete_failure(fn, proof.warm)
    if failed is not None:
        return failed
    cap = proof.paths if paths is None else (paths or None)
    t0 = time.perf_counter()
    try:
        return analyze(fn, cap, budget)
    except Exception as e:  # noqa: BLE001  (the analysis failed: an error result, not a traceback)
        return Outcome(ERROR, 0, time.perf_counter() - t0, "no analysis", f"{type(e).__name__}: {e}")


def result_of(index: int, real: Outcome, broken: Outcome, paths: int | None = None) -> CodeResult:
    proof = PROOFS[index]
    cap = proof.paths if paths is None else paths
    return CodeResult(proof.name, proof.contract, proof.bounds, cap, real, proof.mutation, broken)


def check(index: int, budget: float = BUDGET_SECONDS, paths: int | None = None) -> CodeResult:
    """The real function and its broken copy of PROOFS[index] under one contract."""
    return result_of(index, analyze_entry(index, "real", budget, paths), analyze_entry(index, "broken", budget, paths),
                     paths)


def run_all(budget: float = BUDGET_SECONDS, paths: int | None = None, jobs: int = 1, on_result=None) -> dict:
    """Every entry of PROOFS, the halves spread over `jobs` processes (the results do not depend
    on it: each analysis is seeded and capped on its own)."""
    halves = [(i, which) for i in range(len(PROOFS)) for which in ("real", "broken")]
    done: dict[tuple[int, str], Outcome] = {}
    results: dict[int, CodeResult] = {}

    def record(key, outcome):
        done[key] = outcome
        i = key[0]
        if (i, "real") in done and (i, "broken") in done:
            results[i] = result_of(i, done[(i, "real")], done[(i, "broken")], paths)
            if on_result is not None:
                on_result(results[i])

    if jobs <= 1:
        for key in halves:
            record(key, analyze_entry(*key, budget, paths))
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        # fork where there is one: a spawned worker would re-import the caller's main module
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context(method)) as pool:
            futures = {pool.submit(analyze_entry, *key, budget, paths): key for key in halves}
            for f in as_completed(futures):
                record(futures[f], f.result())
    ordered = [results[i] for i in range(len(PROOFS))]
    return {"all_ok": all(r.ok for r in ordered), "budget_seconds": budget, "jobs": jobs,
            "functions": [r.to_json() for r in ordered]}
