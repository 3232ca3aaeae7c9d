"""Z3 obligations on the abstract model: F an uninterpreted function R × O → R.

Each obligation is a function `(max_steps) -> Result` whose docstring gives the paper's
statement, the encoding, and why the encoding is faithful: every assumption it bakes in is
named. OBLIGATIONS lists the ones that must all be proved. ENCODING_CHECKS hold by the way
their terms are built (they check the encoding's glue, not a statement of the paper): they
are run and reported apart and never counted as proofs. REFUTED lists deliberately false
statements that must come back as counterexamples (the kernel's soundness check, and
evidence that the real obligations use their assumptions).

The encoding of forgetting. Observations are constants of an uninterpreted sort O; for each
target z_i a predicate has_i(o) says that o carries z_i; `sanitize(o)` is o ∖ Z for the whole
target set Z. Nothing is assumed about sanitize except its definition on observations that
carry no target: ¬has_i(o) for every i ⇒ sanitize(o) = o (o ∖ Z removes only Z). The
counterfactual stream is o^{-Z}_t = sanitize(o_t) at *every* t, the target's first entry τ_i
is stated as has_i(o_{τ_i}) ∧ ¬has_i(o_t) for t < τ_i, and a target may enter again after
τ_i (nothing constrains has_i there). So no statement below is true merely because the real
and counterfactual trajectories were built as the same term.

These proofs are about the abstract transition system. They say nothing about whether a
concrete engine satisfies A1–A3: that evidence comes from the property tests and from the
code-level checks.
"""

from __future__ import annotations

import time
from dataclasses import replace
from types import MappingProxyType

import networkx as nx
import z3

from unsee.proofs.kernel import Result, check_exists, check_valid, combine

R = z3.DeclareSort("R")
O = z3.DeclareSort("O")
F = z3.Function("F", R, O, R)
R_INIT = z3.Const("R_init", R)


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

    Returns (o, oz, real, twin, facts): o[t] constants, oz[t] = sanitize(o[t]), the real and
    counterfactual trajectories from R_init, and the facts: first entries and the definition
    of o ∖ Z on observations that carry no target (see the module docstring)."""
    has = [z3.Function(f"has_z{i}", O, z3.BoolSort()) for i in range(len(taus))]
    sanitize = z3.Function("sanitize", O, O)
    o = [None] + [z3.Const(f"o_{t}", O) for t in range(1, T + 1)]
    facts = []
    for h, ti in zip(has, taus):
        facts.append(h(o[ti]))
        facts += [z3.Not(h(o[t])) for t in range(1, ti)]
    facts += [z3.Implies(z3.And([z3.Not(h(o[t])) for h in has]), sanitize(o[t]) == o[t]) for t in range(1, T + 1)]
    oz = [None] + [sanitize(o[t]) for t in range(1, T + 1)]
    real, twin = [R_INIT], [R_INIT]
    for t in range(1, T + 1):
        real.append(F(real[-1], o[t]))
        twin.append(F(twin[-1], oz[t]))
    return o, oz, real, twin, facts


def target_entries(max_steps: int):
    """Every (T, entries) checked at a bound: one target at every τ ≤ T, and two targets at
    every pair of first entries τ_1 ≤ τ_2 (the targets are interchangeable, so this is every
    pair up to their names), for every T ≤ max_steps."""
    out = [(T, (tau,)) for T in range(1, max_steps + 1) for tau in range(1, T + 1)]
    out += [(T, (a, b)) for T in range(1, max_steps + 1) for a in range(1, T + 1) for b in range(a, T + 1)]
    return out


def pairs(max_steps: int):
    return [(T, tau) for T in range(1, max_steps + 1) for tau in range(1, T + 1)]


# --- Theorem 1 --------------------------------------------------------------------------

def theorem1_base(max_steps: int) -> Result:
    """Encoding check (not a proof): the base case's glue, R̃_{τ−1} = R_{τ−1} (restore) and
    R_{τ−1} = R^{-z}_{τ−1} (Lemma 1) give R̃_{τ−1} = R^{-z}_{τ−1}, by transitivity of =. The
    statement itself is proved at t = τ−1 by `theorem1_bounded`."""
    t0 = time.perf_counter()
    r_tilde, r_prev, rz_prev = z3.Consts("Rtilde_tau_minus_1 R_tau_minus_1 Rz_tau_minus_1", R)
    res = check_valid([r_tilde == r_prev, r_prev == rz_prev], r_tilde == rz_prev)
    return combine("theorem1_base", "R̃_{τ−1} = R_{τ−1} (restore) ∧ R_{τ−1} = R^{-z}_{τ−1} (Lemma 1) ⇒ R̃_{τ−1} = R^{-z}_{τ−1}",
                   [("base", res)], t0)


def theorem1_step(max_steps: int) -> Result:
    """Theorem 1's inductive step, unbounded.

    Statement: for every t ≥ τ, R̃_{t−1} = R^{-z}_{t−1} ⇒ R̃_t = R^{-z}_t.
    Encoding: trajectories are functions of an integer index and t is an arbitrary
    (uninterpreted) index, so validity for t is validity for every t (no quantifiers, no
    bound on T). The replay reads õ_t = sanitize(o_t) (Algorithm 1, line 7) and the twin
    o^{-z}_t = sanitize(o_t), with the same sanitize.
    Assumptions baked in: A1 (F is a function: both sides apply the same F); A2 (Sanitize
    returns exactly o^{-z}_t: the replay's and the twin's inputs are the same function of o_t).
    Nothing is assumed about whether o_t carries z: the target may re-enter at any t ≥ τ."""
    t0 = time.perf_counter()
    Rt, Rz = z3.Function("Rtilde", z3.IntSort(), R), z3.Function("Rz", z3.IntSort(), R)
    o, ot, oz = (z3.Function(n, z3.IntSort(), O) for n in ("o", "otilde", "oz"))
    sanitize = z3.Function("sanitize", O, O)
    t, tau = z3.Ints("t tau")
    assumptions = [
        tau >= 1, t >= tau,
        ot(t) == sanitize(o(t)),  # line 7 of Algorithm 1
        oz(t) == sanitize(o(t)),  # the counterfactual stream (A2: Sanitize gives o^{-z}_t)
        Rt(t) == F(Rt(t - 1), ot(t)),  # the replay applies F (A1: F is a function)
        Rz(t) == F(Rz(t - 1), oz(t)),  # the twin applies F
        Rt(t - 1) == Rz(t - 1),  # induction hypothesis
    ]
    return combine("theorem1_step", "∀t ≥ τ: R̃_{t−1} = R^{-z}_{t−1} ∧ (A1: F a function) ∧ (A2: õ_t = sanitize(o_t) = o^{-z}_t) "
                   "⇒ R̃_t = R^{-z}_t", [("step", check_valid(assumptions, Rt(t) == Rz(t)))], t0)


def theorem1_bounded(max_steps: int) -> Result:
    """Theorem 1 as written, at every t from τ−1 to T, bounded.

    Statement: restoring R_{τ−1} and replaying õ_t = o_t ∖ Z for t = τ..T gives R̃_t = R^{-Z}_t
    for every τ−1 ≤ t ≤ T, where R^{-Z} is the twin run from R_init on o ∖ Z.
    Encoding: `streams` (the module docstring): o_t are free constants, the twin reads
    sanitize(o_t) at every t, and the only link between the real prefix and the twin's is the
    definition of o ∖ Z on target-free observations, so R_{τ−1} = R^{-Z}_{τ−1} must be derived
    (Lemma 1), not read off the terms. Targets may re-enter after τ; with two targets τ is the
    earlier first entry. Assumptions baked in: A1 (one F), A2 (one sanitize on both sides),
    finite T (every T ≤ max_steps, every τ, one or two targets)."""
    t0 = time.perf_counter()
    parts = []
    for T, taus in target_entries(max_steps):
        o, oz, real, twin, facts = streams(T, taus)
        tau = min(taus)
        replay, goal = real[tau - 1], [real[tau - 1] == twin[tau - 1]]
        for t in range(tau, T + 1):
            replay = F(replay, oz[t])
            goal.append(replay == twin[t])
        parts.append((f"T={T} τ={taus}", check_valid(facts, z3.And(goal))))
    return combine("theorem1_bounded", f"for every T ≤ {max_steps}, one or two targets with any first entries (re-entry "
                   "allowed), τ the earliest: restoring R_{τ−1} and replaying o_t ∖ Z gives R̃_t = R^{-Z}_t at every "
                   "t from τ−1 to T", parts, t0)


def theorem1_needs_the_prefix(max_steps: int) -> Result:
    """(false) Theorem 1 without the definition of o ∖ Z on target-free observations: then
    the prefix before τ need not be shared and restoring R_{τ−1} is not the twin's state.
    Refuted, it shows that `theorem1_bounded` uses that definition (it is not vacuous)."""
    t0 = time.perf_counter()
    o, oz, real, twin, facts = streams(3, (2,))
    first_entries = [f for f in facts if not z3.is_implies(f)]
    replay = F(F(real[1], oz[2]), oz[3])
    return combine("theorem1_needs_the_prefix", "(false) without ¬z ∈ o ⇒ o ∖ z = o, restoring R_{τ−1} and replaying "
                   "still gives R^{-z}_T", [("claim", check_valid(first_entries, replay == twin[3]))], t0)


# --- Lemma 1 ----------------------------------------------------------------------------

def lemma1_bounded(max_steps: int) -> Result:
    """Lemma 1, bounded.

    Statement: R_t = R^{-Z}_t for every t ≤ τ−1 (the prefix before the first entry is shared).
    Encoding: `streams`: the twin reads sanitize(o_t) at every t, so equality on the prefix
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


def lemma1_inductive(max_steps: int) -> Result:
    """Lemma 1, unbounded.

    Statement: R_0 = R^{-z}_0, and for t ≤ τ−1, R_{t−1} = R^{-z}_{t−1} ⇒ R_t = R^{-z}_t.
    Encoding: t an arbitrary index as in `theorem1_step`; the twin reads sanitize(o(t)); that
    o(t) carries no target for t < τ is the first-entry fact, and o ∖ Z = o on such an o is the
    definition of sanitize (a quantified axiom over all of O). Assumptions baked in: A1."""
    t0 = time.perf_counter()
    Rr, Rz = z3.Function("Rreal", z3.IntSort(), R), z3.Function("Rz", z3.IntSort(), R)
    o = z3.Function("o", z3.IntSort(), O)
    has = z3.Function("has_z", O, z3.BoolSort())
    sanitize = z3.Function("sanitize", O, O)
    t, tau = z3.Ints("t tau")
    x = z3.Const("x", O)
    base = check_valid([Rr(0) == R_INIT, Rz(0) == R_INIT], Rr(0) == Rz(0))
    assumptions = [
        tau >= 1, t >= 1, t <= tau - 1,
        z3.ForAll([x], z3.Implies(z3.Not(has(x)), sanitize(x) == x)),  # o ∖ Z removes only Z
        has(o(tau)), z3.Not(has(o(t))),  # τ is the first entry and t < τ
        Rr(t) == F(Rr(t - 1), o(t)),
        Rz(t) == F(Rz(t - 1), sanitize(o(t))),
        Rr(t - 1) == Rz(t - 1),  # induction hypothesis
    ]
    step = check_valid(assumptions, Rr(t) == Rz(t))
    return combine("lemma1_inductive", "R_0 = R^{-z}_0 and ∀t ≤ τ−1: R_{t−1} = R^{-z}_{t−1} ⇒ R_t = R^{-z}_t",
                   [("base", base), ("step", step)], t0)


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


def lemma2_boundary_bounded(max_steps: int) -> Result:
    """Lemma 2 (ii), bounded.

    Statement: under oracle propagation a generated artifact is tainted iff it was created at
    or after τ (the taint boundary is τ).
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
                cons = [(t, None)] + ([(t - 1, 1)] if t > 1 else []) + ([(t, j - 1)] if j else [])
                extra = derived[:i] + [(s, None) for s in range(1, t + 1)]
                terms = [reach[u] for u in cons]
                terms += [z3.And(z3.Bool(f"E_{u}_{(t, j)}"), reach[u]) for u in extra if u not in cons]
                defs.append(reach[(t, j)] == z3.Or(terms))
            goal = z3.And([reach[v] == (v[0] >= tau) for v in derived])
            parts.append((f"n={n} τ={tau}", check_valid(defs, goal)))
    return combine("lemma2_boundary_bounded", f"for every graph of ≤ {n_max} turns (conservative edges plus any forward "
                   "edges): z ⇝ a ⇔ turn(a) ≥ τ for every generated artifact a", parts, t0)


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
    """Lemma 2's closure on recorded graphs: Z3's Datalog reach(z, a) agrees with the model's
    one-pass closure and with networkx, for a recorded session of every length 2..max_steps.

    Statement: I(z) = {a : z ⇝_G a} is what the runtime's closure returns.
    Encoding: the recorded provenance graph as Datalog facts; reach is the least fixpoint
    (sound on any graph). Assumptions baked in: the sessions of `taint_session` (fixed shapes;
    random sessions on both runtimes are compared in the refinement tests)."""
    from unsee.model.session import locate_source, provenance_graph, run, suffix_closure, taint_closure

    t0 = time.perf_counter()
    parts = []
    for n in range(2, max(2, max_steps) + 1):
        s = run(taint_session(n))
        if "z" not in {p.source for o in s.observations for p in o.parts}:
            continue
        g = provenance_graph(s.state)
        srcs = locate_source(s, "z")
        got, want = datalog_closure(list(g.edges), srcs), taint_closure(g, srcs)
        one_pass = suffix_closure(s.state.artifacts, srcs)
        ok = got == want == one_pass
        parts.append((f"n={n}", ("proved", None, "") if ok else
                      ("counterexample", f"datalog−networkx {sorted(got ^ want)}, one-pass−networkx "
                       f"{sorted(one_pass ^ want)}", "")))
    return combine("lemma2_taint_queries", f"for recorded sessions of every length ≤ {max_steps}: Datalog reach(z, a) = "
                   "the one-pass closure = networkx's", parts, t0)


# --- Corollary 1 ------------------------------------------------------------------------

def corollary1_cheaper_shapes_not_exact(max_steps: int) -> Result:
    """Corollary 1's lower bound, bounded: no cheaper operator shape is exact for every F.

    Statement: for every (T, τ) there is an F and a stream on which every cheaper operator
    shape misses R^{-z}_T at once: restoring any stored R_k with k ≥ τ and replaying the rest,
    or starting at any stored R_j and applying fewer than T−τ+1 invocations.
    Encoding: an existence claim over `worlds` (z enters only at τ). Restricting the class of
    streams only makes a witness harder to find, so a witness there is a witness in general.
    Assumptions baked in: the operator reads only stored states and invokes F (Corollary 1's
    class), finite T (every T ≤ max_steps, every τ)."""
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
                   "restores R_k (k ≥ τ) or invokes F fewer than T−τ+1 times reaches R^{-z}_T", parts, t0)


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


def corollary1_any_checkpoint_set(max_steps: int) -> Result:
    """Corollary 1's upper bound over arbitrary checkpoint sets, bounded.

    Statement: for any checkpoint set C ∋ 0, Algorithm 1 restores c* = max{c ∈ C : c < τ},
    replays the T−c* later observations sanitized, and reaches R^{-Z}_T; it invokes F
    T−c* ≥ T−τ+1 times, with equality iff τ−1 ∈ C.
    Encoding: (a) the cost, for any C: C is an uninterpreted predicate on 0..T with C(0) and
    c* is characterised by C(c*) ∧ c* < τ ∧ ∀c < τ: C(c) ⇒ c ≤ c*; proved symbolically in T,
    τ and C (unbounded). (b) Exactness: the result depends on C only through c*, and c* ranges
    over 0..τ−1, so exactness from every c ∈ [0, τ−1] covers every C; checked on `streams`
    (one or two targets, re-entry allowed), where it needs Lemma 1 (the twin is not built from
    the real prefix). Assumptions baked in: A1, A2, finite T for (b) (every T ≤ max_steps)."""
    t0 = time.perf_counter()
    T_, tau, cstar, c = z3.Ints("T tau cstar c")
    C = z3.Function("C", z3.IntSort(), z3.BoolSort())
    chosen = [T_ >= 1, tau >= 1, tau <= T_, C(0), C(cstar), 0 <= cstar, cstar < tau,
              z3.ForAll([c], z3.Implies(z3.And(0 <= c, c < tau, C(c)), c <= cstar))]
    cost = check_valid(chosen, z3.And(T_ - cstar >= T_ - tau + 1, (T_ - cstar == T_ - tau + 1) == C(tau - 1)))
    parts = [("cost: T−c* ≥ T−τ+1, equality iff τ−1 ∈ C", cost)]
    for T, taus in target_entries(max_steps):
        o, oz, real, twin, facts = streams(T, taus)
        exact = [advance(real[k], oz[k + 1:]) == twin[T] for k in range(min(taus))]
        parts.append((f"T={T} τ={taus} every c* < τ", check_valid(facts, z3.And(exact))))
    return combine("corollary1_any_checkpoint_set", f"for any checkpoint set C ∋ 0 (symbolic) and every T ≤ {max_steps}, "
                   "one or two targets: restoring c* = max{c ∈ C : c < τ} and replaying T−c* sanitized observations "
                   "gives R^{-Z}_T, at cost T−c* ≥ T−τ+1 with equality iff τ−1 ∈ C", parts, t0)


# --- the assumptions are needed -------------------------------------------------------

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
    """A1 is needed (unbounded: one step suffices).

    Statement: without A1 the twin need not be reproducible: F a relation may give one (R, o)
    two successors. Encoding: an existence claim for an uninterpreted relation R × O × R.
    Assumptions baked in: none."""
    t0 = time.perf_counter()
    Frel = z3.Function("Frel", R, O, R, z3.BoolSort())
    r0, r1, r1b = z3.Consts("r0 r1 r1b", R)
    o1 = z3.Const("o1", O)
    res = check_exists([Frel(r0, o1, r1), Frel(r0, o1, r1b), r1 != r1b])
    return combine("a1_needed", "∃ a nondeterministic F (a relation): one (R, o) with two successors, so the replay "
                   "and the twin can part", [("witness", res)], t0)


OBLIGATIONS = (
    theorem1_step,
    theorem1_bounded,
    lemma1_bounded,
    lemma1_inductive,
    lemma2_closure_step,
    lemma2_boundary_bounded,
    lemma2_taint_queries,
    corollary1_cheaper_shapes_not_exact,
    corollary1_any_checkpoint_set,
    a1_needed,
    a2_needed,
)

# Hold by construction of their terms: run and reported apart, never counted as proofs.
ENCODING_CHECKS = (theorem1_base, corollary1_splice_is_exact)


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


# The bounds each check actually uses at a given max_steps (reported, never implied).
BOUNDS = MappingProxyType({
    "theorem1_base": lambda n: "unbounded (one step)",
    "theorem1_step": lambda n: "unbounded (t an arbitrary index)",
    "theorem1_bounded": lambda n: f"every T ≤ {n}, one target at every τ ≤ T and two at every τ1 ≤ τ2, every t ∈ [τ−1, T]",
    "lemma1_bounded": lambda n: f"every T ≤ {n}, one target at every τ ≤ T and two at every τ1 ≤ τ2",
    "lemma1_inductive": lambda n: "unbounded (t an arbitrary index)",
    "lemma2_closure_step": lambda n: "unbounded (any two edge relations)",
    "lemma2_boundary_bounded": lambda n: f"every graph of ≤ {n} turns, every τ",
    "lemma2_taint_queries": lambda n: f"recorded sessions of every length ≤ {max(2, n)}",
    "corollary1_cheaper_shapes_not_exact": lambda n: f"every T ≤ {n}, every τ ≤ T",
    "corollary1_splice_is_exact": lambda n: f"every T ≤ {n}, every τ ≤ T",
    "corollary1_any_checkpoint_set": lambda n: f"cost: unbounded (C, T, τ symbolic); exactness: every T ≤ {n}, "
                                               "one or two targets, every c* < τ",
    "a1_needed": lambda n: "unbounded (a witness for one step)",
    "a2_needed": lambda n: f"every T ≤ {n}, every τ ≤ T",
})


def run_all(max_steps: int = 16, on_result=None) -> dict:
    """Every obligation and encoding check at `max_steps`: `all_proved` counts the obligations
    only; the encoding checks are listed apart."""
    if max_steps < 1:
        raise ValueError(f"max_steps must be at least 1, not {max_steps}")
    results, checks = [], []
    for group, out in ((OBLIGATIONS, results), (ENCODING_CHECKS, checks)):
        for ob in group:
            r = replace(ob(max_steps), bounds=BOUNDS[ob.__name__](max_steps))
            out.append(r)
            if on_result is not None:
                on_result(r)
    return {"all_proved": all(r.ok for r in results), "max_steps": max_steps,
            "obligations": [r.to_json() for r in results],
            "encoding_checks": [{**r.to_json(), "kind": "encoding check"} for r in checks]}
