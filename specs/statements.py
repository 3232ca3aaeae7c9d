"""The paper's statements as executable properties, one function per statement.

Each function checks its statement on an `Observed` record: what a runtime did on one
session and one forget request, next to its counterfactual twin (a fresh runtime of the
same kind driven over o^{-z}). `observe` builds that record from any factory that
implements `unsee.specs.protocol.Runtime`; `check_all` runs every statement.

A statement that fails raises `SpecViolation` naming the step and the layers that differ.
The assumptions A1–A3 are preconditions: they are checked, and a violation is reported
(`AssumptionViolated`, or the receipt's compensation list for A3), never ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import networkx as nx

from unsee.model.state import Observation
from unsee.model.session import counterfactual_stream
from unsee.specs.protocol import RuntimeFactory


class SpecViolation(AssertionError):
    """A paper statement does not hold on this runtime (the message says where)."""


class AssumptionViolated(SpecViolation):
    """A1, A2 or A3 does not hold, so Theorem 1 does not apply as stated."""


def require(cond: bool, message: str, exc: type[SpecViolation] = SpecViolation) -> None:
    if not cond:
        raise exc(message)


def diff_layers(a: dict, b: dict) -> list[str]:
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


@dataclass
class Observed:
    stream: tuple[Observation, ...]
    sources: tuple[str, ...]
    tau: int
    real: list[dict] = field(default_factory=list)  # digest of R_t, t = 0..T
    graphs: list[Any] = field(default_factory=list)  # G_t, t = 0..T
    twin: list[dict] = field(default_factory=list)  # digest of R^{-z}_t, t = 0..T
    twin_invocations: int = 0
    twin_world: tuple = ()
    world_before: tuple = ()
    world_after: tuple = ()
    receipt: Any = None
    after: dict = field(default_factory=dict)  # digest after the forget
    trajectory: list[dict] | None = None  # digests of R̃_c..R̃_T, when the runtime offers them
    invocations_delta: int = 0
    checkpoints: tuple[int, ...] = ()
    forced: int | None = None  # a splice point the caller imposed (B5 is forced to 0)
    graph_after: Any = None  # G after the forget, as the runtime reports it
    twin_graph: Any = None  # G^{-z}_T

    @property
    def T(self) -> int:
        return len(self.stream)


def first_entry_of(stream: Sequence[Observation], sources) -> int:
    """τ: the first transition whose observation carries any of the sources (1-based)."""
    z = set(sources)
    for t, o in enumerate(stream, 1):
        if o.sources & z:
            return t
    raise ValueError(f"none of {sorted(z)} occurs in the stream")


def drive(rt, stream, digests: list | None = None, graphs: list | None = None) -> None:
    rt.reset()
    if digests is not None:
        digests.append(dict(rt.digest()))
    if graphs is not None:
        graphs.append(rt.graph().copy())
    for o in stream:
        rt.step(o)
        if digests is not None:
            digests.append(dict(rt.digest()))
        if graphs is not None:
            graphs.append(rt.graph().copy())


def observe(factory: RuntimeFactory, stream, sources, method: str = "B7",
            checkpoint: int | None = None, twin_factory: RuntimeFactory | None = None) -> Observed:
    """Run the session, forget, and run the never-saw-z twin; record what the specs need."""
    stream = tuple(stream)
    sources = tuple(sources)
    ob = Observed(stream, sources, first_entry_of(stream, sources),
                  forced=0 if method == "B5" else checkpoint)
    rt = factory()
    drive(rt, stream, ob.real, ob.graphs)
    record_forget(rt, ob, method, checkpoint)
    twin = (twin_factory or factory)()
    drive(twin, counterfactual_stream(stream, sources), ob.twin)
    ob.twin_invocations = twin.invocations
    ob.twin_world = tuple(twin.world)
    ob.twin_graph = twin.graph().copy()
    return ob


def record_forget(rt, ob: Observed, method: str = "B7", checkpoint: int | None = None) -> None:
    """Forget `ob.sources` on `rt` and record into `ob` what the protocol exposes before and after."""
    ob.checkpoints = tuple(rt.checkpoints)
    ob.world_before = tuple(rt.world)
    before = rt.invocations
    ob.receipt = rt.forget(list(ob.sources), method=method, checkpoint=checkpoint)
    ob.invocations_delta = rt.invocations - before
    ob.after = dict(rt.digest())
    if callable(getattr(rt, "trajectory", None)):
        ob.trajectory = [dict(d) for d in rt.trajectory()]
    ob.world_after = tuple(rt.world)
    ob.graph_after = rt.graph().copy()


def graph_rows(g) -> tuple[set, set]:
    """A provenance graph as comparable values: nodes with (type, turn, source ids), and edges."""
    nodes = {(n, d.get("type"), d.get("turn"), frozenset(d.get("source_ids", ()))) for n, d in g.nodes(data=True)}
    return nodes, set(g.edges)


def graph_closure(g, sources) -> set:
    """I(z) read off a runtime's graph(): the root nodes carrying a source, and their descendants."""
    roots = [n for n, d in g.nodes(data=True) if g.in_degree(n) == 0 and d["source_ids"] & set(sources)]
    out = set(roots)
    for r in roots:
        out |= nx.descendants(g, r)
    return out


def lemma1_prefix_sharing(ob: Observed) -> None:
    """Lemma 1 (Prefix sharing). For all t ≤ τ−1, R_t = R^{-z}_t."""
    for t in range(ob.tau):
        # Verify every layer of the real state equals the twin's before z entered
        d = diff_layers(ob.real[t], ob.twin[t])
        require(not d, f"Lemma 1: R_{t} ≠ R^-z_{t} (τ={ob.tau}) in layers {d}")


def lemma2_taint_monotonicity(ob: Observed) -> None:
    """Lemma 2 (i) taint monotonicity: "Execution only appends nodes and edges:
    A_t ⊆ A_{t+1}, E_t ⊆ E_{t+1}, and reachability is monotone in the edge set", so
    I_t(z) ⊆ I_{t+1}(z) for all t."""
    prev_nodes: set = set()
    prev_edges: set = set()
    prev: set = set()
    for t, g in enumerate(ob.graphs):
        nodes, edges = set(g.nodes), set(g.edges)
        require(prev_nodes <= nodes, f"Lemma 2(i): A_{t - 1} ⊄ A_{t}; lost {sorted(prev_nodes - nodes)[:5]}")
        require(prev_edges <= edges, f"Lemma 2(i): E_{t - 1} ⊄ E_{t}; lost {sorted(prev_edges - edges)[:5]}")
        cur = graph_closure(g, ob.sources)
        lost = prev - cur
        require(not lost, f"Lemma 2(i): I_{t - 1}(z) ⊄ I_{t}(z); lost {sorted(lost)[:5]}")
        prev_nodes, prev_edges, prev = nodes, edges, cur


def lemma2_certifiable_boundary(ob: Observed) -> None:
    """Lemma 2 (ii) certifiable boundary: absent per-token influence attribution, the maximal
    artifact set certifiably independent of z is exactly the prefix output {a : turn(a) < τ}.

    Checked on G_T for every generated artifact (recorded observation fields are inputs,
    fixed under A2: a field is in I(z) exactly when it carries z).
    """
    g = ob.graphs[-1]
    taint = graph_closure(g, ob.sources)
    for n, d in g.nodes(data=True):
        if g.in_degree(n) == 0:
            want = bool(d["source_ids"] & set(ob.sources))
            require((n in taint) == want, f"Lemma 2(ii): field {n} in I(z) is {n in taint}, carries z is {want}")
        else:
            want = d["turn"] >= ob.tau
            require((n in taint) == want,
                    f"Lemma 2(ii): {n} (turn {d['turn']}, τ={ob.tau}) in I(z) is {n in taint}, turn ≥ τ is {want}")


def theorem1_splicing_equivalence(ob: Observed) -> None:
    """Theorem 1 (Splicing equivalence). Let a checkpoint exist at τ−1 (or any earlier clean
    boundary) ... If (A1), (A2) and (A3), then R̃_t = R^{-z}_t for all t ≥ τ−1; in particular
    R̃_T = R^{-z}_T, i.e., the splicing operator is an exact unlearner."""
    d = diff_layers(ob.after, ob.twin[-1])
    require(not d, f"Theorem 1: after forgetting {list(ob.sources)} (τ={ob.tau}, T={ob.T}, "
                   f"checkpoint {ob.receipt.checkpoint}) the state differs from R^-z_T in layers {d}")
    if ob.trajectory is None:
        return
    c = ob.receipt.checkpoint
    require(len(ob.trajectory) == ob.T - c + 1,
            f"Theorem 1: the runtime reports {len(ob.trajectory)} states for R̃_{c}..R̃_{ob.T}")
    for t, got in enumerate(ob.trajectory, c):
        # Verify R̃_t = R^{-z}_t on every layer the runtime reported for it
        d = [k for k in got if got[k] != ob.twin[t].get(k)]
        require(not d, f"Theorem 1: R̃_{t} ≠ R^-z_{t} (τ={ob.tau}, checkpoint {c}) in layers {sorted(d)}")


def corollary1_optimal_invocations(ob: Observed) -> None:
    """Corollary 1 (Recomputation lower bound and optimality). ... The splicing operator
    invokes [F] exactly T−τ+1 times ...; the gain over a full reset (T invocations) is
    T/(T−τ+1). With a coarser checkpoint at c < τ it invokes F exactly T−c times."""
    r = ob.receipt
    c = r.checkpoint
    # Verify the splice point is the latest checkpoint before τ (or the forced one)
    want = ob.forced if ob.forced is not None else max(b for b in ob.checkpoints if b < ob.tau)
    require(c == want, f"Corollary 1: spliced at boundary {c}, expected {want} "
                       f"(τ={ob.tau}, checkpoints {list(ob.checkpoints)})")
    require(r.transitions == ob.T - c, f"Corollary 1: {r.transitions} invocations of F from boundary {c}, "
                                       f"expected T−c = {ob.T - c} (T={ob.T}, τ={ob.tau})")
    require(ob.invocations_delta == r.transitions,
            f"Corollary 1: receipt says {r.transitions} invocations, the runtime counted {ob.invocations_delta}")
    require(ob.twin_invocations == ob.T, f"Corollary 1: full reset took {ob.twin_invocations} invocations, expected T={ob.T}")


def assumption_a1_deterministic_decoding(factory: RuntimeFactory, stream) -> None:
    """(A1) decoding is deterministic (or the randomness source is fixed): F is single-valued,
    so two fresh runs over the same stream reach the same state at every step."""
    a: list = []
    b: list = []
    drive(factory(), stream, a)
    drive(factory(), stream, b)
    for t, (x, y) in enumerate(zip(a, b)):
        d = diff_layers(x, y)
        require(not d, f"A1 violated: two runs of the same stream differ at step {t} in layers {d} "
                       f"(unseeded sampling?); fix the sampler's seed", AssumptionViolated)


def assumption_a2_sanitized_stream(ob: Observed) -> None:
    """(A2) sanitized observations agree with the counterfactual ones, õ_t = o^{-z}_t for all t ≥ τ."""
    c = ob.receipt.checkpoint
    want = counterfactual_stream(ob.stream, ob.sources)[c:]
    got = tuple(ob.receipt.replayed)
    require(len(got) == len(want), f"A2 violated: replayed {len(got)} observations, o^-z has {len(want)} after {c}",
            AssumptionViolated)
    for i, (x, y) in enumerate(zip(got, want), c + 1):
        require(x == y, f"A2 violated: õ_{i} ≠ o^-z_{i}", AssumptionViolated)


def assumption_a3_side_effects(ob: Observed) -> None:
    """(A3) no committed external side effects exist after τ. Where one does, the forget must
    still reach the counterfactual state, fire nothing, and list it for compensation."""
    c = ob.receipt.checkpoint
    # Verify the forget fired no side effect, not even a de-duplicated one
    require(ob.world_after == ob.world_before, "A3: the forget changed the world ledger (a side effect fired)")
    ids = [e.call_id for e in ob.world_after]
    require(len(ids) == len(set(ids)), f"A3: a call id appears twice in the world ledger: {ids}")
    twin = {e.call_id: (e.tool, tuple(e.args)) for e in ob.twin_world if e.turn > c}
    real = {e.call_id: (e.tool, tuple(e.args)) for e in ob.world_before if e.turn > c}
    want = {k for k in set(twin) | set(real) if twin.get(k) != real.get(k)}
    got = {x["call_id"] for x in ob.receipt.compensation}
    require(got == want, f"A3 report: compensation lists {sorted(got)}, the twin shows {sorted(want)} differ")


def protocol_reports_the_twin(ob: Observed) -> None:
    """Theorem 1 through everything the protocol exposes, not only `digest()`: after the forget
    `graph()` is G^{-z}_T (nodes, their type, turn and source ids, and edges), and the receipt
    states τ and T (the length before the forget) as the kit computes them."""
    r = ob.receipt
    require(r.tau == ob.tau, f"receipt: tau={r.tau}, but {list(ob.sources)} first enter at τ={ob.tau}")
    require(r.T == ob.T, f"receipt: T={r.T}, but the session had T={ob.T} observations before the forget")
    if ob.graph_after is None or ob.twin_graph is None:
        return
    (n1, e1), (n2, e2) = graph_rows(ob.graph_after), graph_rows(ob.twin_graph)
    extra, missing = sorted(n1 - n2, key=str), sorted(n2 - n1, key=str)
    require(not extra and not missing,
            f"Theorem 1 (graph): after forgetting {list(ob.sources)} graph() differs from G^-z_T: "
            f"{len(extra)} node(s) not in the twin's (first: {extra[:2]}), {len(missing)} missing (first: {missing[:2]})")
    require(e1 == e2, f"Theorem 1 (graph): edges differ from G^-z_T: extra {sorted(e1 - e2)[:3]}, "
                      f"missing {sorted(e2 - e1)[:3]}")


FORGET_STATEMENTS = (
    lemma1_prefix_sharing,
    lemma2_taint_monotonicity,
    lemma2_certifiable_boundary,
    theorem1_splicing_equivalence,
    protocol_reports_the_twin,
    corollary1_optimal_invocations,
    assumption_a2_sanitized_stream,
    assumption_a3_side_effects,
)


def check_all(ob: Observed) -> None:
    for spec in FORGET_STATEMENTS:
        spec(ob)
