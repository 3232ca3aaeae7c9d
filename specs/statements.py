"""The paper's statements as executable properties, one function per statement.

Each function checks its statement on an `Observed` record: what a runtime did on one
session and one forget request, next to its counterfactual twin (a fresh runtime of the
same kind driven over o^{-z}). Every expected value (o^{-z}, τ, I(z), the splice point, the
checkpoints a policy promises, the compensation list) comes from `unsee.specs.oracle`,
never from the runtime's own report or from `unsee.model`'s functions. `observe` builds that record from any factory that
implements `unsee.specs.protocol.Runtime`; `check_all` runs every statement.

A statement that fails raises `SpecViolation` naming the step and the layers that differ.
The assumptions A1–A3 are preconditions: they are checked, and a violation is reported
(`AssumptionViolated`, or the receipt's compensation list for A3), never ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Sequence

from unsee.model.state import Observation
from unsee.specs import oracle
from unsee.specs import persistence as P
from unsee.specs.erasure import erasure_nothing_forgotten_is_persisted
from unsee.specs.protocol import Receipt, RuntimeFactory, SpecViolation, checked, plain


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
    receipt: Receipt | None = None
    after: dict = field(default_factory=dict)  # digest after the forget
    trajectory: list[dict] | None = None  # digests of R̃_c..R̃_T, when the runtime offers them
    invocations_delta: int = 0
    checkpoints: tuple[int, ...] = ()
    forced: int | None = None  # a splice point the caller imposed (B5 is forced to 0)
    method: str = "B7"  # the method the forget was asked for
    graph_after: Any = None  # G after the forget, as the runtime reports it
    twin_graph: Any = None  # G^{-z}_T
    graph_before: Any = None  # G_T, as the runtime reported it just before the forget
    policy: str | None = None  # the checkpoint policy the runtime was built with (None: unknown)
    log_after: tuple = ()  # the runtime's log after the forget
    twin_log: tuple = ()  # the twin's log: o^{-z}
    forgotten: tuple = ()  # (source, text) of every part forgotten so far, this forget's included
    layers_after: dict | None = None  # the runtime's optional `layers()` after the forget
    twin_layers: dict | None = None
    # what the runtime persists (the optional persistence hooks; None without them)
    persisted_before: dict | None = None  # file name → bytes, just before the forget
    persisted_after: dict | None = None  # the same, after it
    twin_persisted: dict | None = None  # the twin's files after T steps
    persisted_log_before: tuple | None = None  # the log read back from them, before and after
    persisted_log_after: tuple | None = None
    secrets: tuple | None = None  # `persisted_secrets(sources)`, asked before the forget
    erasure_checked: int = 0  # byte runs the erasure statement found persisted before and judged after

    @property
    def T(self) -> int:
        return len(self.stream)


def forgotten_parts(stream: Sequence[Observation], sources) -> tuple:
    """(source, text) of every part of the stream whose source is one of `sources`, hidden or not."""
    z = set(sources)
    return tuple(dict.fromkeys((p.source, p.text) for o in stream for p in o.parts if p.source in z))


def drive(rt, stream, digests: list | None = None, graphs: list | None = None) -> None:
    """Reset `rt` and step it over `stream`, recording digests and graphs of R_0..R_T if asked
    (every value checked at the protocol's boundary)."""
    rt = checked(rt)
    rt.reset()
    if digests is not None:
        digests.append(rt.digest())
    if graphs is not None:
        graphs.append(rt.graph())
    for o in stream:
        rt.step(o)
        if digests is not None:
            digests.append(rt.digest())
        if graphs is not None:
            graphs.append(rt.graph())


def observe(factory: RuntimeFactory, stream, sources, method: str = "B7",
            checkpoint: int | None = None, twin_factory: RuntimeFactory | None = None,
            policy: str | None = None) -> Observed:
    """Run the session, forget, and run the never-saw-z twin over the oracle's o^{-z};
    record what the specs need."""
    stream = tuple(stream)
    sources = tuple(sources)
    ob = Observed(stream, sources, oracle.first_entry(stream, sources),
                  forced=0 if method == "B5" else checkpoint, policy=policy,
                  forgotten=forgotten_parts(stream, sources))
    rt = checked(factory(), "a fresh runtime driven over the same log")
    drive(rt, stream, ob.real, ob.graphs)
    record_forget(rt, ob, method, checkpoint)
    record_twin(ob, (twin_factory or factory)(), oracle.counterfactual(stream, sources))
    return ob


def record_twin(ob: Observed, twin, stream) -> None:
    """Drive `twin` over `stream` (o^{-z}) and record what the specs compare against."""
    twin = checked(twin, "the twin (a fresh runtime driven over o^-z)")
    drive(twin, stream, ob.twin)
    ob.twin_invocations = twin.invocations
    ob.twin_world = twin.world
    ob.twin_graph = twin.graph()
    ob.twin_log = twin.observations
    ob.twin_layers = twin.layers()
    ob.twin_persisted = P.persisted_files(twin)


def record_forget(rt, ob: Observed, method: str = "B7", checkpoint: int | None = None) -> None:
    """Forget `ob.sources` on `rt` and record into `ob` what the protocol exposes before and after."""
    rt = checked(rt)
    ob.method = method
    ob.checkpoints = rt.checkpoints
    ob.world_before = rt.world
    ob.graph_before = rt.graph()
    ob.persisted_before = P.persisted_files(rt)
    ob.persisted_log_before = P.persisted_log(rt)
    ob.secrets = P.persisted_secrets(rt, ob.sources)
    before = rt.invocations
    ob.receipt = rt.forget(list(ob.sources), method=method, checkpoint=checkpoint)
    ob.invocations_delta = rt.invocations - before
    ob.after = rt.digest()
    ob.trajectory = rt.trajectory()
    ob.world_after = rt.world
    ob.graph_after = rt.graph()
    ob.log_after = rt.observations
    ob.layers_after = rt.layers()
    ob.persisted_after = P.persisted_files(rt)
    ob.persisted_log_after = P.persisted_log(rt)


def graph_rows(g) -> tuple[set, set]:
    """A provenance graph as comparable values: nodes with (type, turn, source ids), and edges."""
    nodes = {(n, d.get("type"), d.get("turn"), frozenset(d.get("source_ids", ()))) for n, d in g.nodes(data=True)}
    return nodes, set(g.edges)


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
        cur = oracle.taint_closure(g, ob.sources)
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
    taint = oracle.taint_closure(g, ob.sources)
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
    T/(T−τ+1). With a coarser checkpoint at c < τ it invokes F exactly T−c times.

    The splice point is the oracle's c* = max{c ∈ C : c ≤ τ−1} (Algorithm 1, line 4), where C
    must hold every checkpoint the runtime's policy promises for its log."""
    r = ob.receipt
    c = r.checkpoint
    if ob.policy is not None:
        # Verify the runtime holds every checkpoint its policy promises
        missing = sorted(oracle.promised_checkpoints(ob.policy, ob.stream) - set(ob.checkpoints))
        require(not missing, f"Corollary 1: policy {ob.policy!r} promises checkpoints at boundaries {missing} "
                             f"of this log; the runtime holds {list(ob.checkpoints)}")
    # Verify the splice point is the latest checkpoint at or before τ−1 (or the forced one)
    clean = [b for b in ob.checkpoints if b <= ob.tau - 1]
    require(ob.forced is not None or bool(clean), f"Corollary 1: no checkpoint at or before τ−1 = {ob.tau - 1} "
                                                  f"(checkpoints {list(ob.checkpoints)}): R_0 at least must be one")
    want = ob.forced if ob.forced is not None else oracle.splice_point(clean, ob.tau)
    require(c == want, f"Corollary 1: spliced at boundary {c}, expected {want} "
                       f"(τ={ob.tau}, checkpoints {list(ob.checkpoints)})")
    n = oracle.transitions(ob.T, want)
    require(r.transitions == n, f"Corollary 1: {r.transitions} invocations of F from boundary {want}, "
                                f"expected T−c = {n} (T={ob.T}, τ={ob.tau})")
    require(ob.invocations_delta == n,
            f"Corollary 1: the runtime counted {ob.invocations_delta} invocations of F for the forget, expected {n}")
    require(ob.twin_invocations == ob.T, f"Corollary 1: full reset took {ob.twin_invocations} invocations, expected T={ob.T}")


def assumption_a1_deterministic_decoding(factory: RuntimeFactory, stream) -> None:
    """(A1) decoding is deterministic (or the randomness source is fixed): F is single-valued,
    so two fresh runs over the same stream reach the same state at every step."""
    a: list = []
    b: list = []
    drive(checked(factory(), "a fresh runtime (A1, first run)"), stream, a)
    drive(checked(factory(), "a fresh runtime (A1, second run)"), stream, b)
    for t, (x, y) in enumerate(zip(a, b)):
        d = diff_layers(x, y)
        require(not d, f"A1 violated: two runs of the same stream differ at step {t} in layers {d} "
                       f"(unseeded sampling?); fix the sampler's seed", AssumptionViolated)


def assumption_a2_sanitized_stream(ob: Observed) -> None:
    """(A2) sanitized observations agree with the counterfactual ones, õ_t = o^{-z}_t for all t ≥ τ."""
    c = ob.receipt.checkpoint
    want = oracle.counterfactual(ob.stream, ob.sources)[c:]
    got = tuple(ob.receipt.replayed)
    require(len(got) == len(want), f"A2 violated: replayed {len(got)} observations, o^-z has {len(want)} after {c}",
            AssumptionViolated)
    for i, (x, y) in enumerate(zip(got, want), c + 1):
        require(x == y, f"A2 violated: õ_{i} ≠ o^-z_{i}: replayed {x}, o^-z has {y}", AssumptionViolated)


def assumption_a3_side_effects(ob: Observed) -> None:
    """(A3) no committed external side effects exist after τ. Where one does, the forget must
    still reach the counterfactual state, fire nothing, and list it for compensation: each
    entry with the call's tool, its committed and counterfactual arguments and the reason,
    as `unsee.specs.oracle.compensation` states them."""
    c = ob.receipt.checkpoint
    # Verify the forget fired no side effect, not even a de-duplicated one
    require(ob.world_after == ob.world_before, "A3: the forget changed the world ledger (a side effect fired)")
    ids = [e.call_id for e in ob.world_after]
    require(len(ids) == len(set(ids)), f"A3: a call id appears twice in the world ledger: {ids}")
    want = oracle.compensation(ob.world_before, ob.twin_world, c)
    got = sorted((x.as_dict() for x in ob.receipt.compensation), key=lambda x: x["call_id"])
    got_ids = [x["call_id"] for x in got]
    require(got_ids == [x["call_id"] for x in want],
            f"A3 report: compensation lists {got_ids}, the twin shows {[x['call_id'] for x in want]} differ")
    for g, w in zip(got, want):  # arguments compare as canonical JSON (the entries hold plain JSON values)
        require(g == plain(w), f"A3 report: compensation entry {g}, expected {w}")
    dedup = ob.receipt.deduplicated
    if dedup is not None:
        want_d = oracle.deduplicated(ob.world_before, ob.twin_world, c)
        require(sorted(dedup) == want_d, f"A3 report: de-duplicated {sorted(dedup)}, expected {want_d}")


def protocol_reports_the_twin(ob: Observed) -> None:
    """Theorem 1 through everything the protocol exposes, not only `digest()`: after the forget
    `graph()` is G^{-z}_T (nodes, their type, turn and source ids, and edges) and the log is
    o^{-z}; the receipt states τ, T (the length before the forget), the method asked for
    (its `method`, when it has one), the sources it forgot,
    I(z) (its `taint`, when it has one) on G_T and the digests of R^{-z}_T (its `digests`, when
    it has them), each as the oracle computes it."""
    r = ob.receipt
    require(r.tau == ob.tau, f"receipt: tau={r.tau}, but {list(ob.sources)} first enter at τ={ob.tau}")
    require(r.T == ob.T, f"receipt: T={r.T}, but the session had T={ob.T} observations before the forget")
    if r.method is not None and ob.method in ("B7", "B5"):
        require(r.method == ob.method, f"receipt: method {r.method!r}, but {ob.method!r} was asked for")
    if r.sources is not None:
        require(sorted(r.sources) == sorted(ob.sources), f"receipt: sources {list(r.sources)}, requested {list(ob.sources)}")
    if r.taint is not None and ob.graph_before is not None:
        want = oracle.taint_closure(ob.graph_before, ob.sources)
        got = set(r.taint)
        require(got == want, f"receipt: I(z) has {len(got)} artifacts, the oracle's closure on G_T {len(want)}: "
                             f"extra {sorted(got - want)[:3]}, missing {sorted(want - got)[:3]}")
    if r.digests is not None and ob.twin:
        d = diff_layers(r.digests, ob.twin[-1])
        require(not d, f"receipt: its digests differ from R^-z_T's in layers {d}")
    if ob.log_after and ob.twin_log:
        require(tuple(ob.log_after) == tuple(ob.twin_log),
                f"log: after forgetting {list(ob.sources)} the runtime's log is not o^-z")
    if ob.graph_after is None or ob.twin_graph is None:
        return
    (n1, e1), (n2, e2) = graph_rows(ob.graph_after), graph_rows(ob.twin_graph)
    extra, missing = sorted(n1 - n2, key=str), sorted(n2 - n1, key=str)
    require(not extra and not missing,
            f"Theorem 1 (graph): after forgetting {list(ob.sources)} graph() differs from G^-z_T: "
            f"{len(extra)} node(s) not in the twin's (first: {extra[:2]}), {len(missing)} missing (first: {missing[:2]})")
    require(e1 == e2, f"Theorem 1 (graph): edges differ from G^-z_T: extra {sorted(e1 - e2)[:3]}, "
                      f"missing {sorted(e2 - e1)[:3]}")


def _texts(obj) -> list[str]:
    """Every string a value holds (observations, parts, dicts, tuples), for the privacy scan."""
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, Observation):
        return [x for p in obj.parts for x in (p.source, p.text, p.instead_of or "")]
    if isinstance(obj, dict):
        return [x for k, v in obj.items() for x in _texts(k) + _texts(v)]
    if isinstance(obj, (tuple, list, set, frozenset)):
        return [x for v in obj for x in _texts(v)]
    if is_dataclass(obj) and not isinstance(obj, type):  # a record the runtime made (e.g. a compensation entry)
        return _texts({f.name: getattr(obj, f.name) for f in fields(obj)})
    if hasattr(obj, "__dict__") and not callable(obj):  # a plain object the runtime made
        return _texts(vars(obj))
    return []


def holds(text: str, needle: str) -> bool:
    """Does `text` hold `needle` as a run of whole words?"""
    h, n = text.split(), needle.split()
    return bool(n) and any(h[i:i + len(n)] == n for i in range(len(h) - len(n) + 1))


def privacy_nothing_forgotten_remains(ob: Observed) -> None:
    """Definition 1's first requirement, checked directly: "the target is no longer accessible
    (the counterfactual never contained z)". After the forget no layer the runtime exposes
    holds what the twin's lacks: no part with a forgotten source id (hidden `instead_of` parts
    included) and no forgotten part's text — in the log, the graph's source ids, the receipt
    (its replayed observations and every other field but the request's own source ids, and of its
    compensation entries the twin's arguments only: the arguments a committed call already sent are
    the world's, which A3 asks it to report, and a tool's name is no data), and
    every layer of the optional `layers()` (transcript, memory, artifacts, plans, ledger,
    receipts, pages: whatever the runtime persists). Layers exposed only as digests are
    covered by Theorem 1 (equal to the twin's)."""
    gone = {s for s, _ in ob.forgotten} - oracle.sources_in(ob.twin_log)
    twin_texts = _texts(ob.twin_log) + _texts(ob.twin_layers or {})
    words = sorted({t for _, t in ob.forgotten if t.split() and not any(holds(x, t) for x in twin_texts)})

    def scan(where: str, texts) -> None:
        for x in texts:
            bad = [w for w in words if holds(x, w)] + [s for s in gone if s in x.split()]
            if bad:
                raise SpecViolation(f"privacy: after forgetting {list(ob.sources)} {where} still holds {bad[0]!r}, "
                                    "which the twin's lacks")

    # Verify the log holds no part of a forgotten source and no forgotten text the twin lacks
    for t, o in enumerate(ob.log_after, 1):
        scan(f"the log at t={t}", _texts(o))
    if ob.graph_after is not None:
        for n, d in ob.graph_after.nodes(data=True):
            scan(f"graph node {n}'s source ids", list(d.get("source_ids", ())))
    r = ob.receipt
    for name, value in (r.given or {}).items():  # every field the runtime returned, as it returned it
        if name == "compensation":  # what a committed call sent is the world's already (A3 asks for it), and a
            value = [e.args for e in r.compensation]  # tool's name, id and reason are not data: the twin's args
        if name != "sources":
            scan(f"the receipt's {name}", _texts(value))
    for layer, texts in (ob.layers_after or {}).items():
        scan(f"layer {layer!r}", texts)


FORGET_STATEMENTS = (
    lemma1_prefix_sharing,
    lemma2_taint_monotonicity,
    lemma2_certifiable_boundary,
    theorem1_splicing_equivalence,
    protocol_reports_the_twin,
    corollary1_optimal_invocations,
    assumption_a2_sanitized_stream,
    assumption_a3_side_effects,
    privacy_nothing_forgotten_remains,
    erasure_nothing_forgotten_is_persisted,
)


# statements on more than one thread, checked on their own records (`unsee.specs.shared`)
from unsee.specs.shared import cross_thread_forget_is_a_full_reset  # noqa: E402

SHARED_STATEMENTS = (cross_thread_forget_is_a_full_reset,)


def check_all(ob: Observed) -> None:
    for spec in FORGET_STATEMENTS:
        spec(ob)
