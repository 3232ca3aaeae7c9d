"""Z3 obligations on the abstract model: F an uninterpreted function R × O → R.

Each obligation is a function `(max_steps) -> Result`. OBLIGATIONS lists the ones that
must all be proved; `REFUTED` lists deliberately false statements that must come back
as counterexamples (the kernel's soundness check).

These proofs are about the abstract transition system. They say nothing about whether a
concrete engine satisfies A1–A3: that evidence comes from the property tests.
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
    """The real and counterfactual trajectories as terms: R_t = F(R_{t−1}, o_t)."""
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


def pairs(max_steps: int):
    return [(T, tau) for T in range(1, max_steps + 1) for tau in range(1, T + 1)]


# --- Theorem 1 --------------------------------------------------------------------------

def theorem1_base(max_steps: int) -> Result:
    t0 = time.perf_counter()
    r_tilde, r_prev, rz_prev = z3.Consts("Rtilde_tau_minus_1 R_tau_minus_1 Rz_tau_minus_1", R)
    res = check_valid([r_tilde == r_prev, r_prev == rz_prev], r_tilde == rz_prev)
    return combine("theorem1_base", "R̃_{τ−1} = R_{τ−1} (restore) ∧ R_{τ−1} = R^{-z}_{τ−1} (Lemma 1) ⇒ R̃_{τ−1} = R^{-z}_{τ−1}",
                   [("base", res)], t0)


def theorem1_step(max_steps: int) -> Result:
    """Unbounded: trajectories are functions of an integer time index and t is an arbitrary
    (uninterpreted) index, so validity for t is validity for every t (no quantifiers, no
    bound on T)."""
    t0 = time.perf_counter()
    Rt, Rz = z3.Function("Rtilde", z3.IntSort(), R), z3.Function("Rz", z3.IntSort(), R)
    ot, oz = z3.Function("otilde", z3.IntSort(), O), z3.Function("oz", z3.IntSort(), O)
    t, tau = z3.Ints("t tau")
    assumptions = [
        tau >= 1, t >= tau,
        Rt(t) == F(Rt(t - 1), ot(t)),  # the replay applies F (A1: F is a function)
        Rz(t) == F(Rz(t - 1), oz(t)),  # the twin applies F
        ot(t) == oz(t),  # A2
        Rt(t - 1) == Rz(t - 1),  # induction hypothesis
    ]
    return combine("theorem1_step", "∀t ≥ τ: R̃_{t−1} = R^{-z}_{t−1} ∧ (A1: F a function) ∧ (A2: õ_t = o^{-z}_t) ⇒ R̃_t = R^{-z}_t",
                   [("step", check_valid(assumptions, Rt(t) == Rz(t)))], t0)


def theorem1_bounded(max_steps: int) -> Result:
    t0 = time.perf_counter()
    parts = []
    for T, tau in pairs(max_steps):
        o, oz, real, twin = worlds(T, tau)
        o_tilde = [z3.Const(f"otilde_{t}", O) for t in range(tau, T + 1)]
        a2 = [x == oz[t] for x, t in zip(o_tilde, range(tau, T + 1))]
        replayed = advance(real[tau - 1], o_tilde)  # restore R_{τ−1}, then T−τ+1 invocations
        parts.append((f"T={T} τ={tau}", check_valid([o[tau] != oz[tau]] + a2, replayed == twin[T])))
    return combine("theorem1_bounded", f"for every T ≤ {max_steps} and 1 ≤ τ ≤ T: restoring R_{{τ−1}} and replaying "
                   "õ_τ..õ_T (A2) gives R^{-z}_T", parts, t0)


# --- Lemma 1 ----------------------------------------------------------------------------

def lemma1_bounded(max_steps: int) -> Result:
    t0 = time.perf_counter()
    parts = []
    for T, tau in pairs(max_steps):
        o, oz, real, twin = worlds(T, tau)
        goal = z3.And([real[t] == twin[t] for t in range(tau)])
        parts.append((f"T={T} τ={tau}", check_valid([o[tau] != oz[tau]], goal)))
    return combine("lemma1_bounded", f"for every T ≤ {max_steps}, τ ≤ T and t ≤ τ−1: R_t = R^{{-z}}_t", parts, t0)


def lemma1_inductive(max_steps: int) -> Result:
    """Unbounded, with t an arbitrary index as in theorem1_step."""
    t0 = time.perf_counter()
    Rr, Rz = z3.Function("Rreal", z3.IntSort(), R), z3.Function("Rz", z3.IntSort(), R)
    o, oz = z3.Function("o", z3.IntSort(), O), z3.Function("oz", z3.IntSort(), O)
    t, tau = z3.Ints("t tau")
    base = check_valid([Rr(0) == R_INIT, Rz(0) == R_INIT], Rr(0) == Rz(0))
    assumptions = [
        tau >= 1, t >= 1, t <= tau - 1,
        Rr(t) == F(Rr(t - 1), o(t)),
        Rz(t) == F(Rz(t - 1), oz(t)),
        o(t) == oz(t),  # o^{-z}_t = o_t for t < τ
        o(tau) != oz(tau),
        Rr(t - 1) == Rz(t - 1),  # induction hypothesis
    ]
    step = check_valid(assumptions, Rr(t) == Rz(t))
    return combine("lemma1_inductive", "R_0 = R^{-z}_0 and ∀t ≤ τ−1: R_{t−1} = R^{-z}_{t−1} ⇒ R_t = R^{-z}_t",
                   [("base", base), ("step", step)], t0)


# --- Lemma 2 ----------------------------------------------------------------------------

def lemma2_closure_step(max_steps: int) -> Result:
    """(i) I_t ⊆ I_{t+1}: the least z-closed set under E_{t+1} is closed under E_t ⊆ E_{t+1},
    so it contains the least z-closed set under E_t."""
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
    """(ii) on the conservative graph with arbitrary extra forward edges: a generated artifact
    is reachable from z iff its turn is ≥ τ."""
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


def lemma2_taint_queries(max_steps: int) -> Result:
    """Concrete taint queries: Z3's Datalog engine and networkx agree on a recorded session."""
    from unsee.model.session import locate_source, provenance_graph, run, taint_closure
    from unsee.model.state import Observation, Part

    t0 = time.perf_counter()
    stream = [Observation("system", (Part("sys", "you are an agent"),)),
              Observation("user", (Part("u1", "plan the trip"),), reply=2),
              Observation("memory", (Part("z", "alice lives at 12 elm street"),)),
              Observation("user", (Part("u2", "book it"),), reply=2, tool="send"),
              Observation("tool", (Part("t1", "ok booked"),), reply=1, tool="lookup", compact=True),
              Observation("user", (Part("u3", "thanks"),), reply=2)]
    s = run(stream)
    g = provenance_graph(s.state)
    idx = {n: i for i, n in enumerate(g.nodes)}
    fp = z3.Fixedpoint()
    fp.set(engine="datalog")
    bv = z3.BitVecSort(16)
    edge = z3.Function("edge", bv, bv, z3.BoolSort())
    reach = z3.Function("reach", bv, z3.BoolSort())
    fp.register_relation(edge, reach)
    x, y = z3.Consts("x y", bv)
    fp.declare_var(x, y)
    for u, v in g.edges:
        fp.fact(edge(z3.BitVecVal(idx[u], 16), z3.BitVecVal(idx[v], 16)))
    srcs = locate_source(s, "z")
    for a in srcs:
        fp.fact(reach(z3.BitVecVal(idx[a], 16)))
    fp.rule(reach(y), [reach(x), edge(x, y)])
    want = taint_closure(g, srcs)
    parts = []
    for n, i in idx.items():
        got = fp.query(reach(z3.BitVecVal(i, 16)))
        ok = (got == z3.sat) == (n in want) and got != z3.unknown
        parts.append((n, ("proved", None, "") if ok else ("counterexample", f"{n}: datalog {got}, networkx {n in want}", "")))
    return combine("lemma2_taint_queries", f"Datalog reach(z, a) = networkx closure on a recorded session "
                   f"({g.number_of_nodes()} artifacts, {g.number_of_edges()} edges)", parts, t0)


# --- Corollary 1 ------------------------------------------------------------------------

def corollary1_cheaper_shapes_not_exact(max_steps: int) -> Result:
    """Counter-models: for every (T, τ) there is an F and a stream on which every cheaper
    operator shape misses R^{-z}_T at once: restoring any stored R_k with k ≥ τ and replaying
    the rest, or starting at any stored R_j and applying fewer than T−τ+1 invocations."""
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
    """The upper bound: restore R_{τ−1}, invoke F exactly T−τ+1 times, reach R^{-z}_T."""
    t0 = time.perf_counter()
    parts = []
    for T, tau in pairs(max_steps):
        o, oz, real, twin = worlds(T, tau)
        suffix = oz[tau:]
        assert len(suffix) == T - tau + 1
        parts.append((f"T={T} τ={tau}", check_valid([o[tau] != oz[tau]], advance(real[tau - 1], suffix) == twin[T])))
    return combine("corollary1_splice_is_exact", f"for every T ≤ {max_steps}, τ: T−τ+1 invocations from R_{{τ−1}} give R^{{-z}}_T",
                   parts, t0)


# --- the assumptions are needed -------------------------------------------------------

def a2_needed(max_steps: int) -> Result:
    """Without A2 (õ_τ ≠ o^{-z}_τ), some F makes the splice inexact."""
    t0 = time.perf_counter()
    o, oz, real, twin = worlds(3, 2)
    bad = z3.Const("otilde_2", O)
    res = check_exists([bad != oz[2], advance(real[1], [bad, oz[3]]) != twin[3]])
    return combine("a2_needed", "∃F: õ_τ ≠ o^{-z}_τ ⇒ R̃_T ≠ R^{-z}_T (T=3, τ=2)", [("witness", res)], t0)


def a1_needed(max_steps: int) -> Result:
    """Without A1, F is a relation: the same (R, o) may step to different states."""
    t0 = time.perf_counter()
    Frel = z3.Function("Frel", R, O, R, z3.BoolSort())
    r0, r1, r1b = z3.Consts("r0 r1 r1b", R)
    o1 = z3.Const("o1", O)
    res = check_exists([Frel(r0, o1, r1), Frel(r0, o1, r1b), r1 != r1b])
    return combine("a1_needed", "∃ a nondeterministic F (a relation): one (R, o) with two successors, so the replay "
                   "and the twin can part", [("witness", res)], t0)


OBLIGATIONS = (
    theorem1_base,
    theorem1_step,
    theorem1_bounded,
    lemma1_bounded,
    lemma1_inductive,
    lemma2_closure_step,
    lemma2_boundary_bounded,
    lemma2_taint_queries,
    corollary1_cheaper_shapes_not_exact,
    corollary1_splice_is_exact,
    a1_needed,
    a2_needed,
)


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


REFUTED = (false_crop_at_tau_is_exact, false_one_step_short_is_exact)


# The bounds each obligation actually checks at a given max_steps (reported, never implied).
BOUNDS = MappingProxyType({
    "theorem1_base": lambda n: "unbounded (one step)",
    "theorem1_step": lambda n: "unbounded (t an arbitrary index)",
    "theorem1_bounded": lambda n: f"every T ≤ {n}, every τ ≤ T",
    "lemma1_bounded": lambda n: f"every T ≤ {n}, every τ ≤ T",
    "lemma1_inductive": lambda n: "unbounded (t an arbitrary index)",
    "lemma2_closure_step": lambda n: "unbounded (any two edge relations)",
    "lemma2_boundary_bounded": lambda n: f"every graph of ≤ {n} turns, every τ",
    "lemma2_taint_queries": lambda n: "one recorded session (6 observations); max_steps not used",
    "corollary1_cheaper_shapes_not_exact": lambda n: f"every T ≤ {n}, every τ ≤ T",
    "corollary1_splice_is_exact": lambda n: f"every T ≤ {n}, every τ ≤ T",
    "a1_needed": lambda n: "a witness; max_steps not used",
    "a2_needed": lambda n: "a witness at T=3, τ=2; max_steps not used",
})


def run_all(max_steps: int = 16, on_result=None) -> dict:
    results = []
    for ob in OBLIGATIONS:
        r = replace(ob(max_steps), bounds=BOUNDS[ob.__name__](max_steps))
        results.append(r)
        if on_result is not None:
            on_result(r)
    return {"all_proved": all(r.ok for r in results), "max_steps": max_steps,
            "obligations": [r.to_json() for r in results]}
