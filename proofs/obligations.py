"""Z3 obligations on the abstract model: F an uninterpreted function R × O → R.

Each obligation is a function `(max_steps) -> Result` whose docstring gives the paper's
statement, the encoding, and why the encoding is faithful: every assumption it bakes in is
named. OBLIGATIONS lists the ones that must all be proved. ENCODING_CHECKS hold by the way
their terms are built (they check the encoding's glue, not a statement of the paper): they
are run and reported apart and never counted as proofs. REFUTED lists deliberately false
statements that must come back as counterexamples (the kernel's soundness check, and
evidence that the real obligations use their assumptions).

The encoding of forgetting. Observations are constants of an uninterpreted sort O (what F
reads of an observation); for each target z_i a predicate has_i(o) says that removing z_i
changes o; `without(o)` is o ∖ Z for the whole target set Z (the definition the twin reads)
and `sanitize(o)` is Algorithm 1's line 7 (what the replay reads). Nothing is assumed about
without except its definition on observations that carry no target: ¬has_i(o) for every i ⇒
without(o) = o (o ∖ Z removes only Z); sanitize is linked to it only by A2, sanitize(o_t) =
without(o_t), stated where it is used. The counterfactual stream is o^{-Z}_t = without(o_t) at
*every* t, the target's first entry τ_i is stated as has_i(o_{τ_i}) ∧ ¬has_i(o_t) for t < τ_i,
and a target may enter again after τ_i (nothing constrains has_i there). So no statement
below is true merely because the real and counterfactual trajectories were built as the same
term.

Each symbol is a function of `unsee.model`: F is `step`, without is `Observation.without`,
sanitize is `sanitize`, has and τ are `plan_forget`, reachability is `taint_closure`, c* is
`choose_checkpoint`, restoring is `restore`, recognising a committed call is `replay_tools`.
TIES_OF names, for each obligation, the code ties (`unsee.proofs.ties`) that check those
functions against the facts assumed of them, on every input within a small bound; a tie
that fails turns its obligations into counterexamples. KIND says what each row establishes
(validity, existence, checked on samples, encoding check).
"""

from __future__ import annotations

import time
from dataclasses import replace
from types import MappingProxyType

import networkx as nx
import z3

from unsee.proofs import kernel
from unsee.proofs.kernel import ENCODING, EXISTENCE, SAMPLES, VALIDITY, Result, check_exists, check_valid, combine
from unsee.proofs.ties import BY_NAME as TIE_BY_NAME
from unsee.proofs.ties import TIES, run_tie

R = z3.DeclareSort("R")
O = z3.DeclareSort("O")
F = z3.Function("F", R, O, R)
R_INIT = z3.Const("R_init", R)
WITHOUT = z3.Function("without_Z", O, O)  # o ∖ Z, the definition (Observation.without)
SANITIZE = z3.Function("sanitize", O, O)  # Algorithm 1, line 7 (model.replay.sanitize)


def worlds(T: int, tau: int):
    """The real and counterfactual trajectories as terms, R_t = F(R_{t−1}, o_t), for a stream
    in which z enters *only* at τ (o^{-z}_t is o_t itself at every t ≠ τ). That restriction is
    sound only where it is used: for existence claims (a counter-model on a restricted class of
    streams is a counter-model) and for the refuted statements. Statements that must hold for
    every stream use `streams`."""
    o = [None] + [z3.Const(f"o_{t}", O) for t in range(1, T + 1)]
    o_minus = z3.Const(f"o_{tau}_minus_z", O)  # o^{-z}_τ = o_τ \ {z}
    oz = [None] + [o_minus if t == tau else o[t] for t in range(1, T + 1)]
    real, twin = [R_INIT], [R_INIT]
    for t in range(1, T + 1):
        real.append(F(real[-1], o[t]))
        twin.append(F(twin[-1], oz[t]))
    return o, oz, real, twin


def advance(start, obs):
    for x in obs:
        start = F(start, x)
    return start


def streams(T: int, taus):
    """A stream o_1..o_T carrying targets z_i that first enter at taus[i] (and may re-enter
    later), its counterfactual o^{-Z}_t = sanitize(o_t), and the facts that define them.

    Returns (o, oz, real, twin, facts): o[t] constants, oz[t] = without(o[t]), the real and
    counterfactual trajectories from R_init, and the facts: first entries and the definition
    of o ∖ Z on observations that carry no target (see the module docstring). `a2(o)` states
    A2 for the replay's inputs."""
    has = [z3.Function(f"has_z{i}", O, z3.BoolSort()) for i in range(len(taus))]
    o = [None] + [z3.Const(f"o_{t}", O) for t in range(1, T + 1)]
    facts = []
    for h, ti in zip(has, taus):
        facts.append(h(o[ti]))
        facts += [z3.Not(h(o[t])) for t in range(1, ti)]
    facts += [z3.Implies(z3.And([z3.Not(h(o[t])) for h in has]), WITHOUT(o[t]) == o[t]) for t in range(1, T + 1)]
    oz = [None] + [WITHOUT(o[t]) for t in range(1, T + 1)]
    real, twin = [R_INIT], [R_INIT]
    for t in range(1, T + 1):
        real.append(F(real[-1], o[t]))
        twin.append(F(twin[-1], oz[t]))
    return o, oz, real, twin, facts


def a2(o, start: int):
    """A2 for the replay from step `start` on: sanitize(o_t) = o ∖ Z (õ_t = o^{-Z}_t)."""
    return [SANITIZE(o[t]) == WITHOUT(o[t]) for t in range(start, len(o))]


def target_entries(max_steps: int):
    """Every (T, entries) checked at a bound: one target at every τ ≤ T, and two targets at
    every pair of first entries τ_1 ≤ τ_2 (the targets are interchangeable, so this is every
    pair up to their names), for every T ≤ max_steps."""
    out = [(T, (tau,)) for T in range(1, max_steps + 1) for tau in range(1, T + 1)]
    out += [(T, (a, b)) for T in range(1, max_steps + 1) for a in range(1, T + 1) for b in range(a, T + 1)]
    return out


def pairs(max_steps: int):
    return [(T, tau) for T in range(1, max_steps + 1) for tau in range(1, T + 1)]


# --- Theorem 1 and Lemma 1 -----------------------------------------------------------------

def induction_terms():
    """The trajectories of Theorem 1 as functions of an integer index, and the facts that define
    them (the unbounded encoding). Returns (P1, P2, tau, defs, witness)."""
    Rr, Rz, Rt = (z3.Function(n, z3.IntSort(), R) for n in ("Rreal", "Rtwin", "Rreplay"))
    o = z3.Function("o", z3.IntSort(), O)
    has = z3.Function("has_z", O, z3.BoolSort())
    tau, t = z3.Int("tau"), z3.Int("t")
    x = z3.Const("x", O)
    defs = [
        tau >= 1,
        Rr(0) == R_INIT, Rz(0) == R_INIT,
        z3.ForAll([t], z3.Implies(t >= 1, Rr(t) == F(Rr(t - 1), o(t)))),  # the recorded run (Eq. 1)
        z3.ForAll([t], z3.Implies(t >= 1, Rz(t) == F(Rz(t - 1), WITHOUT(o(t))))),  # the twin, on o ∖ Z
        z3.ForAll([x], z3.Implies(z3.Not(has(x)), WITHOUT(x) == x)),  # o ∖ Z removes only Z
        has(o(tau)), z3.ForAll([t], z3.Implies(z3.And(1 <= t, t < tau), z3.Not(has(o(t))))),  # τ: first entry
        Rt(tau - 1) == Rr(tau - 1),  # line 5: restore R_{τ−1}
        z3.ForAll([t], z3.Implies(t >= tau, Rt(t) == F(Rt(t - 1), SANITIZE(o(t))))),  # lines 6–9: replay from τ
        z3.ForAll([x], SANITIZE(x) == WITHOUT(x)),  # A2: õ_t = o^{-z}_t
    ]
    # a small model of the definitions (one state, two observations, τ = 2): their satisfiability,
    # which Z3 cannot decide alone under the quantifiers over the integers
    r = z3.Const("r", R)
    e1, e2 = z3.Consts("e1 e2", O)
    witness = [z3.ForAll([r], r == R_INIT), z3.ForAll([x], z3.Or(x == e1, x == e2)), tau == 2,
               z3.Not(has(e1)), has(e2), o(1) == e1, o(2) == e2]
    return (lambda i: Rr(i) == Rz(i)), (lambda i: Rt(i) == Rz(i)), tau, t, defs, witness


def theorem1_lemma1_induction(max_steps: int) -> Result:
    """Lemma 1 and Theorem 1 as one induction on t, unbounded.

    Statement: R_t = R^{-Z}_t for every 0 ≤ t ≤ τ−1 (Lemma 1), and R̃_t = R^{-Z}_t for every
    t ≥ τ−1 (Theorem 1), where R̃ restores R_{τ−1} and replays õ_t = sanitize(o_t).
    Encoding: the real run, the twin and the replay are functions of an integer index defined
    by quantified equations (the real run on o(t), the twin on without(o(t)), the replay on
    sanitize(o(t)) from τ on, after restoring R_{τ−1}); τ is the first entry (has_z(o(τ)),
    ¬has_z(o(t)) for 1 ≤ t < τ); without is the identity on target-free observations. Z3 has no
    induction, so each induction is given as one explicit instance of the induction schema over
    the integers, (P(a) ∧ ∀t > a: P(t−1) ⇒ P(t)) ⇒ ∀t ≥ a: P(t), for P1(t) ≔ R_t = R^{-z}_t below
    τ (a = 0) and P2(t) ≔ R̃_t = R^{-z}_t (a = τ−1); an instance of a valid schema adds nothing
    false. One solver holds the definitions and both instances, and five queries are each unsat
    from them together: Lemma 1's base and step, Theorem 1's base (which uses Lemma 1's goal at
    τ−1 and the restore) and step (which uses A2 and the replay from τ), and the goal of both.
    Assumptions baked in: A1 (one F), A2 (sanitize = without), the schema instances. The
    definitions are satisfiable: a one-state model with τ = 2 is checked as their witness."""
    t0 = time.perf_counter()
    P1, P2, tau, t, defs, witness = induction_terms()
    base1, base2 = P1(0), P2(tau - 1)
    step1 = z3.ForAll([t], z3.Implies(z3.And(1 <= t, t <= tau - 1, P1(t - 1)), P1(t)))
    step2 = z3.ForAll([t], z3.Implies(z3.And(t >= tau, P2(t - 1)), P2(t)))
    goal1 = z3.ForAll([t], z3.Implies(z3.And(0 <= t, t <= tau - 1), P1(t)))
    goal2 = z3.ForAll([t], z3.Implies(t >= tau - 1, P2(t)))
    schema = [z3.Implies(z3.And(base1, step1), goal1), z3.Implies(z3.And(base2, step2), goal2)]
    axioms = defs + schema
    parts = [(label, check_valid(axioms, goal, witness)) for label, goal in (
        ("Lemma 1 base: R_0 = R^{-z}_0", base1),
        ("Lemma 1 step: 1 ≤ t ≤ τ−1 ∧ R_{t−1} = R^{-z}_{t−1} ⇒ R_t = R^{-z}_t", step1),
        ("Theorem 1 base: R̃_{τ−1} = R^{-z}_{τ−1}", base2),
        ("Theorem 1 step: t ≥ τ ∧ R̃_{t−1} = R^{-z}_{t−1} ⇒ R̃_t = R^{-z}_t", step2),
        ("goal: ∀t ≤ τ−1: R_t = R^{-z}_t and ∀t ≥ τ−1: R̃_t = R^{-z}_t", z3.And(goal1, goal2)))]
    return combine("theorem1_lemma1_induction", "∀t ∈ [0, τ−1]: R_t = R^{-z}_t (Lemma 1) and ∀t ≥ τ−1: R̃_t = R^{-z}_t "
                   "(Theorem 1), by induction on t (base, step and an induction-schema instance each, discharged "
                   "together); A1: one F; A2: sanitize(o) = o ∖ z", parts, t0)


def theorem1_bounded(max_steps: int) -> Result:
    """Theorem 1 as written, at every t from τ−1 to T, bounded.

    Statement: restoring R_{τ−1} and replaying õ_t = sanitize(o_t) for t = τ..T gives
    R̃_t = R^{-Z}_t for every τ−1 ≤ t ≤ T, where R^{-Z} is the twin run from R_init on o ∖ Z.
    Encoding: `streams` (the module docstring): o_t are free constants; the replay reads
    sanitize(o_t) of the recorded stream, the twin without(o_t), and A2 (sanitize(o_t) =
    without(o_t) for t ≥ τ) is the only link between them; the only link between the real prefix
    and the twin's is the definition of o ∖ Z on target-free observations, so R_{τ−1} =
    R^{-Z}_{τ−1} must be derived (Lemma 1), not read off the terms. Targets may re-enter after τ;
    with two targets τ is the earlier first entry. Assumptions baked in: A1 (one F), A2, finite
    T (every T ≤ max_steps, every τ, one or two targets)."""
    t0 = time.perf_counter()
    parts = []
    for T, taus in target_entries(max_steps):
        o, oz, real, twin, facts = streams(T, taus)
        tau = min(taus)
        replay, goal = real[tau - 1], [real[tau - 1] == twin[tau - 1]]
        for t in range(tau, T + 1):
            replay = F(replay, SANITIZE(o[t]))
            goal.append(replay == twin[t])
        parts.append((f"T={T} τ={taus}", check_valid(facts + a2(o, tau), z3.And(goal))))
    return combine("theorem1_bounded", f"for every T ≤ {max_steps}, one or two targets with any first entries (re-entry "
                   "allowed), τ the earliest: restoring R_{τ−1} and replaying sanitize(o_t) (A2: = o_t ∖ Z) gives "
                   "R̃_t = R^{-Z}_t at every t from τ−1 to T", parts, t0)


def theorem1_needs_the_prefix(max_steps: int) -> Result:
    """(false) Theorem 1 without the definition of o ∖ Z on target-free observations: then
    the prefix before τ need not be shared and restoring R_{τ−1} is not the twin's state.
    Refuted, it shows that `theorem1_bounded` uses that definition (it is not vacuous)."""
    t0 = time.perf_counter()
    o, oz, real, twin, facts = streams(3, (2,))
    first_entries = [f for f in facts if not z3.is_implies(f)]
    replay = F(F(real[1], SANITIZE(o[2])), SANITIZE(o[3]))
    return combine("theorem1_needs_the_prefix", "(false) without ¬z ∈ o ⇒ o ∖ z = o, restoring R_{τ−1} and replaying "
                   "still gives R^{-z}_T", [("claim", check_valid(first_entries + a2(o, 2), replay == twin[3]))], t0)


def lemma1_bounded(max_steps: int) -> Result:
    """Lemma 1, bounded.

    Statement: R_t = R^{-Z}_t for every t ≤ τ−1 (the prefix before the first entry is shared).
    Encoding: `streams`: the twin reads without(o_t) at every t, so equality on the prefix
    follows only from the first entries (no target in o_t for t < τ_i) and the definition of
    o ∖ Z. Targets may re-enter after τ; two targets may enter at different steps.
    Assumptions baked in: A1 (one F), finite T (every T ≤ max_steps, every τ, one or two
    targets)."""
    t0 = time.perf_counter()
    parts = []
    for T, taus in target_entries(max_steps):
        o, oz, real, twin, facts = streams(T, taus)
        goal = z3.And([real[t] == twin[t] for t in range(min(taus))])
        parts.append((f"T={T} τ={taus}", check_valid(facts, goal)))
    return combine("lemma1_bounded", f"for every T ≤ {max_steps}, one or two targets with any first entries (re-entry "
                   "allowed), and every t ≤ τ−1: R_t = R^{-Z}_t", parts, t0)


# --- Lemma 2 ----------------------------------------------------------------------------

def lemma2_closure_step(max_steps: int) -> Result:
    """Lemma 2 (i), the closure half, unbounded.

    Statement: I_t ⊆ I_{t+1}, where I_t = {a : z ⇝ a in G_t}.
    Encoding: artifacts are an uninterpreted sort, E_t and E_{t+1} arbitrary edge relations
    with E_t ⊆ E_{t+1} (execution only appends: A_t ⊆ A_{t+1} and E_t ⊆ E_{t+1}, which the
    specs check on every run); I_t is the least z-closed set under E_t, so I_t ⊆ I_{t+1} holds
    iff I_{t+1} (any set closed under E_{t+1}) is closed under E_t, which is what is proved,
    for any S. Assumptions baked in: growth of the graph (the premise), nothing else."""
    t0 = time.perf_counter()
    A = z3.DeclareSort("A")
    E1 = z3.Function("E_t", A, A, z3.BoolSort())
    E2 = z3.Function("E_t1", A, A, z3.BoolSort())
    S = z3.Function("S", A, z3.BoolSort())
    a, b = z3.Consts("a b", A)
    assumptions = [
        z3.ForAll([a, b], z3.Implies(E1(a, b), E2(a, b))),  # execution only appends edges
        z3.ForAll([a, b], z3.Implies(z3.And(S(a), E2(a, b)), S(b))),  # S closed under E_{t+1}
    ]
    goal = z3.ForAll([a, b], z3.Implies(z3.And(S(a), E1(a, b)), S(b)))
    return combine("lemma2_closure_step", "E_t ⊆ E_{t+1} and S closed under E_{t+1} ⇒ S closed under E_t",
                   [("closure", check_valid(assumptions, goal))], t0)


def lemma2_boundary_bounded(max_steps: int, chain: bool = True) -> Result:
    """Lemma 2 (ii), bounded.

    Statement: on the conservative graph a generated artifact is tainted iff it was created at
    or after τ: the clean set A ∖ I(z) is exactly the prefix output {a : turn(a) < τ}.
    Not covered: the lemma's maximality claim, that no attribution-free certificate can keep
    more (it is about every certification method, not about this graph); and the premise
    itself, that the conservative edges are present: assumed here, and checked of the graphs
    `step` records by the tie `conservative_graph` (with chain=False, the chain edge previous
    output → next left free like any other, the statement is false: counterexamples from n = 2).
    Encoding: n turns; each turn has its observation field and two generated artifacts; the
    conservative edges (field → output, previous output → next, within a turn) are always
    present and any forward edge (from an earlier artifact or field) may be added (a free
    Boolean per edge). Reachability is written as equations reach(v) = ∨ (edge ∧ reach(u)):
    that is the least fixpoint only because every edge points forward (the graph is acyclic,
    as execution graphs are: a parent exists before its child); on a cyclic graph the
    equations would admit larger solutions. Assumptions baked in: z enters at one field τ
    (several entries are several targets, each with its own τ), acyclicity, the conservative
    edges, finite n (every n ≤ max_steps, every τ)."""
    t0 = time.perf_counter()
    parts = []
    n_max = max_steps
    for n in range(1, n_max + 1):
        for tau in range(1, n + 1):
            fields = [(s, None) for s in range(1, n + 1)]
            derived = [(t, j) for t in range(1, n + 1) for j in range(2)]
            reach = {v: z3.Bool(f"reach_{v[0]}_{v[1]}") for v in fields + derived}
            defs = [reach[(s, None)] == (s == tau) for s in range(1, n + 1)]
            for i, (t, j) in enumerate(derived):
                cons = [(t, None)] + ([(t - 1, 1)] if t > 1 and chain else []) + ([(t, j - 1)] if j else [])
                extra = derived[:i] + [(s, None) for s in range(1, t + 1)]
                terms = [reach[u] for u in cons]
                terms += [z3.And(z3.Bool(f"E_{u}_{(t, j)}"), reach[u]) for u in extra if u not in cons]
                defs.append(reach[(t, j)] == z3.Or(terms))
            goal = z3.And([reach[v] == (v[0] >= tau) for v in derived])
            parts.append((f"n={n} τ={tau}", check_valid(defs, goal)))
    return combine("lemma2_boundary_bounded", f"for every graph of ≤ {n_max} turns, assuming the conservative edges "
                   "(field → output, previous output → next, within a turn) plus any forward edges: z ⇝ a ⇔ "
                   "turn(a) ≥ τ for every generated artifact a (maximality over other certificates not covered)",
                   parts, t0)


def datalog_closure(edges, sources) -> set:
    """{a : some source ⇝ a}, computed by Z3's Datalog engine (a least fixpoint, so sound on
    any graph, cyclic or not): `edges` pairs of node ids, `sources` node ids."""
    nodes = sorted({u for e in edges for u in e} | set(sources))
    idx = {n: i for i, n in enumerate(nodes)}
    bits = max(4, len(nodes).bit_length() + 1)
    fp = z3.Fixedpoint()
    fp.set(engine="datalog")
    bv = z3.BitVecSort(bits)
    edge = z3.Function("edge", bv, bv, z3.BoolSort())
    reach = z3.Function("reach", bv, z3.BoolSort())
    fp.register_relation(edge, reach)
    x, y = z3.Consts("x y", bv)
    fp.declare_var(x, y)
    for u, v in edges:
        fp.fact(edge(z3.BitVecVal(idx[u], bits), z3.BitVecVal(idx[v], bits)))
    for a in sources:
        fp.fact(reach(z3.BitVecVal(idx[a], bits)))
    fp.rule(reach(y), [reach(x), edge(x, y)])
    out = set()
    for n, i in idx.items():
        got = fp.query(reach(z3.BitVecVal(i, bits)))
        if got == z3.unknown:
            raise RuntimeError(f"Datalog query on {n} came back unknown")
        if got == z3.sat:
            out.add(n)
    return out


def taint_session(n: int):
    """A recorded session of n observations that exercises every artifact kind: replies,
    memory records, read-only and consequential calls, compactions, and the target z entering
    at the middle and again near the end."""
    from unsee.model.state import Observation, Part

    tau = max(2, (n + 1) // 2)
    obs = [Observation("system", (Part("sys", "you are an agent"),))]
    kinds = ("user", "memory", "tool", "user", "user")
    for t in range(2, n + 1):
        z = t == tau or (t == n and n > tau + 1)
        part = Part("z", "alice lives at 12 elm street") if z else Part(f"s{t}", f"note {t}")
        k = kinds[t % len(kinds)]
        obs.append(Observation(k, (part,), reply=0 if k == "memory" else 2,
                               tool="send" if t % 4 == 0 else ("lookup" if t % 3 == 0 else None),
                               compact=t % 6 == 0))
    return obs


def lemma2_taint_queries(max_steps: int) -> Result:
    """Lemma 2's closure on recorded graphs, checked on samples: for a recorded session of every
    length 2..max_steps, the least-fixpoint equations of reachability on its provenance graph
    have the model's closures as their only solution.

    Statement: I(z) = {a : z ⇝_G a} is what the runtime's closures (taint_closure on
    provenance_graph, and suffix_closure, the one pass B7 runs) return, on these sessions.
    Encoding: one Boolean reach(a) per artifact, reach(a) = source(a) ∨ ∨_{p parent} reach(p):
    on an acyclic graph (parents are created before their children) the least fixpoint is the
    only solution, so 'reach = the closure' is valid iff the closure is right. Assumptions
    baked in: the sessions of `taint_session` (fixed shapes; every small graph is the tie
    `closure`, random sessions on both runtimes the refinement tests)."""
    from unsee.model.plan import locate_source, provenance_graph, suffix_closure, taint_closure
    from unsee.model.replay import run

    t0 = time.perf_counter()
    parts = []
    for n in range(2, max(2, max_steps) + 1):
        s = run(taint_session(n))
        if "z" not in {p.source for o in s.observations for p in o.parts}:
            continue
        srcs = set(locate_source(s, "z"))
        reach = {a.id: z3.Bool(f"reach_{a.id}") for a in s.state.artifacts}
        defs = [reach[a.id] == z3.Or([z3.BoolVal(a.id in srcs)] + [reach[p] for p in a.parents])
                for a in s.state.artifacts]
        for name, got in (("taint_closure", taint_closure(provenance_graph(s.state), srcs)),
                          ("suffix_closure", suffix_closure(s.state.artifacts, srcs))):
            goal = z3.And([reach[a] == z3.BoolVal(a in got) for a in reach])
            parts.append((f"n={n} {name}", check_valid(defs, goal)))
    return combine("lemma2_taint_queries", f"for recorded sessions of every length ≤ {max(2, max_steps)} (samples): "
                   "reach(z, a) by the least-fixpoint equations = taint_closure = suffix_closure", parts, t0)


# --- Corollary 1 ------------------------------------------------------------------------

def corollary1_cheaper_shapes_not_exact(max_steps: int) -> Result:
    """Corollary 1's lower bound for two classes of cheaper operators, bounded.

    Statement: for every (T, τ) there is an F and a stream on which every operator of these
    classes misses R^{-z}_T at once: (a) restore a stored R_k with k ≥ τ and apply F to
    o^{-z}_{k+1..T}; (b) start at a stored R_j (any j) and apply F to m < T−τ+1 consecutive
    counterfactual observations o^{-z}_{j+1..j+m}.
    Not covered: operators outside these classes (reading observations out of order or
    repeated, combining several stored states, or computing something other than F); the
    paper's "no operator" is wider than this.
    Encoding: an existence claim over `worlds` (z enters only at τ). Restricting the class of
    streams only makes a witness harder to find, so a witness there is a witness in general.
    Assumptions baked in: finite T (every T ≤ max_steps, every τ)."""
    t0 = time.perf_counter()
    parts = []
    n_max = max_steps
    for T, tau in pairs(n_max):
        o, oz, real, twin = worlds(T, tau)
        misses = []
        for k in range(tau, T + 1):
            misses.append(advance(real[k], oz[k + 1:]) != twin[T])
        for j in range(0, T + 1):
            for m in range(0, min(T - tau + 1, T - j + 1)):
                if (j, m) != (tau - 1, T - tau + 1):
                    misses.append(advance(real[j], oz[j + 1:j + 1 + m]) != twin[T])
        parts.append((f"T={T} τ={tau}", check_exists(misses)))
    return combine("corollary1_cheaper_shapes_not_exact", f"for every T ≤ {n_max}, τ: ∃F, o such that no operator that "
                   "(a) restores a stored R_k (k ≥ τ) and applies F to o^{-z}_{k+1..T}, or (b) applies F to fewer "
                   "than T−τ+1 consecutive o^{-z}_{j+1..j+m} from a stored R_j, reaches R^{-z}_T (other operators "
                   "not covered)", parts, t0)


def corollary1_splice_is_exact(max_steps: int) -> Result:
    """Encoding check (not a proof): T−τ+1 invocations from R_{τ−1} reach R^{-z}_T when z
    enters only at τ. On `worlds` both sides are the same term, so this checks the encoding;
    the statement is `corollary1_any_checkpoint_set`."""
    t0 = time.perf_counter()
    parts = []
    for T, tau in pairs(max_steps):
        o, oz, real, twin = worlds(T, tau)
        suffix = oz[tau:]
        assert len(suffix) == T - tau + 1
        parts.append((f"T={T} τ={tau}", check_valid([o[tau] != oz[tau]], advance(real[tau - 1], suffix) == twin[T])))
    return combine("corollary1_splice_is_exact", f"for every T ≤ {max_steps}, τ: T−τ+1 invocations from R_{{τ−1}} give R^{{-z}}_T",
                   parts, t0)


def corollary1_cost(max_steps: int) -> Result:
    """Corollary 1's cost over arbitrary checkpoint sets, unbounded.

    Statement: for any checkpoint set C ∋ 0, Algorithm 1 restores c* = max{c ∈ C : c < τ} and
    invokes F T−c* ≥ T−τ+1 times, with equality iff τ−1 ∈ C.
    Encoding: C is an uninterpreted predicate on the integers with C(0), and c* is characterised
    by C(c*) ∧ c* < τ ∧ ∀c < τ: C(c) ⇒ c ≤ c*; T, τ, C symbolic. Assumptions baked in: the
    checkpoint rule (choose_checkpoint, tie `choose_checkpoint`) and one invocation per replayed
    observation (tie `replay`)."""
    t0 = time.perf_counter()
    T_, tau, cstar, c = z3.Ints("T tau cstar c")
    C = z3.Function("C", z3.IntSort(), z3.BoolSort())
    chosen = [T_ >= 1, tau >= 1, tau <= T_, C(0), C(cstar), 0 <= cstar, cstar < tau,
              z3.ForAll([c], z3.Implies(z3.And(0 <= c, c < tau, C(c)), c <= cstar))]
    cost = check_valid(chosen, z3.And(T_ - cstar >= T_ - tau + 1, (T_ - cstar == T_ - tau + 1) == C(tau - 1)))
    return combine("corollary1_cost", "for any checkpoint set C ∋ 0 and any T, τ: c* = max{c ∈ C : c < τ} costs T−c* ≥ "
                   "T−τ+1 invocations, with equality iff τ−1 ∈ C", [("cost", cost)], t0)


def corollary1_any_checkpoint_set(max_steps: int) -> Result:
    """Corollary 1's upper bound over arbitrary checkpoint sets, bounded.

    Statement: for any checkpoint set C ∋ 0, restoring c* = max{c ∈ C : c < τ} and replaying the
    T−c* later observations sanitized reaches R^{-Z}_T.
    Encoding: the result depends on C only through c*, and c* ranges over 0..τ−1, so exactness
    from every c ∈ [0, τ−1] covers every C; checked on `streams` (one or two targets, re-entry
    allowed), where it needs Lemma 1 (the twin is not built from the real prefix). The replay
    reads sanitize(o_t), linked to the twin's without(o_t) by A2. Assumptions baked in: A1, A2,
    finite T (every T ≤ max_steps)."""
    t0 = time.perf_counter()
    parts = []
    for T, taus in target_entries(max_steps):
        o, oz, real, twin, facts = streams(T, taus)
        exact = [advance(real[k], [SANITIZE(x) for x in o[k + 1:]]) == twin[T] for k in range(min(taus))]
        parts.append((f"T={T} τ={taus} every c* < τ", check_valid(facts + a2(o, 1), z3.And(exact))))
    return combine("corollary1_any_checkpoint_set", f"for every T ≤ {max_steps}, one or two targets, every c* < τ: "
                   "restoring R_{c*} and replaying T−c* sanitized observations gives R^{-Z}_T", parts, t0)


# --- the assumptions --------------------------------------------------------------------

def a2_needed(max_steps: int) -> Result:
    """A2 is needed, bounded.

    Statement: if the replay's input at τ is not o^{-z}_τ, some F makes the splice inexact.
    Encoding: an existence claim on `worlds` for every T ≤ max_steps and τ ≤ T: a model of
    õ_τ ≠ o^{-z}_τ ∧ replay ≠ R^{-z}_T. Assumptions baked in: A1 (one F)."""
    t0 = time.perf_counter()
    parts = []
    for T, tau in pairs(max_steps):
        o, oz, real, twin = worlds(T, tau)
        bad = z3.Const(f"otilde_{tau}", O)
        parts.append((f"T={T} τ={tau}", check_exists([bad != oz[tau], advance(real[tau - 1], [bad] + oz[tau + 1:]) != twin[T]])))
    return combine("a2_needed", f"for every T ≤ {max_steps}, τ: ∃F with õ_τ ≠ o^{{-z}}_τ ⇒ R̃_T ≠ R^{{-z}}_T", parts, t0)


def a1_needed(max_steps: int) -> Result:
    """A1 is needed, bounded.

    Statement: without A1 (F a relation, not a function), restoring R_{τ−1} and replaying the
    very inputs the twin reads can end in another state than the twin's.
    Encoding: an existence claim for every T ≤ max_steps and τ ≤ T: a relation Frel ⊆ R × O × R,
    a twin R^{-z}_{τ−1..T} and a replay R̃_{τ−1..T} with R̃_{τ−1} = R^{-z}_{τ−1}, each step of each
    an Frel step on the same input o^{-z}_t, and R̃_T ≠ R^{-z}_T. Assumptions baked in: none."""
    t0 = time.perf_counter()
    Frel = z3.Function("Frel", R, O, R, z3.BoolSort())
    parts = []
    for T, tau in pairs(max_steps):
        twin = [z3.Const(f"Rz_{t}", R) for t in range(tau - 1, T + 1)]
        replay = [twin[0]] + [z3.Const(f"Rtilde_{t}", R) for t in range(tau, T + 1)]
        oz = [z3.Const(f"oz_{t}", O) for t in range(tau, T + 1)]
        steps = [Frel(run[i], oz[i], run[i + 1]) for run in (twin, replay) for i in range(len(oz))]
        parts.append((f"T={T} τ={tau}", check_exists(steps + [replay[-1] != twin[-1]])))
    return combine("a1_needed", f"for every T ≤ {max_steps}, τ: ∃ a nondeterministic F (a relation) under which the replay "
                   "from R_{τ−1} on the twin's own inputs o^{-z}_{τ..T} ends in R̃_T ≠ R^{-z}_T", parts, t0)


A3_CALLS = 3  # ledgers of at most this many calls


def a3_compensation(max_steps: int) -> Result:
    """A3, bounded: the replay's compensation list is empty iff A3 holds.

    Statement: a counterfactual consequential call is recognised (not fired again) iff a
    committed call has the same id, tool and arguments, and listed for compensation otherwise;
    a committed call after τ whose id the counterfactual never makes is listed too. Then
    nothing is listed iff the calls committed after τ are exactly the counterfactual's (same
    ids, tools and arguments): the environment the replay leaves equals the twin's exactly
    when A3 holds, and otherwise the receipt names every call that differs.
    Encoding: calls are triples of integers (id, tool, argument); ids are distinct within a
    ledger; every pair of a committed list and a counterfactual list of ≤ A3_CALLS calls.
    Assumptions baked in: the recognition rule (replay_tools, tie `replay_tools`) and the list
    of committed calls absent from the counterfactual (compensation)."""
    t0 = time.perf_counter()
    parts = []
    for nw in range(A3_CALLS + 1):
        for ne in range(A3_CALLS + 1):
            w = [z3.Ints(f"w{i}_id w{i}_tool w{i}_arg") for i in range(nw)]
            e = [z3.Ints(f"e{j}_id e{j}_tool e{j}_arg") for j in range(ne)]
            same = lambda a, b: z3.And([x == y for x, y in zip(a, b)])  # noqa: E731
            any_, all_ = (lambda xs: z3.Or(xs) if xs else z3.BoolVal(False)), (lambda xs: z3.And(xs) if xs else z3.BoolVal(True))  # noqa: E731
            distinct = [z3.Distinct([c[0] for c in w])] if nw > 1 else []
            distinct += [z3.Distinct([c[0] for c in e])] if ne > 1 else []
            recognised = [any_([same(wi, ej) for wi in w]) for ej in e]
            absent = [z3.Not(any_([ej[0] == wi[0] for ej in e])) for wi in w]
            nothing_listed = all_(recognised + [z3.Not(x) for x in absent])
            equal = all_([any_([same(wi, ej) for ej in e]) for wi in w] + [any_([same(wi, ej) for wi in w]) for ej in e])
            parts.append((f"{nw} committed, {ne} counterfactual", check_valid(distinct, nothing_listed == equal)))
    return combine("a3_compensation", f"for every committed and counterfactual ledger of ≤ {A3_CALLS} calls: nothing is "
                   "listed for compensation iff the calls committed after τ are exactly the counterfactual's", parts, t0)


OBLIGATIONS = (
    theorem1_lemma1_induction,
    theorem1_bounded,
    lemma1_bounded,
    lemma2_closure_step,
    lemma2_boundary_bounded,
    lemma2_taint_queries,
    corollary1_cheaper_shapes_not_exact,
    corollary1_cost,
    corollary1_any_checkpoint_set,
    a1_needed,
    a2_needed,
    a3_compensation,
)

# Hold by construction of their terms: run and reported apart, never counted as proofs.
ENCODING_CHECKS = (corollary1_splice_is_exact,)


# --- deliberately false: must be refuted ------------------------------------------------

def false_crop_at_tau_is_exact(max_steps: int) -> Result:
    t0 = time.perf_counter()
    o, oz, real, twin = worlds(3, 2)
    res = check_valid([o[2] != oz[2]], advance(real[2], oz[3:]) == twin[3])
    return combine("false_crop_at_tau_is_exact", "(false) restoring R_τ and replaying the rest gives R^{-z}_T",
                   [("claim", res)], t0)


def false_one_step_short_is_exact(max_steps: int) -> Result:
    t0 = time.perf_counter()
    o, oz, real, twin = worlds(3, 2)
    res = check_valid([o[2] != oz[2]], advance(real[1], oz[2:3]) == twin[3])
    return combine("false_one_step_short_is_exact", "(false) T−τ invocations from R_{τ−1} give R^{-z}_T",
                   [("claim", res)], t0)


REFUTED = (false_crop_at_tau_is_exact, false_one_step_short_is_exact, theorem1_needs_the_prefix)


# What each row establishes (kernel.KINDS).
KIND = MappingProxyType({
    "theorem1_lemma1_induction": VALIDITY, "theorem1_bounded": VALIDITY, "lemma1_bounded": VALIDITY,
    "lemma2_closure_step": VALIDITY, "lemma2_boundary_bounded": VALIDITY, "lemma2_taint_queries": SAMPLES,
    "corollary1_cheaper_shapes_not_exact": EXISTENCE, "corollary1_cost": VALIDITY,
    "corollary1_any_checkpoint_set": VALIDITY, "a1_needed": EXISTENCE, "a2_needed": EXISTENCE,
    "a3_compensation": VALIDITY, "corollary1_splice_is_exact": ENCODING,
})

# The bounds each check actually uses at a given max_steps (reported, never implied). Only a row
# with no bound anywhere says "unbounded".
BOUNDS = MappingProxyType({
    "theorem1_lemma1_induction": lambda n: "unbounded (induction on t: base, step, schema instance)",
    "theorem1_bounded": lambda n: f"every T ≤ {n}, one target at every τ ≤ T and two at every τ1 ≤ τ2, every t ∈ [τ−1, T]",
    "lemma1_bounded": lambda n: f"every T ≤ {n}, one target at every τ ≤ T and two at every τ1 ≤ τ2",
    "lemma2_closure_step": lambda n: "unbounded (any two edge relations)",
    "lemma2_boundary_bounded": lambda n: f"every graph of ≤ {n} turns, every τ",
    "lemma2_taint_queries": lambda n: f"recorded sessions of every length ≤ {max(2, n)}",
    "corollary1_cheaper_shapes_not_exact": lambda n: f"every T ≤ {n}, every τ ≤ T",
    "corollary1_splice_is_exact": lambda n: f"every T ≤ {n}, every τ ≤ T",
    "corollary1_cost": lambda n: "unbounded (C, T, τ symbolic)",
    "corollary1_any_checkpoint_set": lambda n: f"every T ≤ {n}, one or two targets, every c* < τ",
    "a1_needed": lambda n: f"every T ≤ {n}, every τ ≤ T",
    "a2_needed": lambda n: f"every T ≤ {n}, every τ ≤ T",
    "a3_compensation": lambda n: f"ledgers of ≤ {A3_CALLS} calls (independent of --max-steps)",
})

# The code ties (unsee.proofs.ties) each row rests on: the functions of unsee.model its symbols
# abstract. A row with none is about operators or relations the code does not implement.
TIES_OF = MappingProxyType({
    "theorem1_lemma1_induction": ("F", "sanitize", "first_entry", "restore", "replay"),
    "theorem1_bounded": ("F", "sanitize", "first_entry", "restore", "replay"),
    "lemma1_bounded": ("F", "sanitize", "first_entry"),
    "lemma2_closure_step": ("closure",),
    "lemma2_boundary_bounded": ("closure", "conservative_graph"),
    "lemma2_taint_queries": ("closure",),
    "corollary1_cheaper_shapes_not_exact": ("F",),
    "corollary1_cost": ("choose_checkpoint", "replay"),
    "corollary1_any_checkpoint_set": ("F", "sanitize", "first_entry", "choose_checkpoint", "restore", "replay"),
    "a1_needed": ("F",),
    "a2_needed": ("sanitize",),
    "a3_compensation": ("replay_tools", "compensation"),
    "corollary1_splice_is_exact": (),
})


def tied(r: Result, ties: dict) -> Result:
    """The row with its code ties: a tie that failed makes the row a counterexample (the code
    is not what the statement is about)."""
    names = TIES_OF[r.name]
    abstracts = tuple({"tie": n, "functions": list(TIE_BY_NAME[n].functions), "result": ties[n].result}
                      for n in names)
    broken = [ties[n] for n in names if not ties[n].ok]
    if broken and r.ok:
        b = broken[0]
        return replace(r, result=kernel.COUNTEREXAMPLE, abstracts=abstracts, model=b.counterexample,
                       detail=f"the code breaks the abstraction of tie {b.name} ({', '.join(b.functions)})")
    return replace(r, abstracts=abstracts)


def _discharge(name: str, max_steps: int):
    """One obligation (or encoding check, or refuted statement) and the queries it sent; each query
    is solved in a fresh Z3 context whichever process runs it, so the answer does not depend on it."""
    with kernel.recording() as qs:
        r = _BY_NAME[name](max_steps)
    return name, r, qs


def run_all(max_steps: int = 16, on_result=None, record: bool = False, jobs: int = 1) -> dict:
    """The code ties, then every obligation and encoding check at `max_steps`: `all_proved`
    counts the obligations (with their ties) only; the encoding checks are listed apart. With
    `record`, each row's SMT-LIB queries are returned under "queries" (name → [Query]), the
    refuted statements' too. `jobs`: processes the obligations are spread over (the ties run in
    this one meanwhile); the document is the same whatever it is, rows in the same order."""
    if max_steps < 1:
        raise ValueError(f"max_steps must be at least 1, not {max_steps}")
    groups = ((OBLIGATIONS, []), (ENCODING_CHECKS, []), (REFUTED if record else (), []))
    names = [ob.__name__ for group, _ in groups for ob in group]
    done: dict = {}
    if jobs <= 1:
        ties = {t.name: run_tie(t) for t in TIES}
        for name in names:
            done[name] = _discharge(name, max_steps)[1:]
            if on_result is not None:
                on_result(done[name][0])
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        # fork where there is one (as `code.run_all`): a spawned worker would re-import the caller's main module
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context(method)) as pool:
            futures = [pool.submit(_discharge, name, max_steps) for name in names]
            ties = {t.name: run_tie(t) for t in TIES}
            for f in as_completed(futures):
                name, r, qs = f.result()
                done[name] = (r, qs)
                if on_result is not None:
                    on_result(r)
    results, checks, refuted, queries = groups[0][1], groups[1][1], groups[2][1], {}
    for group, out in groups:
        for ob in group:
            r, queries[ob.__name__] = done[ob.__name__]
            if group is not REFUTED:
                r = tied(replace(r, bounds=BOUNDS[ob.__name__](max_steps), kind=KIND[ob.__name__]), ties)
            out.append(r)
    doc = {"all_proved": all(r.ok for r in results) and all(t.ok for t in ties.values()), "max_steps": max_steps,
           "ties": [t.to_json() for t in ties.values()],
           "obligations": [r.to_json() for r in results],
           "encoding_checks": [r.to_json() for r in checks]}
    if record:
        doc["refuted"] = [r.to_json() for r in refuted]
        doc["queries"] = queries
    return doc


_BY_NAME = MappingProxyType({ob.__name__: ob for ob in OBLIGATIONS + ENCODING_CHECKS + REFUTED})
