"""Code ties: each Z3 obligation abstracts functions of `unsee.model`; here each abstraction is
checked against the real function on every input within a small bound.

The obligations (`unsee.proofs.obligations`) reason about symbols: F, sanitize, has_z (z is in
what F reads of o), the first entry τ, reachability, the checkpoint rule c*, restore, the
de-duplication of consequential calls. Each symbol is a function of `unsee.model`, and each
obligation assumes a few facts about it. A TIE names the function, states the facts the
obligations assume, and checks them on the real function, exhaustively on every input of a
small bound. The expected values are computed here from the paper's definitions (a few lines
each, never by calling the function under check), so a bug in the function, e.g. a
first_entry that returns the last entry, makes the tie and every obligation that rests on it
report a counterexample. A function that raises on an input is a counterexample too.

A tie is bounded (it says nothing about inputs beyond its bound); the obligation it supports
may be unbounded about the symbol. The pair says: the symbol's assumed facts hold of the code
on every small input, and the statement holds of every function with those facts.
"""

from __future__ import annotations

import json

import itertools
import time
from dataclasses import dataclass, replace
from typing import Callable
from types import MappingProxyType

EXHAUSTED, COUNTEREXAMPLE = "exhausted", "counterexample"
Z, Y, A = "z", "y", "a"  # the target, a second target, a source never forgotten


@dataclass(frozen=True)
class Tie:
    name: str
    functions: tuple[str, ...]  # the functions of unsee.model under check
    abstraction: str  # the facts the obligations assume of them
    bounds: str
    check: Callable[[], tuple[int, str | None]]  # → (inputs checked, counterexample or None)


@dataclass(frozen=True)
class TieResult:
    name: str
    functions: tuple[str, ...]
    abstraction: str
    bounds: str
    result: str
    inputs: int
    seconds: float
    counterexample: str | None = None

    @property
    def ok(self) -> bool:
        return self.result == EXHAUSTED

    def to_json(self) -> dict:
        d = {"name": self.name, "kind": "exhaustive on small inputs", "functions": list(self.functions),
             "abstraction": " ".join(self.abstraction.split()), "bounds": self.bounds, "result": self.result,
             "inputs": self.inputs, "seconds": round(self.seconds, 4)}
        if self.counterexample:
            d["counterexample"] = self.counterexample
        return d


def _call(fn, *args):
    """(value, None) or (None, the exception as text): a function that raises is a counterexample."""
    try:
        return fn(*args), None
    except Exception as e:  # noqa: BLE001  (any exception of the code under check is a finding)
        return None, f"raised {type(e).__name__}: {e}"


# --- the paper's definitions, written apart from unsee.model --------------------------------

def view(o) -> tuple:
    """What F reads of an observation: kind, the parts it shows (source, text), reply, tool,
    compaction. A part that stands instead of a source is not read while that source exists."""
    return o.kind, tuple((p.source, p.text) for p in o.parts if p.instead_of is None), o.reply, o.tool, o.compact


def minus(o, sources) -> tuple:
    """o ∖ Z as (kind, parts, reply, tool, compact): every part from a source in Z removed (read
    or not), a part that stood instead of a source in Z shown, everything else verbatim."""
    z = set(sources)
    parts = tuple((p.source, p.text, None if p.instead_of in z else p.instead_of) for p in o.parts if p.source not in z)
    return o.kind, parts, o.reply, o.tool, o.compact


def as_tuple(o) -> tuple:
    return o.kind, tuple((p.source, p.text, p.instead_of) for p in o.parts), o.reply, o.tool, o.compact


def has(o, sources) -> bool:
    """has_Z(o): removing Z changes what F reads of o (a shown part of Z, or a part instead of Z)."""
    from unsee.model.state import Observation, Part

    k, parts, r, t, c = minus(o, sources)
    return view(Observation(k, tuple(Part(*p) for p in parts), r, t, c)) != view(o)


def reach(parents: dict, seeds) -> set:
    """{a : some seed ⇝ a}: the least set holding the seeds and closed under parent → child."""
    out = set(seeds)
    while True:
        more = {a for a, ps in parents.items() if a not in out and any(p in out for p in ps)}
        if not more:
            return out
        out |= more


# --- the inputs -------------------------------------------------------------------------

def small_parts():
    """Every part over sources z, y, a, shown or standing instead of another of them."""
    from unsee.model.state import Part

    for k, (src, instead) in enumerate(itertools.product((Z, Y, A), (None, Z, Y, A))):
        if instead != src:
            yield Part(src, f"text {k}", instead)


def small_observations(max_parts: int = 3):
    from unsee.model.state import Observation

    parts = list(small_parts())
    for n in range(max_parts + 1):
        for ps in itertools.product(parts, repeat=n):
            yield Observation("tool", ps, reply=1)


PATTERNS = ("none", "z", "z hidden", "instead of z", "y")  # what one step's observation holds


def pattern_obs(t: int, pattern: str):
    from unsee.model.state import Observation, Part

    parts = (Part(A, f"turn {t}"),)
    parts += {"none": (), "z": (Part(Z, f"alice lives at elm {t}"),),
              "z hidden": (Part(Z, f"alice lives at oak {t}", instead_of=Y),),
              "instead of z": (Part(A, f"size {t}", instead_of=Z),),
              "y": (Part(Y, f"bob lives at ash {t}"),)}[pattern]
    return Observation("user", parts, reply=1)


def entry_streams(max_steps: int = 4):
    for n in range(1, max_steps + 1):
        yield from itertools.product(PATTERNS, repeat=n)


# --- the checks -------------------------------------------------------------------------

def check_without() -> tuple[int, str | None]:
    """Observation.without, sanitize and counterfactual_stream against o ∖ Z."""
    from unsee.model.replay import counterfactual_stream, sanitize

    n = 0
    for o in small_observations():
        for zs in ((Z,), (Y,), (Z, Y)):
            want = minus(o, zs)
            for name, fn in (("Observation.without", lambda: o.without(frozenset(zs))),
                             ("sanitize", lambda: sanitize(o, zs)),
                             ("counterfactual_stream", lambda: counterfactual_stream((o,), zs)[0])):
                n += 1
                got, err = _call(fn)
                if err or as_tuple(got) != want:
                    return n, f"{name}({as_tuple(o)}, {set(zs)}) = {err or as_tuple(got)}, o ∖ Z = {want}"
    return n, None


def check_first_entry() -> tuple[int, str | None]:
    """plan_forget (locate_source, first_entry): τ = min{t : has_Z(o_t)} on every stream in
    which a target enters (parts standing instead of z, or z shown only without y, included)."""
    from unsee.model.plan import plan_forget
    from unsee.model.replay import run

    n = 0
    for pats in entry_streams():
        obs = [pattern_obs(t, p) for t, p in enumerate(pats, 1)]
        for zs in ((Z,), (Z, Y)):
            if not all(any(src in o.sources for o in obs) for src in zs):
                continue  # every target must enter (a forget of a source never seen is refused)
            n += 1
            want = min(t for t, o in enumerate(obs, 1) if has(o, zs))
            got, err = _call(lambda: plan_forget(run(obs), zs).tau)
            if err or got != want:
                return n, f"stream {list(pats)}, forget {list(zs)}: τ = {err or got}, first t with has_Z(o_t) = {want}"
    return n, None


def dag_states(max_nodes: int = 4):
    """Every DAG on ≤ max_nodes artifacts (parents before children) and every set of parentless
    sources: (state, edges, seeds)."""
    from unsee.proofs.code import graph_state

    for n in range(1, max_nodes + 1):
        slots = [(i, j) for i in range(n) for j in range(i)]
        for bits in itertools.product((False, True), repeat=len(slots)):
            on = dict(zip(slots, bits))
            edges = tuple(tuple(on[(i, j)] for j in range(i)) for i in range(n))
            roots = [i for i in range(n) if not any(edges[i])]
            for k in range(1, len(roots) + 1):
                for chosen in itertools.combinations(roots, k):
                    seeds = tuple(i in chosen for i in range(n))
                    yield graph_state(edges, seeds), edges, seeds


def check_closure() -> tuple[int, str | None]:
    """taint_closure (on provenance_graph) and suffix_closure against reachability."""
    from unsee.model.plan import provenance_graph, suffix_closure, taint_closure

    n = 0
    for state, edges, seeds in dag_states():
        src = [f"a{i}" for i in range(len(seeds)) if seeds[i]]
        want = reach({a.id: a.parents for a in state.artifacts}, src)
        for name, fn in (("taint_closure", lambda: taint_closure(provenance_graph(state), src)),
                         ("suffix_closure", lambda: suffix_closure(state.artifacts, src))):
            n += 1
            got, err = _call(fn)
            if err or set(got) != want:
                return n, f"{name} on edges {edges}, sources {src}: {err or sorted(got)}, z ⇝ a gives {sorted(want)}"
    return n, None




def recorded_sessions(max_steps: int = 3):
    """Every session of ≤ max_steps observations drawn from code.TEMPLATES (a reply, a memory
    record of z, a consequential call, a compaction), under both checkpoint policies that keep
    more than R_0."""
    from unsee.model.replay import run
    from unsee.proofs.code import TEMPLATES as templates

    for n in range(1, max_steps + 1):
        for shape in itertools.product(range(len(templates)), repeat=n):
            for policy in ("every", "events"):
                yield shape, policy, run([templates[k] for k in shape], policy=policy)


def check_boundary() -> tuple[int, str | None]:
    """The graphs `step` records are conservative (Lemma 2 (ii)'s chain edges): for every
    observation field f and every generated artifact a, f ⇝ a ⇔ turn(a) ≥ turn(f)."""
    n = 0
    for shape, policy, s in recorded_sessions():
        parents = {a.id: a.parents for a in s.state.artifacts}
        fields = [a for a in s.state.artifacts if not a.parents]
        made = [a for a in s.state.artifacts if a.parents]
        for f in fields:
            n += 1
            closure = reach(parents, [f.id])
            wrong = [a.id for a in made if (a.id in closure) != (a.turn >= f.turn)]
            if wrong:
                return n, f"session {shape} ({policy}): field {f.id} of turn {f.turn}: {wrong} break z ⇝ a ⇔ turn(a) ≥ τ"
    return n, None


def check_checkpoint() -> tuple[int, str | None]:
    """choose_checkpoint = argmax{c ∈ C : boundary(c) < τ}, for every C ⊆ {0..5} ∋ 0 (in either
    order) and every τ ≤ 6."""
    from unsee.model.plan import choose_checkpoint
    from unsee.proofs.code import checkpoints_at

    n = 0
    for rest in itertools.chain.from_iterable(itertools.combinations(range(1, 6), k) for k in range(6)):
        for bs in ((0,) + rest, tuple(reversed((0,) + rest))):
            for tau in range(1, 7):
                n += 1
                want = max(b for b in bs if b < tau)
                got, err = _call(lambda: choose_checkpoint(checkpoints_at(bs), tau).boundary)
                if err or got != want:
                    return n, f"C = {list(bs)}, τ = {tau}: c* = {err or got}, max{{c < τ}} = {want}"
    return n, None


def check_restore() -> tuple[int, str | None]:
    """restore(c) = R_boundary(c), every layer and the cache, at every checkpoint of every session."""
    from unsee.model.replay import restore

    n = 0
    for shape, policy, s in recorded_sessions():
        for c in s.checkpoints:
            n += 1
            got, err = _call(restore, s, c)
            if err or got != s.states[c.boundary]:
                diff = err or [f for f in ("tokens", "kv", "blocks", "memory", "env", "ledger", "artifacts", "plan")
                               if getattr(got, f) != getattr(s.states[c.boundary], f)]
                return n, f"session {shape} ({policy}), checkpoint at {c.boundary}: restore ≠ R_{c.boundary} ({diff})"
    return n, None


def check_replay() -> tuple[int, str | None]:
    """selective_replay feeds F õ_t = o_t ∖ Z for t = c*+1..T, one invocation each, and its result
    is the twin's (the run on o ∖ Z): on every entry stream of ≤ 3 steps."""
    from unsee.model.replay import run, selective_replay

    n = 0
    for pats in entry_streams(3):
        obs = [pattern_obs(t, p) for t, p in enumerate(pats, 1)]
        if not any(Z in o.sources for o in obs):
            continue
        n += 1
        got, err = _call(selective_replay, run(obs), (Z,))
        if err:
            return n, f"stream {list(pats)}: {err}"
        new, rc = got
        want = [minus(o, (Z,)) for o in obs[rc.checkpoint:]]
        if [as_tuple(o) for o in rc.replayed] != want or rc.transitions != len(obs) - rc.checkpoint:
            return n, f"stream {list(pats)}: replayed {[as_tuple(o) for o in rc.replayed]} in {rc.transitions} " \
                      f"transitions, o_t ∖ z from c* = {rc.checkpoint} is {want}"
        from unsee.model.state import Observation, Part
        twin = run([Observation(k, tuple(Part(*p) for p in ps), r, t, c) for k, ps, r, t, c in
                    (minus(o, (Z,)) for o in obs)])
        if new.state != twin.state:
            return n, f"stream {list(pats)}: the replay's R_T differs from the twin's"
    return n, None


def check_step() -> tuple[int, str | None]:
    """F reads only the view of o: step(R, o) = step(R, o') whenever view(o) = view(o'), and the
    same call twice gives the same state (A1), for every R of a recorded session of ≤ 2 steps
    and every small observation shown with and without a hidden part."""
    from unsee.model.state import Observation, Part, step
    from unsee.proofs.code import TEMPLATES as templates

    n = 0
    for shape, policy, s in recorded_sessions(2):
        if policy != "every":
            continue
        for o in templates:
            hidden = replace(o, parts=o.parts + (Part(Z, "alice lives at oak", instead_of=Y),))
            n += 1
            a, err = _call(step, s.state, o)
            b, err2 = _call(step, s.state, o)
            c, err3 = _call(step, s.state, hidden)
            if err or err2 or err3 or not (a == b == c):
                return n, f"R after {shape}, o = {as_tuple(o)}: {err or err2 or err3 or 'step differs'}"
    return n, None


def expected_tools(world, effects) -> tuple[list, list]:
    """What replay_tools must return, from A3's wording: (the ids recognised as committed, the list)."""
    by_id = {w.call_id: w for w in world}
    dedup = [e.call_id for e in effects if (e.call_id, e.tool, e.args) in {(w.call_id, w.tool, w.args) for w in world}]
    listed = [{"call_id": e.call_id, "tool": e.tool, "args": json.loads(e.args),
               "committed": None if e.call_id not in by_id else json.loads(by_id[e.call_id].args),
               "reason": "not committed" if e.call_id not in by_id else "arguments differ"}
              for e in effects if e.call_id not in dedup]
    return dedup, listed


def ledgers(universe, most: int = 2):
    """Every list of ≤ `most` entries of `universe` with distinct call ids, in every order."""
    return [ls for k in range(most + 1) for ls in itertools.permutations(universe, k)
            if len({e.call_id for e in ls}) == len(ls)]


def check_replay_tools() -> tuple[int, str | None]:
    """replay_tools (A3): a counterfactual call is recognised iff a committed call has the same
    id, tool and arguments; every other one is listed for compensation with its reason and the
    committed arguments. Every ledger of ≤ 2 calls (distinct ids) against every list of ≤ 2."""
    from unsee.model.plan import replay_tools
    from unsee.model.state import LedgerEntry

    lists = ledgers([LedgerEntry(cid, tool, args, 1) for cid in ("c1", "c2") for tool in ("send", "post")
                     for args in ("[0,1]", "[1,1]")])
    n = 0
    for world in lists:
        for effects in lists:
            n += 1
            want = expected_tools(world, effects)
            got, err = _call(replay_tools, tuple(world), tuple(effects))
            if err or (list(got[0]), list(got[1])) != want:
                return n, f"committed {world}, counterfactual {effects}: {err or got}, " \
                          f"expected recognised {want[0]}, listed {want[1]}"
    return n, None


def check_compensation() -> tuple[int, str | None]:
    """compensation (A3 at its boundary): replay_tools' list, then every call committed after the
    splice point c (turn > c: at c+1, which is τ when c = τ−1, included) that the replay never
    makes; a call committed at c or before is the prefix's, never listed. Every ledger of ≤ 2
    calls committed at turns 1..3 against every replay of ≤ 2 calls, every c in 0..3."""
    from unsee.model.plan import compensation
    from unsee.model.state import LedgerEntry

    worlds = ledgers([LedgerEntry(cid, "send", args, turn) for cid in ("c1", "c2") for args in ("[0]", "[1]")
                      for turn in (1, 2, 3)])
    replays = ledgers([LedgerEntry(cid, "send", args, 2) for cid in ("c1", "c2") for args in ("[0]", "[1]")])
    n = 0
    for world in worlds:
        for effects in replays:
            dedup, listed = expected_tools(world, effects)
            made = {e.call_id for e in effects}
            for c in range(4):
                n += 1
                want = listed + [{"call_id": w.call_id, "tool": w.tool, "args": None, "committed": json.loads(w.args),
                                  "reason": "counterfactual makes no such call"}
                                 for w in world if w.turn > c and w.call_id not in made]
                got, err = _call(compensation, tuple(world), tuple(effects), c)
                if err or list(got[0]) != dedup or sorted(map(_key, got[1])) != sorted(map(_key, want)):
                    return n, f"committed {world}, replay from c={c} made {effects}: {err or got}, " \
                              f"expected recognised {dedup}, listed {want}"
    return n, None


def _key(entry: dict) -> str:
    return json.dumps(entry, sort_keys=True)


TIES = (
    Tie("F", ("unsee.model.state.step",),
        "F is a function of R and of what o shows it (A1): step(R, o) = step(R, o') when view(o) = view(o'), and "
        "the same call gives the same state", "every R of a recorded session of ≤ 2 steps, 4 observation shapes, "
        "each with and without a part shown only without another target", check_step),
    Tie("sanitize", ("unsee.model.state.Observation.without", "unsee.model.replay.sanitize",
                     "unsee.model.replay.counterfactual_stream"),
        "sanitize(o) = o ∖ Z: every part from Z removed, read or only shown without another target; a part "
        "standing instead of Z shown; the rest verbatim (so ¬has_Z(o) ⇒ F reads sanitize(o) as o)",
        "every observation of ≤ 3 parts over sources z, y, a (shown, or standing instead of another), "
        "Z = {z}, {y}, {z, y}", check_without),
    Tie("first_entry", ("unsee.model.plan.locate_source", "unsee.model.plan.first_entry",
                        "unsee.model.plan.plan_forget"),
        "τ = min{t : has_Z(o_t)}, where has_Z(o) says removing Z changes what F reads of o: has_Z(o_τ) and "
        "¬has_Z(o_t) for t < τ", "every stream of ≤ 4 steps, each with nothing, z, z shown only without y, "
        "a part instead of z, or y; forget {z} and {z, y}", check_first_entry),
    Tie("closure", ("unsee.model.plan.taint_closure", "unsee.model.plan.suffix_closure",
                    "unsee.model.plan.provenance_graph"),
        "I(z) = {a : z ⇝_G a}, the least set holding the sources and closed under the recorded edges",
        "every DAG on ≤ 4 artifacts, every non-empty set of parentless sources", check_closure),
    Tie("conservative_graph", ("unsee.model.state.step",),
        "the recorded graph is conservative: a transition's generated artifacts read the whole state, so a field "
        "of turn τ reaches exactly the generated artifacts of turn ≥ τ (the chain edges of Lemma 2 (ii))",
        "every session of ≤ 3 observations (reply, memory, consequential call, compaction), policies every "
        "and events, every field", check_boundary),
    Tie("choose_checkpoint", ("unsee.model.plan.choose_checkpoint",),
        "c* = max{c ∈ C : c < τ}", "every C ⊆ {0..5} with 0 ∈ C, in either order, every τ ≤ 6", check_checkpoint),
    Tie("restore", ("unsee.model.replay.restore",),
        "restore(c) = R_boundary(c) (every layer and the cache)",
        "every checkpoint of every session of ≤ 3 observations, policies every and events", check_restore),
    Tie("replay", ("unsee.model.replay.selective_replay", "unsee.model.replay.replay_suffix"),
        "the replay reads õ_t = sanitize(o_t) of the recorded log for t = c*+1..T, one invocation of F each, and "
        "ends in the twin's state", "every entry stream of ≤ 3 steps in which z enters, forget {z}", check_replay),
    Tie("replay_tools", ("unsee.model.plan.replay_tools",),
        "a counterfactual call is recognised iff a committed call has the same id, tool and arguments; every "
        "other one is listed with its reason and the committed arguments (A3)",
        "every ledger of ≤ 2 calls against every list of ≤ 2 (ids c1, c2; tools send, post; two argument "
        "tuples)", check_replay_tools),
    Tie("compensation", ("unsee.model.plan.compensation",),
        "the compensation list is replay_tools' list and every call committed after the splice point c (turn > c, "
        "so a call committed at τ = c+1 too) whose id the replay never makes; none committed at c or before (A3)",
        "every ledger of ≤ 2 calls committed at turns 1..3 against every replay of ≤ 2 calls, c = 0..3",
        check_compensation),
)
BY_NAME = MappingProxyType({t.name: t for t in TIES})


def run_tie(tie: Tie) -> TieResult:
    t0 = time.perf_counter()
    inputs, cex = tie.check()
    return TieResult(tie.name, tie.functions, tie.abstraction, tie.bounds, COUNTEREXAMPLE if cex else EXHAUSTED,
                     inputs, time.perf_counter() - t0, cex)
