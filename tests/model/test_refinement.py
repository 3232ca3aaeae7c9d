"""Refinement: the Z3 graph model, evaluated on the provenance graphs that the runtimes really
produce, gives the taint set and boundary that model/'s closures give.

On random sessions (the kit's programs, forgets included: a forget rebuilds the suffix's
graph) through the reference runtime and the KV engine, for every target present: Z3's
Datalog least fixpoint (`proofs.obligations.datalog_closure`), the one-pass closure B7 uses
(`suffix_closure`) and networkx's descendants (`taint_closure`) return the same set, and the
same boundary (the earliest turn of a tainted artifact, which is τ).
"""

import pytest
from hypothesis import HealthCheck, given, settings

from unsee.impl.engine.kv_runtime import KVRuntime
from unsee.model import Config
from unsee.specs.reference import ReferenceRuntime
from unsee.model.plan import locate_source, suffix_closure, taint_closure
from unsee.proofs.obligations import datalog_closure
from unsee.specs.harness import present_targets
from unsee.specs.strategies import programs

from tests.kv_helpers import FAMILIES

pytestmark = pytest.mark.tiny


def _graphs(rt, program):
    """(graph, session) after every step of `program` that leaves a target present."""
    for op, arg in program:
        if op == "obs":
            rt.step(arg)
        else:
            present = present_targets(rt.observations)
            chosen = sorted({present[k % len(present)] for k in arg.picks}) if present else []
            if chosen:
                rt.forget(chosen)
        if present_targets(rt.observations):
            yield rt.graph(), rt.session


def _agree(graph, session) -> int:
    by_turn = {a.id: a.turn for a in session.state.artifacts}
    checked = 0
    for z in present_targets(session.observations):
        srcs = locate_source(session, z)
        z3_set = datalog_closure(list(graph.edges), srcs)
        nx_set = taint_closure(graph, srcs)
        one_pass = suffix_closure(session.state.artifacts, srcs)
        assert z3_set == nx_set == one_pass, (z, sorted(z3_set ^ nx_set), sorted(one_pass ^ nx_set))
        tau = min(by_turn[a] for a in srcs)
        assert min(by_turn[a] for a in z3_set) == min(by_turn[a] for a in one_pass) == tau
        checked += 1
    return checked


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(max_ops=8, max_steps=16))
def test_z3_closure_refines_the_reference_runtime(program):
    rt = ReferenceRuntime(Config(), "every")
    assert sum(_agree(g, s) for g, s in _graphs(rt, program)) > 0


@pytest.mark.parametrize("model", FAMILIES[:1])
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(program=programs(max_ops=6, max_steps=10))
def test_z3_closure_refines_the_kv_runtime(model, program):
    rt = KVRuntime(model, Config(), "every")
    assert sum(_agree(g, s) for g, s in _graphs(rt, program)) > 0


def test_a_wrong_closure_is_told_apart():
    """Non-vacuity: a closure that misses transitive descendants disagrees with Z3's."""
    from unsee.model.replay import run
    from unsee.proofs.obligations import taint_session

    s = run(taint_session(9))
    srcs = locate_source(s, "z")
    edges = [(p, a.id) for a in s.state.artifacts for p in a.parents]
    one_hop = set(srcs) | {c for p, c in edges if p in srcs}
    assert datalog_closure(edges, srcs) != one_hop
